package taskstore

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chio-ledger/chio/internal/natstest"
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
		if _, err := complete(ctx, s, task.ID, alice, StateCompleted, msg("done"), artifact, []string{"receipt"}); err != nil {
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
	if _, err := complete(ctx, s, task.ID, alice, StateCompleted, msg("done"), nil, []string{"receipt"}); err != nil {
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

// BenchmarkConcurrentCommits has n committers append to n distinct tasks
// as fast as they can, on a single node that fsyncs every write (as `chio
// up` runs), with group commit on (the default threshold) and off. An op
// is one commit; commits/s is their rate across all committers.
func BenchmarkConcurrentCommits(b *testing.B) {
	for _, n := range []int{16, 64} {
		for _, batched := range []bool{true, false} {
			threshold := DefaultBatchThreshold
			if !batched {
				threshold = 0
			}
			b.Run(fmt.Sprintf("committers=%d/batch=%v", n, batched), func(b *testing.B) {
				ctx := b.Context()
				_, _, js := natstest.Start(b)
				s, err := Open(ctx, js, WithBatchThreshold(threshold))
				if err != nil {
					b.Fatal(err)
				}
				tasks := make([]*Task, n)
				for i := range tasks {
					if tasks[i], err = s.Create(ctx, alice, "", msg("go"), nil, nil); err != nil {
						b.Fatal(err)
					}
				}
				event := []Event{MessageEvent(msg("chunk"))}
				var left atomic.Int64
				left.Store(int64(b.N))
				var wg sync.WaitGroup
				b.ResetTimer()
				for _, task := range tasks {
					wg.Go(func() {
						for left.Add(-1) >= 0 {
							next, err := s.TransitionFrom(ctx, task, func(*Task) ([]Event, error) { return event, nil })
							if err != nil {
								b.Error(err)
								return
							}
							task = next
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
				if s.batch != nil {
					st := s.batch.stats()
					b.ReportMetric(float64(st.commits)/float64(b.N), "batched/op")
					b.ReportMetric(float64(st.commits)/float64(max(st.batches, 1)), "commits/batch")
				}
			})
		}
	}
}
