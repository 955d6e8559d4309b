package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// Governed calls through the official client: each answer carries its
// verdict, and each call that reached the kernel has its decision event on
// CHIO_EVENTS, marked as an MCP call.
func TestCallTool(t *testing.T) {
	cases := []struct {
		name, tool string
		args       map[string]any
		decision   string
		isError    bool
		structured string // "" for none
		text       string // prefix
		server     string
		verdict    schemas.Verdict
	}{
		{"allowed", "read", map[string]any{"path": "/tmp/notes.txt"}, DecisionAllow, false,
			`{"arguments":{"path":"/tmp/notes.txt"},"server":"files-srv","tool":"read"}`, `{"arguments":`, "files-srv", schemas.VerdictAllow},
		{"mapped name", "twin-srv__echo", map[string]any{"path": "/tmp/a"}, DecisionAllow, false,
			`{"arguments":{"path":"/tmp/a"},"server":"twin-srv","tool":"echo"}`, `{"arguments":`, "twin-srv", schemas.VerdictAllow},
		{"no arguments", "scalar", nil, DecisionAllow, false, `{"result":"hi"}`, `{"result":"hi"}`, "files-srv", schemas.VerdictAllow},
		{"API error status", "http_fail", nil, DecisionAllow, true,
			`{"body":{"error":"no such pet"},"httpStatus":404,"method":"GET","path":"/pets/9"}`, `{"body":`, "files-srv", schemas.VerdictAllow},
		{"guard denial", "read", map[string]any{"path": "/etc/shadow"}, DecisionDeny, true, "", "chio: denied at ", "files-srv", schemas.VerdictDeny},
		{"tool error", "explode", map[string]any{}, DecisionToolError, true, "", "chio: the tool failed: boom", "files-srv", schemas.VerdictAllow},
	}
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("protocol "+version, func(t *testing.T) {
			f := start(t)
			cs := mustConnect(t, f.url, fullToken(t), version)
			refs := map[string]string{}
			for _, c := range cases {
				res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				v := verdictOf(t, res.Meta)
				sc, _ := json.Marshal(res.StructuredContent)
				if v.Decision != c.decision || res.IsError != c.isError || v.ReceiptRef == "" || v.ServerID != c.server ||
					(c.structured == "") != (res.StructuredContent == nil) || (c.structured != "" && string(sc) != c.structured) ||
					!strings.HasPrefix(textOf(t, res), c.text) || v.Denied != (c.decision == DecisionDeny) {
					t.Errorf("%s: %+v structured %s text %q", c.name, v, sc, textOf(t, res))
					continue
				}
				if c.structured != "" && textOf(t, res) != string(sc) {
					t.Errorf("%s: text %q is not the structured content", c.name, textOf(t, res))
				}
				refs[c.name] = v.ReceiptRef
			}
			events := natstest.Decisions(t, f.js)
			if len(events) != len(cases) {
				t.Errorf("%d decision events, want %d", len(events), len(cases))
			}
			for _, c := range cases {
				ev, ok := events[refs[c.name]]
				if !ok {
					t.Errorf("%s: no decision event for %s", c.name, refs[c.name])
					continue
				}
				m := metaOf(t, ev)
				if ev.Decision.Verdict != c.verdict || ev.ToolServer != c.server || m.Protocol != "mcp" || m.MCP.Tool != c.tool ||
					m.MCP.RequestID == nil {
					t.Errorf("%s: event %+v metadata %s", c.name, ev.Decision, ev.Metadata)
				}
			}
		})
	}
}

