package tracing

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderTraceparent is the W3C header the propagator writes.
const HeaderTraceparent = "traceparent"

// HeaderTraceparents carries, on an event envelope (several events in one
// message, schemas/envelope.go), the traceparent of each event in order,
// comma-separated, an empty entry for an event without one: the events
// of one envelope come from different calls, so one message-level
// traceparent cannot parent them all.
const HeaderTraceparents = "Chio-Traceparents"

// TraceparentLen is the length of a version 00 traceparent value.
const TraceparentLen = 55

// HeaderCarrier adapts a nats.Header to the propagator's TextMapCarrier.
// NATS header keys are case-sensitive, and the W3C names are lowercase.
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces the values of key.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the keys present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes ctx's span context into h (traceparent, tracestate).
func Inject(ctx context.Context, h nats.Header) {
	propagation.TraceContext{}.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote span context h carries, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, HeaderCarrier(h))
}

// Traceparent is the traceparent value of ctx's span, "" without a valid one.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[HeaderTraceparent]
}

// ExtractTraceparent returns ctx with the remote span context of a
// traceparent value; an empty or malformed value leaves ctx as it is.
func ExtractTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{HeaderTraceparent: traceparent})
}

// JoinTraceparents is the HeaderTraceparents value of an envelope's
// events, "" when none of them has one.
func JoinTraceparents(tps []string) string {
	for _, tp := range tps {
		if tp != "" {
			return strings.Join(tps, ",")
		}
	}
	return ""
}

// SplitTraceparents reads a HeaderTraceparents value for an envelope of n
// events: n entries, "" where the value has none (a header that does not
// match the envelope gives no parent rather than a wrong one).
func SplitTraceparents(v string, n int) []string {
	out := make([]string, n)
	if v == "" {
		return out
	}
	parts := strings.Split(v, ",")
	if len(parts) != n {
		return out
	}
	copy(out, parts)
	return out
}
