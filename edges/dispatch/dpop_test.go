package dispatch

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// chain is the setting of the rebuilt-parent attack (the helper's grant
// spent after one call), with agent2, a second token for the agent's key.
type chain struct {
	*dpoptest.Chain
	agent2 string
}

func newChain(t *testing.T) chain {
	t.Helper()
	issuer := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	one := uint32(1)
	ch := dpoptest.NewChain(t, dpoptest.Spec{Issuer: issuer,
		AgentKey:  ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32)),
		HelperKey: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{4}, 32)),
		Agent: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}},
		Helper: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "hello_task",
			Operations: []schemas.Operation{schemas.OpInvoke}, MaxInvocations: &one}}})
	body2 := ch.AgentToken.CapabilityBody
	body2.ID = "cap-agent-2"
	agent2, err := schemas.IssueCapability(issuer, body2)
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(agent2)
	if err != nil {
		t.Fatal(err)
	}
	return chain{Chain: ch, agent2: h}
}

func httpProof(t *testing.T, key ed25519.PrivateKey, token, method, url string) *kernel.Proof {
	t.Helper()
	return &kernel.Proof{DPoP: dpoptest.Proof(t, dpoptest.Signer(t, key, token), method, url), Method: method, URL: url}
}

// TestRebuiltParent is the attack: a helper rebuilds its parent's token
// from its own delegation chain and presents it. Without proof, or with a
// proof by its own key, the call is denied at the dpop step with a deny
// decision; the agent with its own key is allowed, its binding recorded.
func TestRebuiltParent(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	if ch.Rebuilt != ch.Agent {
		t.Fatal("the rebuilt ancestor should be the agent's token byte for byte: that is the attack")
	}
	const url = "http://edge.example/a2a"
	call := func(token string, p *kernel.Proof) *Result {
		res, err := f.d.Do(context.Background(), Call{Token: token, Proof: p, ServerID: "hello-a2a-srv", ToolName: "hello_task",
			Arguments: json.RawMessage(`{"text":"world"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cases := []struct {
		name  string
		token string
		proof func() *kernel.Proof
		allow bool
		check dpop.Check
		bind  string
	}{
		{"rebuilt parent as bearer", ch.Rebuilt, func() *kernel.Proof { return nil }, false, dpop.CheckMissing, ""},
		{"rebuilt parent proven by the helper's key", ch.Rebuilt, func() *kernel.Proof {
			return &kernel.Proof{DPoP: dpoptest.ForgedProof(t, ch.HelperKey, ch.Rebuilt, "POST", url), Method: "POST", URL: url}
		}, false, dpop.CheckKey, ""},
		{"the agent's own token as bearer", ch.Agent, func() *kernel.Proof { return nil }, false, dpop.CheckMissing, ""},
		{"the agent, proven", ch.Agent, func() *kernel.Proof { return httpProof(t, ch.AgentKey, ch.Agent, "POST", url) }, true, "", dpop.MethodDPoP},
		{"the helper's leaf token as bearer", ch.Helper, func() *kernel.Proof { return nil }, true, "", dpop.MethodBearer},
		{"the helper's leaf spent", ch.Helper, func() *kernel.Proof { return nil }, false, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runs := f.server.runs.Load()
			res := call(c.token, c.proof())
			d := res.Decision
			if d.Allow != c.allow || d.DPoPCheck() != c.check {
				t.Fatalf("allow=%v guard=%s reason=%s", d.Allow, d.Guard, d.Reason)
			}
			if !c.allow && f.server.runs.Load() != runs {
				t.Fatal("a denied call ran")
			}
			if c.bind != "" && d.Binding.Method != c.bind {
				t.Fatalf("binding %+v", d.Binding)
			}
			if c.bind == dpop.MethodDPoP && d.Binding.Thumbprint != dpoptest.JKT(ch.AgentKey) {
				t.Fatalf("thumbprint %s", d.Binding.Thumbprint)
			}
		})
	}
	// The decision events say who was bound how.
	var dpopBound int
	for _, raw := range f.events(t)[schemas.SubjectDecision] {
		var ev schemas.DecisionEvent
		_ = json.Unmarshal(raw, &ev)
		if bytes.Contains(ev.Metadata, []byte(`"binding":{"jkt":"`+dpoptest.JKT(ch.AgentKey)+`","method":"dpop"}`)) {
			dpopBound++
		}
	}
	if dpopBound != 1 {
		t.Fatalf("%d decision events record the agent's dpop binding, want 1", dpopBound)
	}
}

// TestReplayAcrossReplicas: a proof accepted by one edge replica is
// refused by another on the same JetStream, after its decision was
// written, with a refused outcome (its receipt is a deny by "dpop"), and
// the tool does not run.
func TestReplayAcrossReplicas(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	reg := tools.NewRegistry()
	srv := &countingServer{Server: hello.New()}
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k2, err := kernel.New(ctx, f.js, f.k.Policy(), kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k2.Close)
	d2, err := New(ctx, f.js, k2, reg, "edge-2", 1)
	if err != nil {
		t.Fatal(err)
	}
	const url = "http://edge.example/a2a"
	first := httpProof(t, ch.AgentKey, ch.Agent, "POST", url)
	// The same proof text, as a second request carries it.
	again := &kernel.Proof{DPoP: first.DPoP, Method: first.Method, URL: first.URL}
	call := Call{Token: ch.Agent, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{"text":"x"}`)}

	c1 := call
	c1.Proof = first
	r1, err := f.d.Do(ctx, c1)
	if err != nil || !r1.Decision.Allow || !r1.Ran {
		t.Fatalf("first use refused: %+v %v", r1, err)
	}
	c2 := call
	c2.Proof = again
	r2, err := d2.Do(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Decision.Allow || r2.Ran || r2.Decision.DPoPCheck() != dpop.CheckReplayed || srv.runs.Load() != 0 {
		t.Fatalf("replay on the second replica: allow=%v ran=%v reason=%s runs=%d", r2.Decision.Allow, r2.Ran, r2.Decision.Reason, srv.runs.Load())
	}
	var refused *schemas.OutcomeEvent
	for _, raw := range f.events(t)[schemas.SubjectOutcome] {
		var o schemas.OutcomeEvent
		_ = json.Unmarshal(raw, &o)
		if o.ReceiptID == r2.ReceiptID {
			refused = &o
		}
	}
	if refused == nil || refused.Outcome != schemas.OutcomeRefused || refused.Guard != kernel.StepDPoP ||
		!strings.Contains(refused.Reason, "replayed") || refused.Validate() != nil {
		t.Fatalf("refused outcome %+v", refused)
	}
	// A third use, on the first replica, is refused too.
	c3 := call
	c3.Proof = &kernel.Proof{DPoP: first.DPoP, Method: first.Method, URL: first.URL}
	if r3, err := f.d.Do(ctx, c3); err != nil || r3.Decision.Allow {
		t.Fatalf("third use: %+v %v", r3, err)
	}
}

// TestProofForAnotherRequest: a proof is bound to its request's method and
// URL and to the token.
func TestProofForAnotherRequest(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	p := httpProof(t, ch.AgentKey, ch.Agent, "POST", "http://edge.example/a2a")
	for _, c := range []struct {
		name  string
		p     *kernel.Proof
		token string
		check dpop.Check
	}{
		{"another URL", &kernel.Proof{DPoP: p.DPoP, Method: "POST", URL: "http://edge.example/v1/chat/completions"}, ch.Agent, dpop.CheckURL},
		{"another method", &kernel.Proof{DPoP: p.DPoP, Method: "GET", URL: p.URL}, ch.Agent, dpop.CheckMethod},
		{"another token of the same key", &kernel.Proof{DPoP: p.DPoP, Method: p.Method, URL: p.URL}, ch.agent2, dpop.CheckToken},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := f.d.Do(context.Background(), Call{Token: c.token, Proof: c.p, ServerID: "hello-a2a-srv", ToolName: "hello_task",
				Arguments: json.RawMessage(`{}`)})
			if err != nil || res.Decision.Allow || res.Decision.DPoPCheck() != c.check {
				t.Fatalf("%+v %v", res.Decision, err)
			}
		})
	}
}

// issueFor issues a root token for the agent key of ch with scope.
func issueFor(t *testing.T, key ed25519.PrivateKey, id string, scope schemas.Scope) (*schemas.CapabilityToken, string) {
	t.Helper()
	issuer := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	now := time.Now()
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: id, Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject: schemas.EncodePublicKey(key.Public().(ed25519.PublicKey)), Scope: scope,
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix()),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return tok, h
}

