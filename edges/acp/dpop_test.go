package acp

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var helperKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, 32))

// delegated issues the agent acp-srv/* with invoke and delegate, and has
// the agent delegate read_file (invoke only) to the helper.
func delegated(t testing.TB) *dpoptest.Chain {
	t.Helper()
	return dpoptest.NewChain(t, dpoptest.Spec{Issuer: issuerKey, AgentKey: agentKey, HelperKey: helperKey,
		Agent: []schemas.ToolGrant{{ServerID: srvID, ToolName: "*",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}},
		Helper: []schemas.ToolGrant{grant("read_file")}})
}

// toolProof is s's tool proof for acp-srv/tool with args.
func toolProof(t testing.TB, s *dpop.Signer, tool, args string) *dpop.ToolProof {
	t.Helper()
	var raw json.RawMessage
	if args != "" {
		raw = json.RawMessage(args)
	}
	p, err := s.ToolProof(srvID, tool, raw)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readParams are the params of a tool/invoke of read_file on path, with
// meta as _meta.
func readParams(path string, meta map[string]any) map[string]any {
	p := map[string]any{"capabilityId": "read_file", "arguments": map[string]any{"path": path}}
	if meta != nil {
		p["_meta"] = meta
	}
	return p
}

func withProof(p *dpop.ToolProof) map[string]any { return map[string]any{MetaDPoPProof: p} }

// rpcBody is one JSON-RPC request.
func rpcBody(t testing.TB, id any, method string, params any) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func agentJKT() string { return dpoptest.JKT(agentKey) }

// refusal checks an answer refusing a proof for check and returns its data.
func refusal(t testing.TB, a answer, check dpop.Check) Refused {
	t.Helper()
	var d Refused
	if a.Error == nil || a.Error.Code != CodeUnauthorized || json.Unmarshal(a.Error.Data, &d) != nil || d.Guard != kernel.StepDPoP ||
		d.DPoPCheck != string(check) || !strings.Contains(a.Error.Message, "dpop "+string(check)+":") {
		t.Fatalf("answer %+v, want a refusal naming %s", a.Error, check)
	}
	return d
}

// denyReceipt checks that a refused call's receipt is a deny at the proof
// step naming check (on the decision, or on the refused outcome of a
// proof found replayed after the decision was written).
func denyReceipt(t testing.TB, f *fixture, rid string, check dpop.Check) {
	t.Helper()
	dpoptest.WantDeny(t, natstest.Decisions(t, f.js), natstest.Outcomes(t, f.js), rid, kernel.StepDPoP, check)
}

// invoked checks an invoke that ran and the binding its receipt records.
func invoked(t testing.TB, f *fixture, a answer, method, jkt string) {
	t.Helper()
	var inv struct {
		ReceiptID string `json:"receiptId"`
	}
	ok(t, a, &inv)
	ev := natstest.Decisions(t, f.js)[inv.ReceiptID]
	if b := dpoptest.Binding(t, ev); ev.Decision.Verdict != schemas.VerdictAllow || b["method"] != method || b["jkt"] != jkt {
		t.Fatalf("receipt %+v binding %v, want %s %s", ev.Decision, b, method, jkt)
	}
}

// postAnswer sends body with headers h and reads its single answer.
func (f *fixture) postAnswer(t testing.TB, body string, h map[string]string) (int, http.Header, answer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+Path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("answer: %v", err)
	}
	return resp.StatusCode, resp.Header, a
}

