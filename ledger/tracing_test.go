package ledger

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/internal/tracing"
	"github.com/chio-ledger/chio/schemas"
)

// edgeSpan is a span context as an edge's producer span would have.
func edgeSpan(t *testing.T) trace.SpanContext {
	t.Helper()
	var tid trace.TraceID
	var sid trace.SpanID
	_, _ = rand.Read(tid[:])
	_, _ = rand.Read(sid[:])
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

func traceparentOf(sc trace.SpanContext) string {
	return tracing.Traceparent(trace.ContextWithSpanContext(context.Background(), sc))
}

// publishMsg publishes one message with headers.
func (h *harness) publishMsg(subject string, data []byte, header nats.Header, msgID string) {
	h.t.Helper()
	if _, err := h.js.PublishMsg(context.Background(), &nats.Msg{Subject: subject, Data: data, Header: header}, jetstream.WithMsgID(msgID)); err != nil {
		h.t.Fatal(err)
	}
}

// The ledger traces each traced event, lone or in an envelope, as a
// CONSUMER span under the edge's span from its headers, with the sign and
// append of the receipt it completes below it and the receipt's
// republication below those, its context in the receipt message's
// headers; it signs the decision's trace id into the receipt's metadata.
// Tracing changes no receipt: a ledger without it folds the same stream
// to the same leaves, and an untraced call's receipt has no trace_id.
func TestLedgerTracesEachEventAndSignsTheTraceID(t *testing.T) {
	h := newHarness(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))

	// a: allowed, decision and outcome in one envelope, each with its own
	// producer span; b: a lone traced deny; c: untraced, as before tracing.
	a, b, c := newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
	aDec, aOut, bDec := edgeSpan(t), edgeSpan(t), edgeSpan(t)
	aOut = trace.NewSpanContext(trace.SpanContextConfig{TraceID: aDec.TraceID(), SpanID: aOut.SpanID(), TraceFlags: trace.FlagsSampled})

	da := decisionEvent(a, 100)
	da.TraceID = aDec.TraceID().String()
	oa := outcomeEvent(a, 101)
	evs := []schemas.StreamEvent{{Subject: schemas.SubjectDecision, Data: mustJSON(da)}, {Subject: schemas.SubjectOutcome, Data: mustJSON(oa)}}
	body, err := schemas.PackEvents(evs)
	if err != nil {
		t.Fatal(err)
	}
	hdr := nats.Header{}
	hdr.Set(schemas.HeaderEventKinds, schemas.EnvelopeKinds(evs))
	hdr.Set(tracing.HeaderTraceparents, tracing.JoinTraceparents([]string{traceparentOf(aDec), traceparentOf(aOut)}))
	h.publishMsg(schemas.SubjectEnvelope, body, hdr, schemas.EnvelopeMsgID(body))

	db := decisionEvent(b, 102)
	db.TraceID = bDec.TraceID().String()
	hdr = nats.Header{}
	hdr.Set(tracing.HeaderTraceparent, traceparentOf(bDec))
	h.publishMsg(schemas.SubjectDecision, mustJSON(db), hdr, db.EventID)
	h.publishCalls([]call{c}, 103)

	traced := h.openStore("traced")
	h.start(traced, WithTracerProvider(tp))
	waitSize(t, traced, 3)

	// Receipts: the trace id where the decision has one, nothing else.
	for _, tc := range []struct {
		call call
		want string
	}{{a, aDec.TraceID().String()}, {b, bDec.TraceID().String()}, {c, ""}} {
		r, _, leaf := h.receipt(traced, tc.call.id)
		var meta map[string]json.RawMessage
		if err := json.Unmarshal(r.Metadata, &meta); err != nil {
			t.Fatal(err)
		}
		var got string
		if raw, ok := meta["trace_id"]; ok {
			_ = json.Unmarshal(raw, &got)
		}
		if got != tc.want {
			t.Errorf("receipt %s: trace_id %q, want %q", tc.call.id, got, tc.want)
		}
		if tc.want == "" && bytes.Contains(leaf, []byte("trace_id")) {
			t.Errorf("untraced receipt mentions trace_id: %s", leaf)
		}
	}

	// The same stream folded without tracing: the same log, leaf for leaf.
	plain := h.openStore("plain")
	h.start(plain, WithConsumer("plain"))
	waitSize(t, plain, 3)
	for i := range uint64(3) {
		x, _ := traced.Entry(i)
		y, _ := plain.Entry(i)
		if !bytes.Equal(x, y) {
			t.Fatalf("leaf %d differs with tracing:\n%s\n%s", i, x, y)
		}
	}

	// Spans.
	waitFor(t, "the republished receipts' spans", func() bool {
		n := 0
		for _, s := range rec.Ended() {
			if s.Name() == "send CHIO_RECEIPTS" {
				n++
			}
		}
		return n == 2
	})
	spans := rec.Ended()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	process := map[trace.SpanID]sdktrace.ReadOnlySpan{} // by the edge span it continues
	for _, s := range spans {
		if s.Name() == "process CHIO_EVENTS" {
			if s.SpanKind() != trace.SpanKindConsumer || !s.Parent().IsRemote() {
				t.Errorf("process span %v: kind %v, remote parent %v", s.Name(), s.SpanKind(), s.Parent().IsRemote())
			}
			process[s.Parent().SpanID()] = s
		}
	}
	if len(process) != 3 {
		t.Fatalf("%d process spans, want one per traced event", len(process))
	}
	for _, sc := range []trace.SpanContext{aDec, aOut, bDec} {
		if p, ok := process[sc.SpanID()]; !ok || p.SpanContext().TraceID() != sc.TraceID() {
			t.Errorf("no process span under edge span %s", sc.SpanID())
		}
	}
	// The receipt's own spans hang under the event that completed it: a's
	// outcome, b's decision.
	completing := map[string]trace.SpanID{a.id: process[aOut.SpanID()].SpanContext().SpanID(), b.id: process[bDec.SpanID()].SpanContext().SpanID()}
	var appends, signs int
	for _, s := range spans {
		switch s.Name() {
		case "chio.ledger.sign":
			signs++
			if p := s.Parent().SpanID(); p != completing[a.id] && p != completing[b.id] {
				t.Errorf("sign span under %s, not a completing event's process span", p)
			}
		case "chio.ledger.append":
			appends++
			var rid string
			for _, kv := range s.Attributes() {
				if kv.Key == "chio.receipt_id" {
					rid = kv.Value.AsString()
				}
			}
			if s.Parent().SpanID() != completing[rid] {
				t.Errorf("append span of %s under %s, want %s", rid, s.Parent().SpanID(), completing[rid])
			}
		case "send CHIO_RECEIPTS":
			if p := byID[s.Parent().SpanID()]; p == nil || p.Name() != "chio.ledger.append" || s.SpanKind() != trace.SpanKindProducer {
				t.Errorf("receipt send span: parent %v, kind %v", s.Parent().SpanID(), s.SpanKind())
			}
		}
	}
	if signs != 2 || appends != 2 {
		t.Errorf("%d sign and %d append spans, want 2 each (the untraced call has none)", signs, appends)
	}

	// The republished receipts carry their send span's context.
	st, err := h.js.Stream(context.Background(), schemas.ReceiptsStream)
	if err != nil {
		t.Fatal(err)
	}
	sends := map[trace.SpanID]bool{}
	for _, s := range spans {
		if s.Name() == "send CHIO_RECEIPTS" {
			sends[s.SpanContext().SpanID()] = true
		}
	}
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		head, err := schemas.ReadReceiptHead(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		sc := trace.SpanContextFromContext(tracing.Extract(context.Background(), m.Header))
		switch head.ID {
		case c.id:
			if sc.IsValid() {
				t.Errorf("untraced receipt message carries %v", m.Header)
			}
		default:
			if !sends[sc.SpanID()] {
				t.Errorf("receipt %s (leaf %s) carries %v, no send span of ours", head.ID, m.Header.Get(HeaderLeafIndex), sc)
			}
		}
	}
}
