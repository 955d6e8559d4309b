package taskstore

import (
	"slices"
	"testing"
)

// TransitionFrom commits against the task it is given; when another
// writer moved the task on, it reloads and applies fn to the current task,
// so nothing the other writer wrote is lost and the fold is Load's.
func TestTransitionFrom(t *testing.T) {
	ns := startNATS(t)
	s := openStore(t, ns)
	ctx := t.Context()
	task, err := s.Create(ctx, alice, "", msg("hi"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	add := func(text string) func(*Task) ([]Event, error) {
		return func(*Task) ([]Event, error) { return []Event{MessageEvent(msg(text))}, nil }
	}
	cur := task
	for _, text := range []string{"a", "b"} {
		if cur, err = s.TransitionFrom(ctx, cur, add(text)); err != nil {
			t.Fatal(err)
		}
	}
	// Another writer appends; the held task is now stale.
	if _, err := s.Transition(ctx, task.ID, alice, add("other")); err != nil {
		t.Fatal(err)
	}
	var sawOther bool
	if cur, err = s.TransitionFrom(ctx, cur, func(t *Task) ([]Event, error) {
		sawOther = len(t.History) == 4
		return []Event{MessageEvent(msg("c"))}, nil
	}); err != nil {
		t.Fatal(err)
	}
	loaded, err := s.Load(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	if !sawOther || cur.Seq != loaded.Seq || len(loaded.History) != 5 || !slices.Equal(cur.commitIDs, loaded.commitIDs) {
		t.Fatalf("after a stale append: saw other %v, seq %d vs %d, %d messages", sawOther, cur.Seq, loaded.Seq, len(loaded.History))
	}
	// A refused event writes nothing.
	if _, err := complete(ctx, s, task.ID, alice, StateCompleted, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TransitionFrom(ctx, cur, add("late")); err == nil {
		t.Fatal("an event after the end was accepted")
	}
}
