package a2a

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/schemas"
)

// logSink collects JSON log lines; safe for concurrent writes.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// calls returns the "a2a call" lines logged with http_request_id id.
func (s *logSink) calls(t *testing.T, id string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	raw := s.b.String()
	s.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(raw), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "a2a call" && m["http_request_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// observed starts one replica logging JSON to a sink, with its metrics on
// a registry.
func observed(t *testing.T, devToken string) (*cluster, *logSink, *prometheus.Registry) {
	t.Helper()
	sink, reg := &logSink{}, prometheus.NewRegistry()
	cl := startCluster(t, 1, devToken, func(c *Config, _ jetstream.JetStream) {
		c.Logger = slog.New(slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Metrics = reg
	})
	return cl, sink, reg
}

// post sends one request with X-Request-Id and returns the response's
// echo of it and its body.
func post(t *testing.T, url, tok, contentType, xrid, body string) (string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set(HeaderRequestID, xrid)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Header.Get(HeaderRequestID), b
}

// streamEvents reads every event of one kind on CHIO_EVENTS, alone or in
// envelopes.
func streamEvents(t *testing.T, js jetstream.JetStream, subject string) [][]byte {
	t.Helper()
	c, err := js.OrderedConsumer(context.Background(), schemas.EventsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject, schemas.SubjectEnvelope}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for m := range batch.Messages() {
		evs, err := schemas.UnpackEvents(m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Subject == subject {
				out = append(out, e.Data)
			}
		}
	}
	return out
}

// decisionEvents reads every decision event on CHIO_EVENTS by receipt id.
func decisionEvents(t *testing.T, js jetstream.JetStream) map[string]schemas.DecisionEvent {
	t.Helper()
	out := map[string]schemas.DecisionEvent{}
	for _, raw := range streamEvents(t, js, schemas.SubjectDecision) {
		if bytes.Contains(raw, []byte("xr-")) {
			t.Fatalf("a caller's X-Request-Id reached an event: %s", raw)
		}
		var d schemas.DecisionEvent
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		out[d.ReceiptID] = d
	}
	return out
}

// outcomeOf reads the outcome event of a receipt, if one was published.
func outcomeOf(t *testing.T, js jetstream.JetStream, receiptID string) (schemas.OutcomeEvent, bool) {
	t.Helper()
	var found schemas.OutcomeEvent
	ok := false
	for _, raw := range streamEvents(t, js, schemas.SubjectOutcome) {
		var o schemas.OutcomeEvent
		if json.Unmarshal(raw, &o) == nil && o.ReceiptID == receiptID {
			found, ok = o, true
		}
	}
	return found, ok
}

// Every call is logged once, when its decision is known, with the ids an
// operator follows from the edge log to the receipt, and counted by
// method and decision.
func TestCallsAreLoggedOnceAndCounted(t *testing.T) {
	cl, sink, reg := observed(t, "")
	url := cl.edges[0].URL
	tok := token(t, agentKey, "cap-log")
	now := time.Now()
	foreign, err := schemas.IssueCapability(otherKey, schemas.CapabilityBody{ID: "cap-foreign", Issuer: pub(otherKey), Subject: pub(agentKey),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	untrusted, _ := schemas.EncodeCapabilityHeader(foreign)
	send := func(messageID, extra string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":%q,"parts":[{"text":"world"}]},%s"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`, messageID, extra)
	}
	cases := []struct {
		name, path, tok, contentType, body string
		want                               map[string]string // logged attributes ("*": present)
	}{
		{"allowed send", "/a2a", tok, "application/json", send("m-allow", ""),
			map[string]string{"method": "SendMessage", "decision": "allow", "binding": "jsonrpc", "request_id": "m-allow", "receipt_id": "*", "task_id": "*", "outcome": "completed"}},
		{"denied send", "/a2a", untrusted, "application/json", send("m-deny", ""),
			// A refused capability makes no task: 401 with the deny receipt.
			map[string]string{"method": "SendMessage", "decision": "deny", "request_id": "m-deny", "receipt_id": "*", "reason": "*", "error_code": "-31401"}},
		{"background send, logged when it ran", "/a2a", tok, "application/json", send("m-bg", `"configuration":{"returnImmediately":true},`),
			map[string]string{"method": "SendMessage", "decision": "allow", "request_id": "m-bg", "receipt_id": "*", "task_id": "*", "outcome": "completed"}},
		{"REST send", RESTPath + "/message:send", tok, "application/json",
			`{"message":{"role":"ROLE_USER","messageId":"m-rest","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}`,
			map[string]string{"method": "SendMessage", "decision": "allow", "binding": "rest", "request_id": "m-rest", "receipt_id": "*"}},
		{"unknown method", "/a2a", tok, "application/json", `{"jsonrpc":"2.0","id":1,"method":"no/such","params":{}}`,
			map[string]string{"method": "unknown", "decision": "error", "error_code": "-32601"}},
		{"get of a missing task", "/a2a", tok, "application/json", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t-missing"}}`,
			map[string]string{"method": "GetTask", "decision": "error", "task_id": "t-missing", "error_code": "-32001"}},
		{"unauthenticated get", "/a2a", "", "application/json", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t-any"}}`,
			map[string]string{"method": "GetTask", "decision": "deny", "error_code": "-31401"}},
	}
	events := map[string]string{} // receipt id → request id logged with it
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			xrid := fmt.Sprintf("xr-%d", i)
			echoed, body := post(t, url+c.path, c.tok, c.contentType, xrid, c.body)
			if echoed != xrid {
				t.Fatalf("X-Request-Id echoed as %q", echoed)
			}
			deadline := time.Now().Add(10 * time.Second)
			for len(sink.calls(t, xrid)) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("no call logged for %s; response %s", xrid, body)
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // a second line would come now
			lines := sink.calls(t, xrid)
			if len(lines) != 1 {
				t.Fatalf("logged %d times: %v", len(lines), lines)
			}
			got := lines[0]
			for k, v := range c.want {
				s := fmt.Sprint(got[k])
				if got[k] == nil || (v != "*" && s != v) {
					t.Fatalf("%s = %v, want %s; line %v", k, got[k], v, got)
				}
			}
			if id, ok := got["receipt_id"].(string); ok {
				if !strings.Contains(string(body), id) && c.name != "background send, logged when it ran" {
					t.Fatalf("the logged receipt id %s is not the one answered: %s", id, body)
				}
				events[id] = fmt.Sprint(got["request_id"])
			}
		})
	}
	// From the log to the stream: the receipt id logged names the decision
	// event, whose request_id is the one logged (the messageId).
	decisions := decisionEvents(t, cl.js)
	for receipt, request := range events {
		d, ok := decisions[receipt]
		if !ok || d.RequestID != request {
			t.Fatalf("receipt %s: decision event %+v, logged request id %s", receipt, d, request)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "chio_edge_calls_total" {
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				counts[l["edge"]+" "+l["method"]+" "+l["decision"]] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"a2a SendMessage allow": 3, "a2a SendMessage deny": 1, "a2a unknown error": 1, "a2a GetTask error": 1, "a2a GetTask deny": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("chio_edge_calls_total %v, want %v", counts, want)
	}
}

// An X-Request-Id unfit to log is neither logged nor echoed.
func TestOddRequestIDsAreIgnored(t *testing.T) {
	cl, sink, _ := observed(t, "")
	for _, id := range []string{strings.Repeat("x", maxHTTPRequestID+1), "tab\there"} {
		echoed, _ := post(t, cl.edges[0].URL+"/a2a", "", "application/json", id, `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t"}}`)
		if echoed != "" || len(sink.calls(t, id)) != 0 {
			t.Fatalf("request id %q: echoed %q", id, echoed)
		}
	}
}

// sendBackground starts a returnImmediately call of skill and returns its
// task id once the tool is running (started fires).
func sendBackground(t *testing.T, url, tok, skill string, started <-chan struct{}) string {
	t.Helper()
	m := rpc(t, url, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m-drain","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":%q}}}}`, skill))
	task, ok := m["result"].(map[string]any)["task"].(map[string]any)
	if !ok {
		t.Fatalf("send: %v", m)
	}
	if started != nil {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the tool never started")
		}
	}
	return task["id"].(string)
}

// A drain waits for the calls running on the replica: their tools finish
// and their outcome events are published before Drain returns, while
// subscriptions end at once.
func TestDrainWaitsForInFlightCalls(t *testing.T) {
	cl, sink, _ := observed(t, "")
	e, url := cl.raw[0], cl.edges[0].URL
	tok := token(t, agentKey, "cap-drain")
	id := sendBackground(t, url, tok, "step_task", nil)

	// A subscriber to the task: its stream ends when the drain begins.
	req, _ := http.NewRequest(http.MethodPost, url+"/a2a", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"SubscribeToTask","params":{"id":"`+id+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	subscribed := make(chan struct{})
	streamEnded := make(chan struct{})
	go func() {
		defer close(streamEnded)
		r := bufio.NewReader(resp.Body)
		first := true
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if first && strings.HasPrefix(line, "data: ") {
				first = false
				close(subscribed)
			}
		}
	}()
	<-subscribed

	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drained <- e.Drain(ctx)
	}()
	select {
	case <-streamEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription did not end when the drain began")
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while a call was running", err)
	case <-time.After(300 * time.Millisecond):
	}
	cl.step.open(stepChunks) // the tool finishes
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return after the call finished")
	}
	owner, werr := e.owner(context.Background(), caller{token: tok}, "")
	if werr != nil {
		t.Fatal(werr)
	}
	task, err := e.tasks.Load(context.Background(), id, owner)
	if err != nil {
		t.Fatal(err)
	}
	out, ok := outcomeOf(t, cl.js, task.ExecutionID)
	if task.State != "completed" || !ok || out.Outcome != schemas.OutcomeCompleted {
		t.Fatalf("after the drain: task %s, outcome %+v (published %v)", task.State, out, ok)
	}
	if len(sink.calls(t, "")) != 0 {
		t.Fatal("a call was logged with an empty http_request_id")
	}
}

// A drain that runs out of time cancels the calls still running: their
// tools see it and their outcome is published as cancelled.
func TestDrainDeadlineCancelsWhatIsLeft(t *testing.T) {
	cl, _, _ := observed(t, "")
	e := cl.raw[0]
	tok := token(t, agentKey, "cap-drain-late")
	id := sendBackground(t, cl.edges[0].URL, tok, "slow_task", cl.slow.started)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := e.Drain(ctx)
	if err == nil || !strings.Contains(err.Error(), "cancelled 1 calls") {
		t.Fatalf("Drain past its deadline: %v", err)
	}
	select {
	case <-cl.slow.cancelled:
	default:
		t.Fatal("the running tool was not cancelled")
	}
	owner, werr := e.owner(context.Background(), caller{token: tok}, "")
	if werr != nil {
		t.Fatal(werr)
	}
	task, err := e.tasks.Load(context.Background(), id, owner)
	if err != nil {
		t.Fatal(err)
	}
	if out, ok := outcomeOf(t, cl.js, task.ExecutionID); !ok || out.Outcome != schemas.OutcomeCancelled {
		t.Fatalf("outcome %+v (published %v)", out, ok)
	}
	// Nothing is left in flight: draining again returns at once.
	if err := e.Drain(context.Background()); err != nil {
		t.Fatalf("second Drain: %v", err)
	}
}
