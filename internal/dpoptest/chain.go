// Package dpoptest is test support for holder binding (schemas/dpop): the
// tokens of the rebuilt-parent attack (NewChain, Rebuild), proofs by the
// token's subject (Signer, Proof) and by any other key (ForgedProof,
// SignClaims), the proofs a correct signer never makes (JWS, ES256Proof),
// and the reading of what a receipt records of a proof (Binding, WantDeny,
// JKT).
//
// It imports only schemas, schemas/dpop, go-jose and the standard
// library, so that any edge, the ledger, the projections and the command
// can use it.
package dpoptest

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// Spec is what NewChain issues.
type Spec struct {
	// Issuer issues the agent's token: a key the system under test
	// trusts. Required.
	Issuer ed25519.PrivateKey
	// AgentKey is the agent's key, HelperKey the helper's; nil is a fresh
	// key.
	AgentKey, HelperKey ed25519.PrivateKey
	// AgentID and HelperID are the tokens' ids ("cap-agent" and
	// "cap-helper" when empty).
	AgentID, HelperID string
	// Agent are the agent's grants; at least one must hold OpDelegate.
	// Helper are the grants the agent delegates to the helper.
	Agent, Helper []schemas.ToolGrant
}

// Chain is the setting of the rebuilt-parent attack: an agent's token
// that can delegate (honoured only with a proof by AgentKey), the leaf
// token the agent delegated to HelperKey, and the agent's token as the
// helper rebuilds it from its own delegation chain. The tokens are valid
// from a minute ago to an hour from now.
type Chain struct {
	AgentKey, HelperKey ed25519.PrivateKey
	// AgentToken and HelperToken are the tokens as issued.
	AgentToken, HelperToken *schemas.CapabilityToken
	// Agent, Helper and Rebuilt are the tokens in header form. Rebuilt
	// is the agent's token byte for byte: that is the attack.
	Agent, Helper, Rebuilt string
}

// NewChain issues the agent's token, has the agent delegate the helper's,
// and rebuilds the agent's from the helper's. The test fails if any step
// does, or if the rebuilt token is not the agent's.
func NewChain(t testing.TB, s Spec) *Chain {
	t.Helper()
	if s.Issuer == nil {
		t.Fatal("dpoptest: a chain needs an issuer")
	}
	c := &Chain{AgentKey: orFresh(t, s.AgentKey), HelperKey: orFresh(t, s.HelperKey)}
	now := time.Now()
	var err error
	c.AgentToken, err = schemas.IssueCapability(s.Issuer, schemas.CapabilityBody{ID: or(s.AgentID, "cap-agent"),
		Issuer: pub(s.Issuer), Subject: pub(c.AgentKey), Scope: schemas.Scope{Grants: s.Agent},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix())})
	if err != nil {
		t.Fatalf("dpoptest: issue the agent's token: %v", err)
	}
	c.HelperToken, err = schemas.Delegate(c.AgentKey, c.AgentToken, schemas.CapabilityBody{ID: or(s.HelperID, "cap-helper"),
		Subject: pub(c.HelperKey), Scope: schemas.Scope{Grants: s.Helper},
		IssuedAt: c.AgentToken.IssuedAt, ExpiresAt: c.AgentToken.ExpiresAt})
	if err != nil {
		t.Fatalf("dpoptest: delegate the helper's token: %v", err)
	}
	c.Agent, c.Helper = encode(t, c.AgentToken), encode(t, c.HelperToken)
	if c.Rebuilt = Rebuild(t, c.Helper); c.Rebuilt != c.Agent {
		t.Fatalf("dpoptest: the rebuilt parent %s is not the agent's token %s", c.Rebuilt, c.Agent)
	}
	return c
}

// Rebuild is what a delegate does with its own token (header or JSON
// form): its parent's token, rebuilt from the delegation chain it
// carries, in header form.
func Rebuild(t testing.TB, child string) string {
	t.Helper()
	raw, err := schemas.DecodeCapabilityText(child)
	if err != nil {
		t.Fatalf("dpoptest: rebuild: %v", err)
	}
	tok, err := schemas.ParseCapability(raw)
	if err != nil {
		t.Fatalf("dpoptest: rebuild: %v", err)
	}
	if len(tok.DelegationChain) == 0 {
		t.Fatalf("dpoptest: rebuild: %s was not delegated", tok.ID)
	}
	return encode(t, tok.Ancestor(len(tok.DelegationChain)-1))
}

func encode(t testing.TB, tok *schemas.CapabilityToken) string {
	t.Helper()
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatalf("dpoptest: encode %s: %v", tok.ID, err)
	}
	return h
}

func pub(k ed25519.PrivateKey) string { return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey)) }

func orFresh(t testing.TB, k ed25519.PrivateKey) ed25519.PrivateKey {
	t.Helper()
	if k != nil {
		return k
	}
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
