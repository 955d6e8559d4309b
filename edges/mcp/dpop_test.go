package mcp

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var helperKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))

// delegated issues the agent files-srv/* with invoke and delegate, and
// has the agent delegate files-srv/read (invoke only) to the helper.
func delegated(t testing.TB) *dpoptest.Chain {
	t.Helper()
	return dpoptest.NewChain(t, dpoptest.Spec{Issuer: issuerKey, AgentKey: agentKey, HelperKey: helperKey,
		Agent: []schemas.ToolGrant{{ServerID: "files-srv", ToolName: "*",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}},
		Helper: []schemas.ToolGrant{{ServerID: "files-srv", ToolName: "read",
			Operations: []schemas.Operation{schemas.OpInvoke}}}})
}

// dpopHeaders present token with a proof by s for a POST to the edge.
func dpopHeaders(t testing.TB, s *dpop.Signer, token, url string) map[string]string {
	t.Helper()
	p := dpoptest.Proof(t, s, http.MethodPost, url+Path)
	return map[string]string{"Authorization": "DPoP " + token, "DPoP": p}
}

// toolProofOf is s's tool proof for files-srv/tool with args, as JSON.
func toolProofOf(t testing.TB, s *dpop.Signer, tool, args string) json.RawMessage {
	t.Helper()
	p, err := s.ToolProof("files-srv", tool, json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// proofCallBody is a raw tools/call request carrying proof in its _meta.
func proofCallBody(id any, name, args string, proof json.RawMessage) string {
	idRaw, _ := json.Marshal(id)
	return `{"jsonrpc":"2.0","id":` + string(idRaw) + `,"method":"tools/call","params":{"name":` + quote(name) +
		`,"arguments":` + args + `,"_meta":{"` + MetaDPoPProof + `":` + string(proof) + `}}}`
}

func agentJKT() string { return dpoptest.JKT(agentKey) }

// refusalOf checks a JSON-RPC error refusing a proof for check and
// returns its data.
func refusalOf(t testing.TB, code int64, msg string, data json.RawMessage, check dpop.Check) Refused {
	t.Helper()
	var d Refused
	if err := json.Unmarshal(data, &d); code != CodeUnauthorized || err != nil || d.Guard != kernel.StepDPoP ||
		d.DPoPCheck != string(check) || !strings.Contains(msg, "dpop "+string(check)+":") {
		t.Fatalf("error %d %q %s, want a refusal naming %s", code, msg, data, check)
	}
	return d
}

// refused401 checks an HTTP answer refusing a proof for check: 401 with
// the DPoP challenge alone, and the JSON-RPC error naming it.
func refused401(t testing.TB, status int, h http.Header, a rpcAnswer, check dpop.Check) Refused {
	t.Helper()
	if ch := h.Values("WWW-Authenticate"); status != http.StatusUnauthorized || a.Error == nil || len(ch) != 1 || ch[0] != dpop.Challenge(check) {
		t.Fatalf("%d %q %+v, want 401 for %s", status, ch, a.Error, check)
	}
	return refusalOf(t, a.Error.Code, a.Error.Message, a.Error.Data, check)
}

// denyReceipt checks that a refused call's receipt is a deny at the proof
// step naming check (on the decision, or on the refused outcome of a
// proof found replayed after the decision was written).
func denyReceipt(t testing.TB, f *fixture, rid string, check dpop.Check) {
	t.Helper()
	dpoptest.WantDeny(t, natstest.Decisions(t, f.js), natstest.Outcomes(t, f.js), rid, kernel.StepDPoP, check)
}

// allowedCall checks a tools/call answer that ran, and the binding its
// receipt records.
func allowedCall(t testing.TB, f *fixture, status int, a rpcAnswer, method, jkt string) {
	t.Helper()
	var res sdk.CallToolResult
	if status != http.StatusOK || a.Error != nil || json.Unmarshal(a.Result, &res) != nil || res.IsError {
		t.Fatalf("%d %+v %s", status, a.Error, a.Result)
	}
	ev := natstest.Decisions(t, f.js)[verdictOf(t, res.Meta).ReceiptRef]
	if b := dpoptest.Binding(t, ev); ev.Decision.Verdict != schemas.VerdictAllow || b["method"] != method || b["jkt"] != jkt {
		t.Fatalf("receipt %+v binding %v, want %s %s", ev.Decision, b, method, jkt)
	}
}

const (
	listBody = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	readArgs = `{"path":"/tmp/x"}`
)

// The rebuilt-parent attack over HTTP: the helper's rebuilt parent is
// refused on tools/list and tools/call as a bearer token (missing_proof),
// with a DPoP proof by the helper's key and with a tool proof by it
// (wrong_key), each call with its deny receipt; the agent's own proofs
// work (binding dpop, or chio_dpop_v1 for a tool proof in _meta); the
// helper's leaf token works as a bearer token.
func TestRebuiltParentRefusedHTTP(t *testing.T) {
	f := start(t)
	l := delegated(t)
	helper := dpoptest.Signer(t, helperKey, l.Helper)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

	for _, c := range []struct {
		name  string
		h     func() map[string]string
		body  string // the call, when it differs
		check dpop.Check
	}{
		{"as bearer", func() map[string]string { return bearer(l.Rebuilt) }, "", dpop.CheckMissing},
		{"with the helper's DPoP proof", func() map[string]string { return dpopHeaders(t, helper, l.Rebuilt, f.url) }, "", dpop.CheckKey},
		{"with the helper's tool proof", func() map[string]string { return bearer(l.Rebuilt) },
			proofCallBody(2, "read", readArgs, toolProofOf(t, helper, "read", readArgs)), dpop.CheckKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.body == "" {
				status, h, a := post(t, f.url, "", listBody, c.h())
				if d := refused401(t, status, h, a, c.check); len(d.Receipts) != 0 {
					t.Fatalf("a list has no receipt: %+v", d)
				}
				c.body = callBody(2, "read", readArgs)
			}
			status, h, a := post(t, f.url, "", c.body, c.h())
			d := refused401(t, status, h, a, c.check)
			if len(d.Receipts) != 1 || d.Receipts[0].RequestID != float64(2) {
				t.Fatalf("receipts %+v", d.Receipts)
			}
			denyReceipt(t, f, d.Receipts[0].ReceiptRef, c.check)
		})
	}

	// The agent: a DPoP proof for the list and for a call, or a tool proof
	// in the call's _meta beside its token as a bearer token.
	status, _, a := post(t, f.url, "", listBody, dpopHeaders(t, agent, l.Agent, f.url))
	var list sdk.ListToolsResult
	if err := json.Unmarshal(a.Result, &list); status != http.StatusOK || err != nil || len(list.Tools) == 0 {
		t.Fatalf("the agent's list: %d %+v %s", status, a.Error, a.Result)
	}
	status, _, a = post(t, f.url, "", callBody(3, "read", readArgs), dpopHeaders(t, agent, l.Agent, f.url))
	allowedCall(t, f, status, a, dpop.MethodDPoP, agentJKT())
	status, _, a = post(t, f.url, "", proofCallBody(4, "read", readArgs, toolProofOf(t, agent, "read", readArgs)), bearer(l.Agent))
	allowedCall(t, f, status, a, dpop.MethodToolProof, agentJKT())

	// The helper's leaf token as a bearer token.
	status, _, a = post(t, f.url, "", callBody(5, "read", readArgs), bearer(l.Helper))
	allowedCall(t, f, status, a, dpop.MethodBearer, "")
}

// Proofs over HTTP refused after the transport admitted them: a DPoP
// proof used twice, and a tool proof for another tool or other arguments.
// Each is a 401 naming its check, with the call's deny receipt.
func TestRefusedCallProofsHTTP(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	h := dpopHeaders(t, agent, l.Agent, f.url)
	status, _, a := post(t, f.url, "", callBody(1, "read", readArgs), h)
	allowedCall(t, f, status, a, dpop.MethodDPoP, agentJKT())
	status, hdr, a := post(t, f.url, "", callBody(2, "read", readArgs), h)
	d := refused401(t, status, hdr, a, dpop.CheckReplayed)
	if len(d.Receipts) != 1 {
		t.Fatalf("receipts %+v", d)
	}
	denyReceipt(t, f, d.Receipts[0].ReceiptRef, dpop.CheckReplayed)

	bearer := map[string]string{"Authorization": "Bearer " + l.Agent}
	for _, c := range []struct{ name, body string }{
		{"another tool", proofCallBody(3, "read", readArgs, toolProofOf(t, agent, "echo", readArgs))},
		{"other arguments", proofCallBody(4, "read", readArgs, toolProofOf(t, agent, "read", `{"path":"/etc/shadow"}`))},
	} {
		status, hdr, a := post(t, f.url, "", c.body, bearer)
		d := refused401(t, status, hdr, a, dpop.CheckCall)
		if len(d.Receipts) != 1 {
			t.Fatalf("%s: receipts %+v", c.name, d)
		}
		denyReceipt(t, f, d.Receipts[0].ReceiptRef, dpop.CheckCall)
	}
}

// A JSON-RPC batch is one request with one proof: its calls share the
// DPoP proof; without one, each call may bring its own tool proof.
func TestBatchProofs(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	batch := func(calls ...string) string { return "[" + strings.Join(calls, ",") + "]" }
	answers := func(body string, h map[string]string) []rpcAnswer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.url+Path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-03-26") // batches end with 2025-06-18
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out []rpcAnswer
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		return out
	}
	check := func(out []rpcAnswer, method string) {
		t.Helper()
		if len(out) != 2 {
			t.Fatalf("%d answers", len(out))
		}
		for _, a := range out {
			allowedCall(t, f, http.StatusOK, a, method, agentJKT())
		}
	}
	check(answers(batch(callBody(1, "read", readArgs), callBody(2, "scalar", readArgs)), dpopHeaders(t, agent, l.Agent, f.url)), dpop.MethodDPoP)
	own := batch(proofCallBody(3, "read", readArgs, toolProofOf(t, agent, "read", readArgs)),
		proofCallBody(4, "scalar", readArgs, toolProofOf(t, agent, "scalar", readArgs)))
	check(answers(own, map[string]string{"Authorization": "Bearer " + l.Agent}), dpop.MethodToolProof)
	// The same tool proofs again: each call refused, with its receipt.
	for _, a := range answers(own, map[string]string{"Authorization": "Bearer " + l.Agent}) {
		if a.Error == nil {
			t.Fatalf("a replayed tool proof was honoured: %s", a.Result)
		}
		d := refusalOf(t, a.Error.Code, a.Error.Message, a.Error.Data, dpop.CheckReplayed)
		denyReceipt(t, f, d.Receipts[0].ReceiptRef, dpop.CheckReplayed)
	}
}

