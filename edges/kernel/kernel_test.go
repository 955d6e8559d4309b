package kernel

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// A fixed clock: tokens are issued relative to it.
var t0 = time.Unix(1_800_000_000, 0)

func key(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func pub(k ed25519.PrivateKey) string { return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey)) }

var (
	issuerKey    = key(1)
	agentKey     = key(2)
	subAgentKey  = key(3)
	strangerKey  = key(9)
	helloGrantOp = []schemas.Operation{schemas.OpInvoke}
)

type env struct {
	ns *natsembed.Server
	js jetstream.JetStream
	nc *nats.Conn
}

func startNATS(t testing.TB) *env {
	t.Helper()
	ns, nc, js := natstest.Start(t)
	return &env{ns: ns, js: js, nc: nc}
}

func testPolicy(t testing.TB, mutate func(*Policy)) *LoadedPolicy {
	t.Helper()
	p := Policy{TrustedIssuers: []string{pub(issuerKey)}}
	if mutate != nil {
		mutate(&p)
	}
	lp, err := NewPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	return lp
}

func newKernel(t testing.TB, e *env, p *LoadedPolicy, opts ...Option) *Kernel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k, err := New(ctx, e.js, p, append([]Option{WithClock(func() time.Time { return t0 })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return k
}

func body(id string, grants ...schemas.ToolGrant) schemas.CapabilityBody {
	return schemas.CapabilityBody{
		ID: id, Issuer: pub(issuerKey), Subject: pub(agentKey), Scope: schemas.Scope{Grants: grants},
		IssuedAt: uint64(t0.Unix()) - 60, ExpiresAt: uint64(t0.Unix()) + 3600,
	}
}

func grant(server, tool string, ops ...schemas.Operation) schemas.ToolGrant {
	if len(ops) == 0 {
		ops = helloGrantOp
	}
	return schemas.ToolGrant{ServerID: server, ToolName: tool, Operations: ops}
}

func issue(t testing.TB, priv ed25519.PrivateKey, b schemas.CapabilityBody) *schemas.CapabilityToken {
	t.Helper()
	b.Issuer = pub(priv)
	tok, err := schemas.IssueCapability(priv, b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func header(t testing.TB, tok *schemas.CapabilityToken) string {
	t.Helper()
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// signRaw signs a body without IssueCapability's checks, to build tokens
// that only the kernel should refuse.
func signRaw(t testing.TB, priv ed25519.PrivateKey, b schemas.CapabilityBody) string {
	t.Helper()
	if b.Schema == "" {
		b.Schema = schemas.CapabilitySchema
	}
	sig, err := schemas.SignCanonical(priv, b)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(schemas.CapabilityToken{CapabilityBody: b, Signature: sig})
	return string(raw)
}

func u32(n uint32) *uint32 { return &n }

func req(token, server, tool, args string) *Request {
	return &Request{Token: token, ServerID: server, ToolName: tool, Arguments: json.RawMessage(args)}
}

func TestValidationSteps(t *testing.T) {
	e := startNATS(t)
	reg := tools.NewRegistry()
	if err := reg.Register(hello.New()); err != nil {
		t.Fatal(err)
	}
	k := newKernel(t, e, testPolicy(t, func(p *Policy) {
		p.Guards.Egress = nil
	}), WithRegistry(reg))

	good := issue(t, issuerKey, body("cap-good", grant("hello-a2a-srv", "hello_task")))
	wild := issue(t, issuerKey, body("cap-wild", grant("hello-a2a-srv", "*")))
	readOnly := issue(t, issuerKey, body("cap-read", grant("hello-a2a-srv", "hello_task", schemas.OpRead)))
	untrusted := issue(t, strangerKey, body("cap-untrusted", grant("hello-a2a-srv", "hello_task")))
	expired := body("cap-expired", grant("hello-a2a-srv", "hello_task"))
	expired.IssuedAt, expired.ExpiresAt = uint64(t0.Unix())-7200, uint64(t0.Unix())
	early := body("cap-early", grant("hello-a2a-srv", "hello_task"))
	early.IssuedAt, early.ExpiresAt = uint64(t0.Unix())+3600, uint64(t0.Unix())+7200
	inSkew := body("cap-skew", grant("hello-a2a-srv", "hello_task"))
	inSkew.IssuedAt = uint64(t0.Unix()) + 10
	tampered := issue(t, issuerKey, body("cap-tampered", grant("hello-a2a-srv", "hello_task")))
	tampered.Scope.Grants[0].ToolName = "*"
	dpop := grant("hello-a2a-srv", "hello_task")
	dpop.DPoPRequired = new(bool)
	*dpop.DPoPRequired = true
	constrained := grant("hello-a2a-srv", "hello_task")
	constrained.Constraints = []schemas.Constraint{{Type: "prefix", Value: json.RawMessage(`{"pointer":"/text","prefix":"hello"}`)}}
	unknownConstraint := grant("hello-a2a-srv", "hello_task")
	unknownConstraint.Constraints = []schemas.Constraint{{Type: "approval_required_above"}}

	cases := []struct {
		name  string
		token string
		tool  string
		args  string
		guard string // "" = allow
	}{
		{"valid token", header(t, good), "hello_task", `{"text":"world"}`, ""},
		{"token as JSON text", mustJSON(t, good), "hello_task", `{}`, ""},
		{"wildcard grant", header(t, wild), "hello_task", `{}`, ""},
		{"unknown tool", header(t, good), "nope", `{}`, StepToolResolution},
		{"garbage token", "%%%not-a-token", "hello_task", `{}`, StepParse},
		{"empty token", "", "hello_task", `{}`, StepParse},
		{"unknown field", strings.Replace(mustJSON(t, good), `"id":`, `"extra":1,"id":`, 1), "hello_task", `{}`, StepParse},
		{"unknown schema", strings.Replace(mustJSON(t, good), schemas.CapabilitySchema, "chio.capability.v9", 1), "hello_task", `{}`, StepParse},
		{"untrusted issuer", header(t, untrusted), "hello_task", `{}`, StepIssuer},
		{"tampered scope", header(t, tampered), "hello_task", `{}`, StepSignature},
		{"expired", header(t, issue(t, issuerKey, expired)), "hello_task", `{}`, StepTime},
		{"not yet valid", header(t, issue(t, issuerKey, early)), "hello_task", `{}`, StepTime},
		{"issued within clock skew", header(t, issue(t, issuerKey, inSkew)), "hello_task", `{}`, ""},
		{"operation not granted", header(t, readOnly), "hello_task", `{}`, StepGrant},
		{"dpop required", header(t, issue(t, issuerKey, body("cap-dpop", dpop))), "hello_task", `{}`, StepDPoP},
		{"constraint holds", header(t, issue(t, issuerKey, body("cap-c1", constrained))), "hello_task", `{"text":"hello there"}`, ""},
		{"constraint fails", header(t, issue(t, issuerKey, body("cap-c2", constrained))), "hello_task", `{"text":"bye"}`, guardConstraint},
		{"unsupported constraint", header(t, issue(t, issuerKey, body("cap-c3", unknownConstraint))), "hello_task", `{}`, guardConstraint},
		{"path traversal", header(t, good), "hello_task", `{"path":"../../etc/passwd"}`, guardPath},
		{"secret in arguments", header(t, good), "hello_task", `{"text":"AKIAABCDEFGHIJKLMNOP"}`, guardSecretLeak},
		{"private egress", header(t, good), "hello_task", `{"url":"http://169.254.169.254/latest"}`, guardEgress},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := k.Decide(context.Background(), req(c.token, "hello-a2a-srv", c.tool, c.args))
			if c.guard == "" {
				if !d.Allow {
					t.Fatalf("denied by %s: %s", d.Guard, d.Reason)
				}
				if d.GrantIndex != 0 || d.PolicyHash != k.Policy().Hash || d.Tool == nil {
					t.Fatalf("allow without grant index, policy hash or tool: %+v", d)
				}
				for _, ev := range d.Evidence {
					if !ev.Verdict {
						t.Fatalf("allow with failed evidence %+v", ev)
					}
				}
				if len(d.Evidence) < 4 {
					t.Fatalf("evidence of every guard expected, got %+v", d.Evidence)
				}
				return
			}
			if d.Allow || d.Guard != c.guard {
				t.Fatalf("want deny by %s, got allow=%v guard=%s reason=%s", c.guard, d.Allow, d.Guard, d.Reason)
			}
			if d.Reason == "" || len(d.Evidence) == 0 || d.Evidence[len(d.Evidence)-1].Verdict || d.Evidence[len(d.Evidence)-1].GuardName != c.guard {
				t.Fatalf("deny must carry a reason and end with the failing step's evidence: %+v", d)
			}
			if v := d.Verdict(); v.Validate() != nil {
				t.Fatalf("verdict %+v does not validate: %v", v, v.Validate())
			}
		})
	}
}

// A governed intent must fit its call, fail closed; a grant with
// governed_intent_required demands one. Each deny names the step.
func TestGovernedIntent(t *testing.T) {
	e := startNATS(t)
	reg := tools.NewRegistry()
	if err := reg.Register(hello.New()); err != nil {
		t.Fatal(err)
	}
	k := newKernel(t, e, testPolicy(t, func(p *Policy) { p.Guards.Egress = nil }), WithRegistry(reg))
	required := grant("hello-a2a-srv", "hello_task")
	required.Constraints = []schemas.Constraint{{Type: ConstraintGovernedIntent}}
	badValue := grant("hello-a2a-srv", "hello_task")
	badValue.Constraints = []schemas.Constraint{{Type: ConstraintGovernedIntent, Value: json.RawMessage(`{"x":1}`)}}
	plain := header(t, issue(t, issuerKey, body("cap-gi-plain", grant("hello-a2a-srv", "hello_task"))))
	needs := header(t, issue(t, issuerKey, body("cap-gi-req", required)))
	bad := header(t, issue(t, issuerKey, body("cap-gi-bad", badValue)))
	intent := func(mut func(*schemas.GovernedIntent)) *schemas.GovernedIntent {
		g := &schemas.GovernedIntent{ID: "intent-1", ServerID: "hello-a2a-srv", ToolName: "hello_task", Purpose: "greet",
			CallChain: &schemas.CallChain{ChainID: "chain-1", ParentRequestID: "req-0", OriginSubject: "a", DelegatorSubject: "a"}}
		if mut != nil {
			mut(g)
		}
		return g
	}
	cases := []struct {
		name   string
		token  string
		intent *schemas.GovernedIntent
		guard  string // "" = allow
		reason string
	}{
		{"no intent, none required", plain, nil, "", ""},
		{"valid intent with call chain", plain, intent(nil), "", ""},
		{"intent required and given", needs, intent(nil), "", ""},
		{"intent required and missing", needs, nil, StepGovernedIntent, "requires a governed intent"},
		{"required constraint with a value", bad, intent(nil), guardConstraint, "takes no value"},
		{"tool mismatch", plain, intent(func(g *schemas.GovernedIntent) { g.ToolName = "other" }), StepGovernedIntent, "names hello-a2a-srv/other"},
		{"server mismatch", plain, intent(func(g *schemas.GovernedIntent) { g.ServerID = "x" }), StepGovernedIntent, "but the call is to"},
		{"empty chain id", plain, intent(func(g *schemas.GovernedIntent) { g.CallChain.ChainID = "" }), StepGovernedIntent, "chain_id"},
		{"empty parent request", plain, intent(func(g *schemas.GovernedIntent) { g.CallChain.ParentRequestID = "" }), StepGovernedIntent, "parent_request_id"},
		{"empty origin", plain, intent(func(g *schemas.GovernedIntent) { g.CallChain.OriginSubject = "" }), StepGovernedIntent, "origin_subject"},
		{"empty delegator", plain, intent(func(g *schemas.GovernedIntent) { g.CallChain.DelegatorSubject = "" }), StepGovernedIntent, "delegator_subject"},
		{"parent is the call itself", plain, intent(func(g *schemas.GovernedIntent) { g.CallChain.ParentRequestID = "req-1" }), StepGovernedIntent, "own request id"},
		{"bad parent receipt id", plain, intent(func(g *schemas.GovernedIntent) { g.CallChain.ParentReceiptID = "../x" }), StepGovernedIntent, "parent_receipt_id"},
		{"empty purpose", plain, intent(func(g *schemas.GovernedIntent) { g.Purpose = "" }), StepGovernedIntent, "purpose"},
		{"bad currency", plain, intent(func(g *schemas.GovernedIntent) { g.MaxAmount = &schemas.MonetaryAmount{Units: 5, Currency: "usd"} }), StepGovernedIntent, "currency"},
		{"commerce without token", plain, intent(func(g *schemas.GovernedIntent) { g.Commerce = &schemas.Commerce{Seller: "s"} }), StepGovernedIntent, "commerce"},
		{"unknown settlement mode", plain, intent(func(g *schemas.GovernedIntent) {
			g.MeteredBilling = &schemas.MeteredBilling{SettlementMode: "later"}
		}), StepGovernedIntent, "settlement_mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := req(c.token, "hello-a2a-srv", "hello_task", `{"text":"x"}`)
			r.RequestID, r.GovernedIntent = "req-1", c.intent
			d := k.Decide(context.Background(), r)
			if c.guard == "" {
				if !d.Allow {
					t.Fatalf("denied by %s: %s", d.Guard, d.Reason)
				}
				if len(d.CapabilityLineage) != 1 || d.CapabilityLineage[0].CapabilityID != d.CapabilityID || len(d.CapabilityLineage[0].Grants) != 1 {
					t.Fatalf("lineage %+v", d.CapabilityLineage)
				}
				return
			}
			if d.Allow || d.Guard != c.guard || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("want deny by %s (%q), got allow=%v guard=%s reason=%s", c.guard, c.reason, d.Allow, d.Guard, d.Reason)
			}
		})
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestDelegation(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	delegable := grant("srv", "*", schemas.OpInvoke, schemas.OpDelegate)
	delegable.MaxInvocations = u32(10)
	root := issue(t, issuerKey, body("root", delegable))

	childBody := func(id string, g schemas.ToolGrant) schemas.CapabilityBody {
		b := body(id, g)
		b.Subject = pub(subAgentKey)
		return b
	}
	narrow := grant("srv", "read_file")
	narrow.MaxInvocations = u32(5)
	child, err := schemas.Delegate(agentKey, root, childBody("child", narrow))
	if err != nil {
		t.Fatal(err)
	}
	if d := k.Decide(context.Background(), req(header(t, child), "srv", "read_file", `{}`)); !d.Allow || d.DelegationDepth != 1 ||
		fmt.Sprint(d.Lineage) != "[root child]" || d.RootIssuer != pub(issuerKey) || d.Issuer != pub(agentKey) {
		t.Fatalf("delegated call: %+v", d)
	}
	if d := k.Decide(context.Background(), req(header(t, child), "srv", "write_file", `{}`)); d.Allow || d.Guard != StepGrant {
		t.Fatalf("child used a tool outside its own scope: %+v", d)
	}

	// A widening child, signed correctly by the delegator, built by hand
	// because Delegate refuses to mint it.
	link, _ := root.Link()
	wide := childBody("wide", grant("srv", "*", schemas.OpInvoke, schemas.OpDelegate))
	wide.Issuer = pub(agentKey)
	wide.DelegationChain = []schemas.DelegationLink{link}
	badLink := link
	badLink.Scope = schemas.Scope{Grants: []schemas.ToolGrant{grant("srv", "*", schemas.OpInvoke, schemas.OpDelegate, schemas.OpRead)}}
	forgedScope := childBody("forged-scope", narrow)
	forgedScope.Issuer = pub(agentKey)
	forgedScope.DelegationChain = []schemas.DelegationLink{badLink}
	rehashed := badLink
	rehashed.ScopeHash, _ = schemas.ScopeHash(rehashed.Scope)
	forgedSig := forgedScope
	forgedSig.ID = "forged-sig"
	forgedSig.DelegationChain = []schemas.DelegationLink{rehashed}
	stranger := childBody("stranger", narrow)
	stranger.Issuer = pub(strangerKey)
	stranger.DelegationChain = []schemas.DelegationLink{link}
	longer := childBody("longer", narrow)
	longer.Issuer = pub(agentKey)
	longer.ExpiresAt = root.ExpiresAt + 1
	longer.DelegationChain = []schemas.DelegationLink{link}
	dropsBudget := childBody("no-budget", grant("srv", "read_file"))
	dropsBudget.Issuer = pub(agentKey)
	dropsBudget.DelegationChain = []schemas.DelegationLink{link}

	for name, tok := range map[string]string{
		"widens operations":             signRaw(t, agentKey, wide),
		"scope does not match its hash": signRaw(t, agentKey, forgedScope),
		"ancestor signature forged":     signRaw(t, agentKey, forgedSig),
		"issued by a non-subject":       signRaw(t, strangerKey, stranger),
		"outlives its parent":           signRaw(t, agentKey, longer),
		"drops the parent's budget":     signRaw(t, agentKey, dropsBudget),
	} {
		t.Run(name, func(t *testing.T) {
			d := k.Decide(context.Background(), req(tok, "srv", "read_file", `{}`))
			if d.Allow || d.Guard != StepDelegation {
				t.Fatalf("want deny by delegation, got allow=%v %s: %s", d.Allow, d.Guard, d.Reason)
			}
		})
	}

	// Revoking the root revokes the child.
	if err := Revoke(context.Background(), e.js, 1, "root", "test", t0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		d := k.Decide(context.Background(), req(header(t, child), "srv", "read_file", `{}`))
		return !d.Allow && d.Guard == StepRevocation && strings.Contains(d.Reason, "ancestor capability root")
	})
}

// waitFor polls until cond holds. The deadline only stops a test that
// would hang: how fast a revocation takes effect is a benchmark's figure,
// not an assertion a loaded CI machine could break.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 15 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRevocationSeenByAnotherReplica(t *testing.T) {
	e := startNATS(t)
	p := testPolicy(t, nil)
	a, b := newKernel(t, e, p), newKernel(t, e, p)
	tok := header(t, issue(t, issuerKey, body("cap-r", grant("srv", "tool"))))
	for _, k := range []*Kernel{a, b} {
		if d := k.Decide(context.Background(), req(tok, "srv", "tool", `{}`)); !d.Allow {
			t.Fatalf("before revocation: %s %s", d.Guard, d.Reason)
		}
	}
	if err := Revoke(context.Background(), e.js, 1, "cap-r", "compromised", t0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return !b.Decide(context.Background(), req(tok, "srv", "tool", `{}`)).Allow })
	// A kernel started after the revocation loads it before serving.
	c := newKernel(t, e, p)
	if d := c.Decide(context.Background(), req(tok, "srv", "tool", `{}`)); d.Allow || d.Guard != StepRevocation {
		t.Fatalf("new replica: %+v", d)
	}
}

