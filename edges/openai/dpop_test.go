package openai

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var helperKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))

// delegated issues the agent hello-a2a-srv/* with invoke and delegate,
// and has the agent delegate hello_task (invoke only) to the helper.
func delegated(t testing.TB) *dpoptest.Chain {
	t.Helper()
	return dpoptest.NewChain(t, dpoptest.Spec{Issuer: issuerKey, AgentKey: agentKey, HelperKey: helperKey,
		Agent: []schemas.ToolGrant{{ServerID: hello.ServerID, ToolName: "*",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}},
		Helper: []schemas.ToolGrant{{ServerID: hello.ServerID, ToolName: hello.ToolName,
			Operations: []schemas.Operation{schemas.OpInvoke}}}})
}

// proofHeaders presents token with a proof by key for method url.
func proofHeaders(t testing.TB, key ed25519.PrivateKey, signedFor, token, method, url string) map[string]string {
	t.Helper()
	p := dpoptest.Proof(t, dpoptest.Signer(t, key, signedFor), method, url)
	return map[string]string{"Content-Type": "application/json", "Authorization": "DPoP " + token, "DPoP": p}
}

func agentJKT() string { return dpoptest.JKT(agentKey) }

// proofError is a 401 for a refused proof, in OpenAI's error shape.
type proofError struct {
	Error struct {
		Type, Code, Message string
		Chio                struct {
			DPoPCheck string    `json:"dpop_check"`
			Receipts  []Refusal `json:"receipts"`
		}
	}
}

// refusedProof checks a 401 naming check, with the DPoP challenge alone,
// and returns its body.
func refusedProof(t testing.TB, code int, h http.Header, raw []byte, check dpop.Check) proofError {
	t.Helper()
	var e proofError
	if err := json.Unmarshal(raw, &e); code != http.StatusUnauthorized || err != nil || e.Error.Code != codeInvalidProof ||
		e.Error.Chio.DPoPCheck != string(check) || !strings.Contains(e.Error.Message, "dpop "+string(check)+":") {
		t.Fatalf("%d %v %s, want 401 naming %s", code, err, raw, check)
	}
	if ch := h.Values("WWW-Authenticate"); len(ch) != 1 || ch[0] != dpop.Challenge(check) {
		t.Fatalf("challenge %q", ch)
	}
	return e
}

// denyReceipt checks that a refused call's receipt is a deny at the proof
// step naming check (on the decision, or on the refused outcome of a
// proof found replayed after the decision was written).
func denyReceipt(t testing.TB, f *fixture, rid string, check dpop.Check) {
	t.Helper()
	dpoptest.WantDeny(t, natstest.Decisions(t, f.js), natstest.Outcomes(t, f.js), rid, kernel.StepDPoP, check)
}

const helloCall = `{"tool_calls":[{"id":"c1","type":"function","function":{"name":"hello_task","arguments":"{}"}}]}`

// The rebuilt-parent attack on the tools list and on tool calls: the
// helper's rebuilt parent is refused as a bearer token (missing_proof)
// and with a proof by the helper's key (wrong_key), each call with its
// deny receipt; the agent's own proof works and its receipt binds its
// key; the helper's leaf token works as a bearer token.
func TestRebuiltParentRefused(t *testing.T) {
	f := start(t)
	l := delegated(t)
	list, calls := f.url+ToolsPath, f.url+ToolCallsPath
	bearer := func(tok string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tok}
	}

	for _, c := range []struct {
		name  string
		h     func(method, url string) map[string]string
		check dpop.Check
	}{
		{"as bearer", func(string, string) map[string]string { return bearer(l.Rebuilt) }, dpop.CheckMissing},
		{"with the helper's proof", func(m, u string) map[string]string {
			return proofHeaders(t, helperKey, l.Helper, l.Rebuilt, m, u)
		}, dpop.CheckKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, h, raw := doWith(t, http.MethodGet, list, c.h(http.MethodGet, list), nil)
			refusedProof(t, code, h, raw, c.check)
			code, h, raw = doWith(t, http.MethodPost, calls, c.h(http.MethodPost, calls), []byte(helloCall))
			e := refusedProof(t, code, h, raw, c.check)
			if len(e.Error.Chio.Receipts) != 1 || e.Error.Chio.Receipts[0].CallID != "c1" {
				t.Fatalf("receipts %s", raw)
			}
			denyReceipt(t, f, e.Error.Chio.Receipts[0].ReceiptRef, c.check)
		})
	}

	// The agent, with a proof by its key.
	code, _, raw := doWith(t, http.MethodGet, list, proofHeaders(t, agentKey, l.Agent, l.Agent, http.MethodGet, list), nil)
	if code != http.StatusOK || !strings.Contains(string(raw), `"name":"hello_task"`) {
		t.Fatalf("the agent's list: %d %s", code, raw)
	}
	code, _, raw = doWith(t, http.MethodPost, calls, proofHeaders(t, agentKey, l.Agent, l.Agent, http.MethodPost, calls), []byte(helloCall))
	var ans chatAnswer
	var c chioOf
	if err := json.Unmarshal(raw, &ans); code != http.StatusOK || err != nil || len(ans.Messages) != 1 || json.Unmarshal(ans.Messages[0], &c) != nil ||
		c.Chio.Decision != DecisionAllow {
		t.Fatalf("the agent's call: %d %s", code, raw)
	}
	if b := dpoptest.Binding(t, natstest.Decisions(t, f.js)[c.Chio.ReceiptRef]); b["method"] != dpop.MethodDPoP || b["jkt"] != agentJKT() {
		t.Fatalf("the agent's binding %v", b)
	}

	// The helper's own leaf token, as a bearer token.
	code, _, raw = doWith(t, http.MethodPost, calls, bearer(l.Helper), []byte(helloCall))
	if err := json.Unmarshal(raw, &ans); code != http.StatusOK || err != nil || json.Unmarshal(ans.Messages[0], &c) != nil || c.Chio.Decision != DecisionAllow {
		t.Fatalf("the helper's call: %d %s", code, raw)
	}
	if b := dpoptest.Binding(t, natstest.Decisions(t, f.js)[c.Chio.ReceiptRef]); b["method"] != dpop.MethodBearer {
		t.Fatalf("the helper's binding %v", b)
	}
}