// A tool the edge does not serve is unknown, whether it does not exist,
// is not exposed over MCP or is named by its Chio name when MCP knows it
// by another: a JSON-RPC error naming it, and nothing reaches the kernel.
// A served tool outside the caller's capability is not listed to it, but a
// call to it is the kernel's to deny, with a deny receipt.
func TestUnknownTools(t *testing.T) {
	f := start(t)
	full := mustConnect(t, f.url, fullToken(t), "")
	twinOnly := mustConnect(t, f.url, valid(t, "cap-twin", "twin-srv"), "2025-11-25")
	cases := []struct {
		name string
		cs   *sdk.ClientSession
		tool string
	}{
		{"absent", full, "nope"},
		{"not exposed", full, "secret"},
		{"schema MCP cannot carry", full, "bad_schema"},
		{"Chio name of a mapped tool", full, "echo"},
	}
	for _, c := range cases {
		_, err := c.cs.CallTool(context.Background(), &sdk.CallToolParams{Name: c.tool, Arguments: map[string]any{}})
		if rpcCode(err) != codeInvalidParams || !strings.Contains(err.Error(), `unknown tool "`+c.tool+`"`) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after unknown tools", n)
	}
	for _, tool := range []string{"read", "files-srv__echo"} {
		res, err := twinOnly.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: map[string]any{}})
		if err != nil || !res.IsError {
			t.Fatalf("%s outside the capability: %v %+v", tool, err, res)
		}
		v := verdictOf(t, res.Meta)
		if v.Decision != DecisionDeny || v.ReceiptRef == "" || natstest.Decisions(t, f.js)[v.ReceiptRef].Decision.Guard != "grant" {
			t.Fatalf("%s outside the capability: %+v", tool, v)
		}
	}
}

// Malformed requests get JSON-RPC errors in MCP's form over a sessionless
// POST; none runs a tool or reaches the record, and the edge keeps serving.
func TestBadRequests(t *testing.T) {
	f := start(t)
	tok := fullToken(t)
	big := `{"path":"` + strings.Repeat("x", schemas.MaxParametersBytes) + `"}`
	cases := []struct {
		name, body string
		code       int64
	}{
		{"arguments an array", callBody(1, "read", `[1,2]`), codeInvalidParams},
		{"arguments a string", callBody(2, "read", `"/etc/motd"`), codeInvalidParams},
		{"duplicate member", callBody(3, "read", `{"path":"a","path":"b"}`), codeInvalidParams},
		{"arguments too large", callBody(4, "read", big), codeInvalidParams},
		{"no name", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"arguments":{}}}`, codeInvalidParams},
		{"params an array", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":[]}`, codeInvalidParams},
		{"_meta a string", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read","_meta":"x","arguments":{}}}`, codeInvalidParams},
	}
	for _, c := range cases {
		status, _, a := post(t, f.url, tok, c.body, nil)
		if status >= 500 || a.Error == nil || a.Error.Code != c.code {
			t.Errorf("%s: %d %+v %s", c.name, status, a.Error, a.Result)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after bad requests", n)
	}
	// Still serving: a good call over the same sessionless POST.
	status, _, a := post(t, f.url, tok, callBody("after", "read", `{"path":"/tmp/x"}`), nil)
	var res sdk.CallToolResult
	if err := json.Unmarshal(a.Result, &res); status != 200 || err != nil || res.IsError || string(a.ID) != `"after"` {
		t.Fatalf("after bad requests: %d %s %v", status, a.Result, err)
	}
	ev := natstest.Decisions(t, f.js)[verdictOf(t, res.Meta).ReceiptRef]
	if m := metaOf(t, ev); m.MCP.RequestID != "after" {
		t.Fatalf("request id %v", m.MCP.RequestID)
	}
}

// A decision that cannot be made durable runs nothing and has no receipt:
// an isError result with decision "error".
func TestNotRecorded(t *testing.T) {
	f := start(t)
	cs := mustConnect(t, f.url, fullToken(t), "")
	// A stream that refuses every event (no retry helps: the write fails
	// at once, as a full or misconfigured stream would).
	cfg := schemas.EventsStreamConfig(1)
	cfg.MaxMsgSize = 16
	if _, err := f.js.UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}})
	if err != nil {
		t.Fatal(err)
	}
	v := verdictOf(t, res.Meta)
	if !res.IsError || v.Decision != DecisionError || v.ReceiptRef != "" || res.StructuredContent != nil ||
		!strings.HasPrefix(textOf(t, res), "chio: the call could not be recorded, so it did not run") {
		t.Fatalf("%+v %q", v, textOf(t, res))
	}
	// Nor can a refused capability's deny receipt be written: 503, not a
	// 401 that would claim a record.
	status, _, a := post(t, f.url, expiredToken(t), callBody(1, "read", `{}`), nil)
	if status != http.StatusServiceUnavailable || a.Error == nil || a.Error.Code != CodeNotRecorded {
		t.Fatalf("refusal not recorded: %d %+v", status, a.Error)
	}
}
