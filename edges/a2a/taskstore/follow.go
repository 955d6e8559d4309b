package taskstore

import (
	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/schemas"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Commit is one commit of a task, as Follow delivers it: the events of
// one transition, with the task's owner and state after it.
type Commit struct {
	TaskID    string
	Owner     Owner
	ContextID string
	State     State // the task's state after the commit
	Seq       uint64
	// Generation is the task's generation after the commit, 0 for a
	// commit written before commits recorded it.
	Generation int64
	// Events are the commit's events, each with Seq and, when the commit
	// records its generation, Generation as Watch sets it: the task's
	// generation after the event for a mutation, 0 for the rest.
	Events []Event
}

// Follow hands every commit appended to the store after the durable
// consumer named durable was first created to fn, until ctx ends. Every
// replica that calls Follow with the same name shares that consumer, so
// each commit goes to one of them; a commit is acknowledged when fn
// returns nil and offered again (to any of them) when it returns an error
// or the replica dies, so delivery is at least once. Commits of one task
// arrive in order unless a redelivery reorders them. Each event carries
// the generation Watch gives it (see Commit), read from the commit alone:
// Follow folds no task.
//
// With FollowTasks, only the commits of the tasks its function accepts are
// decoded and handed to fn.
func (s *Store) Follow(ctx context.Context, durable string, fn func(context.Context, Commit) error, opts ...FollowOption) error {
	var fo followOptions
	for _, o := range opts {
		o(&fo)
	}
	cons, err := s.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "shared follower of every task commit",
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 1024,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("follow tasks: consumer %s: %w", durable, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow tasks: consume: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return ctx.Err()
			}
			return fmt.Errorf("follow tasks: %w", err)
		}
		if fo.want != nil {
			id, _ := strings.CutPrefix(m.Subject(), schemas.TasksSubjectPrefix)
			want, err := fo.want(ctx, id)
			if err != nil {
				if ctx.Err() == nil {
					s.opts.log.Warn("taskstore: follow: commit not filtered; redelivering", "task", id, "err", err)
				}
				_ = m.NakWithDelay(redeliveryDelay(m))
				continue
			}
			if !want {
				if err := m.Ack(); err != nil {
					s.opts.log.Debug("taskstore: follow: ack", "task", id, "err", err)
				}
				continue
			}
		}
		c, err := s.decodeCommit(ctx, m)
		var retry errRetry
		if errors.As(err, &retry) {
			if ctx.Err() == nil {
				s.opts.log.Warn("taskstore: follow: commit not checked; redelivering", "subject", m.Subject(), "err", err)
			}
			_ = m.NakWithDelay(redeliveryDelay(m))
			continue
		}
		if err != nil {
			// Not a commit this store can read: nothing will ever make it
			// readable, so drop it rather than block the consumer.
			s.opts.log.Warn("taskstore: follow: dropping unreadable commit", "subject", m.Subject(), "err", err)
			_ = m.Term()
			continue
		}
		if err := fn(ctx, c); err != nil {
			if ctx.Err() == nil {
				s.opts.log.Warn("taskstore: follow: commit not handled; redelivering", "task", c.TaskID, "seq", c.Seq, "err", err)
			}
			_ = m.NakWithDelay(redeliveryDelay(m))
			continue
		}
		if err := m.Ack(); err != nil {
			s.opts.log.Debug("taskstore: follow: ack", "task", c.TaskID, "seq", c.Seq, "err", err)
		}
	}
}

// FollowOption configures Follow.
type FollowOption func(*followOptions)

type followOptions struct {
	want func(ctx context.Context, taskID string) (bool, error)
}

// FollowTasks hands Follow's fn only the commits of the tasks want
// accepts; the others are acknowledged without their bodies being
// decoded, which is most of what following costs when few tasks are of
// interest (push delivery: only tasks with a config). An error from want
// offers the commit again, as one from fn does.
func FollowTasks(want func(ctx context.Context, taskID string) (bool, error)) FollowOption {
	return func(o *followOptions) { o.want = want }
}

func (s *Store) decodeCommit(ctx context.Context, m jetstream.Msg) (Commit, error) {
	meta, err := m.Metadata()
	if err != nil {
		return Commit{}, fmt.Errorf("metadata: %w", err)
	}
	id, ok := strings.CutPrefix(m.Subject(), schemas.TasksSubjectPrefix)
	if !ok || !validID(id) {
		return Commit{}, fmt.Errorf("subject %q is not a task subject", m.Subject())
	}
	prev, ok := s.authentic(m.Subject(), meta.Sequence.Stream, m.Headers(), m.Data(), meta.Timestamp)
	if !ok {
		return Commit{}, errUnsigned
	}
	if replayed, err := s.replayed(ctx, m.Subject(), prev, meta.Sequence.Stream); err != nil {
		return Commit{}, errRetry{err}
	} else if replayed {
		return Commit{}, fmt.Errorf("%w: replayed onto another position (signed to follow %d)", errUnsigned, prev)
	}
	sm, err := decodeSummary(m.Headers().Get(summaryHeader))
	if err != nil {
		return Commit{}, fmt.Errorf("summary header: %w", err)
	}
	var body commit
	if err := json.Unmarshal(m.Data(), &body); err != nil {
		return Commit{}, fmt.Errorf("body: %w", err)
	}
	for i := range body.Events {
		body.Events[i].Seq, body.Events[i].Generation = meta.Sequence.Stream, 0
	}
	numberMutations(body.Events, sm.Generation)
	return Commit{
		TaskID: id, Owner: Owner{Subject: sm.Subject, Tenant: sm.Tenant}, ContextID: sm.ContextID,
		State: sm.State, Seq: meta.Sequence.Stream, Generation: sm.Generation, Events: body.Events,
	}, nil
}

// numberMutations sets the generation of each mutation among events, the
// events of one commit after which the task is at generation after: the
// last mutation is at after, each one before it one less. Every event of
// a commit the store wrote applied to its task (commit checks them
// strictly against the task it expects to append to), and whether an
// accepted event is a mutation depends on the event alone
// (schemas.TaskEvent.Mutates), so these are the numbers the fold gives,
// as Watch does. A commit that does not record its generation (after 0,
// written before commits did) or records one too small for its mutations
// (not written by a store) leaves every event at 0.
func numberMutations(events []Event, after int64) {
	var n int64
	for i := range events {
		if events[i].Mutates() {
			n++
		}
	}
	g := after - n
	if after <= 0 || g < 0 {
		return
	}
	for i := range events {
		if events[i].Mutates() {
			g++
			events[i].Generation = g
		}
	}
}

// redeliveryDelay backs a failing commit off: about 1s, 2s, 4s … up to a
// minute, jittered like every retry (internal/backoff).
func redeliveryDelay(m jetstream.Msg) time.Duration {
	n := 1
	if meta, err := m.Metadata(); err == nil {
		n = int(min(max(meta.NumDelivered, 1), 64))
	}
	return followRetry.Delay(n)
}

// followRetry paces the redelivery of a commit its handler failed.
var followRetry = backoff.Policy{Base: time.Second, Cap: time.Minute}

// errRetry marks a commit that could not be checked for now (the stream
// did not answer): it is offered again.
type errRetry struct{ err error }

func (e errRetry) Error() string { return e.err.Error() }
func (e errRetry) Unwrap() error { return e.err }