// A batch is one request with one proof: its calls share it (each
// receipt binds the agent's key), and the proof used again is refused
// for every call of the second batch, each with its deny receipt.
func TestBatchSharesItsProof(t *testing.T) {
	f := start(t)
	l := delegated(t)
	calls := f.url + ToolCallsPath
	batch := []byte(`{"tool_calls":[
		{"id":"c1","type":"function","function":{"name":"hello_task","arguments":"{\"text\":\"a\"}"}},
		{"id":"c2","type":"function","function":{"name":"nope","arguments":"{}"}},
		{"id":"c3","type":"function","function":{"name":"hello_task","arguments":"{\"text\":\"b\"}"}}]}`)
	h := proofHeaders(t, agentKey, l.Agent, l.Agent, http.MethodPost, calls)
	code, _, raw := doWith(t, http.MethodPost, calls, h, batch)
	var ans chatAnswer
	if err := json.Unmarshal(raw, &ans); code != http.StatusOK || err != nil || len(ans.Messages) != 3 {
		t.Fatalf("%d %s", code, raw)
	}
	for _, i := range []int{0, 2} {
		var c chioOf
		if err := json.Unmarshal(ans.Messages[i], &c); err != nil || c.Chio.Decision != DecisionAllow {
			t.Fatalf("call %d: %s", i, ans.Messages[i])
		}
		if b := dpoptest.Binding(t, natstest.Decisions(t, f.js)[c.Chio.ReceiptRef]); b["method"] != dpop.MethodDPoP || b["jkt"] != agentJKT() {
			t.Fatalf("call %d binding %v", i, b)
		}
	}
	code, hdr, raw := doWith(t, http.MethodPost, calls, h, batch)
	e := refusedProof(t, code, hdr, raw, dpop.CheckReplayed)
	if len(e.Error.Chio.Receipts) != 2 || e.Error.Chio.Receipts[0].CallID != "c1" || e.Error.Chio.Receipts[1].CallID != "c3" {
		t.Fatalf("receipts %s", raw)
	}
	for _, r := range e.Error.Chio.Receipts {
		denyReceipt(t, f, r.ReceiptRef, dpop.CheckReplayed)
	}
	// A batch whose calls all stop before the kernel spends its proof too.
	none := []byte(`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"nope","arguments":"{}"}}]}`)
	h = proofHeaders(t, agentKey, l.Agent, l.Agent, http.MethodPost, calls)
	if code, _, raw := doWith(t, http.MethodPost, calls, h, none); code != http.StatusOK {
		t.Fatalf("%d %s", code, raw)
	}
	code, hdr, raw = doWith(t, http.MethodPost, calls, h, none)
	refusedProof(t, code, hdr, raw, dpop.CheckReplayed)
}

