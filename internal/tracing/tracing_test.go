package tracing

import (
	"context"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr bool
	}{
		{name: "nothing set: off", env: nil, want: Config{Protocol: ProtocolHTTP, ServiceName: "chio"}},
		{name: "endpoint: on, http/protobuf by default",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "chio"}},
		{name: "traces endpoint alone",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "chio"}},
		{name: "grpc protocol",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want: Config{Enabled: true, Protocol: ProtocolGRPC, ServiceName: "chio"}},
		{name: "the traces protocol wins over the general one",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
			want: Config{Enabled: true, Protocol: ProtocolGRPC, ServiceName: "chio"}},
		{name: "exporter otlp without an endpoint: on, the exporter's default endpoint",
			env:  map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "chio"}},
		{name: "exporter none wins over an endpoint",
			env:  map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: Config{Protocol: ProtocolHTTP, ServiceName: "chio"}},
		{name: "sdk disabled wins over everything",
			env:  map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: Config{Protocol: ProtocolHTTP, ServiceName: "chio"}},
		{name: "sdk disabled false",
			env:  map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "chio"}},
		{name: "service name",
			env:  map[string]string{"OTEL_SERVICE_NAME": "edge-a", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: Config{Enabled: true, Protocol: ProtocolHTTP, ServiceName: "edge-a"}},
		{name: "bad sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "maybe"}, wantErr: true},
		{name: "unsupported exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: true},
		{name: "unsupported protocol",
			env:     map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromEnv(func(k string) string { return tc.env[k] }, "chio")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestStartOffIsNil(t *testing.T) {
	p, err := Start(context.Background(), Config{})
	if err != nil || p.TracerProvider != nil {
		t.Fatalf("off: %v %v", p.TracerProvider, err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []trace.TracerProvider{nil, noop.NewTracerProvider()} {
		if Enabled(tp) || Tracer(tp, "x") != nil {
			t.Fatalf("%T counts as tracing", tp)
		}
	}
}

func TestHeaderCarrier(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled})
	const want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name   string
		header nats.Header // before Inject; nil: nothing injected
		inject bool
		want   trace.SpanContext // what Extract finds
	}{
		{name: "round trip", header: nats.Header{}, inject: true, want: sc.WithRemote(true)},
		{name: "keeps the other headers", header: nats.Header{"Chio-Events": {"a,b"}}, inject: true, want: sc.WithRemote(true)},
		{name: "replaces a stale traceparent", header: nats.Header{"traceparent": {"00-11111111111111111111111111111111-2222222222222222-01"}}, inject: true, want: sc.WithRemote(true)},
		{name: "no header", header: nil},
		{name: "malformed", header: nats.Header{"traceparent": {"00-zz-00f067aa0ba902b7-01"}}},
		{name: "wrong case is not the W3C header", header: nats.Header{"Traceparent": {want}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header
			if tc.inject {
				Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
				if got := h.Get(HeaderTraceparent); got != want {
					t.Fatalf("injected %q, want %q", got, want)
				}
				if tc.name == "keeps the other headers" && h.Get("Chio-Events") != "a,b" {
					t.Fatal("other header lost")
				}
				if keys := HeaderCarrier(h).Keys(); !slices.Contains(keys, HeaderTraceparent) {
					t.Fatalf("keys %v", keys)
				}
			}
			got := trace.SpanContextFromContext(Extract(context.Background(), h))
			if !got.Equal(tc.want) {
				t.Fatalf("extracted %v, want %v", got, tc.want)
			}
		})
	}
	if got := Traceparent(trace.ContextWithSpanContext(context.Background(), sc)); got != want {
		t.Fatalf("Traceparent %q", got)
	}
	if got := Traceparent(context.Background()); got != "" {
		t.Fatalf("Traceparent without a span %q", got)
	}
}

func TestTraceparentList(t *testing.T) {
	a := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b := "00-11111111111111111111111111111111-2222222222222222-01"
	for _, tc := range []struct {
		name   string
		tps    []string
		header string
		n      int
		split  []string
	}{
		{name: "none traced: no header", tps: []string{"", ""}, header: "", n: 2, split: []string{"", ""}},
		{name: "all traced", tps: []string{a, b}, header: a + "," + b, n: 2, split: []string{a, b}},
		{name: "some traced", tps: []string{"", b, ""}, header: "," + b + ",", n: 3, split: []string{"", b, ""}},
		{name: "a list that does not match the envelope gives no parent", tps: []string{a, b}, header: a + "," + b, n: 3, split: []string{"", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := JoinTraceparents(tc.tps)
			if h != tc.header {
				t.Fatalf("join %q, want %q", h, tc.header)
			}
			if got := SplitTraceparents(h, tc.n); !slices.Equal(got, tc.split) {
				t.Fatalf("split %q, want %q", got, tc.split)
			}
		})
	}
	if len(a) != TraceparentLen {
		t.Fatalf("TraceparentLen %d, a traceparent is %d", TraceparentLen, len(a))
	}
}

func TestTraceIDOnlyWhenSampled(t *testing.T) {
	cfg := trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}
	if got := TraceID(trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))); got != "" {
		t.Fatalf("unsampled: %q", got)
	}
	cfg.TraceFlags = trace.FlagsSampled
	if got := TraceID(trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))); got != "01000000000000000000000000000000" {
		t.Fatalf("sampled: %q", got)
	}
}
