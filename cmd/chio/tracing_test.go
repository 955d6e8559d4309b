package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/otlptest"
)

// tracingEnv are the OTEL_* variables the tests set or clear: a CI
// environment's own must not leak in.
var tracingEnv = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES"}

func clearTracingEnv(t *testing.T) {
	for _, k := range tracingEnv {
		t.Setenv(k, "")
	}
}

// tracedCall makes one A2A JSON-RPC call through chio up, with extra
// headers, and returns its receipt id.
func tracedCall(t *testing.T, up *upProcess, header http.Header) string {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m-trace","parts":[{"text":"world"}]}}}`
	req, _ := http.NewRequest(http.MethodPost, up.httpURL+"/a2a", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"receiptId":"([^"]+)"`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no receipt id in %s", out)
	}
	return string(m[1])
}

// receiptTraceID returns the receipt's metadata.trace_id ("" without),
// once the receipt is in the log.
func receiptTraceID(t *testing.T, up *upProcess, id string) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id)
		if code == http.StatusOK {
			var w struct {
				Receipt struct {
					Metadata map[string]json.RawMessage `json:"metadata"`
				} `json:"receipt"`
			}
			if err := json.Unmarshal(body, &w); err != nil {
				t.Fatal(err)
			}
			raw, ok := w.Receipt.Metadata["trace_id"]
			var id string
			_ = json.Unmarshal(raw, &id)
			return id, ok
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipt %s never reached the log (%d)", id, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One A2A call through chio up is one trace, exported over OTLP/gRPC to a
// real receiver: the edge's HTTP server span, the dispatch with the
// kernel's decision and its guards, the PRODUCER spans of the decision
// and outcome events, the tool, the ledger's CONSUMER spans with sign and
// append, the receipt's republication and the projections' CONSUMER
// span, each under the right parent; and the receipt names the trace.
func TestTracingOneCallIsOneTrace(t *testing.T) {
	clearTracingEnv(t)
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "chio-trace-test")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // milliseconds: export promptly
	up := startUp(t)
	// The caller's own trace context is linked, not continued: the
	// receipt's trace id is the edge's to choose.
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	rid := tracedCall(t, up, http.Header{"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-00"}})
	traceID, ok := receiptTraceID(t, up, rid)
	if !ok || len(traceID) != 32 || traceID == callerTrace {
		t.Fatalf("receipt %s: metadata.trace_id %q (the caller's was %s)", rid, traceID, callerTrace)
	}
	// The projections' fold of the receipt is the trace's last span.
	spans := rcv.Await(t, 30*time.Second, "the projections' process span of the receipt", func(all []otlptest.Span) bool {
		for _, s := range all {
			if s.TraceID == traceID && s.Name == "process CHIO_RECEIPTS" {
				return true
			}
		}
		return false
	})
	_ = spans
	tr := rcv.Trace(traceID)
	byID := map[string]otlptest.Span{}
	for _, s := range tr {
		byID[s.SpanID] = s
	}
	named := func(name string) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range tr {
			if s.Name == name || strings.HasSuffix(name, "*") && strings.HasPrefix(s.Name, strings.TrimSuffix(name, "*")) {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			t.Fatalf("trace %s has no %q span; it has:\n%s", traceID, name, describe(tr))
		}
		return out
	}
	parentOf := func(s otlptest.Span) otlptest.Span { return byID[s.ParentSpanID] }
	expectParent := func(child otlptest.Span, parentName string) {
		t.Helper()
		if p := parentOf(child); p.Name != parentName {
			t.Errorf("%s (%s): parent is %q, want %q\n%s", child.Name, child.SpanID, p.Name, parentName, describe(tr))
		}
	}

	t.Logf("trace %s:\n%s", traceID, describe(tr))
	server := named("POST /a2a")[0]
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER || server.ParentSpanID != "" || server.Service != "chio-trace-test" {
		t.Errorf("edge span %+v: want a root SERVER span of service chio-trace-test", server)
	}
	if !slices.Contains(server.Links, callerTrace+"/"+callerSpan) {
		t.Errorf("edge span links %v: want the caller's context %s/%s", server.Links, callerTrace, callerSpan)
	}
	for k, want := range map[string]string{"http.request.method": "POST", "http.route": "/a2a", "http.response.status_code": "200", "url.path": "/a2a"} {
		if got := server.Attributes[k]; got != want {
			t.Errorf("edge span %s = %q, want %q", k, got, want)
		}
	}
	dispatch := named("chio.dispatch")[0]
	if dispatch.Attributes["chio.receipt_id"] != rid {
		t.Errorf("dispatch span receipt id %q, want %q", dispatch.Attributes["chio.receipt_id"], rid)
	}
	if !descends(byID, dispatch, server.SpanID) {
		t.Errorf("chio.dispatch is not under the edge's server span\n%s", describe(tr))
	}
	decide := named("chio.kernel.decide")[0]
	expectParent(decide, "chio.dispatch")
	if decide.Attributes["chio.decision"] != "allow" {
		t.Errorf("decide span: %v", decide.Attributes)
	}
	for _, g := range named("chio.guard *") {
		expectParent(g, "chio.kernel.decide")
	}
	sends := named("send CHIO_EVENTS")
	if len(sends) != 2 {
		t.Errorf("%d send CHIO_EVENTS spans, want the decision's and the outcome's", len(sends))
	}
	for _, s := range sends {
		expectParent(s, "chio.dispatch")
		if s.Kind != tracepb.Span_SPAN_KIND_PRODUCER || s.Attributes["messaging.system"] != "nats" ||
			s.Attributes["messaging.destination.name"] != "CHIO_EVENTS" || s.Attributes["messaging.operation.type"] != "send" {
			t.Errorf("producer span %+v", s)
		}
	}
	expectParent(named("execute_tool *")[0], "chio.dispatch")
	var processes []otlptest.Span // the ledger's; the projections fold the events too
	for _, p := range named("process CHIO_EVENTS") {
		if p.Attributes["messaging.consumer.group.name"] == "chio-ledger" {
			processes = append(processes, p)
		}
	}
	if len(processes) != 2 {
		t.Errorf("%d ledger process CHIO_EVENTS spans, want one per event", len(processes))
	}
	for _, p := range named("process CHIO_EVENTS") {
		expectParent(p, "send CHIO_EVENTS")
		if p.Kind != tracepb.Span_SPAN_KIND_CONSUMER || p.Attributes["messaging.operation.type"] != "process" ||
			p.Attributes["messaging.system"] != "nats" || p.Attributes["messaging.destination.name"] != "CHIO_EVENTS" {
			t.Errorf("consumer span %+v", p)
		}
	}
	expectParent(named("chio.ledger.sign")[0], "process CHIO_EVENTS")
	appendSpan := named("chio.ledger.append")[0]
	expectParent(appendSpan, "process CHIO_EVENTS")
	if appendSpan.Attributes["chio.receipt_id"] != rid {
		t.Errorf("append span %v", appendSpan.Attributes)
	}
	republish := named("send CHIO_RECEIPTS")[0]
	expectParent(republish, "chio.ledger.append")
	var projected bool
	for _, p := range named("process CHIO_RECEIPTS") {
		expectParent(p, "send CHIO_RECEIPTS")
		projected = projected || p.Kind == tracepb.Span_SPAN_KIND_CONSUMER
	}
	if !projected {
		t.Error("the projections' span is no CONSUMER span")
	}
	for _, s := range tr {
		if s.Error {
			t.Errorf("span %s has an error status", s.Name)
		}
	}
	if err := up.stop(); err != nil {
		t.Fatal(err)
	}
}