// The official client, its HTTP client's transport a dpop.Transport,
// works with a token that can delegate: through the proxy every round's
// governed calls run under the request's proof, and the tools list
// answers the client's GET.
func TestOfficialClientWithDPoPTransport(t *testing.T) {
	f, m := startProxy(t, 0)
	l := delegated(t)
	hc := &http.Client{Transport: &dpop.Transport{Signer: dpoptest.Signer(t, agentKey, l.Agent)}}
	c := oa.NewClient(option.WithBaseURL(f.url+"/openai/v1/"), option.WithAPIKey("replaced-by-the-transport"),
		option.WithHTTPClient(hc), option.WithMaxRetries(0))
	for _, d := range []Dialect{Chat, Responses} {
		ans, err := ask(t, c, d, false, "use hello_task hello_task")
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		ids := receiptsOf(ans.header)
		if len(ids) != 2 || !strings.Contains(ans.text, "hello from a2a") {
			t.Fatalf("%s: receipts %v, answer %+v", d, ids, ans)
		}
		for _, id := range ids {
			ev := natstest.Decisions(t, f.js)[id]
			if b := dpoptest.Binding(t, ev); ev.Decision.Verdict != schemas.VerdictAllow || b["method"] != dpop.MethodDPoP || b["jkt"] != agentJKT() {
				t.Fatalf("%s: receipt %s %+v binding %v", d, id, ev.Decision, b)
			}
		}
	}
	for i := range m.Count() {
		if a := m.Auth(i); a != "Bearer "+upstreamKey {
			t.Fatalf("upstream request %d sent %q", i, a)
		}
	}
	var tools struct {
		Tools []map[string]any `json:"tools"`
	}
	if err := c.Get(context.Background(), "tools", nil, &tools); err != nil || len(tools.Tools) != 1 {
		t.Fatalf("tools list: %v %+v", err, tools)
	}
	// Without the transport the same token is refused: it can delegate.
	plain := oa.NewClient(option.WithBaseURL(f.url+"/openai/v1/"), option.WithAPIKey(l.Agent), option.WithMaxRetries(0))
	_, err := ask(t, plain, Chat, false, "use hello_task")
	var apiErr *oa.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != codeInvalidProof {
		t.Fatalf("bearer: %v", err)
	}
}

// sendHeaders sends body with exactly the headers h (and Content-Type).
func sendHeaders(t *testing.T, method, url string, h http.Header, body []byte) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, raw.Bytes()
}

// A presentation wrong in form reaches the kernel as a refused proof: a
// 401 with the DPoP challenge naming the check, each call's deny receipt
// naming it ("dpop missing_proof: ..." or "dpop malformed: ...").
func TestMalformedPresentation(t *testing.T) {
	f := start(t)
	l := delegated(t)
	calls := f.url + ToolCallsPath
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	proof := func() string { return dpoptest.Proof(t, agent, http.MethodPost, calls) }
	for _, c := range dpoptest.WrongForms(l.Agent, l.Helper, proof) {
		t.Run(c.Name, func(t *testing.T) {
			code, h, raw := sendHeaders(t, http.MethodPost, calls, c.Header(), []byte(helloCall))
			e := refusedProof(t, code, h, raw, c.Check)
			if len(e.Error.Chio.Receipts) != 1 {
				t.Fatalf("receipts %s", raw)
			}
			denyReceipt(t, f, e.Error.Chio.Receipts[0].ReceiptRef, c.Check)
		})
	}
}

// An unreachable replay state is a server condition: 503 server_error
// dpop_state_unavailable with Retry-After and no challenge, the calls'
// receipts kept (on the tools list too). A bearer token that needs no
// proof still works.
func TestProofStateUnavailable(t *testing.T) {
	f := start(t)
	l := delegated(t)
	natstest.BreakProofState(t, f.js)
	list, calls := f.url+ToolsPath, f.url+ToolCallsPath
	for _, c := range []struct {
		name, method, url string
		body              []byte
	}{
		{"tools list", http.MethodGet, list, nil},
		{"tool calls", http.MethodPost, calls, []byte(helloCall)},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, h, raw := doWith(t, c.method, c.url, proofHeaders(t, agentKey, l.Agent, l.Agent, c.method, c.url), c.body)
			var e proofError
			if err := json.Unmarshal(raw, &e); code != http.StatusServiceUnavailable || err != nil || e.Error.Type != "server_error" ||
				e.Error.Code != codeProofState || e.Error.Chio.DPoPCheck != string(dpop.CheckState) ||
				h.Get("Retry-After") == "" || h.Get("WWW-Authenticate") != "" {
				t.Fatalf("%d %v %s", code, h, raw)
			}
			if c.body != nil {
				if len(e.Error.Chio.Receipts) != 1 {
					t.Fatalf("receipts %s", raw)
				}
				denyReceipt(t, f, e.Error.Chio.Receipts[0].ReceiptRef, dpop.CheckState)
			}
		})
	}
	code, _, raw := doWith(t, http.MethodPost, calls, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + l.Helper}, []byte(helloCall))
	var ans chatAnswer
	var c chioOf
	if err := json.Unmarshal(raw, &ans); code != http.StatusOK || err != nil || json.Unmarshal(ans.Messages[0], &c) != nil || c.Chio.Decision != DecisionAllow {
		t.Fatalf("the helper's call: %d %s", code, raw)
	}
}