func TestBudgetExactAcrossReplicas(t *testing.T) {
	e := startNATS(t)
	p := testPolicy(t, nil)
	kernels := []*Kernel{newKernel(t, e, p), newKernel(t, e, p)}
	g := grant("srv", "tool")
	g.MaxInvocations = u32(50)
	tok := header(t, issue(t, issuerKey, body("cap-budget", g)))
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := kernels[i%2].Decide(context.Background(), req(tok, "srv", "tool", `{}`))
			switch {
			case d.Allow:
				allowed.Add(1)
			case d.Guard == StepBudget && strings.Contains(d.Reason, "max_invocations 50"):
				denied.Add(1)
			default:
				t.Errorf("unexpected deny %s: %s", d.Guard, d.Reason)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 50 || denied.Load() != 350 {
		t.Fatalf("allowed %d, denied %d; want exactly 50 allowed", allowed.Load(), denied.Load())
	}
}

func TestCostBudgets(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	g := grant("srv", "pay")
	g.MaxCostPerInvocation = &schemas.MonetaryAmount{Units: 300, Currency: "USD"}
	g.MaxTotalCost = &schemas.MonetaryAmount{Units: 1000, Currency: "USD"}
	tok := header(t, issue(t, issuerKey, body("cap-cost", g)))
	call := func(cost *schemas.MonetaryAmount) *Decision {
		r := req(tok, "srv", "pay", `{}`)
		r.Cost = cost
		return k.Decide(context.Background(), r)
	}
	usd := func(n uint64) *schemas.MonetaryAmount { return &schemas.MonetaryAmount{Units: n, Currency: "USD"} }
	steps := []struct {
		cost  *schemas.MonetaryAmount
		allow bool
	}{
		{usd(301), false}, // above the per-call cap
		{&schemas.MonetaryAmount{Units: 1, Currency: "EUR"}, false}, // other currency
		{nil, true},       // worst case 300 → 300
		{usd(300), true},  // 600
		{usd(300), true},  // 900
		{usd(200), false}, // 1100 > 1000
		{usd(100), true},  // 1000
		{usd(1), false},
	}
	for i, s := range steps {
		d := call(s.cost)
		if d.Allow != s.allow || (!d.Allow && d.Guard != StepBudget) {
			t.Fatalf("step %d (cost %+v): allow=%v guard=%s reason=%s", i, s.cost, d.Allow, d.Guard, d.Reason)
		}
		if d.Allow && (d.Charged == nil || d.Charged.Currency != "USD") {
			t.Fatalf("step %d: charge not reported: %+v", i, d.Charged)
		}
	}
}

// Children share their parent's budget: delegation cannot multiply it.
func TestDelegatedBudgetsShareTheParent(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	pg := grant("srv", "tool", schemas.OpInvoke, schemas.OpDelegate)
	pg.MaxInvocations = u32(3)
	root := issue(t, issuerKey, body("shared-root", pg))
	var toks []string
	for i := range 2 {
		cg := grant("srv", "tool")
		cg.MaxInvocations = u32(3)
		b := body(fmt.Sprintf("shared-child-%d", i), cg)
		b.Subject = pub(subAgentKey)
		c, err := schemas.Delegate(agentKey, root, b)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, header(t, c))
	}
	allowed := 0
	for i := range 6 {
		if d := k.Decide(context.Background(), req(toks[i%2], "srv", "tool", `{}`)); d.Allow {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("two children of a 3-call parent ran %d calls", allowed)
	}
}

func TestVelocityAcrossReplicas(t *testing.T) {
	e := startNATS(t)
	p := testPolicy(t, func(p *Policy) { p.Guards.Velocity = &VelocityConfig{MaxCalls: 5, WindowSeconds: 60} })
	a, b := newKernel(t, e, p), newKernel(t, e, p)
	tok := header(t, issue(t, issuerKey, body("cap-v", grant("srv", "tool"))))
	allowed := 0
	var last *Decision
	for i := range 8 {
		last = []*Kernel{a, b}[i%2].Decide(context.Background(), req(tok, "srv", "tool", `{}`))
		if last.Allow {
			allowed++
		}
	}
	if allowed != 5 || last.Guard != guardVelocity || !strings.Contains(last.Reason, "velocity_limit_exceeded") {
		t.Fatalf("allowed %d; last %s %s", allowed, last.Guard, last.Reason)
	}
}

func TestNATSDownDenies(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	tok := header(t, issue(t, issuerKey, body("cap-down", grant("srv", "tool"))))
	if d := k.Decide(context.Background(), req(tok, "srv", "tool", `{}`)); !d.Allow {
		t.Fatalf("before: %s", d.Reason)
	}
	e.ns.Stop()
	waitFor(t, func() bool { return !e.nc.IsConnected() })
	d := k.Decide(context.Background(), req(tok, "srv", "tool", `{}`))
	if d.Allow || d.Guard != StepRevocation || !strings.Contains(d.Reason, "fail closed") {
		t.Fatalf("NATS down: %+v", d)
	}
}

// A small cache evicts and re-verifies; it never answers for another token.
func TestTokenCacheBound(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil), WithTokenCacheBytes(2000))
	var toks []string
	for i := range 10 {
		toks = append(toks, header(t, issue(t, issuerKey, body(fmt.Sprintf("cap-cache-%d", i), grant("srv", fmt.Sprintf("tool%d", i))))))
	}
	for round := range 3 {
		for i, tok := range toks {
			d := k.Decide(context.Background(), req(tok, "srv", fmt.Sprintf("tool%d", i), `{}`))
			if !d.Allow || d.CapabilityID != fmt.Sprintf("cap-cache-%d", i) {
				t.Fatalf("round %d token %d: %+v", round, i, d)
			}
			if d := k.Decide(context.Background(), req(tok, "srv", fmt.Sprintf("tool%d", (i+1)%10), `{}`)); d.Allow {
				t.Fatalf("token %d allowed another token's tool", i)
			}
		}
		k.tokens.mu.RLock()
		size := k.tokens.bytes
		k.tokens.mu.RUnlock()
		if size > 2000 {
			t.Fatalf("cache holds %d bytes, bound 2000", size)
		}
	}
}

