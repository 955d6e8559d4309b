package kernel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/edges/guards"
	"github.com/chio-ledger/chio/internal/tracing"
)

// WithTracerProvider traces each decision as a "chio.kernel.decide" span
// of the caller's context, with one child span per guard of the pipeline
// ("chio.guard <name>"). A nil or noop provider traces nothing and leaves
// the pipeline unwrapped.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracer = tracing.Tracer(tp, "github.com/chio-ledger/chio/edges/kernel") }
}

// startDecide starts the decision's span; nil when tracing is off.
func (k *Kernel) startDecide(ctx context.Context, req *Request) (context.Context, trace.Span) {
	if k.cfg.tracer == nil {
		return ctx, nil
	}
	return k.cfg.tracer.Start(ctx, "chio.kernel.decide", trace.WithAttributes(
		attribute.String("chio.tool.server", req.ServerID), attribute.String("gen_ai.tool.name", req.ToolName)))
}

// endDecide records the decision on its span.
func endDecide(span trace.Span, d *Decision) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		verdict := "deny"
		if d.Allow {
			verdict = "allow"
		}
		span.SetAttributes(attribute.String("chio.decision", verdict), attribute.String("chio.capability_id", d.CapabilityID))
		if !d.Allow {
			span.SetAttributes(attribute.String("chio.deny.step", d.Guard))
		}
	}
	span.End()
}

// traced wraps each guard in a span; without a tracer the pipeline is
// left as is.
func traced(pipeline []guards.Guard, t trace.Tracer) []guards.Guard {
	if t == nil {
		return pipeline
	}
	out := make([]guards.Guard, len(pipeline))
	for i, g := range pipeline {
		out[i] = g
		if g != nil { // a nil guard stays nil: guards.Run denies with it
			out[i] = &tracedGuard{Guard: g, tracer: t, name: "chio.guard " + g.Name()}
		}
	}
	return out
}

// tracedGuard is a guard whose Check is a span.
type tracedGuard struct {
	guards.Guard
	tracer trace.Tracer
	name   string
}

func (g *tracedGuard) Check(ctx context.Context, c *guards.Call) (res guards.Result, err error) {
	ctx, span := g.tracer.Start(ctx, g.name, trace.WithAttributes(attribute.String("chio.guard", g.Guard.Name())))
	defer func() { // deferred: a panicking guard's span ends too
		if span.IsRecording() {
			span.SetAttributes(attribute.Bool("chio.guard.allow", err == nil && res.Allow))
		}
		tracing.End(span, err)
	}()
	return g.Guard.Check(ctx, c)
}
