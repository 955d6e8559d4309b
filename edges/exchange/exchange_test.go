package exchange_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/exchange"
	"github.com/chio-ledger/chio/internal/authtest"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// The exchange's own limits, against a real verifier of a test provider:
// a capability never outlives its subject token or the exchange's
// lifetime; a rule with a budget is refused; a chain longer than a
// capability may hold is refused; a proof must be a token request's (no
// ath), for this endpoint.
func TestExchangeLimits(t *testing.T) {
	is := authtest.StartIssuer(t)
	one := uint32(1)
	v, err := identity.New([]identity.Provider{{Issuer: is.URL, Audiences: []string{"chio"}, Rules: []identity.Rule{
		{Match: map[string]string{"sub": "budgeted"}, Grants: []schemas.ToolGrant{{ServerID: "s", ToolName: "t", Operations: []schemas.Operation{schemas.OpInvoke}, MaxInvocations: &one}}},
		{Match: map[string]string{}, Grants: []schemas.ToolGrant{{ServerID: "s", ToolName: "t", Operations: []schemas.Operation{schemas.OpInvoke}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srv := httptest.NewServer(exchange.New(key, v, exchange.WithLifetime(time.Minute)))
	t.Cleanup(srv.Close)
	endpoint := srv.URL + exchange.Path
	post := func(t *testing.T, subject string, proof string) (int, map[string]any) {
		t.Helper()
		form := url.Values{"grant_type": {exchange.GrantType}, "subject_token": {subject}, "subject_token_type": {exchange.TokenTypeJWT}}
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proof != "" {
			req.Header.Set(dpop.Header, proof)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	token := func(sub string, exp time.Duration, act any) string {
		c := map[string]any{"iss": is.URL, "sub": sub, "aud": "chio", "exp": time.Now().Add(exp).Unix()}
		if act != nil {
			c["act"] = act
		}
		return is.Sign(t, c)
	}
	capOf := func(t *testing.T, out map[string]any) *schemas.CapabilityToken {
		t.Helper()
		raw, err := schemas.DecodeCapabilityText(out["access_token"].(string))
		if err != nil {
			t.Fatal(err)
		}
		tok, err := schemas.ParseCapability(raw)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	deep := map[string]any{"sub": "a0"}
	for i := 1; i < 8; i++ {
		deep = map[string]any{"sub": "a" + string(rune('0'+i)), "act": deep}
	}
	_, holder, _ := ed25519.GenerateKey(rand.Reader)
	withATH := dpoptest.SignClaims(t, holder, dpop.Claims{JTI: "j1", HTM: http.MethodPost, HTU: endpoint, IAT: time.Now().Unix(), ATH: dpop.TokenHash("x")})
	elsewhere, _ := dpop.TokenRequestProof(holder, srv.URL+"/elsewhere")
	fresh := func() string {
		p, err := dpop.TokenRequestProof(holder, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	holderKey := schemas.EncodePublicKey(holder.Public().(ed25519.PublicKey))

	t.Run("the subject token's expiry bounds the capability", func(t *testing.T) {
		code, out := post(t, token("agent", 30*time.Second, nil), "")
		if code != http.StatusOK {
			t.Fatalf("%d %v", code, out)
		}
		c := capOf(t, out)
		if life := int64(c.ExpiresAt) - int64(c.IssuedAt); life > 31 {
			t.Fatalf("the capability lives %d s, past its token's 30", life)
		}
	})
	t.Run("the exchange's lifetime bounds the capability", func(t *testing.T) {
		code, out := post(t, token("agent", time.Hour, nil), "")
		if c := capOf(t, out); code != http.StatusOK || int64(c.ExpiresAt)-int64(c.IssuedAt) > 60 {
			t.Fatalf("%d %v", code, out)
		}
	})
	t.Run("eight actors make a full chain", func(t *testing.T) {
		code, out := post(t, token("agent", time.Hour, deep), "")
		if code != http.StatusOK || len(capOf(t, out).DelegationChain) != 8 {
			t.Fatalf("%d %v", code, out)
		}
	})
	t.Run("an actor and a key to bind to", func(t *testing.T) {
		// Root to the subject, the subject to the planner, the planner
		// to the proof's key: every party named.
		code, out := post(t, token("agent", time.Hour, map[string]any{"sub": "planner"}), fresh())
		if code != http.StatusOK || out["token_type"] != "DPoP" {
			t.Fatalf("%d %v", code, out)
		}
		c := capOf(t, out)
		ch := c.DelegationChain
		if len(ch) != 2 || c.Subject != holderKey || ch[1].Delegatee != c.Issuer || ch[1].Delegatee == holderKey || ch[0].Delegatee != ch[1].Delegator {
			t.Fatalf("chain %+v to %s", ch, c.Subject)
		}
	})
	t.Run("every capability of an identity has one root subject", func(t *testing.T) {
		roots := map[string]bool{}
		for _, proof := range []string{"", fresh()} {
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			if proof == "" {
				p, _ := dpop.TokenRequestProof(other, endpoint)
				proof = p
			}
			code, out := post(t, token("agent", time.Hour, nil), proof)
			if code != http.StatusOK {
				t.Fatalf("%d %v", code, out)
			}
			c := capOf(t, out)
			if len(c.DelegationChain) != 1 {
				t.Fatalf("a bound capability's chain %+v", c.DelegationChain)
			}
			roots[c.DelegationChain[0].Delegatee] = true
		}
		_, out := post(t, token("agent", time.Hour, nil), "")
		roots[capOf(t, out).Subject] = true
		if len(roots) != 1 {
			t.Fatalf("root subjects %v: a new key would start the identity's velocity afresh", roots)
		}
	})
	for _, c := range []struct {
		name, subject, proof, code string
	}{
		{"a rule with a budget", token("budgeted", time.Hour, nil), "", "invalid_request"},
		{"eight actors and a key to bind to", token("agent", time.Hour, deep), fresh(), "invalid_request"},
		{"a token past exp, within the clock skew", token("agent", -10*time.Second, nil), "", "invalid_request"},
		{"nine actors", token("agent", time.Hour, map[string]any{"sub": "a9", "act": deep}), "", "invalid_request"},
		{"a proof naming a token", token("agent", time.Hour, nil), withATH, "invalid_dpop_proof"},
		{"a proof for another URL", token("agent", time.Hour, nil), elsewhere, "invalid_dpop_proof"},
		{"an expired subject token", token("agent", -time.Hour, nil), "", "invalid_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := post(t, c.subject, c.proof)
			if code != http.StatusBadRequest || out["error"] != c.code || out["access_token"] != nil {
				t.Fatalf("%d %v, want 400 %s", code, out, c.code)
			}
		})
	}
}

// BenchmarkExchange is one exchange end to end over loopback HTTP: an
// RS256 access token verified against a cached key, a DPoP proof checked,
// and a capability signed, with and without an actor chain.
func BenchmarkExchange(b *testing.B) {
	is := authtest.StartIssuer(b)
	v, err := identity.New([]identity.Provider{{Issuer: is.URL, Audiences: []string{"chio"}, Rules: []identity.Rule{
		{Match: map[string]string{}, Grants: []schemas.ToolGrant{{ServerID: "s", ToolName: "t", Operations: []schemas.Operation{schemas.OpInvoke}}}},
	}}})
	if err != nil {
		b.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srv := httptest.NewServer(exchange.New(key, v, exchange.WithLogger(slog.New(slog.DiscardHandler))))
	b.Cleanup(srv.Close)
	endpoint := srv.URL + exchange.Path
	_, holder, _ := ed25519.GenerateKey(rand.Reader)
	for _, c := range []struct {
		name string
		act  any
	}{{"bound", nil}, {"bound, two actors", map[string]any{"sub": "runner", "act": map[string]any{"sub": "planner"}}}} {
		claims := map[string]any{"iss": is.URL, "sub": "agent", "aud": "chio", "exp": time.Now().Add(time.Hour).Unix()}
		if c.act != nil {
			claims["act"] = c.act
		}
		body := url.Values{"grant_type": {exchange.GrantType}, "subject_token": {is.Sign(b, claims)}, "subject_token_type": {exchange.TokenTypeJWT}}.Encode()
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				proof, err := dpop.TokenRequestProof(holder, endpoint)
				if err != nil {
					b.Fatal(err)
				}
				req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set(dpop.Header, proof)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("exchange: %d", resp.StatusCode)
				}
			}
		})
	}
}
