package tracing

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// messagingSystem is messaging.system for JetStream.
func messagingSystem() attribute.KeyValue { return semconv.MessagingSystemKey.String("nats") }

// StartSend starts the PRODUCER span of a JetStream publish to stream,
// named "send <stream>" as the messaging conventions ask.
func StartSend(ctx context.Context, t trace.Tracer, stream string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.Start(ctx, "send "+stream, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(messagingSystem(), semconv.MessagingDestinationName(stream),
			semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send")),
		trace.WithAttributes(attrs...))
}

// StartProcess starts the CONSUMER span of processing one message of
// stream, "process <stream>", as a child of parent's remote span context
// (from the message's headers). The returned context carries the new span
// on top of base (parent's values are not kept: base is the consumer's
// own context, for its cancellation).
func StartProcess(base, parent context.Context, t trace.Tracer, stream string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := trace.ContextWithRemoteSpanContext(base, trace.SpanContextFromContext(parent))
	return t.Start(ctx, "process "+stream, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(messagingSystem(), semconv.MessagingDestinationName(stream),
			semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process")),
		trace.WithAttributes(attrs...))
}

// End ends span, recording err (if any) as its error status.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// HTTPHandler wraps h in an HTTP server span per request (otelhttp: the
// semantic conventions' http.request.method, url.path,
// http.response.status_code, …). With tracing off it returns h itself:
// nothing is added to the request path.
//
// The edges are public endpoints: each request starts a trace of its own
// and a caller's traceparent becomes a link, never the parent. The trace
// id is signed into the call's receipt, so a caller must not choose it
// (nor, by sending sampled=0, keep its calls out of the traces).
func HTTPHandler(h http.Handler, tp trace.TracerProvider) http.Handler {
	if !Enabled(tp) {
		return h
	}
	return otelhttp.NewHandler(h, "http.server", otelhttp.WithTracerProvider(tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // chio's metrics are Prometheus'
		otelhttp.WithPropagators(propagation.TraceContext{}),
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }))
}

// EchoRoute names the HTTP server span after the matched Echo route
// ("POST /a2a") and sets http.route, which the outer otelhttp handler
// cannot know. It only reads the span when one is recording.
func EchoRoute() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if span := trace.SpanFromContext(c.Request().Context()); span.IsRecording() {
				if route := c.Path(); route != "" {
					span.SetName(c.Request().Method + " " + route)
					span.SetAttributes(semconv.HTTPRoute(route))
				}
			}
			return next(c)
		}
	}
}

// GRPCServerOptions are the options of a traced gRPC server (the otelgrpc
// stats handler: rpc.system, rpc.method, …), none with tracing off. Like
// HTTPHandler's, its spans start a trace and link a caller's context.
func GRPCServerOptions(tp trace.TracerProvider) []grpc.ServerOption {
	if !Enabled(tp) {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithPropagators(propagation.TraceContext{}), otelgrpc.WithPublicEndpoint()))}
}
