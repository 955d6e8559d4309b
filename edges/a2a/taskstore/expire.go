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

	"github.com/chio-ledger/chio/schemas"
)

// Retention: the stream keeps a task until it has ended and been left alone
// for a retention period; then Expirer purges the task's subject, all of
// it, so no fold ever sees a task cut in half. A task that is not terminal
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
	// kept are subjects older than the retention that were still needed
	// (not terminal, or not yet acknowledged by every durable reader) when
	// last looked at; from is the stream sequence the walk resumes at.
	kept map[string]bool
	from uint64
}

// NewExpirer returns an Expirer that purges terminal tasks whose last
// commit is older than retention (> 0).
func (s *Store) NewExpirer(retention time.Duration) (*Expirer, error) {
	if retention <= 0 {
		return nil, fmt.Errorf("task retention %s: %w: must be positive", retention, ErrInvalidArgument)
	}
	return &Expirer{s: s, retention: retention, kept: map[string]bool{}}, nil
}

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
	floor, err := x.readFloor(ctx)
	if err != nil {
		return res, err
	}
	decide := func(subject string) error {
		purge, keep, err := x.expired(ctx, subject, cutoff, floor)
		switch {
		case err != nil:
			return err
		case purge:
			if err := x.s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
				return fmt.Errorf("expire tasks: purge %s: %w", subject, err)
			}
			delete(x.kept, subject)
			res.Purged++
		case keep:
			x.kept[subject] = true
		}
		return nil
	}
	again := slices.Collect(maps.Keys(x.kept))
	clear(x.kept) // decide puts back what is still needed
	for _, subject := range again {
		if err := decide(subject); err != nil {
			return res, err
		}
	}
	from := max(x.from, info.State.FirstSeq)
	if info.State.Msgs == 0 || from > info.State.LastSeq {
		res.Kept = len(x.kept)
		return res, nil
	}
	cons, err := x.s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{StreamSubjects}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: from, HeadersOnly: true,
		// Gone soon after the pass, not the default minutes later: a
		// pass runs as often as every second.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return res, fmt.Errorf("expire tasks: consumer: %w", err)
	}
	seen := map[string]bool{}
	for res.Messages < expireBudget {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return res, fmt.Errorf("expire tasks: fetch: %w", err)
		}
		n, young, last := 0, false, uint64(0)
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return res, fmt.Errorf("expire tasks: %w", err)
			}
			if !meta.Timestamp.Before(cutoff) {
				young = true
				break
			}
			res.Messages++
			last = meta.Sequence.Stream
			subject := m.Subject()
			if id, ok := strings.CutPrefix(subject, schemas.TasksSubjectPrefix); !ok || !validID(id) || seen[subject] || x.kept[subject] {
				continue
			}
			seen[subject] = true
			if err := decide(subject); err != nil {
				return res, err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return res, fmt.Errorf("expire tasks: fetch: %w", err)
		}
		if last > 0 {
			x.from = last + 1
		}
		if young || n == 0 || last >= info.State.LastSeq {
			break
		}
	}
	res.Kept = len(x.kept)
	return res, nil
}

// expired reports whether subject's task may go (purge) or is still
// needed although old (keep): it may go once its last commit is older
// than cutoff, at or below floor, and says the task has ended. A task
// whose last commit cannot be read as a signed summary is kept: only a
// commit the store trusts can end a task's retention. A subject with no
// commit left (another replica purged it) is neither.
func (x *Expirer) expired(ctx context.Context, subject string, cutoff time.Time, floor uint64) (purge, keep bool, err error) {
	seq, h, stored, found, err := x.s.lastCommit(ctx, subject)
	if err != nil {
		return false, false, fmt.Errorf("expire tasks: %w", err)
	}
	if !found {
		return false, false, nil
	}
	if !stored.Before(cutoff) || seq > floor {
		return false, true, nil
	}
	sm, err := x.s.readSummary(subject, seq, h, stored)
	if err != nil || !sm.State.Terminal() {
		return false, true, nil
	}
	return true, false, nil
}

// readFloor is the highest stream sequence every durable consumer of the
// stream has acknowledged (delivered, for one that takes no acks): what
// may be purged without a reader losing a commit it has not folded. A
// consumer with nothing pending and nothing unacknowledged has read all it
// wants (a filtered one's floor would otherwise stay where its subjects
// last had a message), and with no durable consumer nothing holds the
// stream back.
func (x *Expirer) readFloor(ctx context.Context) (uint64, error) {
	floor := uint64(1<<63 - 1)
	lister := x.s.stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" || ci.NumPending == 0 && ci.NumAckPending == 0 {
			continue // ephemeral, or has read (and acknowledged) all it wants
		}
		at := ci.AckFloor.Stream
		if ci.Config.AckPolicy == jetstream.AckNonePolicy {
			at = ci.Delivered.Stream
		}
		floor = min(floor, at)
	}
	if err := lister.Err(); err != nil {
		return 0, fmt.Errorf("expire tasks: list the stream's consumers: %w", err)
	}
	return floor, nil
}
