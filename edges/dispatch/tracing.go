package dispatch

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/edges/eventwriter"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/tracing"
)

// WithTracerProvider traces each call: a "chio.dispatch" span of the
// caller's context around the whole call, the event writes as PRODUCER
// spans ("send CHIO_EVENTS", whose context the messages carry to the
// ledger), the tool's run ("execute_tool <tool>") and the edge's own
// durable write ("chio.dispatch.finish"); the decision event records the
// trace id, and the ledger signs it into the receipt's metadata. Give the
// kernel the same provider (kernel.WithTracerProvider) for its decision
// and guard spans. A nil or noop provider traces nothing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(d *Dispatcher) {
		d.tracer = tracing.Tracer(tp, "github.com/chio-ledger/chio/edges/dispatch")
		d.wopts = append(d.wopts, eventwriter.WithTracerProvider(tp))
	}
}

// startCall starts the call's span and records its trace id on c.
func (d *Dispatcher) startCall(ctx context.Context, c *Call) (context.Context, trace.Span) {
	ctx, span := d.tracer.Start(ctx, "chio.dispatch", trace.WithAttributes(
		attribute.String("chio.receipt_id", c.ReceiptID), attribute.String("chio.tool.server", c.ServerID),
		attribute.String("gen_ai.tool.name", c.ToolName)))
	c.traceID = tracing.TraceID(ctx)
	return ctx, span
}

// endCall records what became of the call.
func endCall(span trace.Span, res *Result, err error) {
	if res != nil && span.IsRecording() {
		verdict := "deny"
		if res.Decision != nil && res.Decision.Allow {
			verdict = "allow"
		}
		span.SetAttributes(attribute.String("chio.decision", verdict), attribute.Bool("chio.tool.ran", res.Ran))
		if res.Ran {
			span.SetAttributes(attribute.String("chio.outcome", string(res.Outcome)), attribute.Bool("chio.outcome.durable", res.OutcomeDurable))
		}
	}
	tracing.End(span, err)
}

// traceRun is run in an "execute_tool" span (the GenAI conventions' name
// for a tool's execution) when tracing is on.
func (d *Dispatcher) traceRun(ctx context.Context, c Call, inv tools.Invocation, res *Result) string {
	if d.tracer == nil {
		return d.run(ctx, c, inv, c.entry, res)
	}
	ctx, span := d.tracer.Start(ctx, "execute_tool "+c.ToolName, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", c.ToolName),
		attribute.String("chio.tool.server", c.ServerID), attribute.Bool("chio.tool.stream", c.Stream)))
	hash := d.run(ctx, c, inv, c.entry, res)
	if res.ToolErr != nil {
		span.RecordError(res.ToolErr)
		span.SetStatus(codes.Error, res.ToolErr.Error())
		if errors.Is(res.ToolErr, tools.ErrOutcomeUnknown) {
			span.SetAttributes(attribute.Bool("chio.outcome.unknown", true))
		}
	}
	span.End()
	return hash
}

// finish runs the edge's own durable write of the call (Call.Finish), in
// a span when tracing is on.
func (d *Dispatcher) finish(ctx context.Context, f func(context.Context, *Result) error, res *Result) error {
	if d.tracer == nil {
		return f(ctx, res)
	}
	ctx, span := d.tracer.Start(ctx, "chio.dispatch.finish")
	err := f(ctx, res)
	tracing.End(span, err)
	return err
}
