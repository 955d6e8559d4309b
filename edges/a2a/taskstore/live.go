package taskstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// Live keeps, in memory, the summaries of the tasks a sweeper may have to
// take over (submitted or working, with a request), current by following
// the summary headers of the task stream: first the last commit of every
// task, then each new commit. A sweep then costs what the live tasks cost;
// Claimable's full scan costs every task ever stored, and running it every
// few seconds stalled the calls in flight more the longer a replica ran.
type Live struct {
	s      *Store
	mu     sync.Mutex
	tasks  map[string]taskSummary
	caught bool // the first pass over every task's last commit is done
	err    error
}

// FollowLive starts following the task stream until ctx ends.
func (s *Store) FollowLive(ctx context.Context) (*Live, error) {
	cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{StreamSubjects},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return nil, fmt.Errorf("follow live tasks: create consumer: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("follow live tasks: consumer info: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("follow live tasks: consume: %w", err)
	}
	l := &Live{s: s, tasks: map[string]taskSummary{}, caught: info.NumPending == 0}
	go func() { // Next blocks; stopping the iterator unblocks it
		<-ctx.Done()
		it.Stop()
	}()
	go l.run(ctx, it)
	return l, nil
}

func (l *Live) run(ctx context.Context, it jetstream.MessagesContext) {
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				l.s.opts.log.Warn("taskstore: live task index stopped; sweeps scan the stream", "err", err)
			}
			l.mu.Lock()
			l.err = fmt.Errorf("live task index stopped: %w", cmp.Or(err, ctx.Err()))
			l.mu.Unlock()
			return
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		id, ok := strings.CutPrefix(m.Subject(), schemas.TasksSubjectPrefix)
		if !ok || !validID(id) {
			continue
		}
		sm, err := l.s.readSummary(m.Subject(), meta.Sequence.Stream, m.Headers(), meta.Timestamp)
		l.mu.Lock()
		switch prev, seen := l.tasks[id]; {
		case seen && prev.seq >= meta.Sequence.Stream:
			// an older commit, redelivered after the consumer was reset
		case err == nil && sm.liveForSweep():
			l.tasks[id] = taskSummary{id: id, seq: meta.Sequence.Stream, summary: sm}
		default:
			delete(l.tasks, id)
		}
		if meta.NumPending == 0 {
			l.caught = true
		}
		l.mu.Unlock()
	}
}

// Claimable is Store.Claimable from memory. ok is false until the first
// pass over the stream is done, or once following failed: the caller then
// falls back to the scan.
func (l *Live) Claimable(grace time.Duration) (refs []TaskRef, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.caught || l.err != nil {
		return nil, false
	}
	now := l.s.opts.now()
	for _, ts := range l.tasks {
		if ts.claimable(now, grace) {
			refs = append(refs, TaskRef{ID: ts.id, Owner: Owner{Subject: ts.Subject, Tenant: ts.Tenant}})
		}
	}
	slices.SortFunc(refs, func(a, b TaskRef) int { return cmp.Compare(a.ID, b.ID) })
	return refs, true
}

// Len is how many live tasks the index holds.
func (l *Live) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tasks)
}

// liveForSweep: a task a sweeper may ever have to take over or end.
func (sm summary) liveForSweep() bool {
	return (sm.State == StateSubmitted || sm.State == StateWorking) && sm.HasRequest
}

// claimable: a live task whose claim ran out, or that nobody claimed
// within grace of its last status.
func (sm summary) claimable(now time.Time, grace time.Duration) bool {
	if !sm.liveForSweep() {
		return false
	}
	expired := sm.ClaimedBy != "" && !now.Before(sm.ClaimExpires)
	unclaimed := sm.ClaimedBy == "" && !now.Before(sm.StatusTime.Add(grace))
	return expired || unclaimed
}
