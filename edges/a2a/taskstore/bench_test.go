package taskstore

import (
	"encoding/json"
	"testing"
)

func BenchmarkCreateComplete(b *testing.B) {
	ctx := b.Context()
	s := openStore(b, startNATS(b))
	request := json.RawMessage(`{"tool":"echo","arguments":{"text":"hello"}}`)
	artifact := []json.RawMessage{json.RawMessage(`{"artifactId":"a","parts":[{"text":"hello"}]}`)}
	b.ReportAllocs()
	for b.Loop() {
		task, err := s.Create(ctx, alice, "", msg("hello"), request, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Complete(ctx, task.ID, alice, StateCompleted, msg("done"), artifact, []string{"receipt"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad folds a task of five commits: created, claimed, working,
// a history message, completed.
func BenchmarkLoad(b *testing.B) {
	ctx := b.Context()
	s := openStore(b, startNATS(b))
	task, err := s.Create(ctx, alice, "", msg("hello"), json.RawMessage(`{"tool":"echo"}`), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := s.Claim(ctx, task.ID, alice, "r1", 60e9); err != nil {
		b.Fatal(err)
	}
	for _, e := range []Event{StatusEvent(StateWorking, nil), MessageEvent(msg("more"))} {
		if _, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) { return []Event{e}, nil }); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Complete(ctx, task.ID, alice, StateCompleted, msg("done"), nil, []string{"receipt"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.Load(ctx, task.ID, alice)
		if err != nil || got.Seq != task.Seq+4 {
			b.Fatal(got, err)
		}
	}
}