// The official SDK client works through a dpop.Transport with a token
// that can delegate: every HTTP request it makes carries a fresh proof.
func TestSDKClientWithDPoPTransport(t *testing.T) {
	f := start(t)
	l := delegated(t)
	hc := &http.Client{Transport: &dpop.Transport{Signer: dpoptest.Signer(t, agentKey, l.Agent)}}
	tr := &sdk.StreamableClientTransport{Endpoint: f.url + Path, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "dpop-client", Version: "1"}, nil).Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) == 0 {
		t.Fatalf("list: %v", err)
	}
	for range 2 {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}})
		if err != nil || res.IsError {
			t.Fatalf("call: %v %+v", err, res)
		}
		ev := natstest.Decisions(t, f.js)[verdictOf(t, res.Meta).ReceiptRef]
		if b := dpoptest.Binding(t, ev); b["method"] != dpop.MethodDPoP || b["jkt"] != agentJKT() {
			t.Fatalf("binding %v", b)
		}
	}
	listed, err := ListToolsWith(ctx, f.url+Path, hc)
	if err != nil || len(listed) != len(list.Tools) {
		t.Fatalf("ListToolsWith: %v %+v", err, listed)
	}
	// The same token without the transport is refused.
	if _, err := connect(t, f.url, l.Agent, "2025-11-25"); rpcCode(err) != CodeUnauthorized || !strings.Contains(err.Error(), "missing_proof") {
		t.Fatalf("bearer: %v", err)
	}
}

