package eventwriter

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/tracing"
	"github.com/chio-ledger/chio/schemas"
)

// Each event's PRODUCER span is a child of its caller's span, and the
// message carries that span's context: as the traceparent header of a
// lone event, as its entry in Chio-Traceparents in an envelope.
func TestWriterCarriesEachEventsTraceContext(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, schemas.EventsStreamConfig(1)); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	natstest.EnvelopeReader(t, js)
	w := New(js, WithTracerProvider(tp))
	if err := w.Look(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 64
	callers := make(map[string]trace.SpanContext, n) // event id → its caller's span
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("e%d", i)
			cctx, span := tp.Tracer("test").Start(ctx, "call")
			defer span.End()
			mu.Lock()
			callers[id] = span.SpanContext()
			mu.Unlock()
			if err := w.Write(cctx, id, event(id, 10)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()

	producers := map[string]sdktrace.ReadOnlySpan{} // event id → its send span
	for _, s := range rec.Ended() {
		if s.Name() != "send CHIO_EVENTS" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "messaging.message.id" {
				producers[a.Value.AsString()] = s
			}
		}
		if s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("%s is %v, want PRODUCER", s.Name(), s.SpanKind())
		}
	}
	if len(producers) != n {
		t.Fatalf("%d producer spans, want %d", len(producers), n)
	}
	for id, s := range producers {
		if s.Parent().SpanID() != callers[id].SpanID() || s.SpanContext().TraceID() != callers[id].TraceID() {
			t.Errorf("event %s: producer span not a child of its caller's span", id)
		}
	}

	c, err := js.OrderedConsumer(ctx, schemas.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(n)
	if err != nil {
		t.Fatal(err)
	}
	seen, envelopes := 0, 0
	for m := range batch.Messages() {
		evs, err := schemas.UnpackEvents(m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		tps := []string{m.Headers().Get(tracing.HeaderTraceparent)}
		if m.Subject() == schemas.SubjectEnvelope {
			envelopes++
			tps = tracing.SplitTraceparents(m.Headers().Get(tracing.HeaderTraceparents), len(evs))
		}
		for i, e := range evs {
			var ev struct {
				ID string `json:"event_id"`
			}
			if err := json.Unmarshal(e.Data, &ev); err != nil {
				t.Fatal(err)
			}
			got := trace.SpanContextFromContext(tracing.ExtractTraceparent(ctx, tps[i]))
			if want := producers[ev.ID].SpanContext(); got.SpanID() != want.SpanID() || got.TraceID() != want.TraceID() {
				t.Errorf("event %s (%s): message carries %q, want its producer span %s", ev.ID, m.Subject(), tps[i], want.SpanID())
			}
			seen++
		}
	}
	if seen != n {
		t.Fatalf("%d events in the stream, want %d", seen, n)
	}
	t.Logf("%d events, %d envelopes", n, envelopes)
}

// Without a provider, or with otel's noop one, messages carry no trace
// headers at all.
func TestWriterUntracedHasNoTraceHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{name: "no provider"},
		{name: "nil provider", opts: []Option{WithTracerProvider(nil)}},
		{name: "noop provider", opts: []Option{WithTracerProvider(noop.NewTracerProvider())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, js := natstest.Start(t)
			ctx := context.Background()
			if _, err := js.CreateOrUpdateStream(ctx, schemas.EventsStreamConfig(1)); err != nil {
				t.Fatal(err)
			}
			w := New(js, tc.opts...)
			tp := sdktrace.NewTracerProvider() // a span in the caller's context: not taken up
			cctx, span := tp.Tracer("test").Start(ctx, "call")
			defer span.End()
			if err := w.Write(cctx, "e1", event("e1", 1)); err != nil {
				t.Fatal(err)
			}
			m, err := js.Stream(ctx, schemas.EventsStream)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := m.GetMsg(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if raw.Header.Get(tracing.HeaderTraceparent) != "" || raw.Header.Get(tracing.HeaderTraceparents) != "" {
				t.Fatalf("untraced message has trace headers: %v", raw.Header)
			}
		})
	}
}
