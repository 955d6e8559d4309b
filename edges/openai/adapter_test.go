package openai

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"
	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agentKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
)

func pub(k ed25519.PrivateKey) string { return govtest.Pub(k) }

// testServer is a real in-process tool server: "explode" fails, every
// other tool echoes its call; "secret" is not exposed on OpenAI.
type testServer struct {
	tools.Running
	id    string
	names []string
}

func (s *testServer) Manifest() *schemas.ToolManifest {
	m := &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: s.id, Name: s.id, Version: "0.1.0"}
	for _, n := range s.names {
		md := map[string]json.RawMessage{"openai.expose": json.RawMessage(`true`)}
		if n == "secret" {
			md = nil
		}
		m.Tools = append(m.Tools, schemas.ToolDefinition{Name: n, Description: "test tool " + n, Metadata: md,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)})
	}
	return m
}
func (s *testServer) ServerID() string    { return s.id }
func (s *testServer) ToolNames() []string { return s.names }
func (s *testServer) Invoke(_ context.Context, inv tools.Invocation) (json.RawMessage, error) {
	if inv.ToolName == "explode" {
		return nil, errors.New("boom: the disk is on fire")
	}
	return json.Marshal(map[string]any{"server": s.id, "tool": inv.ToolName, "arguments": inv.Arguments})
}
func (s *testServer) InvokeStream(context.Context, tools.Invocation, func(tools.Chunk) error) error {
	return errors.New("no streams")
}

type fixture struct {
	url string
	js  jetstream.JetStream
	a   *Adapter
	reg *tools.Registry
}

func start(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	env := govtest.New(t, govtest.WithServers(hello.New(), &testServer{id: "files-srv", names: []string{"explode", "fs.read_file", "echo", "secret"}},
		&testServer{id: "twin-srv", names: []string{"echo"}}), govtest.WithIssuers(issuerKey), govtest.WithEdgeID("openai-test"))
	js, k, reg, d := env.JS, env.Kernel, env.Registry, env.Dispatch
	a := New(k, reg, d, opts...)
	ec := echo.New()
	a.Register(ec)
	srv := httptest.NewServer(ec)
	t.Cleanup(srv.Close)
	return &fixture{url: srv.URL, js: js, a: a, reg: reg}
}

// capability issues a token granting servers, valid from..until.
func capability(t testing.TB, id string, from, until time.Time, servers ...string) string {
	t.Helper()
	return govtest.Token(t, issuerKey, agentKey, id, from, until, govtest.AllOf(servers...)...)
}

func fullToken(t testing.TB) string {
	return capability(t, "cap-full", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), hello.ServerID, "files-srv", "twin-srv")
}

func do(t *testing.T, method, url, token string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	return doWith(t, method, url, h, body)
}