// The rebuilt-parent attack over HTTP: refused as a bearer token
// (missing_proof), with a DPoP proof or a tool proof by the helper's key
// (wrong_key): a 401 with the DPoP challenge, the invoke's deny receipt
// naming the check. The agent's own proofs work (binding dpop, or
// chio_dpop_v1 for a tool proof in _meta); the helper's leaf token works
// as a bearer token.
func TestRebuiltParentRefusedHTTP(t *testing.T) {
	f := start(t)
	l := delegated(t)
	helper, agent := dpoptest.Signer(t, helperKey, l.Helper), dpoptest.Signer(t, agentKey, l.Agent)
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
	withDPoP := func(s *dpop.Signer, tok string) map[string]string {
		p := dpoptest.Proof(t, s, http.MethodPost, f.url+Path)
		return map[string]string{"Authorization": "DPoP " + tok, "DPoP": p}
	}
	for _, c := range []struct {
		name  string
		h     map[string]string
		meta  map[string]any
		check dpop.Check
	}{
		{"as bearer", bearer(l.Rebuilt), nil, dpop.CheckMissing},
		{"with the helper's DPoP proof", withDPoP(helper, l.Rebuilt), nil, dpop.CheckKey},
		{"with the helper's tool proof", bearer(l.Rebuilt), withProof(toolProof(t, helper, "read_file", `{"path":"/a"}`)), dpop.CheckKey},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, h, a := f.postAnswer(t, rpcBody(t, 1, MethodInvoke, readParams("/a", c.meta)), c.h)
			if ch := h.Values("WWW-Authenticate"); status != http.StatusUnauthorized || len(ch) != 1 || ch[0] != dpop.Challenge(c.check) {
				t.Fatalf("%d %q", status, ch)
			}
			denyReceipt(t, f, refusal(t, a, c.check).ReceiptID, c.check)
		})
	}
	status, _, a := f.postAnswer(t, rpcBody(t, 2, MethodListCapabilities, nil), bearer(l.Rebuilt))
	if refusal(t, a, dpop.CheckMissing); status != http.StatusUnauthorized {
		t.Fatalf("list: %d", status)
	}

	_, _, a = f.postAnswer(t, rpcBody(t, 3, MethodInvoke, readParams("/a", nil)), withDPoP(agent, l.Agent))
	invoked(t, f, a, dpop.MethodDPoP, agentJKT())
	_, _, a = f.postAnswer(t, rpcBody(t, 4, MethodInvoke, readParams("/a", withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`)))), bearer(l.Agent))
	invoked(t, f, a, dpop.MethodToolProof, agentJKT())
	// The capability in _meta, its tool proof beside it, no header at all.
	_, _, a = f.postAnswer(t, rpcBody(t, 5, MethodInvoke, readParams("/a", map[string]any{"chioCapability": l.Agent,
		MetaDPoPProof: toolProof(t, agent, "read_file", `{"path":"/a"}`)})), nil)
	invoked(t, f, a, dpop.MethodToolProof, agentJKT())
	_, _, a = f.postAnswer(t, rpcBody(t, 6, MethodInvoke, readParams("/a", nil)), bearer(l.Helper))
	invoked(t, f, a, dpop.MethodBearer, "")

	// A batch is one request, one proof: both calls under it.
	p := dpoptest.Proof(t, agent, http.MethodPost, f.url+Path)
	batch := "[" + rpcBody(t, 7, MethodInvoke, readParams("/a", nil)) + "," + rpcBody(t, 8, MethodInvoke, readParams("/b", nil)) + "]"
	status, raw := f.post(t, "", batch, map[string]string{"Authorization": "DPoP " + l.Agent, "DPoP": p})
	var as []answer
	if err := json.Unmarshal(raw, &as); status != http.StatusOK || err != nil || len(as) != 2 {
		t.Fatalf("batch: %d %s", status, raw)
	}
	for _, a := range as {
		invoked(t, f, a, dpop.MethodDPoP, agentJKT())
	}
}

// Over stdio a tool proof in _meta is the only proof. A session under the
// helper's rebuilt parent runs nothing, with or without a tool proof of
// the helper's; a session under the agent's token lists its capabilities
// (the process holds its token) and runs a call only with a tool proof,
// once, for the call it names, a deferred task's resume included.
func TestStdioToolProofs(t *testing.T) {
	f := start(t)
	l := delegated(t)
	c := serveStdio(t, f, l.Rebuilt)
	denyReceipt(t, f, refusal(t, c.call(t, MethodInvoke, readParams("/a", nil)), dpop.CheckMissing).ReceiptID, dpop.CheckMissing)
	helperProof := toolProof(t, dpoptest.Signer(t, helperKey, l.Helper), "read_file", `{"path":"/a"}`)
	denyReceipt(t, f, refusal(t, c.call(t, MethodInvoke, readParams("/a", withProof(helperProof))), dpop.CheckKey).ReceiptID, dpop.CheckKey)

	c = serveStdio(t, f, l.Agent)
	var list struct{ Capabilities []Capability }
	ok(t, c.call(t, MethodListCapabilities, nil), &list)
	if len(list.Capabilities) == 0 {
		t.Fatal("nothing listed")
	}
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	p := toolProof(t, agent, "read_file", `{"path":"/a"}`)
	invoked(t, f, c.call(t, MethodInvoke, readParams("/a", withProof(p))), dpop.MethodToolProof, agentJKT())
	for _, tc := range []struct {
		name   string
		params map[string]any
		check  dpop.Check
	}{
		{"replayed", readParams("/a", withProof(p)), dpop.CheckReplayed},
		{"other arguments", readParams("/etc/shadow", withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`))), dpop.CheckCall},
		{"another tool", readParams("/a", withProof(toolProof(t, agent, "search", `{"path":"/a"}`))), dpop.CheckCall},
		{"none", readParams("/a", nil), dpop.CheckMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			denyReceipt(t, f, refusal(t, c.call(t, MethodInvoke, tc.params), tc.check).ReceiptID, tc.check)
		})
	}

	// A deferred task: stored under a proof bound to the tool/stream
	// request, run by a resume that proves its call.
	streamParams := map[string]any{"capabilityId": "read_file"}
	var task taskResult
	ok(t, c.call(t, MethodStream, requestProofParams(t, agent, MethodStream, streamParams)), &task)
	ok(t, c.call(t, MethodResume, map[string]any{"taskId": task.Task.ID, "_meta": withProof(toolProof(t, agent, "read_file", ""))}), &task)
	ev := natstest.Decisions(t, f.js)[task.Task.ReceiptID]
	if b := dpoptest.Binding(t, ev); task.Task.State != TaskCompleted || b["method"] != dpop.MethodToolProof {
		t.Fatalf("resume: %+v binding %v", task.Task, b)
	}
	ok(t, c.call(t, MethodStream, requestProofParams(t, agent, MethodStream, streamParams)), &task)
	a := c.call(t, MethodResume, map[string]any{"taskId": task.Task.ID})
	denyReceipt(t, f, refusal(t, a, dpop.CheckMissing).ReceiptID, dpop.CheckMissing)
}

