package taskstore

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Retention purges a task only once it has ended, its retention has passed
// and every durable reader has acknowledged its last commit, and then all
// of it; a live task is kept however old, and is purged once it ends.
func TestExpireTerminalTasks(t *testing.T) {
	ctx := t.Context()
	// The stream stamps each message with the server's clock, which is
	// what the retention is measured against: a short one, and real time.
	const retention = 1500 * time.Millisecond
	s := openStore(t, startNATS(t), WithMaxLiveTasksPerOwner(0))
	finish := func(id string) { t.Helper(); finishTask(t, s, id) }
	create := func() string { t.Helper(); return createTask(t, s) }
	// A durable reader that has read nothing yet (the projections' fold
	// behind, say) holds every task back.
	reader, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "reader", AckPolicy: jetstream.AckAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	done, live := create(), create()
	finish(done)
	if _, err := s.Transition(ctx, live, alice, func(*Task) ([]Event, error) {
		return []Event{StatusEvent(StateWorking, nil)}, nil
	}); err != nil {
		t.Fatal(err)
	}

	x, err := s.NewExpirer(retention)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewExpirer(0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("retention 0: %v", err)
	}
	expire := func(wantPurged, wantKept int) {
		t.Helper()
		res, err := x.Expire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.Purged != wantPurged || res.Kept != wantKept {
			t.Fatalf("expire: %+v, want %d purged and %d kept", res, wantPurged, wantKept)
		}
	}
	expire(0, 0) // nothing is past its retention yet
	time.Sleep(retention + 200*time.Millisecond)
	recent := create()
	finish(recent) // within its retention
	expire(0, 2)   // the other two are past it, but the reader has not acknowledged them

	ackAll(t, reader) // the reader catches up
	expire(1, 1)      // the ended task goes; the live one is kept however old
	if _, err := s.Load(ctx, done, alice); !errors.Is(err, ErrNotFound) {
		t.Fatalf("purged task: %v", err)
	}
	for _, id := range []string{live, recent} {
		if _, err := s.Load(ctx, id, alice); err != nil {
			t.Fatalf("kept task %s: %v", id, err)
		}
	}

	// The live task ends; once its retention has passed too it goes,
	// found through the kept set without walking the stream again.
	finish(live)
	ackAll(t, reader)
	expire(0, 1) // its last commit is new: kept
	time.Sleep(retention + 200*time.Millisecond)
	expire(2, 0) // it, through the kept set, and the recent one, walked to now
	info, err := s.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("stream holds %d messages after every task expired", info.State.Msgs)
	}
}

// ackAll fetches what the consumer has and acknowledges the last of it.
func ackAll(t *testing.T, c jetstream.Consumer) {
	t.Helper()
	batch, err := c.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	var last jetstream.Msg
	for m := range batch.Messages() {
		last = m
	}
	if last == nil {
		t.Fatal("the reader got nothing")
	}
	if err := last.DoubleAck(t.Context()); err != nil { // acknowledged before the next pass looks
		t.Fatal(err)
	}
}

// A reader the Expirer was told to wait for (the projections' task fold)
// that does not exist, as while it is being made again, stops every purge:
// the floor must not come from the other readers alone.
func TestExpireWaitsForNamedReaders(t *testing.T) {
	ctx := t.Context()
	const retention = 200 * time.Millisecond
	s := openStore(t, startNATS(t), WithMaxLiveTasksPerOwner(0))
	id := createTask(t, s)
	finishTask(t, s, id)
	time.Sleep(retention + 100*time.Millisecond)
	x, err := s.NewExpirer(retention, "projections")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := x.Expire(ctx); !errors.Is(err, ErrReaderMissing) || res.Purged != 0 {
		t.Fatalf("without the projections' consumer: %+v, %v", res, err)
	}
	if _, err := s.Load(ctx, id, alice); err != nil {
		t.Fatalf("the task went while a named reader was missing: %v", err)
	}
	reader, err := s.stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "projections", AckPolicy: jetstream.AckAllPolicy})
	if err != nil {
		t.Fatal(err)
	}
	ackAll(t, reader)
	if res, err := x.Expire(ctx); err != nil || res.Purged != 1 {
		t.Fatalf("once it has read the task: %+v, %v", res, err)
	}
}

// A task stream deleted and made again is walked from its start: what the
// Expirer remembered of the old one does not hide the new one's tasks.
func TestExpireAfterTheStreamIsMadeAgain(t *testing.T) {
	ctx := t.Context()
	const retention = 200 * time.Millisecond
	ns := startNATS(t)
	s := openStore(t, ns, WithMaxLiveTasksPerOwner(0))
	ended := func(s *Store, n int) {
		t.Helper()
		for range n {
			finishTask(t, s, createTask(t, s))
		}
	}
	ended(s, 5)
	time.Sleep(retention + 100*time.Millisecond)
	x, err := s.NewExpirer(retention)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := x.Expire(ctx); err != nil || res.Purged != 5 {
		t.Fatalf("first stream: %+v, %v", res, err)
	}
	if err := s.js.DeleteStream(ctx, StreamName); err != nil {
		t.Fatal(err)
	}
	openStore(t, ns, WithMaxLiveTasksPerOwner(0)) // another replica makes it again
	ended(s, 6)                                   // more messages than the first stream had
	time.Sleep(retention + 100*time.Millisecond)
	if res, err := x.Expire(ctx); err != nil || res.Purged != 6 {
		t.Fatalf("the stream made again: %+v, %v", res, err)
	}
}

// createTask creates a task of alice's and returns its id.
func createTask(t *testing.T, s *Store) string {
	t.Helper()
	task, err := s.Create(t.Context(), alice, "", msg("go"), json.RawMessage(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return task.ID
}

// finishTask ends task id as completed.
func finishTask(t *testing.T, s *Store, id string) {
	t.Helper()
	if _, err := s.Transition(t.Context(), id, alice, func(*Task) ([]Event, error) {
		return []Event{FinishEvent(StateCompleted, msg("done"))}, nil
	}); err != nil {
		t.Fatal(err)
	}
}