// With no OTEL_* variable set nothing is traced: no span reaches a
// receiver, a caller's traceparent is not taken up, and receipts carry no
// trace_id.
func TestTracingOffByDefault(t *testing.T) {
	clearTracingEnv(t)
	rcv := otlptest.Start(t)
	up := startUp(t)
	h := http.Header{}
	h.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	rid := tracedCall(t, up, h)
	if id, ok := receiptTraceID(t, up, rid); ok {
		t.Fatalf("receipt %s carries trace_id %q with tracing off", rid, id)
	}
	if err := up.stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(rcv.Spans()); n != 0 {
		t.Fatalf("%d spans exported with tracing off", n)
	}
}

// descends reports whether s is below the span ancestor.
func descends(byID map[string]otlptest.Span, s otlptest.Span, ancestor string) bool {
	for p := s.ParentSpanID; p != ""; p = byID[p].ParentSpanID {
		if p == ancestor {
			return true
		}
		if _, ok := byID[p]; !ok {
			return false
		}
	}
	return false
}

// describe lists a trace's spans, one a line, for failure messages.
func describe(spans []otlptest.Span) string {
	var b strings.Builder
	for _, s := range spans {
		b.WriteString(s.SpanID + " <- " + s.ParentSpanID + " " + s.Name + " [" + s.Scope + "]\n")
	}
	return b.String()
}

