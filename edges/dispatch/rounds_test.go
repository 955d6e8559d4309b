package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// streamMessages counts the messages on the events stream by subject.
func (f *fixture) streamMessages(t *testing.T) map[string]int {
	t.Helper()
	c, err := f.js.OrderedConsumer(context.Background(), schemas.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(10000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for m := range batch.Messages() {
		out[m.Subject()]++
	}
	return out
}

// Concurrent calls share writes: every call's two events are in the
// stream exactly once, in fewer messages than events.
func TestConcurrentCallsShareWrites(t *testing.T) {
	f := setup(t)
	natstest.EnvelopeReader(t, f.js)
	if err := f.d.w.Look(context.Background()); err != nil || !f.d.w.Envelopes() {
		t.Fatalf("no envelopes with a reader that declares them: %v", err)
	}
	const calls = 64
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Go(func() {
			res, err := f.d.Do(context.Background(), Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task",
				Arguments: json.RawMessage(fmt.Sprintf(`{"text":"w%d"}`, i))})
			switch {
			case err != nil:
				errs <- err
			case !res.OutcomeDurable || !res.Ran:
				errs <- fmt.Errorf("call %d: ran %v, outcome durable %v", i, res.Ran, res.OutcomeDurable)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ev := f.events(t)
	seen := map[string]int{}
	for _, subj := range []string{schemas.SubjectDecision, schemas.SubjectOutcome} {
		if len(ev[subj]) != calls {
			t.Fatalf("%d events on %s, want %d", len(ev[subj]), subj, calls)
		}
		for _, raw := range ev[subj] {
			var h struct {
				EventID string `json:"event_id"`
			}
			if err := json.Unmarshal(raw, &h); err != nil {
				t.Fatal(err)
			}
			seen[h.EventID]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("event %s written %d times", id, n)
		}
	}
	msgs := f.streamMessages(t)
	total := 0
	for _, n := range msgs {
		total += n
	}
	// 64 calls at once queue behind each other's writes: at least one
	// write must have carried several events (in practice most do).
	if msgs[schemas.SubjectEnvelope] == 0 || total >= 2*calls {
		t.Fatalf("no write was shared: %v for %d events", msgs, 2*calls)
	}
	t.Logf("%d events in %d messages (%v)", 2*calls, total, msgs)
}

// The edge's own write of the result runs concurrently with the outcome
// event's write: Finish sees the outcome land while it is itself still
// running, after the tool ran.
func TestFinishSharesItsRound(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var order []string
	res, err := f.d.Do(ctx, Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{"text":"x"}`),
		Finish: func(context.Context, *Result) error { // bounded by the test's ctx, not the write's

			order = append(order, fmt.Sprintf("finish runs=%d", f.server.runs.Load()))
			for ctx.Err() == nil {
				if len(f.events(t)[schemas.SubjectOutcome]) > 0 {
					return nil
				}
				time.Sleep(5 * time.Millisecond)
			}
			return errors.New("the outcome never landed while the edge's write waited")
		},
	})
	if err != nil || res.FinishErr != nil || !res.OutcomeDurable {
		t.Fatalf("err %v, result %+v", err, res)
	}
	if fmt.Sprint(order) != "[finish runs=1]" {
		t.Fatalf("order %v", order)
	}
}
