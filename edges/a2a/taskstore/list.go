package taskstore

import (
	"github.com/chio-ledger/chio/schemas"

	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Page sizes of List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// ListFilter selects and pages the tasks of List.
type ListFilter struct {
	// ContextID, State: only tasks with this context id / in this state.
	ContextID string
	State     State
	// StatusAfter: only tasks whose status time is at or after it.
	StatusAfter time.Time
	// PageSize: 0 means DefaultPageSize; larger than MaxPageSize is
	// MaxPageSize.
	PageSize int
	// PageToken: "" for the first page, else a token List returned.
	PageToken string
}

// taskSummary is a task's summary as of its last commit.
type taskSummary struct {
	id  string
	seq uint64
	summary
}

// scan returns the summary of every task in the stream, read from the
// summary header of the last message on each task subject by an
// ephemeral headers-only consumer (DeliverLastPerSubject): one small
// message per task, never a payload. The summaries are exactly as fresh
// as the stream, since every commit carries the summary of the task it
// produces; there is no separate index to fall behind.
func (s *Store) scan(ctx context.Context) ([]taskSummary, error) {
	cons, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:       "taskstore list scan",
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject:     StreamSubjects,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("scan tasks: create consumer: %w", err)
	}
	name := cons.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.stream.DeleteConsumer(dctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			s.opts.log.Warn("taskstore: delete scan consumer", "consumer", name, "err", err)
		}
	}()
	want := int(cons.CachedInfo().NumPending)
	byID := make(map[string]taskSummary, want)
	wait := s.js.Options().DefaultTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl), time.Millisecond)
	}
	// want (the consumer's pending count at creation) bounds the scan;
	// a message with nothing pending after it ends it too.
	for got, drained := 0, want == 0; !drained && got < want; {
		batch, err := cons.Fetch(min(want-got, 1000), jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, fmt.Errorf("scan tasks: fetch: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("scan tasks: %w", err)
			}
			drained = drained || meta.NumPending == 0
			id, ok := strings.CutPrefix(m.Subject(), schemas.TasksSubjectPrefix)
			if !ok || !validID(id) {
				continue
			}
			sm, err := s.readSummary(m.Subject(), meta.Sequence.Stream, m.Headers(), meta.Timestamp)
			if err != nil {
				s.opts.log.Warn("taskstore: task without a readable summary", "task", id, "err", err)
				continue
			}
			if prev, ok := byID[id]; !ok || prev.seq < meta.Sequence.Stream {
				byID[id] = taskSummary{id: id, seq: meta.Sequence.Stream, summary: sm}
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("scan tasks: fetch: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("scan tasks: %w: %d of %d summaries delivered", context.DeadlineExceeded, got, want)
		}
		got += n
	}
	out := make([]taskSummary, 0, len(byID))
	for _, ts := range byID {
		out = append(out, ts)
	}
	return out, nil
}

// pageToken is the position after the last task of a page: its status
// time and id. It is opaque to callers.
func encodePageToken(ts taskSummary) string {
	return base64.RawURLEncoding.EncodeToString([]byte("1:" + strconv.FormatInt(ts.StatusTime.UnixNano(), 10) + ":" + ts.id))
}

func decodePageToken(tok string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return time.Time{}, "", ErrInvalidPageToken
	}
	parts := strings.Split(string(b), ":")
	if len(parts) != 3 || parts[0] != "1" || !validID(parts[2]) {
		return time.Time{}, "", ErrInvalidPageToken
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return time.Time{}, "", ErrInvalidPageToken
	}
	return time.Unix(0, ns).UTC(), parts[2], nil
}

// compareSummaries orders newest status first, then id descending (ids
// are UUIDv7: the later created first among equal times).
func compareSummaries(a, b taskSummary) int {
	if c := b.StatusTime.Compare(a.StatusTime); c != 0 {
		return c
	}
	return cmp.Compare(b.id, a.id)
}