// The same call through separate processes (chio edge a2a, chio ledger,
// chio projections on one NATS server) is still one trace: each process
// exports its own spans under its own service name, joined by the
// traceparent the JetStream messages carry.
func TestTracingAcrossProcesses(t *testing.T) {
	clearTracingEnv(t)
	t.Setenv(serviceTokenEnv, "")
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	ctx := context.Background()
	keyDir := t.TempDir()
	issuerKey, issuerPubFile := filepath.Join(keyDir, "issuer.key"), filepath.Join(keyDir, "issuer.pub")
	pub, err := chio(ctx, "capability", "keygen", "--out", issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(issuerPubFile, []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := chio(ctx, "capability", "issue", "--issuer-key", issuerKey, "--subject", strings.Repeat("ab", 32),
		"--grant", "hello-a2a-srv/hello_task", "--ttl", "1h", "--output", "header")
	if err != nil {
		t.Fatalf("issue: %v %s", err, tok)
	}
	start := func(re string, args ...string) string {
		r := regexp.MustCompile(re)
		out, _ := startCommand(t, r, args...)
		return r.FindStringSubmatch(out)[1]
	}
	ledgerDir := t.TempDir()
	ledgerURL := start(`log API on (http://[0-9.:]+)`, "ledger", "--nats", ns.ClientURL(), "--data-dir", ledgerDir, "--listen", "127.0.0.1:0",
		"--service-token", "tok")
	start(`API on (http://[0-9.:]+)`, "projections", "--nats", ns.ClientURL(), "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--service-token", "tok", "--kernel-key", filepath.Join(ledgerDir, "keys", "kernel.pub"))
	edgeURL := start(`agent card (http://[0-9.:]+)/`, "edge", "a2a", "--nats", ns.ClientURL(), "--listen", "127.0.0.1:0", "--issuer-pub", issuerPubFile)

	h := http.Header{}
	h.Set("Authorization", "Bearer "+strings.TrimSpace(tok))
	rid := tracedCall(t, &upProcess{httpURL: edgeURL}, h)
	traceID, ok := receiptTraceID(t, &upProcess{httpURL: ledgerURL, token: "tok"}, rid)
	if !ok || len(traceID) != 32 {
		t.Fatalf("receipt %s: metadata.trace_id %q", rid, traceID)
	}
	want := []struct{ span, service string }{
		{"POST /a2a", "chio-edge-a2a"},
		{"chio.kernel.decide", "chio-edge-a2a"},
		{"send CHIO_EVENTS", "chio-edge-a2a"},
		{"process CHIO_EVENTS", "chio-ledger"},
		{"chio.ledger.append", "chio-ledger"},
		{"send CHIO_RECEIPTS", "chio-ledger"},
		{"process CHIO_RECEIPTS", "chio-projections"},
	}
	services := map[string]map[string]bool{} // span name → services
	missing := func() []string {
		clear(services)
		for _, s := range rcv.Trace(traceID) {
			if services[s.Name] == nil {
				services[s.Name] = map[string]bool{}
			}
			services[s.Name][s.Service] = true
		}
		var out []string
		for _, w := range want {
			if !services[w.span][w.service] {
				out = append(out, fmt.Sprintf("no %q span from %s (%v)", w.span, w.service, services[w.span]))
			}
		}
		return out
	}
	// Each process exports on its own schedule: wait for all of them.
	for deadline := time.Now().Add(30 * time.Second); len(missing()) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, m := range missing() {
		t.Errorf("trace %s: %s", traceID, m)
	}
}

// A call over the gRPC binding gets otelgrpc's SERVER span, with the rest
// of the call below it.
func TestTracingGRPCCall(t *testing.T) {
	clearTracingEnv(t)
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	grpcRE := regexp.MustCompile(`chio up: gRPC +([0-9.:]+) `)
	out, _ := startCommand(t, grpcRE, "up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none")
	conn, err := grpc.NewClient(grpcRE.FindStringSubmatch(out)[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := pb.NewA2AServiceClient(conn).SendMessage(ctx, &pb.SendMessageRequest{Message: &pb.Message{
		MessageId: "g-trace", Role: pb.Role_ROLE_USER, Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "world"}}}}})
	if err != nil || res.GetTask().GetStatus().GetState() != pb.TaskState_TASK_STATE_COMPLETED {
		t.Fatalf("send over gRPC: %v %v", res, err)
	}
	spans := rcv.Await(t, 30*time.Second, "the gRPC call's server and dispatch spans", func(all []otlptest.Span) bool {
		var server, dispatch bool
		for _, s := range all {
			server = server || s.Kind == tracepb.Span_SPAN_KIND_SERVER && s.Attributes["rpc.system.name"]+s.Attributes["rpc.system"] == "grpc"
			dispatch = dispatch || s.Name == "chio.dispatch"
		}
		return server && dispatch
	})
	byID := map[string]otlptest.Span{}
	var server otlptest.Span
	for _, s := range spans {
		byID[s.SpanID] = s
		if s.Kind == tracepb.Span_SPAN_KIND_SERVER && strings.Contains(s.Name, "SendMessage") {
			server = s
		}
	}
	if server.SpanID == "" {
		t.Fatalf("no SendMessage server span:\n%s", describe(spans))
	}
	for _, s := range spans {
		if s.Name == "chio.dispatch" && (s.TraceID != server.TraceID || !descends(byID, s, server.SpanID)) {
			t.Errorf("chio.dispatch is not under the gRPC server span %s:\n%s", server.Name, describe(spans))
		}
	}
}
