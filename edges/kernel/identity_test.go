package kernel

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/authtest"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
)

// TestAccessTokenCallers: a caller with its identity provider's JWT access
// token is decided as a root capability with the matching rule's grants:
// allowed within them, denied outside, revocable by its id, with who it is
// in the receipt's attribution; a bad token is denied at the step that
// names what is wrong.
func TestAccessTokenCallers(t *testing.T) {
	e := startNATS(t)
	o := authtest.StartOP(t, "agent-7", "secret-7")
	is := authtest.StartIssuer(t)
	once := grant("hello-a2a-srv", "hello_task")
	once.MaxInvocations = u32(1)
	rules := []identity.Rule{{Match: map[string]string{"sub": "agent-7"}, Grants: []schemas.ToolGrant{grant("hello-a2a-srv", "*")}}}
	k := newKernel(t, e, testPolicy(t, func(p *Policy) {
		p.Guards.Egress = nil
		p.IdentityProviders = []identity.Provider{
			{Issuer: o.Issuer, Audiences: []string{"agent-7"}, Rules: rules},
			{Issuer: is.URL, Audiences: []string{"https://edge.example"}, Rules: append(rules, identity.Rule{
				Match: map[string]string{"sub": "agent-9"}, Grants: []schemas.ToolGrant{once}})},
		}
	}), WithClock(time.Now), WithIdentityHTTPClient(o.HTTPClient()))
	ctx := context.Background()

	token := o.AccessToken(t)
	d := k.Decide(ctx, req(token, "hello-a2a-srv", "hello_task", `{"text":"hi"}`))
	if !d.Allow {
		t.Fatalf("a real provider's token: denied at %s: %s", d.Guard, d.Reason)
	}
	id, _ := d.Attribution()["identity"].(map[string]any)
	if id["issuer"] != o.Issuer || id["subject"] != "agent-7" || id["token_id"] == "" || id["rule"] != 0 ||
		!strings.HasPrefix(d.CapabilityID, "jwt-") || d.Binding.Method != "bearer" {
		t.Fatalf("decision %+v, identity %v", d, id)
	}
	if d := k.Decide(ctx, req(token, "other-srv", "x", `{}`)); d.Allow || d.Guard != StepGrant {
		t.Fatalf("outside the rule's grants: %+v", d)
	}
	if who, d := k.Identify(ctx, token, nil); d != nil || who.Caller == nil || who.Caller.Subject != "agent-7" {
		t.Fatalf("identify: %+v %+v", who, d)
	}
	// Revoking the token's id denies it.
	if err := Revoke(ctx, e.js, 1, d.CapabilityID, "leaked", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return k.Decide(ctx, req(token, "hello-a2a-srv", "hello_task", `{"text":"hi"}`)).Guard == StepRevocation
	})

	now := time.Now()
	claims := func(extra map[string]any) map[string]any {
		c := map[string]any{"iss": is.URL, "sub": "agent-7", "aud": "https://edge.example", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	agent := key(7)
	bound := is.Sign(t, claims(map[string]any{"cnf": map[string]any{"jkt": dpoptest.JKT(agent)}}))
	const url = "https://edge.example/a2a"
	proof := func(tok string) *Proof {
		return &Proof{DPoP: dpoptest.ForgedProof(t, agent, tok, "POST", url), Method: "POST", URL: url}
	}
	for _, tc := range []struct {
		name  string
		token string
		proof *Proof
		guard string
	}{
		{"wrong audience", is.Sign(t, claims(map[string]any{"aud": "https://other.example"})), nil, StepAudience},
		{"expired", is.Sign(t, claims(map[string]any{"exp": now.Add(-time.Minute).Unix()})), nil, StepTime},
		{"untrusted issuer", is.Sign(t, claims(map[string]any{"iss": "https://evil.example"})), nil, StepIssuer},
		{"no rule", is.Sign(t, claims(map[string]any{"sub": "agent-8"})), nil, StepIdentityRule},
		{"DPoP-bound without its proof", bound, nil, StepDPoP},
		{"a bearer token with a proof", is.Sign(t, claims(nil)), proof(is.Sign(t, claims(nil))), StepDPoP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req(tc.token, "hello-a2a-srv", "hello_task", `{"text":"hi"}`)
			r.Proof = tc.proof
			if d := k.Decide(ctx, r); d.Allow || d.Guard != tc.guard {
				t.Fatalf("got allow=%v at %q (%s), want a deny at %q", d.Allow, d.Guard, d.Reason, tc.guard)
			}
		})
	}
	// The bound token with a proof by its key is allowed, and recorded so.
	r := req(bound, "hello-a2a-srv", "hello_task", `{"text":"hi"}`)
	r.Proof = proof(bound)
	if d := k.Decide(ctx, r); !d.Allow || d.Binding.Method != "dpop" || d.Binding.Thumbprint != dpoptest.JKT(agent) {
		t.Fatalf("a bound token with its proof: %+v", d)
	}
	// With a proof by another key, refused.
	other := &Proof{DPoP: dpoptest.ForgedProof(t, key(8), bound, "POST", url), Method: "POST", URL: url}
	r.Proof = other
	if d := k.Decide(ctx, r); d.Allow || d.Guard != StepDPoP {
		t.Fatalf("a bound token with another key's proof: %+v", d)
	}

	// A grant's budget is the identity's: a new token (another jti) does
	// not start it again.
	for i, want := range []bool{true, false} {
		tok := is.Sign(t, claims(map[string]any{"sub": "agent-9", "jti": fmt.Sprint("budget-", i)}))
		if d := k.Decide(ctx, req(tok, "hello-a2a-srv", "hello_task", `{"text":"hi"}`)); d.Allow != want || (!want && d.Guard != StepBudget) {
			t.Fatalf("call %d of a once-only grant, token %d: allow=%v at %q (%s)", i+1, i+1, d.Allow, d.Guard, d.Reason)
		}
	}

	// A kernel trusting no provider says what a JWT is missing.
	plain := newKernel(t, e, testPolicy(t, nil), WithClock(time.Now))
	if d := plain.Decide(ctx, req(token, "hello-a2a-srv", "hello_task", `{}`)); d.Guard != StepParse || !strings.Contains(d.Reason, "identity_providers") {
		t.Fatalf("a JWT without providers: %+v", d)
	}
}