// List returns owner's tasks matching filter, newest status first (ties:
// id descending), one page at a time: the next page token ("" on the last
// page) and the number of matching tasks across all pages. The selection
// and order come from the task summaries as of the call; the tasks
// returned are loaded afterwards, so one that changed in between is
// returned as it is now. Cost: every List reads one summary header per
// task in the stream (all owners); the tasks of the page are then loaded
// in parallel.
func (s *Store) List(ctx context.Context, owner Owner, filter ListFilter) ([]*Task, string, int, error) {
	tasks, next, total, err := s.list(ctx, owner, filter)
	if err != nil {
		return nil, "", 0, fmt.Errorf("list tasks: %w", err)
	}
	return tasks, next, total, nil
}

func (s *Store) list(ctx context.Context, owner Owner, filter ListFilter) ([]*Task, string, int, error) {
	if err := validateOwner(owner); err != nil {
		return nil, "", 0, err
	}
	if filter.State != "" && !filter.State.Valid() {
		return nil, "", 0, fmt.Errorf("%w: state %q", ErrInvalidArgument, filter.State)
	}
	size := filter.PageSize
	switch {
	case size < 0:
		return nil, "", 0, fmt.Errorf("%w: negative page size", ErrInvalidArgument)
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	var after *taskSummary
	if filter.PageToken != "" {
		t, id, err := decodePageToken(filter.PageToken)
		if err != nil {
			return nil, "", 0, err
		}
		after = &taskSummary{id: id, summary: summary{StatusTime: t}}
	}
	all, err := s.scan(ctx)
	if err != nil {
		return nil, "", 0, err
	}
	matched := all[:0]
	for _, ts := range all {
		switch {
		case ts.Subject != owner.Subject || ts.Tenant != owner.Tenant:
		case filter.ContextID != "" && ts.ContextID != filter.ContextID:
		case filter.State != "" && ts.State != filter.State:
		case !filter.StatusAfter.IsZero() && ts.StatusTime.Before(filter.StatusAfter):
		default:
			matched = append(matched, ts)
		}
	}
	slices.SortFunc(matched, compareSummaries)
	start := 0
	if after != nil {
		i, found := slices.BinarySearchFunc(matched, *after, compareSummaries)
		if found {
			i++
		}
		start = i
	}
	end := min(start+size, len(matched))
	page := matched[start:end]
	next := ""
	if end < len(matched) && len(page) > 0 {
		next = encodePageToken(page[len(page)-1])
	}
	tasks, err := s.loadAll(ctx, page, owner)
	if err != nil {
		return nil, "", 0, err
	}
	return tasks, next, len(matched), nil
}

// loadAll loads the tasks of a page, a few at a time, in page order.
func (s *Store) loadAll(ctx context.Context, page []taskSummary, owner Owner) ([]*Task, error) {
	out := make([]*Task, len(page))
	errs := make([]error, len(page))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, ts := range page {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = s.load(ctx, ts.id, owner)
		})
	}
	wg.Wait()
	tasks := out[:0]
	for i, t := range out {
		switch {
		case errors.Is(errs[i], ErrNotFound): // purged meanwhile
		case errs[i] != nil:
			return nil, fmt.Errorf("load %s: %w", page[i].id, errs[i])
		default:
			tasks = append(tasks, t)
		}
	}
	return tasks, nil
}

// TaskRef names a task and its owner, for a replica that acts on tasks
// it did not accept (Claimable).
type TaskRef struct {
	ID    string
	Owner Owner
}

// Claimable returns the tasks another replica should pick up: submitted
// or working, with a deferred request, and either claimed under a lease
// that has expired or never claimed and unchanged for at least grace
// (the accepting replica normally claims at once; grace keeps the sweeper
// from racing it, and the race would be harmless anyway: one Claim wins).
// The caller claims each with Claim, which re-checks everything.
func (s *Store) Claimable(ctx context.Context, grace time.Duration) ([]TaskRef, error) {
	all, err := s.scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("claimable tasks: %w", err)
	}
	now := s.opts.now()
	var out []TaskRef
	for _, ts := range all {
		if ts.claimable(now, grace) {
			out = append(out, TaskRef{ID: ts.id, Owner: Owner{Subject: ts.Subject, Tenant: ts.Tenant}})
		}
	}
	slices.SortFunc(out, func(a, b TaskRef) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}
