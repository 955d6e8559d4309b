package eventwriter

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

// oldConsumer reads the events stream as a consumer from a release before
// envelopes did: a durable pull consumer that declares nothing, folds the
// event subjects it knows and skips any other subject as unknown.
type oldConsumer struct {
	cons jetstream.Consumer
}

func newOldConsumer(t *testing.T, js jetstream.JetStream, name string) *oldConsumer {
	t.Helper()
	c, err := js.CreateOrUpdateConsumer(context.Background(), schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &oldConsumer{cons: c}
}

// drain reads whatever is pending: the event ids it folded, and how many
// messages it skipped as unknown.
func (o *oldConsumer) drain(t *testing.T) (ids []string, skipped int) {
	t.Helper()
	for {
		batch, err := o.cons.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			switch m.Subject() {
			case schemas.SubjectDecision, schemas.SubjectOutcome, schemas.SubjectTimeout:
				var e struct {
					EventID string `json:"event_id"`
				}
				if err := json.Unmarshal(m.Data(), &e); err != nil {
					t.Fatalf("old consumer: %v", err)
				}
				ids = append(ids, e.EventID)
			default:
				skipped++
			}
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatal(err)
		}
		if n == 0 {
			return ids, skipped
		}
	}
}

// writeConcurrently writes n events at once, ids prefix0…prefixN-1.
func writeConcurrently(t *testing.T, w *Writer, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("%s%d", prefix, i)
			if err := w.Write(context.Background(), id, event(id, 0)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// waitEnvelopes writes lone events until the writer's own looks (every
// refresh interval) find want, or fails after a few seconds.
func waitEnvelopes(t *testing.T, w *Writer, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; w.Envelopes() != want; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("writer envelopes %v, want %v", w.Envelopes(), want)
		}
		id := fmt.Sprintf("probe%d", i)
		if err := w.Write(context.Background(), id, event(id, 0)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A consumer of an older release beside edges of this one: while it is a
// durable consumer of the stream that does not declare it reads
// envelopes, concurrent calls' events are written one per message and it
// folds every one of them, none skipped. Once it is upgraded (its config
// declares the layout), the writer's own looks open the gate; a consumer
// of an older release that appears later shuts it again.
func TestGateKeepsOlderConsumersWhole(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, schemas.EventsStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	natstest.EnvelopeReader(t, js) // this release's ledger
	old := newOldConsumer(t, js, "ledger-of-an-older-release")
	w := New(js, WithGateRefresh(50*time.Millisecond))
	if err := w.Look(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Envelopes() {
		t.Fatal("envelopes on beside a consumer that does not read them")
	}

	const n = 300
	writeConcurrently(t, w, "a", n)
	ids, skipped := old.drain(t)
	if skipped != 0 {
		t.Fatalf("the older consumer skipped %d messages", skipped)
	}
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for i := range n {
		if id := fmt.Sprintf("a%d", i); seen[id] != 1 {
			t.Fatalf("the older consumer folded %s %d times", id, seen[id])
		}
	}
	if msgs, _ := stored(t, js); msgs[schemas.SubjectEnvelope] != 0 {
		t.Fatalf("envelopes written beside an older consumer: %v", msgs)
	}

	// Upgraded: the same durable now declares the layout.
	if _, err := js.CreateOrUpdateConsumer(ctx, schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: "ledger-of-an-older-release", AckPolicy: jetstream.AckExplicitPolicy, Metadata: schemas.ReaderMetadata(),
	}); err != nil {
		t.Fatal(err)
	}
	waitEnvelopes(t, w, true)
	writeConcurrently(t, w, "b", n)
	if msgs, _ := stored(t, js); msgs[schemas.SubjectEnvelope] == 0 {
		t.Fatalf("no envelope once every consumer reads them: %v", msgs)
	}

	// An older consumer joins: the gate shuts within a refresh.
	newOldConsumer(t, js, "projections-of-an-older-release")
	waitEnvelopes(t, w, false)
}

// With no durable consumer at all nobody has said it reads envelopes, and
// a stream the writer cannot look at keeps the gate shut: both write one
// event per message.
func TestGateShutUntilSomeoneDeclares(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	w := New(js)
	if err := w.Look(ctx); err == nil || w.Envelopes() {
		t.Fatalf("look without a stream: err %v, envelopes %v", err, w.Envelopes())
	}
	if _, err := js.CreateOrUpdateStream(ctx, schemas.EventsStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	// Ephemeral readers (replays, tools) do not count either way.
	if _, err := js.OrderedConsumer(ctx, schemas.EventsStream, jetstream.OrderedConsumerConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Look(ctx); err != nil || w.Envelopes() {
		t.Fatalf("no durable consumer: err %v, envelopes %v", err, w.Envelopes())
	}
	natstest.EnvelopeReader(t, js)
	if err := w.Look(ctx); err != nil || !w.Envelopes() {
		t.Fatalf("a declaring reader: err %v, envelopes %v", err, w.Envelopes())
	}
}

// An edge that starts beside its ledger looks before the ledger's
// consumer exists. That look found nobody, not an older release, so the
// writer looks again soon rather than a whole refresh interval later:
// here the interval is an hour, and the gate still opens within seconds
// of the consumer appearing. A look that found an older release's
// consumer waits the interval (TestGateKeepsOlderConsumersWhole).
func TestGateLooksAgainSoonWhileNobodyConsumes(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, schemas.EventsStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	w := New(js, WithGateRefresh(time.Hour))
	if err := w.Look(ctx); err != nil || w.Envelopes() {
		t.Fatalf("no durable consumer: err %v, envelopes %v", err, w.Envelopes())
	}
	natstest.EnvelopeReader(t, js) // the ledger, a moment later
	waitEnvelopes(t, w, true)

	older := New(js, WithGateRefresh(time.Hour))
	newOldConsumer(t, js, "ledger-of-an-older-release")
	if err := older.Look(ctx); err != nil || older.Envelopes() {
		t.Fatalf("beside an older consumer: err %v, envelopes %v", err, older.Envelopes())
	}
	if older.gate.retry != 0 {
		t.Fatal("a look that found an older release's consumer asks to look again soon")
	}
}