// doWith sends body with exactly the headers h.
func doWith(t *testing.T, method, url string, h map[string]string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// openAIError is an error answer in OpenAI's shape.
type openAIError struct {
	Error struct{ Type, Code, Message string }
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventMeta is the openai part of a decision event's metadata.
type eventMeta struct {
	Protocol string `json:"protocol"`
	OpenAI   struct {
		ToolCallID   string `json:"tool_call_id"`
		CallID       string `json:"call_id"`
		FunctionName string `json:"function_name"`
	} `json:"openai"`
}

func metaOf(t *testing.T, d schemas.DecisionEvent) eventMeta {
	t.Helper()
	var m eventMeta
	if err := json.Unmarshal(d.Metadata, &m); err != nil {
		t.Fatalf("metadata %s: %v", d.Metadata, err)
	}
	return m
}

func TestListToolsAsOpenAIDefinitions(t *testing.T) {
	f := start(t)
	tok := fullToken(t)
	// Chat Completions envelopes, read with the official types.
	code, _, body := do(t, http.MethodGet, f.url+ToolsPath, tok, nil)
	var chat struct {
		Tools []struct {
			Type     string                    `json:"type"`
			Function shared.FunctionDefinition `json:"function"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &chat); code != http.StatusOK || err != nil {
		t.Fatalf("%d %v %s", code, err, body)
	}
	got := map[string]shared.FunctionDefinition{}
	for _, tl := range chat.Tools {
		if tl.Type != "function" || !FitsOpenAI(tl.Function.Name) {
			t.Errorf("tool %+v", tl)
		}
		got[tl.Function.Name] = tl.Function
	}
	want := []string{"hello_task", "explode", MappedName("files-srv", "fs.read_file"), MappedName("files-srv", "echo"), MappedName("twin-srv", "echo")}
	if len(got) != len(want) {
		t.Fatalf("tools %s", body)
	}
	for _, n := range want {
		if _, ok := got[n]; !ok {
			t.Errorf("no %s in %s", n, body)
		}
	}
	if fd := got["explode"]; fd.Description != "test tool explode" || fd.Parameters["type"] != "object" {
		t.Errorf("explode %+v", fd)
	}

	// Responses flat tools, non-strict.
	code, _, body = do(t, http.MethodGet, f.url+ToolsPath+"?format=responses", tok, nil)
	var flat struct {
		Tools []responses.FunctionTool `json:"tools"`
	}
	if err := json.Unmarshal(body, &flat); code != http.StatusOK || err != nil || len(flat.Tools) != len(want) {
		t.Fatalf("%d %v %s", code, err, body)
	}
	for _, tl := range flat.Tools {
		if tl.Type != "function" || tl.Strict || tl.Parameters["type"] != "object" {
			t.Errorf("responses tool %+v", tl)
		}
	}

	// Only what the capability grants.
	narrow := capability(t, "cap-hello", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), hello.ServerID)
	_, _, body = do(t, http.MethodGet, f.url+ToolsPath, narrow, nil)
	if err := json.Unmarshal(body, &chat); err != nil || len(chat.Tools) != 1 || chat.Tools[0].Function.Name != "hello_task" {
		t.Fatalf("narrow: %s", body)
	}

	code, _, body = do(t, http.MethodGet, f.url+ToolsPath+"?format=xml", tok, nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"param":"format"`) {
		t.Fatalf("bad format: %d %s", code, body)
	}
	code, h, body := do(t, http.MethodGet, f.url+ToolsPath, "", nil)
	if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(string(body), `"type":"invalid_request_error"`) {
		t.Fatalf("no token: %d %v %s", code, h, body)
	}
}

// chatAnswer is our answer, each message read both with the official
// tool-message type and with its chio block.
type chatAnswer struct {
	Messages []json.RawMessage `json:"messages"`
}

type chioOf struct {
	Chio Chio `json:"chio"`
}

func TestChatBatch(t *testing.T) {
	f := start(t)
	mapped := MappedName("files-srv", "fs.read_file")
	fn := func(id, name, args string) oa.ChatCompletionMessageToolCallUnionParam {
		return oa.ChatCompletionMessageToolCallUnionParam{OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{
			ID: id, Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: name, Arguments: args}}}
	}
	msg := oa.ChatCompletionAssistantMessageParam{ToolCalls: []oa.ChatCompletionMessageToolCallUnionParam{
		fn("call_ok", "hello_task", `{"text":"world"}`),
		fn("call_fail", "explode", `{}`),
		fn("call_mapped", mapped, `{"path":"/etc/motd"}`),
		fn("call_unknown", "secret", `{}`),
		fn("call_badargs", "hello_task", `[1,2]`),
		{OfCustom: &oa.ChatCompletionMessageCustomToolCallParam{ID: "call_custom", Custom: oa.ChatCompletionMessageCustomToolCallCustomParam{Name: "hello_task", Input: "hi"}}},
		fn("call_after", "hello_task", ``),
	}}
	code, _, body := do(t, http.MethodPost, f.url+ToolCallsPath, fullToken(t), mustJSON(t, msg))
	var ans chatAnswer
	if err := json.Unmarshal(body, &ans); code != http.StatusOK || err != nil || len(ans.Messages) != 7 {
		t.Fatalf("%d %v %s", code, err, body)
	}
	type want struct {
		id, decision string
		denied, ref  bool
		tool, fnName string
	}
	wants := []want{
		{"call_ok", DecisionAllow, false, true, "hello_task", ""},
		{"call_fail", DecisionToolError, true, true, "explode", ""},
		{"call_mapped", DecisionAllow, false, true, "fs.read_file", mapped},
		{"call_unknown", DecisionUnknownFunction, true, false, "", ""},
		{"call_badargs", DecisionInvalidArguments, true, false, "hello_task", ""},
		{"call_custom", DecisionUnsupported, true, false, "", ""},
		{"call_after", DecisionAllow, false, true, "hello_task", ""},
	}
	events := natstest.Decisions(t, f.js)
	for i, w := range wants {
		var m oa.ChatCompletionToolMessageParam
		var c chioOf
		if err := json.Unmarshal(ans.Messages[i], &m); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(ans.Messages[i], &c); err != nil {
			t.Fatal(err)
		}
		ch := c.Chio
		if m.ToolCallID != w.id || m.Content.OfString.Value == "" || ch.Decision != w.decision || ch.Denied != w.denied ||
			(ch.ReceiptRef != "") != w.ref || ch.ToolName != w.tool || ch.FunctionName != w.fnName {
			t.Errorf("message %d: %s", i, ans.Messages[i])
			continue
		}
		if !w.ref {
			continue
		}
		ev, ok := events[ch.ReceiptRef]
		if !ok {
			t.Errorf("no decision event for %s", ch.ReceiptRef)
			continue
		}
		meta := metaOf(t, ev)
		if meta.Protocol != "openai.chat" || meta.OpenAI.ToolCallID != w.id || meta.OpenAI.FunctionName != w.fnName || ev.ToolName != w.tool {
			t.Errorf("event of %s: %s", w.id, ev.Metadata)
		}
	}
	var ok struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(ans.Messages[0], &ok); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Message   string          `json:"message"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(ok.Content), &out); err != nil || out.Message != "hello from a2a" || string(out.Arguments) != `{"text":"world"}` {
		t.Errorf("content %q", ok.Content)
	}
	// Only the four calls that reached the kernel were recorded.
	if len(events) != 4 {
		t.Errorf("%d decision events", len(events))
	}
}

// The Responses shape: a response's output as is (reasoning, message,
// server-run calls and outputs skipped), a guard denial in the middle not
// stopping the next call, a namespaced call never run, and client-run
// calls Chio does not govern refused: a custom_tool_call answered with a
// custom_tool_call_output, the others listed under "refused".
func TestResponsesBatch(t *testing.T) {
	f := start(t)
	narrow := capability(t, "cap-hello", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), hello.ServerID)
	items := []any{
		responses.ResponseReasoningItem{ID: "rs_1", Type: "reasoning"},
		responses.ResponseFunctionToolCall{CallID: "call_1", Name: "hello_task", Arguments: `{"text":"a"}`, Type: "function_call"},
		responses.ResponseFunctionToolCall{CallID: "call_2", Name: "explode", Arguments: `{}`, Type: "function_call"},
		responses.ResponseFunctionToolCall{CallID: "call_3", Name: "hello_task", Arguments: `{"text":"c"}`, Type: "function_call"},
		responses.ResponseFunctionToolCall{CallID: "call_ns", Name: "hello_task", Namespace: "crm", Arguments: `{}`, Type: "function_call"},
		responses.ResponseCustomToolCall{CallID: "ct_1", Name: "hello_task", Input: "hi", Type: "custom_tool_call"},
		// Server-run calls and outputs need no answer.
		responses.ResponseOutputItemMcpCall{ID: "mcp_1", Name: "rm", Arguments: `{}`, ServerLabel: "x", Type: "mcp_call"},
		map[string]any{"type": "web_search_call", "id": "ws_1", "status": "completed"},
		map[string]any{"type": "function_call_output", "call_id": "call_old", "output": "done"},
		map[string]any{"type": "shell_call_output", "call_id": "sh_old", "output": []any{}},
		map[string]any{"type": "tool_search_call", "id": "ts_1", "call_id": "ts_c1", "execution": "server", "arguments": map[string]any{}},
		// Client-run calls Chio does not govern.
		map[string]any{"type": "shell_call", "call_id": "sh_1", "action": map[string]any{"commands": []string{"ls"}}},
		map[string]any{"type": "computer_call", "id": "cu_1", "call_id": "cu_c1", "action": map[string]any{"type": "screenshot"}},
		map[string]any{"type": "mcp_approval_request", "id": "mcpr_1", "name": "rm", "arguments": "{}", "server_label": "x"},
	}
	code, _, body := do(t, http.MethodPost, f.url+ToolCallsPath, narrow, mustJSON(t, map[string]any{"output": items}))
	var ans struct {
		Output  []json.RawMessage `json:"output"`
		Refused []map[string]string
	}
	if err := json.Unmarshal(body, &ans); code != http.StatusOK || err != nil || len(ans.Output) != 5 {
		t.Fatalf("%d %v %s", code, err, body)
	}
	wants := []struct{ typ, id, decision string }{
		{"function_call_output", "call_1", DecisionAllow}, {"function_call_output", "call_2", DecisionDeny},
		{"function_call_output", "call_3", DecisionAllow}, {"function_call_output", "call_ns", DecisionUnknownFunction},
		{"custom_tool_call_output", "ct_1", DecisionUnsupported},
	}
	events := natstest.Decisions(t, f.js)
	for i, w := range wants {
		var item responses.ResponseInputItemFunctionCallOutputParam
		var c chioOf
		if err := json.Unmarshal(ans.Output[i], &item); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(ans.Output[i], &c); err != nil {
			t.Fatal(err)
		}
		if string(item.Type) != w.typ || item.CallID.Value != w.id || item.Output.OfString.Value == "" || c.Chio.Decision != w.decision {
			t.Errorf("item %d: %s", i, ans.Output[i])
		}
		if w.decision == DecisionDeny || w.decision == DecisionAllow {
			ev, ok := events[c.Chio.ReceiptRef]
			if !ok || metaOf(t, ev).Protocol != "openai.responses" || metaOf(t, ev).OpenAI.CallID != w.id {
				t.Errorf("event of %s: %+v", w.id, ev)
			}
			if w.decision == DecisionDeny && (ev.Decision.Verdict != schemas.VerdictDeny || !c.Chio.Denied) {
				t.Errorf("deny of %s: %+v %s", w.id, ev.Decision, ans.Output[i])
			}
		} else if c.Chio.ReceiptRef != "" || !c.Chio.Denied {
			t.Errorf("%s reached the kernel: %s", w.id, ans.Output[i])
		}
	}
	// The namespaced call named an exposed tool, yet nothing ran it: only
	// the three plain calls reached the kernel.
	if len(events) != 3 {
		t.Errorf("%d decision events", len(events))
	}
	wantRefused := []map[string]string{
		{"call_id": "sh_1", "type": "shell_call"},
		{"call_id": "cu_c1", "type": "computer_call"},
		{"id": "mcpr_1", "type": "mcp_approval_request"},
	}
	if len(ans.Refused) != len(wantRefused) {
		t.Fatalf("refused: %s", body)
	}
	for i, w := range wantRefused {
		r := ans.Refused[i]
		if r["call_id"] != w["call_id"] || r["id"] != w["id"] || r["type"] != w["type"] || !strings.Contains(r["reason"], "not run by Chio") {
			t.Errorf("refused %d: %v", i, r)
		}
	}
	// A bare array is the same shape.
	code, _, body = do(t, http.MethodPost, f.url+ToolCallsPath, narrow, mustJSON(t, items[1:2]))
	if code != http.StatusOK || !strings.Contains(string(body), `"type":"function_call_output"`) || !strings.Contains(string(body), `"refused":[]`) {
		t.Fatalf("bare array: %d %s", code, body)
	}
}

// An expired capability: 401 in the OpenAI shape, and a deny receipt for
// each call that named a known tool.
func TestRefusedCapabilityGetsDenyReceipts(t *testing.T) {
	f := start(t)
	expired := capability(t, "cap-old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), hello.ServerID)
	body := `{"role":"assistant","tool_calls":[
		{"id":"c1","type":"function","function":{"name":"hello_task","arguments":"{}"}},
		{"id":"c2","type":"function","function":{"name":"nope","arguments":"{}"}}]}`
	code, h, raw := do(t, http.MethodPost, f.url+ToolCallsPath, expired, []byte(body))
	var e struct {
		Error struct {
			Type, Code, Message string
			Chio                struct{ Receipts []Refusal }
		}
	}
	if err := json.Unmarshal(raw, &e); code != http.StatusUnauthorized || err != nil || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") ||
		e.Error.Code != "invalid_capability" || len(e.Error.Chio.Receipts) != 1 || e.Error.Chio.Receipts[0].CallID != "c1" {
		t.Fatalf("%d %v %s", code, err, raw)
	}
	ev, ok := natstest.Decisions(t, f.js)[e.Error.Chio.Receipts[0].ReceiptRef]
	if !ok || ev.Decision.Verdict != schemas.VerdictDeny || metaOf(t, ev).OpenAI.ToolCallID != "c1" {
		t.Fatalf("deny event %+v", ev)
	}
}

// Request-level problems: an OpenAI error, and nothing reaches the kernel.
func TestBadRequestsRunNothing(t *testing.T) {
	f := start(t)
	tok := fullToken(t)
	call := func(id string) string {
		return fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":"hello_task","arguments":"{}"}}`, id)
	}
	var many []string
	for i := range MaxItems + 1 {
		many = append(many, call(fmt.Sprint("c", i)))
	}
	cases := []struct {
		name, body, code string
		status           int
	}{
		{"not json", `{"role":`, "invalid_json", 400},
		{"empty", ``, "invalid_json", 400},
		{"wrong shape", `{"hello":1}`, "invalid_request", 400},
		{"scalar", `42`, "invalid_request", 400},
		{"user role", `{"role":"user","tool_calls":[` + call("c1") + `]}`, "invalid_request", 400},
		{"no calls", `{"role":"assistant","tool_calls":[]}`, "no_tool_calls", 400},
		{"only reasoning", `{"output":[{"type":"reasoning","id":"r"}]}`, "no_tool_calls", 400},
		{"too many", `{"tool_calls":[` + strings.Join(many, ",") + `]}`, "too_many_tool_calls", 400},
		{"missing id", `{"message":{"role":"assistant","tool_calls":[` + call("") + `]}}`, "missing_call_id", 400},
		{"duplicate id", `{"tool_calls":[` + call("c1") + "," + call("c1") + `]}`, "duplicate_call_id", 400},
		{"tool_calls not a list", `{"tool_calls":{"id":"x"}}`, "invalid_request", 400},
		{"chat call without type", `{"tool_calls":[{"id":"c1","function":{"name":"hello_task","arguments":"{}"}}]}`, "invalid_request", 400},
		{"both shapes", `{"tool_calls":[` + call("c1") + `],"output":[{"type":"function_call","call_id":"c2","name":"hello_task","arguments":"{}"}]}`, "ambiguous_request", 400},
		{"only outputs", `{"output":[{"type":"function_call_output","call_id":"c1","output":"x"}]}`, "no_tool_calls", 400},
		{"too large", `{"tool_calls":[` + call(strings.Repeat("x", MaxBodyBytes)) + `]}`, "body_too_large", 413},
	}
	for _, c := range cases {
		code, _, raw := do(t, http.MethodPost, f.url+ToolCallsPath, tok, []byte(c.body))
		var e openAIError
		if err := json.Unmarshal(raw, &e); code != c.status || err != nil || e.Error.Code != c.code || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("%s: %d %v %s", c.name, code, err, raw)
		}
	}
	// A body not declared JSON: 415, whatever it holds.
	for _, ct := range []string{"text/plain", "", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		h := map[string]string{"Authorization": "Bearer " + tok}
		if ct != "" {
			h["Content-Type"] = ct
		}
		code, _, raw := doWith(t, http.MethodPost, f.url+ToolCallsPath, h, []byte(`{"tool_calls":[`+call("c1")+`]}`))
		var e openAIError
		if err := json.Unmarshal(raw, &e); code != http.StatusUnsupportedMediaType || err != nil ||
			e.Error.Code != "unsupported_media_type" || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("content type %q: %d %v %s", ct, code, err, raw)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after bad requests", n)
	}
	// No credential and no dev capability: 401, nothing recorded.
	code, h, _ := do(t, http.MethodPost, f.url+ToolCallsPath, "", []byte(`{"tool_calls":[`+call("c1")+`]}`))
	if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("no credential: %d", code)
	}
}