// requestProofParams are params with a proof by s bound to the request
// method(params) in their _meta (RequestProof).
func requestProofParams(t testing.TB, s *dpop.Signer, method string, params map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	p, err := RequestProof(s, method, raw)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for k, v := range params {
		out[k] = v
	}
	meta := map[string]any{MetaDPoPProof: p}
	if m, ok := params["_meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
		meta[MetaDPoPProof] = p
	}
	out["_meta"] = meta
	return out
}

// withMeta is params with _meta set to meta.
func withMeta(params map[string]any, meta map[string]any) map[string]any {
	out := map[string]any{"_meta": meta}
	for k, v := range params {
		out[k] = v
	}
	return out
}

// taskState is the state of task id as the bucket holds it.
func (f *fixture) taskState(t testing.TB, id string) TaskState {
	t.Helper()
	kve, err := f.edge.tasks.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var rec taskRecord
	if err := json.Unmarshal(kve.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Task.State
}

// TestRequestArguments: what a proof for a request that runs no tool
// hashes is the params without _meta, in JCS form, as a client computes
// it from what it sends.
func TestRequestArguments(t *testing.T) {
	for _, c := range []struct{ params, want string }{
		{``, `{}`},
		{`null`, `{}`},
		{`{"taskId":"t1","_meta":{"chioDpopProof":{"x":1}}}`, `{"taskId":"t1"}`},
		{`{ "b" : 2, "a" : {"y":1,"x":[1,2]}, "_meta":{} }`, `{"a":{"x":[1,2],"y":1},"b":2}`},
		{`{"_Meta":{"k":1}}`, `{"_Meta":{"k":1}}`},
	} {
		got, err := RequestArguments(json.RawMessage(c.params))
		if err != nil {
			t.Fatalf("%s: %v", c.params, err)
		}
		h, _ := dpop.ActionHash(got)
		want, _ := dpop.ActionHash(json.RawMessage(c.want))
		if h != want {
			t.Fatalf("%s: hashed %s, want %s", c.params, got, c.want)
		}
	}
	if _, err := RequestArguments(json.RawMessage(`[1]`)); err == nil {
		t.Fatal("an array accepted as params")
	}
	if _, err := RequestArguments(json.RawMessage(`{"taskId":"a","taskId":"b"}`)); err == nil {
		t.Fatal("a repeated member accepted: which copy is hashed would decide which request the proof covers")
	}
	// The hash, by hand: SHA-256 hex of the JCS form.
	s := dpoptest.Signer(t, agentKey, wildcard(t))
	p, err := RequestProof(s, "_chio/tool/cancel", json.RawMessage(`{"taskId":"t1","_meta":{"chioCapability":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.ToolServer != RequestServer || p.ToolName != "_chio/tool/cancel" || p.ActionHash != schemas.SHA256Hex([]byte(`{"taskId":"t1"}`)) {
		t.Fatalf("proof %+v", p)
	}
}

// Over stdio, a call that stores, resumes or cancels a task needs the
// proof its token needs, bound to that operation: a tool proof for a
// tool call is refused (wrong_call) for tool/cancel and tool/stream, a
// proof bound to the request itself (RequestProof) is honoured. The
// lists that only show what the token states stay under the session's
// token. The rebuilt parent cannot cancel or stream the agent's tasks.
func TestStdioRequestProofs(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	c := serveStdio(t, f, l.Agent)
	ok(t, c.call(t, MethodListCapabilities, nil), nil)
	ok(t, c.call(t, MethodRequestPermission, map[string]any{"capabilityId": "read_file"}), nil)

	streamParams := map[string]any{"capabilityId": "read_file", "arguments": map[string]any{"path": "/a"}}
	// No proof: refused, the stream with its deny receipt.
	a := c.call(t, MethodStream, streamParams)
	denyReceipt(t, f, refusal(t, a, dpop.CheckMissing).ReceiptID, dpop.CheckMissing)
	// A proof for the tool call it would defer is not a proof for the stream.
	a = c.call(t, MethodStream, withMeta(streamParams, withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`))))
	denyReceipt(t, f, refusal(t, a, dpop.CheckCall).ReceiptID, dpop.CheckCall)
	var task taskResult
	ok(t, c.call(t, MethodStream, requestProofParams(t, agent, MethodStream, streamParams)), &task)
	id := task.Task.ID
	cancelParams := map[string]any{"taskId": id}

	for _, tc := range []struct {
		name   string
		method string
		params map[string]any
		check  dpop.Check
	}{
		{"no proof", MethodCancel, cancelParams, dpop.CheckMissing},
		{"a tool call's proof", MethodCancel, withMeta(cancelParams, withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`))), dpop.CheckCall},
		{"a proof for the stream", MethodCancel, withMeta(cancelParams, requestProofParams(t, agent, MethodStream, streamParams)["_meta"].(map[string]any)), dpop.CheckCall},
		{"a proof for another task", MethodCancel, withMeta(cancelParams, requestProofParams(t, agent, MethodCancel, map[string]any{"taskId": "another"})["_meta"].(map[string]any)), dpop.CheckCall},
		{"a proof for the other name", ExtensionPrefix + MethodCancel, requestProofParams(t, agent, MethodCancel, cancelParams), dpop.CheckCall},
		{"a proof for tool/resume", MethodResume, requestProofParams(t, agent, MethodResume, cancelParams), dpop.CheckCall},
		{"a proof for the cancel, on a resume", MethodResume, requestProofParams(t, agent, MethodCancel, cancelParams), dpop.CheckCall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refusal(t, c.call(t, tc.method, tc.params), tc.check)
			if s := f.taskState(t, id); s != TaskPending {
				t.Fatalf("the task is %s", s)
			}
		})
	}
	// A read-only method with a tool proof: it must name that request.
	perm := map[string]any{"capabilityId": "read_file"}
	refusal(t, c.call(t, MethodRequestPermission, withMeta(perm, withProof(toolProof(t, agent, "read_file", `{}`)))), dpop.CheckCall)
	ok(t, c.call(t, MethodRequestPermission, requestProofParams(t, agent, MethodRequestPermission, perm)), nil)

	// The rebuilt parent, in a session of its own, cannot cancel nor
	// stream the agent's tasks, with or without the helper's proof.
	r := serveStdio(t, f, l.Rebuilt)
	helper := dpoptest.Signer(t, helperKey, l.Helper)
	refusal(t, r.call(t, MethodCancel, cancelParams), dpop.CheckMissing)
	refusal(t, r.call(t, MethodCancel, requestProofParams(t, helper, MethodCancel, cancelParams)), dpop.CheckKey)
	denyReceipt(t, f, refusal(t, r.call(t, MethodStream, streamParams), dpop.CheckMissing).ReceiptID, dpop.CheckMissing)
	denyReceipt(t, f, refusal(t, r.call(t, MethodResume, cancelParams), dpop.CheckMissing).ReceiptID, dpop.CheckMissing)
	if s := f.taskState(t, id); s != TaskPending {
		t.Fatalf("the task is %s", s)
	}

	// The agent's proof bound to this cancel, under either name.
	ok(t, c.call(t, MethodCancel, requestProofParams(t, agent, MethodCancel, cancelParams)), &task)
	if task.Task.State != TaskCanceled {
		t.Fatalf("cancel: %+v", task.Task)
	}
	ok(t, c.call(t, ExtensionPrefix+MethodCancel, requestProofParams(t, agent, ExtensionPrefix+MethodCancel, cancelParams)), &task)

	// A resume answers a task that ran only to a proof of its call.
	ok(t, c.call(t, MethodStream, requestProofParams(t, agent, MethodStream, streamParams)), &task)
	resume := map[string]any{"taskId": task.Task.ID}
	ok(t, c.call(t, MethodResume, withMeta(resume, withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`)))), &task)
	if task.Task.State != TaskCompleted {
		t.Fatalf("resume: %+v", task.Task)
	}
	a = c.call(t, MethodResume, withMeta(resume, withProof(toolProof(t, agent, "search", `{"path":"/a"}`))))
	if d := refusal(t, a, dpop.CheckCall); a.Result != nil || d.ReceiptID == "" {
		t.Fatalf("a stored outcome answered to another call's proof: %s %+v", a.Result, d)
	}
	denyReceipt(t, f, refusal(t, a, dpop.CheckCall).ReceiptID, dpop.CheckCall)
	ok(t, c.call(t, MethodResume, withMeta(resume, withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`)))), &task)
}

// Over HTTP, a tool proof in _meta stands for the request's proof for
// that call, so it too must name the operation: a tool call's proof is
// refused for tool/cancel (401, wrong_call), a proof bound to the cancel
// is honoured, as is the request's own DPoP proof.
func TestHTTPRequestProofs(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	bearer := map[string]string{"Authorization": "Bearer " + l.Agent}
	dpopFor := func() map[string]string {
		p := dpoptest.Proof(t, agent, http.MethodPost, f.url+Path)
		return map[string]string{"Authorization": "DPoP " + l.Agent, "DPoP": p}
	}
	streamParams := map[string]any{"capabilityId": "read_file", "arguments": map[string]any{"path": "/a"}}
	_, _, a := f.postAnswer(t, rpcBody(t, 1, MethodStream, streamParams), dpopFor())
	var task taskResult
	ok(t, a, &task)
	cancelParams := map[string]any{"taskId": task.Task.ID}

	status, h, a := f.postAnswer(t, rpcBody(t, 2, MethodCancel, withMeta(cancelParams, withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`)))), bearer)
	if ch := h.Values("WWW-Authenticate"); status != http.StatusUnauthorized || len(ch) != 1 || ch[0] != dpop.Challenge(dpop.CheckCall) {
		t.Fatalf("%d %q", status, ch)
	}
	refusal(t, a, dpop.CheckCall)
	status, _, a = f.postAnswer(t, rpcBody(t, 3, MethodStream, withMeta(streamParams, withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`)))), bearer)
	if status != http.StatusUnauthorized {
		t.Fatalf("stream with a tool call's proof: %d", status)
	}
	denyReceipt(t, f, refusal(t, a, dpop.CheckCall).ReceiptID, dpop.CheckCall)
	if s := f.taskState(t, task.Task.ID); s != TaskPending {
		t.Fatalf("the task is %s", s)
	}
	_, _, a = f.postAnswer(t, rpcBody(t, 4, MethodCancel, requestProofParams(t, agent, MethodCancel, cancelParams)), bearer)
	if ok(t, a, &task); task.Task.State != TaskCanceled {
		t.Fatalf("cancel: %+v", task.Task)
	}
	// The request's DPoP proof binds the request: no _meta proof needed.
	_, _, a = f.postAnswer(t, rpcBody(t, 5, MethodStream, streamParams), dpopFor())
	ok(t, a, &task)
	_, _, a = f.postAnswer(t, rpcBody(t, 6, MethodCancel, map[string]any{"taskId": task.Task.ID}), dpopFor())
	if ok(t, a, &task); task.Task.State != TaskCanceled {
		t.Fatalf("cancel: %+v", task.Task)
	}
}

// A presentation wrong in form reaches the kernel as a refused proof: a
// 401 with the DPoP challenge, and a tool/invoke's or tool/stream's deny
// receipt naming the check. A call's own tool proof does not mend it.
func TestMalformedPresentation(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	proof := func() string { return dpoptest.Proof(t, agent, http.MethodPost, f.url+Path) }
	send := func(t *testing.T, body string, h http.Header) (int, http.Header, answer) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, f.url+Path, strings.NewReader(body))
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
		var a answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, a
	}
	for _, c := range dpoptest.WrongForms(l.Agent, l.Helper, proof) {
		t.Run(c.Name, func(t *testing.T) {
			for i, body := range []string{
				rpcBody(t, 1, MethodInvoke, readParams("/a", nil)),
				rpcBody(t, 2, MethodStream, readParams("/a", nil)),
				rpcBody(t, 3, MethodInvoke, readParams("/a", withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`)))),
			} {
				status, h, a := send(t, body, c.Header())
				if ch := h.Values("WWW-Authenticate"); status != http.StatusUnauthorized || len(ch) != 1 || ch[0] != dpop.Challenge(c.Check) {
					t.Fatalf("call %d: %d %q", i, status, ch)
				}
				d := refusal(t, a, c.Check)
				denyReceipt(t, f, d.ReceiptID, c.Check)
			}
		})
	}
}

