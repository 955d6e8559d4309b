package a2aadapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/natstest"
)

// rawPartner is a hand-written JSON-RPC agent: it answers each method with
// the given result (or SSE stream of results), well formed or not, as a
// broken partner would.
type rawPartner struct {
	srv *httptest.Server
	// results and streams map a 1.0 method name to its result(s).
	results map[string]string
	streams map[string][]string
}

func startRawPartner(t *testing.T, results map[string]string, streams map[string][]string) *rawPartner {
	t.Helper()
	p := &rawPartner{results: results, streams: streams}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		card := &a2a.AgentCard{Name: "Broken", Description: "answers malformed payloads", Version: "0.0.1",
			SupportedInterfaces: []*a2a.AgentInterface{{URL: p.srv.URL + "/jsonrpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version}},
			Capabilities:        a2a.AgentCapabilities{Streaming: true},
			DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
			Skills: []a2a.AgentSkill{{ID: "echo", Name: "Echo", Description: "d", Tags: []string{"t"}}}}
		json.NewEncoder(w).Encode(card)
	})
	mux.HandleFunc("POST /jsonrpc", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		envelope := func(result string) string {
			return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
		}
		if events, ok := p.streams[req.Method]; ok {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range events {
				fmt.Fprintf(w, "data: %s\n\n", envelope(ev))
			}
			return
		}
		result, ok := p.results[req.Method]
		if !ok {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, req.ID)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, envelope(result))
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func TestMalformedPayloadsAreRejected(t *testing.T) {
	const (
		okTask  = `{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`
		working = `{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`
	)
	_, _, js := natstest.Start(t)
	reg, err := OpenTaskRegistry(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		results map[string]string
		streams map[string][]string
		args    string // a follow-up runs after a send recorded t1
		emitted int    // well-formed events delivered before the rejection
	}{
		{name: "task without id", results: map[string]string{"SendMessage": `{"task":{"contextId":"c1","status":{"state":"TASK_STATE_COMPLETED"}}}`}},
		{name: "task without state", results: map[string]string{"SendMessage": `{"task":{"id":"t1","contextId":"c1","status":{}}}`}},
		{name: "task with an unknown state", results: map[string]string{"SendMessage": `{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_DONE"}}}`}},
		{name: "artifact without parts", results: map[string]string{"SendMessage": `{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a1","parts":[]}]}}`}},
		{name: "artifact without id", results: map[string]string{"SendMessage": `{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"parts":[{"text":"x"}]}]}}`}},
		{name: "message without parts", results: map[string]string{"SendMessage": `{"message":{"messageId":"m1","role":"ROLE_AGENT","parts":[]}}`}},
		{name: "GetTask result without id", args: `{"get_task":{"id":"t1"}}`,
			results: map[string]string{"SendMessage": okTask, "GetTask": `{"contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}`}},
		{name: "GetTask result without state", args: `{"get_task":{"id":"t1"}}`,
			results: map[string]string{"SendMessage": okTask, "GetTask": `{"id":"t1","contextId":"c1","status":{}}`}},
		{name: "GetTask answering another task", args: `{"get_task":{"id":"t1"}}`,
			results: map[string]string{"SendMessage": okTask, "GetTask": `{"id":"t2","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}`}},
		{name: "CancelTask result without state", args: `{"cancel_task":{"id":"t1"}}`,
			results: map[string]string{"SendMessage": okTask, "CancelTask": `{"id":"t1","contextId":"c1","status":{}}`}},
		{name: "streamed task without id", args: `{"message":"go","stream":true}`,
			streams: map[string][]string{"SendStreamingMessage": {`{"task":{"contextId":"c1","status":{"state":"TASK_STATE_SUBMITTED"}}}`}}},
		{name: "statusUpdate without taskId", args: `{"message":"go","stream":true}`, emitted: 1,
			streams: map[string][]string{"SendStreamingMessage": {okTask, `{"statusUpdate":{"contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`}}},
		{name: "statusUpdate without state", args: `{"message":"go","stream":true}`, emitted: 1,
			streams: map[string][]string{"SendStreamingMessage": {okTask, `{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{}}}`}}},
		{name: "artifactUpdate without artifact", args: `{"message":"go","stream":true}`, emitted: 2,
			streams: map[string][]string{"SendStreamingMessage": {okTask, working, `{"artifactUpdate":{"taskId":"t1","contextId":"c1"}}`}}},
		{name: "artifactUpdate without taskId", args: `{"message":"go","stream":true}`, emitted: 1,
			streams: map[string][]string{"SendStreamingMessage": {okTask, `{"artifactUpdate":{"contextId":"c1","artifact":{"artifactId":"a1","parts":[{"text":"x"}]}}}`}}},
		{name: "event of another task", args: `{"message":"go","stream":true}`, emitted: 1,
			streams: map[string][]string{"SendStreamingMessage": {okTask, `{"statusUpdate":{"taskId":"t2","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`}}},
		{name: "empty stream", args: `{"message":"go","stream":true}`, streams: map[string][]string{"SendStreamingMessage": {}}},
		{name: "subscription to another task", args: `{"subscribe_task":{"id":"t1"}}`,
			results: map[string]string{"SendMessage": okTask},
			streams: map[string][]string{"SubscribeToTask": {`{"task":{"id":"t2","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startRawPartner(t, tc.results, tc.streams)
			a := discover(t, &partner{srv: p.srv}, Config{Tasks: reg})
			args := tc.args
			if args == "" {
				args = `{"message":"go"}`
			} else if _, ok := tc.results["SendMessage"]; ok {
				invoke(t, a, "echo", `{"message":"go"}`) // records t1
			}
			var chunks int
			err := a.InvokeStream(t.Context(), call(a, "echo", args), func(tools.Chunk) error {
				chunks++
				return nil
			})
			if !errors.Is(err, ErrMalformedPayload) {
				t.Fatalf("err = %v, want ErrMalformedPayload", err)
			}
			if chunks != tc.emitted {
				t.Fatalf("%d chunks reached the caller, want %d", chunks, tc.emitted)
			}
		})
	}
}

// TestPartnerReceipt: a Chio partner's receipt id (metadata.chio.receiptId)
// is surfaced beside the task.
func TestPartnerReceipt(t *testing.T) {
	p := startRawPartner(t, map[string]string{"SendMessage": `{"task":{"id":"t1","contextId":"c1",
		"status":{"state":"TASK_STATE_COMPLETED"},"metadata":{"chio":{"receiptId":"0196b3c0-0000-7000-8000-000000000001"}}}}`}, nil)
	a := discover(t, &partner{srv: p.srv}, Config{})
	out := invoke(t, a, "echo", `{"message":"go"}`)
	if string(out["receiptId"]) != `"0196b3c0-0000-7000-8000-000000000001"` || taskOf(t, out).ID != "t1" {
		t.Fatalf("result %s", out)
	}
}
