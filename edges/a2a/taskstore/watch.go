package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watchBuffer is how many events a slow watcher may lag before the
// watch waits for it (it never drops one).
const watchBuffer = 64

// Watch streams task id's events from the first (created) on, in commit
// order, then live as they are appended. Each watcher has its own ordered
// consumer: concurrent watchers see the same events in the same order,
// and stopping one affects nothing else. Events refused by the fold (see
// Task.apply) are not delivered, so the stream a watcher sees folds to
// exactly what Load returns; each event carries its generation (see
// schemas.TaskEvent.Generation), computed by that same fold, so a watcher
// on any replica numbers the task's events alike. The channel is closed after the event that
// makes the task terminal, when ctx ends, or if the consumer fails for
// good; the caller should Load the task after a close it did not expect.
// A task owned by anyone but owner is ErrNotFound.
func (s *Store) Watch(ctx context.Context, id string, owner Owner) (<-chan Event, error) {
	ch, err := s.watch(ctx, id, owner)
	if err != nil {
		return nil, fmt.Errorf("watch task %s: %w", id, err)
	}
	return ch, nil
}

func (s *Store) watch(ctx context.Context, id string, owner Owner) (<-chan Event, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	seq, h, stored, found, err := s.lastCommit(ctx, Subject(id))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, ErrNotFound
	}
	sm, err := s.readSummary(Subject(id), seq, h, stored)
	if err != nil || sm.Subject != owner.Subject || sm.Tenant != owner.Tenant {
		return nil, ErrNotFound
	}
	cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{Subject(id)},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	ch := make(chan Event, watchBuffer)
	done := make(chan struct{})
	go func() { // Next blocks; stopping the iterator unblocks it
		select {
		case <-ctx.Done():
		case <-done:
		}
		it.Stop()
	}()
	go func() {
		defer func() {
			close(done)
			close(ch)
			s.deleteConsumer(cons)
		}()
		s.pump(ctx, id, it, ch)
	}()
	return ch, nil
}

// pump folds and forwards the commits of it until the task is terminal,
// ctx ends or the iterator fails.
func (s *Store) pump(ctx context.Context, id string, it jetstream.MessagesContext, ch chan<- Event) {
	t := &Task{ID: id}
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				s.opts.log.Warn("taskstore: watch ended", "task", id, "err", err)
			}
			return
		}
		meta, err := m.Metadata()
		if err != nil {
			s.opts.log.Warn("taskstore: watch: message without metadata", "task", id, "err", err)
			return
		}
		var c commit
		// The watch sees the task's every commit in order, so the one
		// before is prev (an ordered consumer delivers from the first).
		prev, ok := s.authentic(m.Subject(), meta.Sequence.Stream, m.Headers(), m.Data(), meta.Timestamp)
		before := t.Seq
		t.Seq = meta.Sequence.Stream
		if !ok || (prev >= 0 && uint64(prev) != before) {
			continue
		}
		if err := json.Unmarshal(m.Data(), &c); err != nil {
			s.opts.log.Warn("taskstore: skipping undecodable commit", "task", id, "seq", meta.Sequence.Stream, "err", err)
			continue
		}
		for i := range c.Events {
			e := c.Events[i]
			eff, err := t.applyEffect(&e)
			if err != nil {
				s.opts.log.Warn("taskstore: skipping refused event", "task", id, "seq", meta.Sequence.Stream, "err", err)
				continue
			}
			e.Seq, e.Generation = meta.Sequence.Stream, 0
			if eff.Mutation {
				e.Generation = t.Generation
			}
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
		if t.State.Terminal() {
			return
		}
	}
}

// deleteConsumer removes a watch's ordered consumer from the server at
// once rather than after its inactivity threshold.
func (s *Store) deleteConsumer(cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.stream.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.opts.log.Debug("taskstore: delete watch consumer", "consumer", info.Name, "err", err)
	}
}
