package readauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/authtest"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// TestAccessTokenReaders: an identity provider's access token reads as
// its identity, plus the read grants its rule gives; a bound token only
// with a proof by its key, once; a revoked or bad token never; a provider
// whose keys cannot be had is the service's condition (503).
func TestAccessTokenReaders(t *testing.T) {
	kv, revs, replay := readState(t)
	ctx := context.Background()
	is := authtest.StartIssuer(t)
	receipts, _ := schemas.ReadGrant(schemas.ReadReceipts)
	tool := schemas.ToolGrant{ServerID: "s", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}
	delegating := schemas.ToolGrant{ServerID: "s", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}
	v, err := identity.New([]identity.Provider{{Issuer: is.URL, Audiences: []string{"aud"}, Rules: []identity.Rule{
		{Match: map[string]string{"sub": "auditor"}, Grants: []schemas.ToolGrant{receipts}},
		{Match: map[string]string{"sub": "delegator"}, Grants: []schemas.ToolGrant{delegating}},
		{Grants: []schemas.ToolGrant{tool}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	a := New(WithIdentities(v), WithRevocations(revs), WithReplay(replay))
	now := time.Now()
	sign := func(sub, jti string, extra map[string]any) string {
		c := map[string]any{"iss": is.URL, "sub": sub, "aud": "aud", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "jti": jti}
		for k, x := range extra {
			c[k] = x
		}
		return is.Sign(t, c)
	}
	bearerH := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	agent := sign("agent", "j1", nil)
	bound := sign("agent", "j4", map[string]any{"cnf": map[string]any{"jkt": dpop.Thumbprint(pub)}})
	proof := dpoptest.ForgedProof(t, key, bound, http.MethodGet, testURL)
	agentCaller, err := v.Verify(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	self := agentCaller.Principals()

	for _, tc := range []struct {
		name     string
		h        http.Header
		status   int    // 0: a reader
		check    string // the refused proof check, if any
		receipts bool
	}{
		{name: "a bearer token reads as itself", h: bearerH(agent)},
		{name: "a rule's read grant", h: bearerH(sign("auditor", "j2", nil)), receipts: true},
		{name: "a delegating rule needs a bound token", h: bearerH(sign("delegator", "j3", nil)), status: 401, check: string(dpop.CheckMissing)},
		{name: "bound, without its proof", h: bearerH(bound), status: 401, check: string(dpop.CheckMissing)},
		{name: "bound, with its proof", h: dpopHeaders(bound, proof)},
		{name: "bound, the proof again", h: dpopHeaders(bound, proof), status: 401, check: string(dpop.CheckReplayed)},
		{name: "bound, another key's proof", h: dpopHeaders(bound, dpoptest.ForgedProof(t, other, bound, http.MethodGet, testURL)), status: 401, check: string(dpop.CheckKey)},
		{name: "a bearer token with a proof", h: dpopHeaders(agent, dpoptest.ForgedProof(t, key, agent, http.MethodGet, testURL)), status: 401, check: string(dpop.CheckKey)},
		{name: "a malformed token", h: bearerH("x.y.z"), status: 401},
		{name: "not a JWT, and no capability issuer trusted", h: bearerH("abc"), status: 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := a.Authenticate(request(http.MethodGet, testURL, tc.h))
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if r.Receipts != tc.receipts || r.All || len(r.Principals) != 1 || r.LimitKey() != r.Principals[0] {
					t.Fatalf("reader %+v", r)
				}
				if tc.name == "a bearer token reads as itself" && r.Principals[0] != self[0] {
					t.Fatalf("principal %s, want the identity's %s", r.Principals[0], self[0])
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != tc.status || (tc.check != "" && string(e.Check) != tc.check) {
				t.Fatalf("got %v (%+v), want %d %s", err, e, tc.status, tc.check)
			}
		})
	}

	// A revoked token is refused, and a newer one for the same subject is not.
	raw, _ := json.Marshal(schemas.Revocation{CapabilityID: agentCaller.CapabilityID(), RevokedAt: uint64(now.Unix()), Reason: "leaked"})
	if _, err := kv.Put(ctx, schemas.KVKey(agentCaller.CapabilityID()), raw); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); revs.FirstRevoked([]string{agentCaller.CapabilityID()}) == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the revocation never arrived")
		}
	}
	if _, err := a.Authenticate(request(http.MethodGet, testURL, bearerH(agent))); err == nil {
		t.Fatal("a revoked token read")
	}
	if _, err := a.Authenticate(request(http.MethodGet, testURL, bearerH(sign("agent", "j5", nil)))); err != nil {
		t.Fatalf("another token of the subject: %v", err)
	}

	// A provider whose keys cannot be fetched: 503, fail closed.
	gone := "http://127.0.0.1:1"
	v2, err := identity.New([]identity.Provider{{Issuer: gone, Audiences: []string{"aud"}, Rules: []identity.Rule{{Grants: []schemas.ToolGrant{tool}}}}})
	if err != nil {
		t.Fatal(err)
	}
	k, kid := is.Key()
	tok := authtest.SignJWT(t, "RS256", k, kid, map[string]any{"iss": gone, "sub": "x", "aud": "aud", "exp": now.Add(time.Hour).Unix()})
	_, err = New(WithIdentities(v2), WithRevocations(revs), WithReplay(replay)).Authenticate(request(http.MethodGet, testURL, bearerH(tok)))
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("a provider out of reach: %v", err)
	}
}
