// Package tracing is chio's OpenTelemetry tracing: the provider built from
// the standard OTEL_* environment variables, W3C trace context carried in
// JetStream message headers, and the span helpers the edges, the ledger
// and the projections share, so that one tool call is one trace across
// processes.
//
// Components take a trace.TracerProvider through their own
// WithTracerProvider option rather than reading otel's global provider:
// the repository keeps no package-level mutable state, tests run several
// `chio up` in one process, and an explicit provider makes "tracing off"
// a nil that every component checks once, at construction, instead of a
// global noop that still builds spans and attributes on every call.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Protocols of the OTLP exporter (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config is what the OTEL_* environment asks for.
type Config struct {
	// Enabled: export spans. Off unless an OTLP endpoint or
	// OTEL_TRACES_EXPORTER=otlp is set, and never with
	// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTP (the specification's
	// default).
	Protocol string
	// ServiceName is OTEL_SERVICE_NAME, or the caller's default.
	ServiceName string
}

// FromEnv reads the configuration through getenv (os.Getenv). The
// exporters read the rest themselves (endpoints, headers, timeouts,
// certificates, compression), the SDK the sampler (OTEL_TRACES_SAMPLER,
// OTEL_TRACES_SAMPLER_ARG) and the batch processor (OTEL_BSP_*), and
// the resource OTEL_RESOURCE_ATTRIBUTES.
func FromEnv(getenv func(string) string, defaultService string) (Config, error) {
	cfg := Config{Protocol: ProtocolHTTP, ServiceName: defaultService}
	if v := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); v != "" {
		cfg.ServiceName = v
	}
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); v != "" {
		off, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("tracing: OTEL_SDK_DISABLED=%q: %w", v, err)
		}
		if off {
			return cfg, nil
		}
	}
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "":
		cfg.Enabled = endpoint // unset: off unless told where to send
	case "none":
		return cfg, nil
	case "otlp":
		cfg.Enabled = true
	default:
		return cfg, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: chio exports otlp or none", exp)
	}
	proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch proto {
	case "":
	case ProtocolGRPC, ProtocolHTTP:
		cfg.Protocol = proto
	default:
		return cfg, fmt.Errorf("tracing: OTLP protocol %q: chio exports grpc or http/protobuf", proto)
	}
	return cfg, nil
}

// Provider is a started tracer provider: nil TracerProvider when tracing
// is off.
type Provider struct {
	// TracerProvider is nil when tracing is off: components given nil
	// trace nothing and build nothing.
	TracerProvider trace.TracerProvider
	sdk            *sdktrace.TracerProvider
}

// Shutdown flushes the spans still queued and stops the exporter. It is
// a no-op when tracing is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.sdk == nil {
		return nil
	}
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Start builds the provider cfg describes: an OTLP exporter behind a
// batch span processor, or nothing at all when tracing is off.
func Start(ctx context.Context, cfg Config) (*Provider, error) {
	if !cfg.Enabled {
		return &Provider{}, nil
	}
	var client otlptrace.Client
	switch cfg.Protocol {
	case ProtocolGRPC:
		client = otlptracegrpc.NewClient()
	case ProtocolHTTP, "":
		client = otlptracehttp.NewClient()
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q", cfg.Protocol)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: start OTLP exporter: %w", err)
	}
	// The default service name first: OTEL_RESOURCE_ATTRIBUTES and then
	// OTEL_SERVICE_NAME (WithFromEnv) override it, as the specification says.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: sdk, sdk: sdk}, nil
}

// Enabled reports whether tp traces: non-nil and not otel's noop.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, noopTP := tp.(noop.TracerProvider)
	return !noopTP
}

// Tracer returns tp's tracer for a chio package, or nil when tp does not
// trace. Components keep the nil and test it before any span work.
func Tracer(tp trace.TracerProvider, scope string) trace.Tracer {
	if !Enabled(tp) {
		return nil
	}
	return tp.Tracer(scope)
}

// TraceID is the hex trace id of ctx's span when it is sampled (its
// spans are exported, so the id leads somewhere), or "".
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}
