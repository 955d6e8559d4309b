package taskstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/readfloor"
	"github.com/chio-ledger/chio/schemas"
)

// Retention: the stream keeps a task until it has ended and been left alone
// for a retention period; then Expirer purges the task's subject up to
// its last commit, all of the task at once. A task that is not terminal
// is never purged, however old; nor is one whose last commit some durable
// consumer of the stream (the projections' task fold, push delivery) has
// not yet acknowledged, so what a reader has not folded is never lost. A
// purged task reads as ErrNotFound (A2A's TaskNotFound); its history stays
// in the projections, which keep what they folded.

// DefaultRetention is how long a terminal task stays readable after its
// last commit: a week, long enough for any client to fetch a result it
// was told about, short enough that the stream holds about a week of
// calls rather than every call ever made.
const DefaultRetention = 7 * 24 * time.Hour

// expireBudget bounds the messages one Expire pass reads, so a first pass
// over a large backlog does not hold a consumer for minutes; the next pass
// goes on from the stream's new first message.
const expireBudget = 100_000

// Expirer purges the tasks whose retention has passed (see Retention).
// It keeps which old tasks it found still needed between passes, so a long
// live task at the head of the stream costs one look per pass, not a walk
// over its commits. One Expirer per process; several replicas may each run
// one (a purge is idempotent). Not safe for concurrent use.
type Expirer struct {
	s         *Store
	retention time.Duration
	readers   []string // durable consumers that must exist for anything to go
	// kept are the tasks past the retention walked to that were still
	// needed (not terminal, or not yet acknowledged by every durable
	// reader) when last looked at, with their last commit then; from is
	// the stream sequence the walk resumes at.
	kept map[string]keptTask
	from uint64
	// created is when the stream from and kept refer to was made: a
	// stream deleted and made again starts both over.
	created time.Time
}

// keptTask is a kept task's last commit as last read: any change to the
// task is a later commit, so while that commit is too young or above the
// floor there is nothing to read again.
type keptTask struct {
	seq    uint64
	stored time.Time
}

// NewExpirer returns an Expirer that purges terminal tasks whose last
// commit is older than retention (> 0). readers names durable consumers
// of the stream (the projections' task fold, push delivery) whose absence
// stops every purge: a reader being made again (its consumer deleted and
// created) must not let a pass take the floor from the others.
func (s *Store) NewExpirer(retention time.Duration, readers ...string) (*Expirer, error) {
	if retention <= 0 {
		return nil, fmt.Errorf("task retention %s: %w: must be positive", retention, ErrInvalidArgument)
	}
	return &Expirer{s: s, retention: retention, readers: readers, kept: map[string]keptTask{}}, nil
}

// ErrReaderMissing is a pass that purged nothing because a durable reader
// the Expirer was told to wait for does not exist.
var ErrReaderMissing = readfloor.ErrReaderMissing

// ExpireResult says what one pass did.
type ExpireResult struct {
	Purged   int // tasks purged
	Kept     int // tasks past the retention still needed (live, or not yet read by every durable reader)
	Messages int // messages read by the walk
}

// Expire runs one pass: it looks again at the tasks kept last time, then
// walks the stream from where the last pass stopped (or its first message)
// to the first message younger than the retention, and purges every task
// whose retention has passed.
func (x *Expirer) Expire(ctx context.Context) (ExpireResult, error) {
	var res ExpireResult
	cutoff := x.s.opts.now().Add(-x.retention)
	info, err := x.s.stream.Info(ctx)
	if err != nil {
		return res, fmt.Errorf("expire tasks: stream info: %w", err)
	}
	if !info.Created.Equal(x.created) || x.from > info.State.LastSeq+1 {
		x.from, x.created = 0, info.Created // another stream: walk it from its start
		clear(x.kept)
	}
	// last, the stream's last sequence as the pass began, bounds the
	// floor, so a commit made during the pass is never judged.
	floor, err := readfloor.Read(ctx, x.s.stream, info.State.LastSeq, x.readers...)
	if err != nil {
		return res, fmt.Errorf("expire tasks: %w", err)
	}
	// decide purges subject or keeps it; on an error it leaves the kept
	// set as it was, so the next pass looks at the task again.
	decide := func(subject string) error {
		v, err := x.expired(ctx, subject, cutoff, floor)
		if err != nil {
			return err
		}
		switch {
		case v.purge:
			// Up to the commit judged, not the whole subject: a receipt
			// link may still land on an ended task, and its reader may not
			// have folded it yet. What it leaves alone goes in a later pass.
			if err := x.s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(v.seq+1)); err != nil {
				return fmt.Errorf("expire tasks: purge %s: %w", subject, err)
			}
			delete(x.kept, subject)
			res.Purged++
		case v.keep:
			x.kept[subject] = keptTask{seq: v.seq, stored: v.stored}
		default:
			delete(x.kept, subject) // gone already
		}
		return nil
	}
	for _, subject := range slices.Sorted(maps.Keys(x.kept)) {
		if k := x.kept[subject]; !k.stored.Before(cutoff) || k.seq > floor {
			continue // unchanged since, it would still be kept
		}
		if err := decide(subject); err != nil {
			return res, err
		}
	}
	from := max(x.from, info.State.FirstSeq)
	if info.State.Msgs == 0 || from > info.State.LastSeq {
		res.Kept = len(x.kept)
		return res, nil
	}
	read, err := x.walk(ctx, from, info.State.LastSeq, cutoff, decide)
	res.Messages = read
	res.Kept = len(x.kept)
	return res, err
}

