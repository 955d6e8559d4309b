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

// Requests without a usable capability get 401 in JSON-RPC form; a refused
// capability's tool calls get their deny receipts first.
func TestCredentials(t *testing.T) {
	f := start(t)
	expired := expiredToken(t)
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	cases := []struct {
		name, body string
		headers    map[string]string
		refs       int    // deny receipts written
		reason     string // in the message
	}{
		{"none", list, nil, 0, "token is required"},
		{"not Bearer", list, map[string]string{"Authorization": "Basic dXNlcjpwdw=="}, 0, "not \"Bearer"},
		{"two different", list, map[string]string{"Authorization": "Bearer " + fullToken(t), "X-Chio-Capability": expired}, 0, "different capabilities"},
		{"garbage", list, map[string]string{"Authorization": "Bearer not-a-token"}, 0, "capability refused at"},
		{"expired, tools/list", list, map[string]string{"Authorization": "Bearer " + expired}, 0, "capability refused at time"},
		{"expired, unknown tool", callBody(2, "nope", `{}`), map[string]string{"X-Chio-Capability": expired}, 0, "capability refused at time"},
		{"expired, bad arguments", callBody(3, "read", `[1]`), map[string]string{"X-Chio-Capability": expired}, 0, "capability refused at time"},
		{"expired, listed tool", callBody(4, "read", `{"path":"/tmp/x"}`), map[string]string{"X-Chio-Capability": expired}, 1, "capability refused at time"},
		{"expired, tool outside its grant", callBody(5, "create_pet", `{}`), map[string]string{"X-Chio-Capability": expired}, 1, "capability refused at time"},
	}
	wantEvents := 0
	for _, c := range cases {
		status, h, a := post(t, f.url, "", c.body, c.headers)
		if status != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || a.Error == nil ||
			a.Error.Code != CodeUnauthorized || !strings.Contains(a.Error.Message, c.reason) {
			t.Errorf("%s: %d %v %+v", c.name, status, h, a.Error)
			continue
		}
		if c.reason == "token is required" || strings.Contains(c.reason, "Bearer") || strings.Contains(c.reason, "different") {
			continue // never reached the kernel: no refusal data
		}
		var data Refused
		if err := json.Unmarshal(a.Error.Data, &data); err != nil || data.Decision != DecisionDeny || !data.Denied ||
			data.Guard == "" || len(data.Receipts) != c.refs {
			t.Errorf("%s: data %s", c.name, a.Error.Data)
			continue
		}
		wantEvents += c.refs
		for _, r := range data.Receipts {
			ev, ok := natstest.Decisions(t, f.js)[r.ReceiptRef]
			if !ok || ev.Decision.Verdict != schemas.VerdictDeny || metaOf(t, ev).Protocol != "mcp" ||
				metaOf(t, ev).MCP.RequestID != r.RequestID || r.RequestID == nil {
				t.Errorf("%s: deny event %+v %s", c.name, ev.Decision, ev.Metadata)
			}
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != wantEvents {
		t.Errorf("%d decision events, want %d", n, wantEvents)
	}

	// The official client surfaces the refusal as the JSON-RPC error.
	for _, tok := range []string{"", expired} {
		if _, err := connect(t, f.url, tok, "2025-11-25"); rpcCode(err) != CodeUnauthorized {
			t.Errorf("client with %q: %v", tok, err)
		}
	}
	// X-Chio-Capability serves as well as Bearer.
	status, _, a := post(t, f.url, "", list, map[string]string{"X-Chio-Capability": fullToken(t)})
	var res sdk.ListToolsResult
	if err := json.Unmarshal(a.Result, &res); status != http.StatusOK || err != nil || len(res.Tools) != len(allNames) {
		t.Errorf("X-Chio-Capability: %d %s %v", status, a.Result, err)
	}
}

// The dev capability acts for callers that send none, but not for a
// browser page of another site (CSRF against a loopback chio up).
func TestDevToken(t *testing.T) {
	tok := fullToken(t)
	f := start(t, WithDevToken(tok))
	cs := mustConnect(t, f.url, "", "")
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}})
	if err != nil || verdictOf(t, res.Meta).Decision != DecisionAllow {
		t.Fatalf("dev call: %v %+v", err, res)
	}
	host := strings.TrimPrefix(f.url, "http://")
	call := callBody(1, "read", `{"path":"/tmp/y"}`)
	cases := []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"same origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": f.url}, http.StatusOK},
		{"typed by the user", map[string]string{"Sec-Fetch-Site": "none"}, http.StatusOK},
		{"origin in upper case", map[string]string{"Origin": "http://" + strings.ToUpper(host)}, http.StatusOK},
		{"explicit capability from elsewhere", map[string]string{"Authorization": "Bearer " + tok, "Origin": "https://app.example"}, http.StatusOK},
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site", map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"foreign origin", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"null origin", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"same-origin claim, foreign origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:1"}, http.StatusForbidden},
	}
	allowed := 1
	for _, c := range cases {
		status, _, a := post(t, f.url, "", call, c.headers)
		if status != c.status {
			t.Errorf("%s: %d %+v", c.name, status, a.Error)
			continue
		}
		if status == http.StatusOK {
			allowed++
		} else if a.Error == nil || a.Error.Code != CodeForbidden || !strings.Contains(a.Error.Message, "dev capability") {
			t.Errorf("%s: %+v", c.name, a.Error)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != allowed {
		t.Fatalf("%d decision events, want %d: a refused cross-site request reached the kernel", n, allowed)
	}
}

// HTTP-level mistakes the SDK refuses come back as JSON-RPC errors too.
func TestHTTPErrors(t *testing.T) {
	f := start(t)
	tok := fullToken(t)
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	cases := []struct {
		name, method, body string
		headers            map[string]string
		status             int
		code               int64
	}{
		{"GET", http.MethodGet, "", nil, http.StatusMethodNotAllowed, codeInvalidRequest},
		{"DELETE", http.MethodDelete, "", nil, http.StatusMethodNotAllowed, codeInvalidRequest},
		{"text/plain", http.MethodPost, list, map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType, codeInvalidRequest},
		{"no Accept", http.MethodPost, list, map[string]string{"Accept": ""}, http.StatusBadRequest, codeInvalidRequest},
		{"unknown method", http.MethodPost, `{"jsonrpc":"2.0","id":8,"method":"tools/run","params":{}}`, nil, http.StatusBadRequest, codeMethodNotFound},
		{"not JSON", http.MethodPost, `{"jsonrpc":`, nil, http.StatusBadRequest, codeParseError},
		{"empty batch", http.MethodPost, `[]`, nil, http.StatusBadRequest, codeInvalidRequest},
		{"a number", http.MethodPost, `42`, nil, http.StatusBadRequest, codeInvalidRequest},
		{"too large", http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"` +
			strings.Repeat("x", MaxBodyBytes) + `"}}`, nil, http.StatusRequestEntityTooLarge, codeInvalidRequest},
	}
	for _, c := range cases {
		status, _, a := request(t, c.method, f.url, tok, c.body, c.headers)
		if status != c.status || a.Error == nil || a.Error.Code != c.code || a.Error.Message == "" {
			t.Errorf("%s: %d %+v", c.name, status, a.Error)
		}
	}
}
