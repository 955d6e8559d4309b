package ledger

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/internal/tracing"
	"github.com/chio-ledger/chio/schemas"
)

// WithTracerProvider traces the fold of every event that carries a trace
// context (the edges' traceparent header, or its entry in an envelope's
// list): a CONSUMER span "process CHIO_EVENTS" per event, a child of the
// edge's span, lasting until its batch is committed; for each receipt the
// event completes, "chio.ledger.sign" and "chio.ledger.append" (until the
// synced commit) below it; and a PRODUCER span "send CHIO_RECEIPTS" for
// the receipt's republication, whose context its message carries on to
// the projections. Batches fold many calls' events, so the spans are
// per event, never per batch: each call's trace holds its own share of
// the batch. Events without a trace context get no spans. A nil or noop
// provider traces nothing and reads no header.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracer = tracing.Tracer(tp, "github.com/chio-ledger/chio/ledger") }
}

// traced reads the trace context of a message into its event.
func (l *Ledger) traced(e event, h nats.Header) event {
	if l.cfg.tracer == nil || len(h) == 0 {
		return e
	}
	if e.subject == schemas.SubjectEnvelope {
		e.traceparents = h.Get(tracing.HeaderTraceparents)
	} else {
		e.traceparent = h.Get(tracing.HeaderTraceparent)
	}
	return e
}

// batchTrace holds the spans of one batch's traced events; a nil
// *batchTrace traces nothing.
type batchTrace struct {
	t     trace.Tracer
	ctxs  []context.Context // per event: its process span's, nil if untraced
	spans []trace.Span      // process and append spans, ended at commit
}

// startBatch starts the process span of every traced event; nil when
// none is traced.
func (l *Ledger) startBatch(events []event) *batchTrace {
	if l.cfg.tracer == nil {
		return nil
	}
	var bt *batchTrace
	for i, e := range events {
		if e.traceparent == "" {
			continue
		}
		parent := tracing.ExtractTraceparent(context.Background(), e.traceparent)
		if !trace.SpanContextFromContext(parent).IsValid() {
			continue
		}
		if bt == nil {
			bt = &batchTrace{t: l.cfg.tracer, ctxs: make([]context.Context, len(events))}
		}
		ctx, span := tracing.StartProcess(context.Background(), parent, bt.t, schemas.EventsStream,
			semconv.MessagingConsumerGroupName(l.cfg.consumer), semconv.MessagingBatchMessageCount(len(events)),
			attribute.String("chio.event.subject", e.subject), attribute.Int64("chio.stream_seq", int64(e.seq)))
		bt.ctxs[i] = ctx
		bt.spans = append(bt.spans, span)
	}
	return bt
}

// signHook gives signAll a span per traced receipt; by[i] is the event
// that completed receipt i.
func (bt *batchTrace) signHook(by []int) func(i int) func(error) {
	if bt == nil {
		return nil
	}
	return func(i int) func(error) {
		ctx := bt.ctxs[by[i]]
		if ctx == nil {
			return func(error) {}
		}
		_, span := bt.t.Start(ctx, "chio.ledger.sign")
		return func(err error) { tracing.End(span, err) }
	}
}

// appended starts the append span of a receipt event ev completed, at
// leaf idx, and returns its traceparent for the republished receipt.
func (bt *batchTrace) appended(ev int, receiptID string, idx uint64) string {
	if bt == nil || bt.ctxs[ev] == nil {
		return ""
	}
	ctx, span := bt.t.Start(bt.ctxs[ev], "chio.ledger.append", trace.WithAttributes(
		attribute.String("chio.receipt_id", receiptID), attribute.Int64("chio.leaf_index", int64(idx))))
	bt.spans = append(bt.spans, span)
	return tracing.Traceparent(ctx)
}

// end ends the batch's spans once it is committed (or failed).
func (bt *batchTrace) end(err error) {
	if bt == nil {
		return
	}
	endSpans(bt.spans, err)
}

// startSendReceipt starts the PRODUCER span of a traced receipt's
// republication and writes its context into the message's headers; nil
// when the receipt is not traced.
func (l *Ledger) startSendReceipt(ctx context.Context, p pubLeaf, h nats.Header) trace.Span {
	if l.cfg.tracer == nil || p.traceparent == "" {
		return nil
	}
	parent := tracing.ExtractTraceparent(ctx, p.traceparent)
	sctx, span := tracing.StartSend(parent, l.cfg.tracer, schemas.ReceiptsStream,
		semconv.MessagingMessageID(p.id), attribute.String("chio.leaf_index", strconv.FormatUint(p.index, 10)))
	tracing.Inject(sctx, h)
	return span
}

// endSpans ends spans, recording err on each.
func endSpans(spans []trace.Span, err error) {
	for _, s := range spans {
		tracing.End(s, err)
	}
}