// TestDelegateInAnyGrantNeedsProof: a token that can delegate only
// through a resource or prompt grant is an ancestor all the same, so its
// tool calls need a proof too.
func TestDelegateInAnyGrantNeedsProof(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	tools := []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}
	for _, c := range []struct {
		name  string
		scope schemas.Scope
	}{
		{"resource grant", schemas.Scope{Grants: tools, ResourceGrants: []schemas.ResourceGrant{{URIPattern: "file://*", Operations: []schemas.Operation{schemas.OpRead, schemas.OpDelegate}}}}},
		{"prompt grant", schemas.Scope{Grants: tools, PromptGrants: []schemas.PromptGrant{{PromptName: "*", Operations: []schemas.Operation{schemas.OpGet, schemas.OpDelegate}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent, text := issueFor(t, ch.AgentKey, "cap-"+strings.ReplaceAll(c.name, " ", "-"), c.scope)
			child, err := schemas.Delegate(ch.AgentKey, parent, schemas.CapabilityBody{ID: parent.ID + "-child",
				Subject:  schemas.EncodePublicKey(ch.HelperKey.Public().(ed25519.PublicKey)),
				Scope:    schemas.Scope{ResourceGrants: c.scope.ResourceGrants, PromptGrants: c.scope.PromptGrants},
				IssuedAt: parent.IssuedAt, ExpiresAt: parent.ExpiresAt})
			if err != nil {
				t.Fatal(err)
			}
			rebuilt, _ := schemas.EncodeCapabilityHeader(child.Ancestor(0))
			if rebuilt != text {
				t.Fatal("the rebuilt parent differs from the parent")
			}
			res, err := f.d.Do(context.Background(), Call{Token: rebuilt, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
			if err != nil || res.Decision.Allow || res.Decision.DPoPCheck() != dpop.CheckMissing {
				t.Fatalf("%+v %v", res.Decision, err)
			}
		})
	}
}

// TestReplayDoesNotSpendTheBudget: a replayed proof is refused after its
// call was charged; the charge is given back, so the holder's next
// proven call still runs.
func TestReplayDoesNotSpendTheBudget(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	two := uint32(2)
	_, tok := issueFor(t, ch.AgentKey, "cap-budget", schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*",
		Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}, MaxInvocations: &two}}})
	const url = "http://edge.example/a2a"
	ctx := context.Background()
	do := func(p *kernel.Proof) *kernel.Decision {
		res, err := f.d.Do(ctx, Call{Token: tok, Proof: p, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Decision
	}
	first := httpProof(t, ch.AgentKey, tok, "POST", url)
	if d := do(first); !d.Allow {
		t.Fatalf("first: %s", d.Reason)
	}
	for range 3 {
		if d := do(&kernel.Proof{DPoP: first.DPoP, Method: "POST", URL: url}); d.Allow || d.DPoPCheck() != dpop.CheckReplayed || d.Binding.Method != "" {
			t.Fatalf("replay: allow=%v reason=%s binding=%+v", d.Allow, d.Reason, d.Binding)
		}
	}
	if d := do(httpProof(t, ch.AgentKey, tok, "POST", url)); !d.Allow {
		t.Fatalf("the second proven call was refused: %s", d.Reason)
	}
	if d := do(httpProof(t, ch.AgentKey, tok, "POST", url)); d.Allow || d.Guard != kernel.StepBudget {
		t.Fatalf("a third call: allow=%v %s", d.Allow, d.Reason)
	}
}

// TestProofIsForOneToken: a Proof checked for one token is refused with
// any other, even one of the same key.
func TestProofIsForOneToken(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	p := httpProof(t, ch.AgentKey, ch.Agent, "POST", "http://edge.example/a2a")
	if _, d := f.k.Identify(context.Background(), ch.Agent, p); d != nil {
		t.Fatalf("identify: %s", d.Reason)
	}
	res, err := f.d.Do(context.Background(), Call{Token: ch.agent2, Proof: p, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Decision.Allow || res.Decision.DPoPCheck() != dpop.CheckToken {
		t.Fatalf("%+v %v", res.Decision, err)
	}
}

// TestDeniedCallWithSpentProof: a call a guard denies, presenting a spent
// proof, is denied for the proof (the earlier step), and its receipt
// records no binding.
func TestDeniedCallWithSpentProof(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	const url = "http://edge.example/a2a"
	ctx := context.Background()
	p := httpProof(t, ch.AgentKey, ch.Agent, "POST", url)
	if res, err := f.d.Do(ctx, Call{Token: ch.Agent, Proof: p, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)}); err != nil || !res.Decision.Allow {
		t.Fatalf("first: %+v %v", res, err)
	}
	secret := json.RawMessage(`{"text":"AKIAABCDEFGHIJKLMNOP"}`)
	res, err := f.d.Do(ctx, Call{Token: ch.Agent, Proof: &kernel.Proof{DPoP: p.DPoP, Method: "POST", URL: url}, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: secret})
	if err != nil || res.Decision.Allow || res.Decision.DPoPCheck() != dpop.CheckReplayed {
		t.Fatalf("%+v %v", res.Decision, err)
	}
	for _, raw := range f.events(t)[schemas.SubjectDecision] {
		var ev schemas.DecisionEvent
		_ = json.Unmarshal(raw, &ev)
		if ev.ReceiptID == res.ReceiptID && (ev.Decision.Guard != kernel.StepDPoP || bytes.Contains(ev.Metadata, []byte(`"binding"`))) {
			t.Fatalf("decision event %+v %s", ev.Decision, ev.Metadata)
		}
	}
	// Fresh proof, same secret: the guard denies, and the binding is recorded.
	res, err = f.d.Do(ctx, Call{Token: ch.Agent, Proof: httpProof(t, ch.AgentKey, ch.Agent, "POST", url), ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: secret})
	if err != nil || res.Decision.Allow || res.Decision.Guard == kernel.StepDPoP || res.Decision.Binding.Method != dpop.MethodDPoP {
		t.Fatalf("%+v %v", res.Decision, err)
	}
}

// TestToolProofBoundToARequest: a tool proof presented for a request that
// runs no tool must name that request's operation when the edge says
// what it is.
func TestToolProofBoundToARequest(t *testing.T) {
	f := setup(t)
	ch := newChain(t)
	s := dpoptest.Signer(t, ch.AgentKey, ch.Agent)
	ctx := context.Background()
	forTool, _ := s.ToolProof("hello-a2a-srv", "hello_task", json.RawMessage(`{}`))
	raw, _ := json.Marshal(forTool)
	cancel := &dpop.Call{ToolServer: "acp", ToolName: "tool/cancel", Arguments: json.RawMessage(`{"taskId":"t1"}`)}
	if _, d := f.k.Identify(ctx, ch.Agent, &kernel.Proof{Tool: raw, Request: cancel}); d == nil || d.DPoPCheck() != dpop.CheckCall {
		t.Fatalf("a proof for a tool call accepted for tool/cancel: %+v", d)
	}
	forCancel, _ := s.ToolProof("acp", "tool/cancel", json.RawMessage(`{"taskId":"t1"}`))
	raw, _ = json.Marshal(forCancel)
	if id, d := f.k.Identify(ctx, ch.Agent, &kernel.Proof{Tool: raw, Request: cancel}); d != nil || id.Binding.Method != dpop.MethodToolProof {
		t.Fatalf("a proof for tool/cancel refused: %+v", d)
	}
}