// stdio serves a session whose token is tok and returns its client.
func stdioSession(t *testing.T, f *fixture, tok string) *sdk.ClientSession {
	t.Helper()
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- f.edge.ServeStdio(context.Background(), tok, toServer, fromServer) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stdio-client", Version: "1"}, nil).
		Connect(context.Background(), &sdk.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
			t.Error("ServeStdio did not return")
		}
	})
	return cs
}

// stdioRefusal checks a tools/call refused for its proof over stdio: the
// JSON-RPC error naming check, and the call's deny receipt.
func stdioRefusal(t *testing.T, f *fixture, err error, check dpop.Check) {
	t.Helper()
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Fatalf("err %v, want a refusal for %s", err, check)
	}
	d := refusalOf(t, werr.Code, werr.Message, werr.Data, check)
	if len(d.Receipts) != 1 || d.Receipts[0].RequestID == nil {
		t.Fatalf("receipts %+v", d)
	}
	denyReceipt(t, f, d.Receipts[0].ReceiptRef, check)
}

// Over stdio a tool proof in _meta is the only proof: a session under a
// token that can delegate lists its tools (the process holds the token)
// but runs a call only with a tool proof by the token's subject. The
// helper's rebuilt parent gets nothing run, with or without a proof of
// the helper's; the agent's tool proof works once, for the call it names.
func TestStdioToolProofs(t *testing.T) {
	f := start(t)
	l := delegated(t)
	ctx := context.Background()
	read := func(meta sdk.Meta) (*sdk.CallToolResult, error) {
		return stdioSession(t, f, l.Rebuilt).CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}, Meta: meta})
	}
	_, err := read(nil)
	stdioRefusal(t, f, err, dpop.CheckMissing)
	helperProof, err := dpoptest.Signer(t, helperKey, l.Helper).ToolProof("files-srv", "read", json.RawMessage(readArgs))
	if err != nil {
		t.Fatal(err)
	}
	_, err = read(sdk.Meta{MetaDPoPProof: helperProof})
	stdioRefusal(t, f, err, dpop.CheckKey)

	cs := stdioSession(t, f, l.Agent)
	if list, err := cs.ListTools(ctx, nil); err != nil || len(list.Tools) == 0 {
		t.Fatalf("list: %v", err)
	}
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	p, err := agent.ToolProof("files-srv", "read", json.RawMessage(readArgs))
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}, Meta: sdk.Meta{MetaDPoPProof: p}})
	if err != nil || res.IsError {
		t.Fatalf("the agent's call: %v %+v", err, res)
	}
	ev := natstest.Decisions(t, f.js)[verdictOf(t, res.Meta).ReceiptRef]
	if b := dpoptest.Binding(t, ev); b["method"] != dpop.MethodToolProof || b["jkt"] != agentJKT() {
		t.Fatalf("binding %v", b)
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}, Meta: sdk.Meta{MetaDPoPProof: p}})
	stdioRefusal(t, f, err, dpop.CheckReplayed)
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/etc/shadow"},
		Meta: sdk.Meta{MetaDPoPProof: toolProofOf(t, agent, "read", readArgs)}})
	stdioRefusal(t, f, err, dpop.CheckCall)
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}})
	stdioRefusal(t, f, err, dpop.CheckMissing)
}

