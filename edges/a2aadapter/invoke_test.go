package a2aadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/natstest"
)

// TestBindings runs every operation of the tool contract against a real
// a2a-go partner through each binding and protocol version.
func TestBindings(t *testing.T) {
	_, _, js := natstest.Start(t)
	reg, err := OpenTaskRegistry(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		opts    partnerOpts
		binding string
		version string
	}{
		{"1.0 JSON-RPC", partnerOpts{}, "JSONRPC", "1.0"},
		{"1.0 HTTP+JSON", partnerOpts{bindings: []a2a.TransportProtocol{a2a.TransportProtocolHTTPJSON}}, "HTTP+JSON", "1.0"},
		{"0.3 JSON-RPC", partnerOpts{legacy: true}, "JSONRPC", "0.3.0"},
		{"0.3 HTTP+JSON", partnerOpts{legacy: true, bindings: []a2a.TransportProtocol{a2a.TransportProtocolHTTPJSON}}, "HTTP+JSON", "0.3.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPartner(t, tc.opts)
			a := discover(t, p, Config{Tasks: reg, Policy: Policy{Partner: "partner-a"}})
			if r := a.Report(); r.Interface.Binding != tc.binding || r.ProtocolVersion != tc.version {
				t.Fatalf("chose %+v (version %s), want %s %s", r.Interface, r.ProtocolVersion, tc.binding, tc.version)
			}
			t.Run("send", func(t *testing.T) { checkSend(t, a, p) })
			t.Run("send data", func(t *testing.T) {
				task := taskOf(t, invoke(t, a, "echo", `{"data":{"n":12345678901234567890}}`))
				if task.Status.State != a2a.TaskStateCompleted {
					t.Fatalf("state %s", task.Status.State)
				}
				calls := p.agent.calls()
				got := calls[len(calls)-1].parts
				if len(got) != 1 || got[0].Data() == nil {
					t.Fatalf("partner got parts %+v, want one data part", got)
				}
			})
			t.Run("stream", func(t *testing.T) { checkStream(t, a) })
			t.Run("get and subscribe", func(t *testing.T) { checkGetSubscribe(t, a, p) })
			t.Run("cancel", func(t *testing.T) {
				id := startSlow(t, a)
				task := taskOf(t, invoke(t, a, "slow", fmt.Sprintf(`{"cancel_task":{"id":%q}}`, id)))
				if task.ID != id || task.Status.State != a2a.TaskStateCanceled {
					t.Fatalf("cancel answered task %s in %s", task.ID, task.Status.State)
				}
				rec, err := reg.Lookup(t.Context(), a.ServerID(), string(id))
				if err != nil || rec.State != string(a2a.TaskStateCanceled) || rec.Source != SourceCancelTask {
					t.Fatalf("record after cancel: %+v, %v", rec, err)
				}
			})
			t.Run("push configs", func(t *testing.T) { checkPushConfigs(t, a, startSlow(t, a)) })
		})
	}
}

func checkSend(t *testing.T, a *Adapter, p *partner) {
	task := taskOf(t, invoke(t, a, "echo", `{"message":"hello","metadata":{"k":"v"},"message_metadata":{"m":"w"}}`))
	if task.Status.State != a2a.TaskStateCompleted || len(task.Artifacts) != 1 || task.Artifacts[0].Parts[0].Text() != "hello" {
		t.Fatalf("task %+v", task)
	}
	calls := p.agent.calls()
	got := calls[len(calls)-1]
	sel, _ := got.requestMeta["chio"].(map[string]any)
	if got.skill != "echo" || sel["targetSkillName"] != "Echo" || got.requestMeta["k"] != "v" || got.messageMeta["m"] != "w" {
		t.Fatalf("partner saw request metadata %v, message metadata %v", got.requestMeta, got.messageMeta)
	}
	if _, ok := got.messageMeta["chio"]; ok {
		t.Fatalf("message metadata carries chio without a PartnerServerID: %v", got.messageMeta)
	}
}