// An unreachable replay state is a server condition: a 503 with
// Retry-After and the surface's internal error code, the call's receipt
// kept (a deny at the proof step naming state_unavailable), over HTTP and
// over stdio. A bearer token that needs no proof still works.
func TestProofStateUnavailable(t *testing.T) {
	f := start(t)
	l := delegated(t)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	c := serveStdio(t, f, l.Agent)
	natstest.BreakProofState(t, f.js)
	stateRefusal := func(t *testing.T, a answer) Refused {
		t.Helper()
		var d Refused
		if a.Error == nil || a.Error.Code != CodeInternal || json.Unmarshal(a.Error.Data, &d) != nil || d.DPoPCheck != string(dpop.CheckState) {
			t.Fatalf("answer %+v, want an internal error naming state_unavailable", a.Error)
		}
		return d
	}
	dpopFor := func() map[string]string {
		p := dpoptest.Proof(t, agent, http.MethodPost, f.url+Path)
		return map[string]string{"Authorization": "DPoP " + l.Agent, "DPoP": p}
	}
	for _, tc := range []struct {
		name, method string
		params       any
		receipt      bool
	}{
		{"invoke", MethodInvoke, readParams("/a", nil), true},
		{"list", MethodListCapabilities, nil, false},
	} {
		t.Run("HTTP "+tc.name, func(t *testing.T) {
			status, h, a := f.postAnswer(t, rpcBody(t, 1, tc.method, tc.params), dpopFor())
			if status != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || h.Get("WWW-Authenticate") != "" {
				t.Fatalf("%d %v", status, h)
			}
			if d := stateRefusal(t, a); tc.receipt {
				denyReceipt(t, f, d.ReceiptID, dpop.CheckState)
			}
		})
	}
	t.Run("stdio invoke", func(t *testing.T) {
		a := c.call(t, MethodInvoke, readParams("/a", withProof(toolProof(t, agent, "read_file", `{"path":"/a"}`))))
		denyReceipt(t, f, stateRefusal(t, a).ReceiptID, dpop.CheckState)
	})
	_, _, a := f.postAnswer(t, rpcBody(t, 2, MethodInvoke, readParams("/a", nil)), map[string]string{"Authorization": "Bearer " + l.Helper})
	invoked(t, f, a, dpop.MethodBearer, "")
}

// A tool proof sent with other arguments is refused wrong_call and not
// spent: the call it proves then runs, once.
func TestProofNotSpentByAnotherCall(t *testing.T) {
	f := start(t)
	l := delegated(t)
	c := serveStdio(t, f, l.Agent)
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	p := toolProof(t, agent, "read_file", `{"path":"/a"}`)
	denyReceipt(t, f, refusal(t, c.call(t, MethodInvoke, readParams("/etc/shadow", withProof(p))), dpop.CheckCall).ReceiptID, dpop.CheckCall)
	invoked(t, f, c.call(t, MethodInvoke, readParams("/a", withProof(p))), dpop.MethodToolProof, agentJKT())
	denyReceipt(t, f, refusal(t, c.call(t, MethodInvoke, readParams("/a", withProof(p))), dpop.CheckReplayed).ReceiptID, dpop.CheckReplayed)
}
