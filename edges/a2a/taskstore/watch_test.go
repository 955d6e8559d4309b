package taskstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// collect reads ch until it closes or the deadline passes.
func collect(t *testing.T, ch <-chan Event, timeout time.Duration) []Event {
	t.Helper()
	var out []Event
	deadline := time.After(timeout)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, e)
		case <-deadline:
			t.Fatalf("watch did not close within %s (%d events)", timeout, len(out))
		}
	}
}

func describe(events []Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%d:%s:%s:%s%s", e.Seq, e.Type, e.State, e.Message, e.Artifact))
	}
	return out
}

func TestWatchersSeeTheSameEvents(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	a, b := openStore(t, ns), openStore(t, ns)
	task, err := a.Create(ctx, alice, "", msg("start"), json.RawMessage(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := a.Watch(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := b.Watch(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	// A third watcher that leaves early must not disturb the others.
	ctx3, stop3 := context.WithCancel(ctx)
	w3, err := b.Watch(ctx3, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	if e := <-w3; e.Type != EventCreated {
		t.Fatalf("first event = %s", e.Type)
	}
	stop3()
	collect(t, w3, 30*time.Second)

	for i := range 10 {
		s := []*Store{a, b}[i%2]
		if _, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
			return []Event{StatusEvent(StateWorking, msg(fmt.Sprint("step ", i))), ArtifactEvent(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)))}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := complete(ctx, b, task.ID, alice, StateCompleted, msg("done"), nil, []string{"r"}); err != nil {
		t.Fatal(err)
	}
	e1, e2 := collect(t, w1, 30*time.Second), collect(t, w2, 30*time.Second)
	if !slices.Equal(describe(e1), describe(e2)) {
		t.Fatalf("watchers differ:\n%v\n%v", describe(e1), describe(e2))
	}
	if len(e1) != 1+20+2 || e1[0].Type != EventCreated || !e1[len(e1)-1].Terminal() {
		t.Fatalf("events: %v", describe(e1))
	}
	// The events fold to what Load returns.
	folded := &Task{ID: task.ID}
	for i := range e1 {
		if err := folded.apply(&e1[i]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Load(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	if folded.State != got.State || len(folded.Artifacts) != len(got.Artifacts) || e1[len(e1)-1].Seq != got.Seq {
		t.Fatalf("watched fold %+v != loaded %+v", folded, got)
	}

	// Watching a terminal task replays it and closes.
	replay, err := a.Watch(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(t, replay, 30*time.Second); !slices.Equal(describe(r), describe(e1)) {
		t.Fatalf("replay differs: %v", describe(r))
	}
}

func TestWatchLive(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t))
	task, err := s.Create(ctx, alice, "", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	if e := <-ch; e.Type != EventCreated {
		t.Fatalf("first = %s", e.Type)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = s.Cancel(ctx, task.ID, alice)
	}()
	rest := collect(t, ch, 30*time.Second)
	if len(rest) != 1 || rest[0].Type != EventCanceled {
		t.Fatalf("live events: %v", describe(rest))
	}
}
