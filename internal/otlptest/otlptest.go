// Package otlptest is an OTLP/gRPC trace receiver for tests and the
// benchmarks: a real collector endpoint (the otlp TraceService)
// in-process, keeping every span it is sent, so tests can check the
// traces a real exporter sends.
package otlptest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span, its ids in lowercase hex.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	// Attributes are the span's attributes as strings (ints and bools
	// formatted).
	Attributes map[string]string
	// Service is the resource's service.name, Scope the name of the
	// tracer that made the span (the instrumented package).
	Service, Scope string
	// Links are the span contexts the span links to, "trace/span".
	Links []string
	// Error: the span's status is ERROR.
	Error bool
}

// Receiver is a running OTLP/gRPC trace endpoint.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer
	srv  *grpc.Server
	addr string

	mu    sync.Mutex
	spans []Span
}

// Start runs a receiver on a loopback port until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// Listen runs a receiver on a loopback port until Close.
func Listen() (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlptest: listen: %w", err)
	}
	r := &Receiver{srv: grpc.NewServer(), addr: ln.Addr().String()}
	collectorpb.RegisterTraceServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Stop() }

// Reset forgets the spans received so far and returns how many there were.
func (r *Receiver) Reset() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.spans)
	r.spans = nil
	return n
}

// Endpoint is the receiver's address as OTEL_EXPORTER_OTLP_ENDPOINT
// takes it (http: plaintext gRPC).
func (r *Receiver) Endpoint() string { return "http://" + r.addr }

// Export implements the OTLP TraceService.
func (r *Receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			scope := ss.GetScope().GetName()
			for _, s := range ss.GetSpans() {
				sp := Span{TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind(),
					Attributes: attrs(s.GetAttributes()), Service: service, Scope: scope,
					Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// Spans returns a copy of every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the spans received of one trace.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Await polls until ok holds for the spans received, or fails the test
// after within.
func (r *Receiver) Await(t testing.TB, within time.Duration, what string, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		spans := r.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("otlptest: %s: not received within %s (%d spans)", what, within, len(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// attrs flattens OTLP attributes to strings.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