// sendHeaders posts body to the edge with exactly the headers h (besides
// Content-Type and Accept).
func sendHeaders(t *testing.T, url, body string, h http.Header) (int, http.Header, rpcAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+Path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a rpcAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("answer %d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header, a
}

// A presentation wrong in form reaches the kernel as a refused proof: a
// 401 with the DPoP challenge naming the check, and the call's deny
// receipt, reason "dpop missing_proof: ..." or "dpop malformed: ...". A
// call's own tool proof does not mend it.
func TestMalformedPresentationHTTP(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	proof := func() string { return dpoptest.Proof(t, agent, http.MethodPost, f.url+Path) }
	for _, c := range dpoptest.WrongForms(l.Agent, l.Helper, proof) {
		t.Run(c.Name, func(t *testing.T) {
			for i, body := range []string{
				callBody(1, "read", readArgs),
				proofCallBody(1, "read", readArgs, toolProofOf(t, agent, "read", readArgs)),
			} {
				status, h, a := sendHeaders(t, f.url, body, c.Header())
				d := refused401(t, status, h, a, c.Check)
				if len(d.Receipts) != 1 {
					t.Fatalf("call %d: receipts %+v", i, d)
				}
				denyReceipt(t, f, d.Receipts[0].ReceiptRef, c.Check)
			}
		})
	}
}

// In simulation nothing is decided, so a call's own tool proof is checked
// when it is spent: one for another call is refused.
func TestSimulatedCallProof(t *testing.T) {
	f := start(t, WithSimulation(true))
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	bearer := map[string]string{"Authorization": "Bearer " + l.Agent}
	status, h, a := post(t, f.url, "", proofCallBody(1, "read", readArgs, toolProofOf(t, agent, "echo", readArgs)), bearer)
	refused401(t, status, h, a, dpop.CheckCall)
	status, _, a = post(t, f.url, "", proofCallBody(2, "read", readArgs, toolProofOf(t, agent, "read", readArgs)), bearer)
	if status != http.StatusOK || a.Error != nil {
		t.Fatalf("the simulated call with its proof: %d %+v", status, a.Error)
	}
}

// An unreachable replay state is a server condition: a JSON-RPC internal
// error, over HTTP a 503 with Retry-After and no challenge, the call's
// receipt kept; over stdio the same error. A bearer token that needs no
// proof still works.
func TestProofStateUnavailable(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	cs := stdioSession(t, f, l.Agent)
	natstest.BreakProofState(t, f.js)
	stateError := func(t *testing.T, code int64, data json.RawMessage) Refused {
		t.Helper()
		var d Refused
		if err := json.Unmarshal(data, &d); code != codeInternal || err != nil || d.DPoPCheck != string(dpop.CheckState) {
			t.Fatalf("error %d %s, want an internal error naming state_unavailable", code, data)
		}
		return d
	}
	for _, c := range []struct {
		name string
		body string
		h    func() map[string]string
	}{
		{"list with a DPoP proof", listBody, func() map[string]string { return dpopHeaders(t, agent, l.Agent, f.url) }},
		{"call with a DPoP proof", callBody(1, "read", readArgs), func() map[string]string { return dpopHeaders(t, agent, l.Agent, f.url) }},
		{"call with a tool proof", proofCallBody(1, "read", readArgs, toolProofOf(t, agent, "read", readArgs)),
			func() map[string]string { return map[string]string{"Authorization": "Bearer " + l.Agent} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, h, a := post(t, f.url, "", c.body, c.h())
			if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || h.Get("WWW-Authenticate") != "" || a.Error == nil {
				t.Fatalf("%d %v %+v", status, h, a.Error)
			}
			d := stateError(t, a.Error.Code, a.Error.Data)
			if c.body != listBody {
				if len(d.Receipts) != 1 {
					t.Fatalf("receipts %+v", d)
				}
				denyReceipt(t, f, d.Receipts[0].ReceiptRef, dpop.CheckState)
			}
		})
	}
	_, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"},
		Meta: sdk.Meta{MetaDPoPProof: json.RawMessage(toolProofOf(t, agent, "read", readArgs))}})
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Fatalf("stdio: %v", err)
	}
	denyReceipt(t, f, stateError(t, werr.Code, werr.Data).Receipts[0].ReceiptRef, dpop.CheckState)

	status, _, a := post(t, f.url, "", callBody(2, "read", readArgs), map[string]string{"Authorization": "Bearer " + l.Helper})
	allowedCall(t, f, status, a, dpop.MethodBearer, "")
}

// A tool proof is spent only by the call it proves: sent first with other
// arguments (refused wrong_call), then for a tool the server does not
// expose, it is still good for its own call, once.
func TestProofNotSpentByAnotherCall(t *testing.T) {
	f := start(t)
	l := delegated(t)
	ctx := context.Background()
	cs := stdioSession(t, f, l.Agent)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	p, err := agent.ToolProof("files-srv", "read", json.RawMessage(readArgs))
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/etc/shadow"}, Meta: sdk.Meta{MetaDPoPProof: p}})
	stdioRefusal(t, f, err, dpop.CheckCall)
	if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "no-such-tool", Arguments: map[string]any{"path": "/tmp/x"}, Meta: sdk.Meta{MetaDPoPProof: p}}); err == nil && !res.IsError {
		t.Fatalf("a call to a tool the server does not expose: %+v", res)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}, Meta: sdk.Meta{MetaDPoPProof: p}})
	if err != nil || res.IsError {
		t.Fatalf("the proof's own call after the refusals: %v %+v", err, res)
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}, Meta: sdk.Meta{MetaDPoPProof: p}})
	stdioRefusal(t, f, err, dpop.CheckReplayed)
}