// The dev capability acts for callers that send none, but not for a
// browser page of another site (CSRF against a loopback chio up).
func TestDevToken(t *testing.T) {
	tok := fullToken(t)
	f := start(t, WithDevToken(tok))
	batch := []byte(`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"hello_task","arguments":"{}"}}]}`)
	code, _, body := do(t, http.MethodPost, f.url+ToolCallsPath, "", batch)
	if code != http.StatusOK || !strings.Contains(string(body), `"decision":"allow"`) {
		t.Fatalf("%d %s", code, body)
	}
	host := strings.TrimPrefix(f.url, "http://")
	base := map[string]string{"Content-Type": "application/json"}
	with := func(h map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	// Browser requests from this origin, or typed by the user, still act.
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "same-origin", "Origin": f.url},
		{"Sec-Fetch-Site": "none"},
		{"Origin": "http://" + strings.ToUpper(host)},
	} {
		if code, _, body := doWith(t, http.MethodPost, f.url+ToolCallsPath, with(h), batch); code != http.StatusOK {
			t.Errorf("%v: %d %s", h, code, body)
		}
	}
	before := len(natstest.Decisions(t, f.js))
	// Cross-site browser requests under the dev capability: 403, nothing runs.
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site"},
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		{"Origin": "https://evil.example"},
		{"Origin": "null"},
		{"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:1"},
	} {
		code, _, raw := doWith(t, http.MethodPost, f.url+ToolCallsPath, with(h), batch)
		var e openAIError
		if err := json.Unmarshal(raw, &e); code != http.StatusForbidden || err != nil || e.Error.Code != "cross_site_request" ||
			!strings.Contains(e.Error.Message, "dev capability") {
			t.Errorf("%v: %d %v %s", h, code, err, raw)
		}
	}
	// The classic CSRF form: a text/plain body, refused before anything else.
	code, _, body = doWith(t, http.MethodPost, f.url+ToolCallsPath, map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}, batch)
	if code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", code, body)
	}
	if n := len(natstest.Decisions(t, f.js)); n != before {
		t.Fatalf("%d decision events after refused cross-site requests, want %d", n, before)
	}
	// A caller presenting its own capability is not acting under the dev
	// one: a cross-site header does not stop it.
	code, _, body = doWith(t, http.MethodPost, f.url+ToolCallsPath, with(map[string]string{"Authorization": "Bearer " + tok, "Origin": "https://app.example"}), batch)
	if code != http.StatusOK {
		t.Errorf("explicit capability: %d %s", code, body)
	}
}