func checkStream(t *testing.T, a *Adapter) {
	chunks, err := streamChunks(t, a, "stream", `{"message":"go","stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"task", "statusUpdate", "artifactUpdate", "artifactUpdate", "statusUpdate"}
	if got := eventKinds(t, chunks); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i, c := range chunks {
		if c.Last != (i == len(chunks)-1) {
			t.Fatalf("chunk %d Last=%v", i, c.Last)
		}
	}
	var last struct{ StatusUpdate a2a.TaskStatusUpdateEvent }
	if err := json.Unmarshal(chunks[len(chunks)-1].Data, &last); err != nil || last.StatusUpdate.Status.State != a2a.TaskStateCompleted {
		t.Fatalf("last event %s", chunks[len(chunks)-1].Data)
	}
	// Invoke collects the same events.
	out := invoke(t, a, "stream", `{"message":"go","stream":true}`)
	var events []json.RawMessage
	if err := json.Unmarshal(out["events"], &events); err != nil || len(events) != len(want) {
		t.Fatalf("Invoke events %s", out["events"])
	}
}

// startSlow starts a task that stays working and returns its id.
func startSlow(t *testing.T, a *Adapter) a2a.TaskID {
	t.Helper()
	task := taskOf(t, invoke(t, a, "slow", `{"message":"wait","return_immediately":true}`))
	if task.Status.State.Terminal() {
		t.Fatalf("slow task is already %s", task.Status.State)
	}
	return task.ID
}

func checkGetSubscribe(t *testing.T, a *Adapter, p *partner) {
	id := startSlow(t, a)
	task := taskOf(t, invoke(t, a, "slow", fmt.Sprintf(`{"get_task":{"id":%q,"history_length":1}}`, id)))
	if task.ID != id || task.Status.State.Terminal() {
		t.Fatalf("get_task: task %s in %s", task.ID, task.Status.State)
	}
	var chunks []tools.Chunk
	err := a.InvokeStream(t.Context(), call(a, "slow", fmt.Sprintf(`{"subscribe_task":{"id":%q}}`, id)), func(c tools.Chunk) error {
		if len(chunks) == 0 {
			p.agent.release <- struct{}{} // subscribed: let the task finish
		}
		chunks = append(chunks, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds := eventKinds(t, chunks)
	if kinds[0] != "task" || !slices.Contains(kinds, "artifactUpdate") || !chunks[len(chunks)-1].Last {
		t.Fatalf("subscription events %v", kinds)
	}
}

func checkPushConfigs(t *testing.T, a *Adapter, id a2a.TaskID) {
	create := fmt.Sprintf(`{"create_push_config":{"task_id":%q,"id":"cfg-1","url":"https://callback.example/hook","token":"tok"}}`, id)
	var cfg a2a.PushConfig
	if err := json.Unmarshal(invoke(t, a, "slow", create)["pushConfig"], &cfg); err != nil || cfg.URL != "https://callback.example/hook" {
		t.Fatalf("create: %+v, %v", cfg, err)
	}
	ref := fmt.Sprintf(`{"task_id":%q,"id":%q}`, id, cfg.ID)
	if err := json.Unmarshal(invoke(t, a, "slow", `{"get_push_config":`+ref+`}`)["pushConfig"], &cfg); err != nil || cfg.Token != "tok" {
		t.Fatalf("get: %+v, %v", cfg, err)
	}
	list := func() []a2a.PushConfig {
		var configs []a2a.PushConfig
		if err := json.Unmarshal(invoke(t, a, "slow", fmt.Sprintf(`{"list_push_configs":{"task_id":%q}}`, id))["pushConfigs"], &configs); err != nil {
			t.Fatal(err)
		}
		return configs
	}
	if got := list(); len(got) != 1 {
		t.Fatalf("list: %+v", got)
	}
	if out := invoke(t, a, "slow", `{"delete_push_config":`+ref+`}`); out["deleted"] == nil {
		t.Fatalf("delete answered %v", out)
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("list after delete: %+v", got)
	}
}

// TestSelectorNamesTheSkill: a skill id that is not a valid tool name gets
// a sanitized tool name, and the partner still sees the card's skill id.
func TestSelectorNamesTheSkill(t *testing.T) {
	p := startPartner(t, partnerOpts{skills: []a2a.AgentSkill{{ID: "research.deep v2", Name: "Deep research", Description: "d", Tags: []string{"t"}}}})
	a := discover(t, p, Config{})
	tool := a.ToolNames()[0]
	if tool == "research.deep v2" || !validToolName(tool) {
		t.Fatalf("tool name %q", tool)
	}
	invoke(t, a, tool, `{"message":"hi"}`)
	sel, _ := p.agent.calls()[0].requestMeta["chio"].(map[string]any)
	if sel["targetSkillId"] != "research.deep v2" || sel["targetSkillName"] != "Deep research" {
		t.Fatalf("selector %v", sel)
	}
}

// TestCancelStopsACall: tools.Server.Cancel ends a running stream with
// tools.ErrCanceled.
func TestCancelStopsACall(t *testing.T) {
	p := startPartner(t, partnerOpts{})
	a := discover(t, p, Config{})
	inv := call(a, "slow", `{"message":"wait","stream":true}`)
	err := a.InvokeStream(t.Context(), inv, func(tools.Chunk) error {
		return a.Cancel(t.Context(), inv.ID)
	})
	if !errors.Is(err, tools.ErrCanceled) {
		t.Fatalf("err = %v, want ErrCanceled", err)
	}
}

// TestCallerLeavingEndsTheUpstreamCall: the caller's context ending (a
// client that hung up) ends the partner's stream too: the call returns
// the context's error and the partner sees its request end, rather than
// the stream running on to its idle or overall deadline.
func TestCallerLeavingEndsTheUpstreamCall(t *testing.T) {
	started, ended := make(chan struct{}), make(chan struct{})
	p := startPartner(t, partnerOpts{answer: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, ": working\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		close(ended)
	}})
	a := discover(t, p, Config{})
	ctx, leave := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- a.InvokeStream(ctx, call(a, "stream", `{"message":"wait","stream":true}`), func(tools.Chunk) error { return nil })
	}()
	select { // the stream is open, and silent
	case <-started:
	case err := <-done:
		t.Fatalf("the call ended before the partner's stream opened: %v", err)
	}
	leave()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("InvokeStream after the caller left = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call went on after its caller left")
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the partner's request did not end when the caller left")
	}
}