// walk reads the stream's messages (headers only) from sequence from up to
// last, stopping at the first one stored at or after cutoff or after
// expireBudget messages, and decides each task it meets for the first
// time. It records where the next pass resumes.
func (x *Expirer) walk(ctx context.Context, from, last uint64, cutoff time.Time, decide func(string) error) (int, error) {
	cons, err := x.s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:   "taskstore retention walk",
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from,
		FilterSubject: StreamSubjects, AckPolicy: jetstream.AckNonePolicy, HeadersOnly: true,
		MemoryStorage: true, Replicas: 1, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return 0, fmt.Errorf("expire tasks: consumer: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := x.s.stream.DeleteConsumer(dctx, cons.CachedInfo().Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			x.s.opts.log.Warn("taskstore: delete retention consumer", "err", err)
		}
	}()
	seen := map[string]bool{}
	read := 0
	// page reads one fetch of up to 256 headers of what the stream holds
	// (it waits for nothing: past the stream's end the walk is done).
	page := func() (young bool, got int, at uint64, err error) {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return false, 0, 0, fmt.Errorf("expire tasks: fetch: %w", err)
		}
		for m := range batch.Messages() {
			got++
			if young || err != nil {
				continue // drain what was delivered
			}
			meta, merr := m.Metadata()
			if merr != nil {
				err = fmt.Errorf("expire tasks: %w", merr)
				continue
			}
			if !meta.Timestamp.Before(cutoff) {
				young = true
				continue
			}
			read++
			seq, subject := meta.Sequence.Stream, m.Subject()
			id, ok := strings.CutPrefix(subject, schemas.TasksSubjectPrefix)
			_, kept := x.kept[subject] // looked at by subject at the start of the pass
			if ok && validID(id) && !seen[subject] && !kept {
				if err = decide(subject); err != nil {
					continue // the walk resumes at this message next time
				}
			}
			seen[subject] = true
			at = seq
		}
		if err != nil {
			return young, got, at, err
		}
		if berr := batch.Error(); berr != nil && !errors.Is(berr, jetstream.ErrNoMessages) {
			return young, got, at, fmt.Errorf("expire tasks: fetch: %w", berr)
		}
		return young, got, at, nil
	}
	for read < expireBudget && ctx.Err() == nil {
		young, got, at, err := page()
		if at > 0 {
			x.from = at + 1
		}
		if err != nil {
			return read, err
		}
		if young || got == 0 || at >= last {
			return read, nil
		}
	}
	return read, nil
}

// verdict is what a pass decides of one task: purge it up to its last
// commit seq, keep it (past the retention but still needed), or neither
// (nothing left on its subject).
type verdict struct {
	purge, keep bool
	seq         uint64
	stored      time.Time
}

// expired decides subject's task: it may go once its last commit is
// older than cutoff, at or below floor, and says the task has ended. A
// task whose last commit cannot be read as a signed summary is kept: only
// a commit the store trusts can end a task's retention.
func (x *Expirer) expired(ctx context.Context, subject string, cutoff time.Time, floor uint64) (verdict, error) {
	seq, h, stored, found, err := x.s.lastCommit(ctx, subject)
	if err != nil {
		return verdict{}, fmt.Errorf("expire tasks: %w", err)
	}
	if !found {
		return verdict{}, nil
	}
	v := verdict{keep: true, seq: seq, stored: stored}
	if !stored.Before(cutoff) || seq > floor {
		return v, nil
	}
	if sm, err := x.s.readSummary(subject, seq, h, stored); err == nil && sm.State.Terminal() {
		v.purge, v.keep = true, false
	}
	return v, nil
}
