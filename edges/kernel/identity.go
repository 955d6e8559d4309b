package kernel

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
)

// Callers with an identity provider's access token. A JWT from a provider
// the policy trusts (identity_providers) is verified by package identity
// and stands, for the rest of the pipeline, as a root capability: its
// grants are the matching rule's, its id is derived from the issuer and
// the token's id (so `chio revoke` can revoke one token), its window is
// the token's, and its issuer and subject "keys" are SHA-256 names of the
// provider and of the provider's subject. Those names are no public keys:
// no capability can be issued by one (the policy trusts real keys only),
// so no capability holder shares a JWT caller's principal, budgets or
// tasks. Budgets are kept per identity and rule, not per token, so a new
// token (each client-credentials fetch) does not start a grant's budget
// afresh. Its receipts record who the caller was (Identity, in
// metadata.attribution.identity).

// Validation steps of an access token, as deny guards, beside the
// capability's (parse, issuer, signature, time).
const (
	StepAudience     = "audience"
	StepIdentityRule = "identity_rule"
)

// WithIdentityHTTPClient sets the client that fetches the identity
// providers' discovery documents and keys (a test provider's CA, a
// proxy); default: 10 s timeout, the system's roots.
func WithIdentityHTTPClient(c *http.Client) Option {
	return func(cfg *config) { cfg.identityClient = c }
}

// Identities is the verifier of the policy's identity providers, nil
// when it trusts none: what a token exchange verifies its subject and
// actor tokens with, as this kernel verifies a caller's.
func (k *Kernel) Identities() *identity.Verifier { return k.identities }

// Revoked reports whether capability id (an access token's, as
// identity.Caller.CapabilityID names it) is revoked; an error means the
// revocation state is out of reach, as the kernel then denies every call.
func (k *Kernel) Revoked(id string) (bool, error) {
	if !k.js.Conn().IsConnected() || !k.revs.Live() {
		return false, errors.New("governance state unavailable: NATS is not connected or the revocation watch has ended")
	}
	return k.revs.FirstRevoked([]string{id}) != "", nil
}

// newIdentities is the verifier of the policy's providers, nil without any.
func newIdentities(p *LoadedPolicy, cfg config) (*identity.Verifier, error) {
	if len(p.IdentityProviders) == 0 {
		return nil, nil
	}
	opts := []identity.Option{identity.WithClock(cfg.now)}
	if cfg.identityClient != nil {
		opts = append(opts, identity.WithHTTPClient(cfg.identityClient))
	}
	return identity.New(p.IdentityProviders, opts...)
}

// verifyToken runs the static checks of a presented token: a capability's
// (cached), or an access token's (not cached: its keys may rotate, and a
// verification is one RSA or ECDSA check).
func (k *Kernel) verifyToken(ctx context.Context, text string) (*verified, *stepError) {
	if !identity.LooksLikeJWT(text) {
		return k.tokens.get(k.policy, text)
	}
	if k.identities == nil {
		return nil, fail(StepParse, "a JWT access token, and this policy trusts no identity provider (identity_providers): present a chio capability")
	}
	c, err := k.identities.Verify(ctx, text)
	if err != nil {
		step := StepParse
		switch {
		case errors.Is(err, identity.ErrUntrusted):
			step = StepIssuer
		case errors.Is(err, identity.ErrSignature):
			step = StepSignature
		case errors.Is(err, identity.ErrUnavailable):
			step, err = StepSignature, fmt.Errorf("%w (fail closed)", err)
		case errors.Is(err, identity.ErrTime):
			step = StepTime
		case errors.Is(err, identity.ErrAudience):
			step = StepAudience
		case errors.Is(err, identity.ErrNoRule):
			step = StepIdentityRule
		}
		return nil, &stepError{step: step, err: err}
	}
	return fromCaller(c, k.cfg.now())
}

// fromCaller is the verified root capability a verified access token
// stands as.
func fromCaller(c *identity.Caller, now time.Time) (*verified, *stepError) {
	issued := c.IssuedAt
	if issued.IsZero() || c.NotBefore.After(issued) {
		issued = c.NotBefore
	}
	if issued.IsZero() {
		issued = now
	}
	iss, sub := c.IssuerKey(), c.SubjectKey()
	tok := &schemas.CapabilityToken{CapabilityBody: schemas.CapabilityBody{
		Schema: schemas.CapabilitySchema, ID: c.CapabilityID(), Issuer: iss, Subject: sub,
		Scope:    schemas.Scope{Grants: c.Grants},
		IssuedAt: uint64(max(issued.Unix(), 0)), ExpiresAt: uint64(max(c.Expiry.Unix(), 0)),
	}}
	v := &verified{tok: tok, rootIssuer: iss, rootSubject: sub, lineage: []string{tok.ID}, cover: [][]int{nil},
		principals: c.Principals(), caller: c, budgetID: c.BudgetID()}
	if serr := v.compile(); serr != nil {
		return nil, serr
	}
	return v, nil
}

// identityRecord is metadata.attribution.identity of a JWT caller's
// receipt: who the caller was, as its provider said.
func identityRecord(c *identity.Caller) map[string]any {
	r := map[string]any{"issuer": c.Issuer, "subject": c.Subject, "audience": c.Audience, "token_id": c.TokenID, "rule": c.Rule}
	if c.ClientID != "" {
		r["client_id"] = c.ClientID
	}
	if c.Thumbprint != "" {
		r["cnf_jkt"] = c.Thumbprint
	}
	if len(c.Actors) > 0 {
		r["act"] = c.Actors
	}
	return r
}