// Findings of the security review, each a way to an allow that must be a deny.
func TestReviewFindings(t *testing.T) {
	e := startNATS(t)
	p := testPolicy(t, func(p *Policy) { p.Guards.Velocity = &VelocityConfig{MaxCalls: 2, WindowSeconds: 60} })
	k := newKernel(t, e, p)
	noVelocity := newKernel(t, e, testPolicy(t, nil))
	ctx := context.Background()

	t.Run("cost overflow", func(t *testing.T) {
		g := grant("srv", "pay")
		g.MaxTotalCost = &schemas.MonetaryAmount{Units: 1000, Currency: "USD"}
		tok := header(t, issue(t, issuerKey, body("cap-overflow", g)))
		spent := 0
		for _, units := range []uint64{900, 1<<64 - 900, 900, 1<<53 - 1} {
			r := req(tok, "srv", "pay", `{}`)
			r.Cost = &schemas.MonetaryAmount{Units: units, Currency: "USD"}
			if k.Decide(ctx, r).Allow {
				spent++
			}
		}
		if spent != 1 {
			t.Fatalf("%d calls allowed against a 1000 USD budget", spent)
		}
	})
	t.Run("total cost with unknown cost", func(t *testing.T) {
		g := grant("srv", "pay")
		g.MaxTotalCost = &schemas.MonetaryAmount{Units: 100, Currency: "USD"}
		tok := header(t, issue(t, issuerKey, body("cap-unknown-cost", g)))
		if d := k.Decide(ctx, req(tok, "srv", "pay", `{}`)); d.Allow || d.Guard != StepBudget {
			t.Fatalf("an uncosted call ran against max_total_cost: %+v", d)
		}
	})
	t.Run("delegation charges the covering grant", func(t *testing.T) {
		free := grant("srv", "tool")
		limited := grant("srv", "tool", schemas.OpInvoke, schemas.OpDelegate)
		limited.MaxInvocations = u32(3)
		root := issue(t, issuerKey, body("cap-two-grants", free, limited))
		allowed := 0
		for i := range 5 {
			cg := grant("srv", "tool")
			cg.MaxInvocations = u32(3)
			b := body(fmt.Sprintf("cap-two-grants-child-%d", i), cg)
			b.Subject = pub(key(byte(40 + i)))
			c, err := schemas.Delegate(agentKey, root, b)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if noVelocity.Decide(ctx, req(header(t, c), "srv", "tool", `{}`)).Allow {
					allowed++
				}
			}
		}
		if allowed != 3 {
			t.Fatalf("%d delegated calls allowed; the covering grant allows 3", allowed)
		}
	})
	t.Run("velocity is keyed on the root subject", func(t *testing.T) {
		pg := grant("srv", "tool", schemas.OpInvoke, schemas.OpDelegate)
		b := body("cap-velocity-root", pg)
		b.Subject = pub(subAgentKey)
		root := issue(t, issuerKey, b)
		allowed := 0
		for i := range 5 {
			cb := body(fmt.Sprintf("cap-velocity-child-%d", i), grant("srv", "tool"))
			cb.Subject = pub(key(byte(60 + i)))
			c, err := schemas.Delegate(subAgentKey, root, cb)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if k.Decide(ctx, req(header(t, c), "srv", "tool", `{}`)).Allow {
					allowed++
				}
			}
		}
		if allowed != 2 {
			t.Fatalf("%d calls allowed through five fresh delegatees; velocity allows 2", allowed)
		}
	})
	t.Run("time is named before delegation", func(t *testing.T) {
		pg := grant("srv", "tool") // not delegable
		root := issue(t, issuerKey, body("cap-nodelegate", pg))
		link, _ := root.Link()
		b := body("cap-expired-child", pg)
		b.Issuer, b.Subject = pub(agentKey), pub(subAgentKey)
		b.IssuedAt, b.ExpiresAt = uint64(t0.Unix())-600, uint64(t0.Unix())-1
		b.DelegationChain = []schemas.DelegationLink{link}
		if d := k.Decide(ctx, req(signRaw(t, agentKey, b), "srv", "tool", `{}`)); d.Guard != StepTime {
			t.Fatalf("want time, got %s: %s", d.Guard, d.Reason)
		}
	})
	t.Run("hard floor without a registry", func(t *testing.T) {
		tok := header(t, issue(t, issuerKey, body("cap-floor", grant("chio.internal", "*"), grant("srv", "*"))))
		for _, c := range [][2]string{{"chio.internal", "x"}, {"srv", "chio.admin"}, {"srv", "$sys"}} {
			if d := k.Decide(ctx, req(tok, c[0], c[1], `{}`)); d.Allow || d.Guard != StepToolResolution {
				t.Fatalf("%v: %+v", c, d)
			}
		}
	})
	t.Run("case-mismatched field names", func(t *testing.T) {
		tok := mustJSON(t, issue(t, issuerKey, body("cap-case", grant("srv", "tool"))))
		decoy := strings.Replace(tok, `"scope":`, `"scope":{"grants":[{"server_id":"srv","tool_name":"other","operations":["invoke"]}]},"Scope":`, 1)
		if d := k.Decide(ctx, req(decoy, "srv", "tool", `{}`)); d.Allow || d.Guard != StepParse {
			t.Fatalf("decoy scope: %+v", d)
		}
		if _, err := ParsePolicy([]byte(`{"schema":"chio.policy.v1","trusted_issuers":["` + pub(strangerKey) + `"],"Trusted_Issuers":["` + pub(issuerKey) + `"],"guards":{}}`)); err == nil {
			t.Fatal("a policy with case-variant keys loaded")
		}
	})
}

