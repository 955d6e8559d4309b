package eventwriter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

func setup(t *testing.T) (jetstream.JetStream, *Writer) {
	t.Helper()
	_, _, js := natstest.Start(t)
	if _, err := js.CreateOrUpdateStream(context.Background(), schemas.EventsStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	natstest.EnvelopeReader(t, js)
	w := New(js)
	if err := w.Look(context.Background()); err != nil || !w.Envelopes() {
		t.Fatalf("writer does not write envelopes with a reader that declares them: %v", err)
	}
	return js, w
}

// stored reads the stream: its messages by subject and every event id,
// unpacked from envelopes.
func stored(t *testing.T, js jetstream.JetStream) (msgs map[string]int, ids []string) {
	t.Helper()
	c, err := js.OrderedConsumer(context.Background(), schemas.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(10000)
	if err != nil {
		t.Fatal(err)
	}
	msgs = map[string]int{}
	for m := range batch.Messages() {
		msgs[m.Subject()]++
		evs, err := schemas.UnpackEvents(m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			ids = append(ids, string(e.Data))
		}
	}
	return msgs, ids
}

func event(id string, pad int) schemas.StreamEvent {
	return schemas.StreamEvent{Subject: schemas.SubjectDecision, Data: fmt.Appendf(nil, `{"event_id":%q,"pad":%q}`, id, strings.Repeat("x", pad))}
}

func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		writers int
		pad     int
		// wantShared: at least one write carried several events.
		wantShared bool
	}{
		{"one event is its own message", 1, 0, false},
		{"concurrent events share writes", 200, 0, true},
		// 40 KiB events: at most 12 fit in one envelope.
		{"envelopes stay within the size bound", 64, 40 << 10, true},
		// Many small events: the kinds header counts against the bound
		// too (1,024 such events fill the body alone).
		{"the kinds header counts", 1500, 440, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js, w := setup(t)
			// The flusher is held until every event is queued, so how the
			// events share writes does not hang on the scheduler of a busy
			// machine: every event alone below is one an envelope refused.
			w.mu.Lock()
			w.running = true
			w.mu.Unlock()
			var wg sync.WaitGroup
			errs := make(chan error, tc.writers)
			for i := range tc.writers {
				wg.Go(func() {
					id := fmt.Sprintf("e%d", i)
					if err := w.Write(context.Background(), id, event(id, tc.pad)); err != nil {
						errs <- err
					}
				})
			}
			waitQueued(t, w, tc.writers)
			go w.flush()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			msgs, ids := stored(t, js)
			seen := map[string]bool{}
			for _, raw := range ids {
				if seen[raw] {
					t.Fatalf("event written twice: %.40s", raw)
				}
				seen[raw] = true
			}
			if len(seen) != tc.writers {
				t.Fatalf("%d events stored, want %d", len(seen), tc.writers)
			}
			if shared := msgs[schemas.SubjectEnvelope] > 0; shared != tc.wantShared {
				t.Fatalf("messages %v: shared %v, want %v", msgs, shared, tc.wantShared)
			}
			// At most the last write's remainder goes alone; more means
			// envelopes were refused and split up.
			if lone := msgs[schemas.SubjectDecision]; tc.wantShared && lone > 1 {
				t.Fatalf("%d events written alone of %d: envelopes refused? %v", lone, tc.writers, msgs)
			}
			t.Logf("%d events in %v", tc.writers, msgs)
		})
	}
}

// waitQueued waits until n events are queued.
func waitQueued(t *testing.T, w *Writer, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		queued := len(w.queue)
		w.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events queued", queued, n)
		}
	}
}

// An event whose caller left before its write is not written, and the
// caller hears why.
func TestWriterDropsLeftEvents(t *testing.T) {
	js, w := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Write(ctx, "gone", event("gone", 0)); !errors.Is(err, context.Canceled) {
		t.Fatalf("write of a cancelled call: %v", err)
	}
	if err := w.Write(context.Background(), "kept", event("kept", 0)); err != nil {
		t.Fatal(err)
	}
	if _, ids := stored(t, js); len(ids) != 1 || !strings.Contains(ids[0], "kept") {
		t.Fatalf("stored %v", ids)
	}
}

// A write the stream refuses fails every event it carried.
func TestWriterReportsRefusal(t *testing.T) {
	_, _, js := natstest.Start(t) // no events stream: nobody answers
	w := New(js)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := w.Write(ctx, "x", event("x", 0)); err == nil {
		t.Fatal("a write with no stream succeeded")
	}
}

// The fullest envelope the writer makes, in events and bytes with its
// kinds header, is one the stream accepts.
func TestFullEnvelopeIsAccepted(t *testing.T) {
	for _, pad := range []int{440, 100, 40 << 10} {
		t.Run(fmt.Sprint(pad), func(t *testing.T) {
			_, w := setup(t)
			for i := range 2 * schemas.MaxEnvelopeEvents {
				id := fmt.Sprintf("e%d", i)
				w.queue = append(w.queue, &queued{ctx: context.Background(), kind: "decision", id: id, event: event(id, pad), done: make(chan error, 1)})
			}
			batch := w.take()
			if len(batch) < 2 {
				t.Fatalf("took %d events", len(batch))
			}
			if err := w.publish(batch); err != nil {
				t.Fatalf("an envelope of %d events refused: %v", len(batch), err)
			}
		})
	}
}