func TestGuardDenyRefundsBudget(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	g := grant("srv", "tool")
	g.MaxInvocations = u32(1)
	tok := header(t, issue(t, issuerKey, body("cap-refund", g)))
	if d := k.Decide(context.Background(), req(tok, "srv", "tool", `{"path":"../etc/passwd"}`)); d.Allow || d.Guard != guardPath {
		t.Fatalf("first call: %+v", d)
	}
	if d := k.Decide(context.Background(), req(tok, "srv", "tool", `{}`)); !d.Allow {
		t.Fatalf("a guard-denied call spent the only invocation: %s %s", d.Guard, d.Reason)
	}
}

// A bucket deleted and recreated under a running kernel, or a watch that
// stalls, is caught by the auditor: the mirror is rebuilt, never trusted stale.
func TestRevocationBucketRecreated(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	tok := header(t, issue(t, issuerKey, body("victim", grant("srv", "tool"))))
	if err := Revoke(context.Background(), e.js, 1, "other", "", t0); err != nil {
		t.Fatal(err)
	}
	if err := e.js.DeleteKeyValue(context.Background(), schemas.RevocationsBucket); err != nil {
		t.Fatal(err)
	}
	if err := Revoke(context.Background(), e.js, 1, "victim", "", t0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second) // a few audits (auditInterval) on an idle machine
	for k.Decide(context.Background(), req(tok, "srv", "tool", `{}`)).Allow {
		if time.Now().After(deadline) {
			t.Fatal("a revocation written to a recreated bucket was never seen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, func() bool {
		d := k.Decide(context.Background(), req(tok, "srv", "tool", `{}`))
		return d.Guard == StepRevocation && strings.Contains(d.Reason, "victim is revoked")
	})
}

// A deny-by-default tool (the OpenAPI bridge's side-effecting operations)
// runs only under a grant that names it: a wildcard grant on its server
// is denied at the grant step, with a reason that says so, and Invokes
// does not list it.
func TestDenyByDefaultNeedsAGrantByName(t *testing.T) {
	e := startNATS(t)
	m := &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: "api", Name: "api", Version: "1",
		Tools: []schemas.ToolDefinition{
			{Name: "listPets", Description: "read", InputSchema: json.RawMessage(`{"type":"object"}`)},
			{Name: "deletePet", Description: "write", HasSideEffects: true, InputSchema: json.RawMessage(`{"type":"object"}`),
				Metadata: map[string]json.RawMessage{tools.MetaDenyByDefault: json.RawMessage(`true`)}},
		}}
	reg := tools.NewRegistry()
	if err := reg.AddManifest(m); err != nil {
		t.Fatal(err)
	}
	k := newKernel(t, e, testPolicy(t, func(p *Policy) { p.Guards.Egress = nil }), WithRegistry(reg))
	wild := header(t, issue(t, issuerKey, body("cap-wild", grant("api", "*"))))
	named := header(t, issue(t, issuerKey, body("cap-named", grant("api", "*"), grant("api", "deletePet"))))
	cases := []struct {
		name, token, tool string
		allow             bool
		reason            string
	}{
		{"wildcard reaches a read", wild, "listPets", true, ""},
		{"wildcard does not reach a write", wild, "deletePet", false, "denied by default unless a grant names it"},
		{"a grant by name does", named, "deletePet", true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := k.Decide(context.Background(), req(c.token, "api", c.tool, `{}`))
			if d.Allow != c.allow || (!c.allow && (d.Guard != StepGrant || !strings.Contains(d.Reason, c.reason))) {
				t.Fatalf("%+v", d)
			}
			id, dec := k.Identify(context.Background(), c.token, nil)
			en, _ := reg.Tool("api", c.tool)
			if dec != nil || id.Invokes(en) != c.allow {
				t.Fatalf("Invokes = %v, want %v", !c.allow, c.allow)
			}
		})
	}
}

func TestIdentify(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	tok := header(t, issue(t, issuerKey, body("cap-id", grant("srv", "tool"))))
	id, d := k.Identify(context.Background(), tok, nil)
	if d != nil || id.Subject != pub(agentKey) || id.CapabilityID != "cap-id" {
		t.Fatalf("%+v %+v", id, d)
	}
	for _, c := range []struct {
		server, tool string
		want         bool
	}{{"srv", "tool", true}, {"srv", "other", false}, {"other", "tool", false}} {
		e := &tools.Entry{Manifest: &schemas.ToolManifest{ServerID: c.server}, Tool: &schemas.ToolDefinition{Name: c.tool}}
		if got := id.Invokes(e); got != c.want {
			t.Errorf("Invokes(%s, %s) = %v, want %v", c.server, c.tool, got, c.want)
		}
	}
	if _, d := k.Identify(context.Background(), "nope", nil); d == nil || d.Guard != StepParse {
		t.Fatalf("bad token identified: %+v", d)
	}
	if err := Revoke(context.Background(), e.js, 1, "cap-id", "", t0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		_, d := k.Identify(context.Background(), tok, nil)
		return d != nil && d.Guard == StepRevocation
	})
}
