package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/chio-ledger/chio/internal/authtest"
	"github.com/chio-ledger/chio/schemas"
)

func grant(server, tool string) []schemas.ToolGrant {
	return []schemas.ToolGrant{{ServerID: server, ToolName: tool, Operations: []schemas.Operation{schemas.OpInvoke}}}
}

// TestVerifyTokenOfARealProvider: a client-credentials access token from
// zitadel's OpenID provider verifies, through discovery and its JWKS, and
// maps by the first matching rule.
func TestVerifyTokenOfARealProvider(t *testing.T) {
	o := authtest.StartOP(t, "agent-7", "secret-7")
	v, err := New([]Provider{{
		Issuer: o.Issuer, Audiences: []string{"agent-7"},
		Rules: []Rule{
			{Match: map[string]string{"sub": "someone-else"}, Grants: grant("other", "*")},
			{Match: map[string]string{"sub": "agent-7"}, Grants: grant("hello-a2a-srv", "*")},
		},
	}}, WithHTTPClient(o.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	token := o.AccessToken(t)
	c, err := v.Verify(t.Context(), token)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if c.Issuer != o.Issuer || c.Subject != "agent-7" || c.Rule != 1 || c.Grants[0].ServerID != "hello-a2a-srv" || c.TokenID == "" || c.Expiry.Before(time.Now()) {
		t.Fatalf("caller %+v", c)
	}
	// Verified again from the cached keys: no second discovery.
	if _, err := v.Verify(t.Context(), token); err != nil || o.Discoveries() != 1 {
		t.Fatalf("second verify: %v, %d discoveries", err, o.Discoveries())
	}
	// A provider that names another audience refuses the same token.
	other, err := New([]Provider{{Issuer: o.Issuer, Audiences: []string{"https://chio.example"}, Rules: []Rule{{Grants: grant("s", "*")}}}},
		WithHTTPClient(o.HTTPClient()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify(t.Context(), token); !errors.Is(err, ErrAudience) {
		t.Fatalf("another audience: %v", err)
	}
}

// TestBadTokensAreRefused: each bad token is refused with the refusal
// that names what is wrong with it.
func TestBadTokensAreRefused(t *testing.T) {
	ti := authtest.StartIssuer(t)
	now := time.Now()
	v, err := New([]Provider{{Issuer: ti.URL, Audiences: []string{"https://edge.example"},
		Rules: []Rule{{Match: map[string]string{"scope": "tools"}, Grants: grant("s", "*")}}}}, WithRefetchInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]any{"iss": ti.URL, "sub": "agent-7", "aud": "https://edge.example", "exp": now.Add(time.Hour).Unix(),
		"iat": now.Unix(), "scope": "read tools", "client_id": "c7", "jti": "j-1",
		"act": map[string]any{"sub": "orchestrator", "act": map[string]any{"sub": "user-1"}}}
	with := func(k string, val any) map[string]any {
		c := map[string]any{}
		for key, x := range good {
			c[key] = x
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	c, err := v.Verify(t.Context(), ti.Sign(t, good))
	if err != nil {
		t.Fatalf("good token: %v", err)
	}
	if c.ClientID != "c7" || c.TokenID != "j-1" || len(c.Actors) != 2 || c.Actors[0].Subject != "orchestrator" || c.Actors[1].Subject != "user-1" {
		t.Fatalf("caller %+v", c)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	key, _ := ti.Key()
	pubDER, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	unsigned := func(claims map[string]any) string {
		h, _ := json.Marshal(map[string]string{"alg": "none", "typ": "at+jwt"})
		p, _ := json.Marshal(claims)
		return b64(h) + "." + b64(p) + "."
	}
	for _, tc := range []struct {
		name  string
		token string
		want  error
	}{
		{"wrong issuer", ti.Sign(t, with("iss", "https://evil.example")), ErrUntrusted},
		{"wrong audience", ti.Sign(t, with("aud", "https://other.example")), ErrAudience},
		{"expired", ti.Sign(t, with("exp", now.Add(-time.Hour).Unix())), ErrTime},
		{"not yet valid", ti.Sign(t, with("nbf", now.Add(time.Hour).Unix())), ErrTime},
		{"no expiry", ti.Sign(t, with("exp", nil)), ErrTime},
		{"no subject", ti.Sign(t, with("sub", nil)), ErrMalformed},
		{"alg none", unsigned(good), ErrSignature},
		// The provider's RSA public key used as an HMAC secret: a verifier
		// that took HS256 with the JWKS key would accept it.
		{"HS256 with the public key as secret", authtest.SignJWT(t, jose.HS256, pubDER, "k1", good), ErrSignature},
		{"signed by another key under the known kid", authtest.SignJWT(t, jose.ES256, ec, "k1", good), ErrSignature},
		{"unknown kid", authtest.SignJWT(t, jose.RS256, key, "k-unknown", good), ErrSignature},
		{"no rule matches", ti.Sign(t, with("scope", "read")), ErrNoRule},
		{"malformed", "a.b.c", ErrMalformed},
		{"an ID token", ti.Sign(t, with("nonce", "n-1")), ErrMalformed},
		// A provider's signature does not make a payload readable two ways.
		{"a claim in another case", ti.Sign(t, with("Sub", "agent-8")), ErrMalformed},
		{"oversized", strings.Repeat("a", MaxTokenBytes) + ".b.c", ErrMalformed},
		{"bound without a thumbprint", ti.Sign(t, with("cnf", map[string]any{})), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := v.Verify(t.Context(), tc.token); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	// A stream of unknown key ids fetched the keys once in all, within the
	// refetch interval: the first good token's fetch, then one refetch.
	for i := range 50 {
		_, _ = v.Verify(t.Context(), authtest.SignJWT(t, jose.RS256, key, "storm-"+string(rune('a'+i%26)), good))
	}
	if got := ti.Fetches(); got > 2 {
		t.Fatalf("%d JWKS fetches for a stream of unknown key ids", got)
	}
}

// TestRotatedKeysAreFollowed: a token signed by a key the provider added
// since the last fetch verifies once the refetch interval has passed.
func TestRotatedKeysAreFollowed(t *testing.T) {
	ti := authtest.StartIssuer(t)
	var clock atomic.Int64
	clock.Store(time.Now().Unix())
	now := func() time.Time { return time.Unix(clock.Load(), 0) }
	v, err := New([]Provider{{Issuer: ti.URL, Audiences: []string{"a"}, Rules: []Rule{{Grants: grant("s", "*")}}}},
		WithClock(now), WithRefetchInterval(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	claims := func() map[string]any {
		return map[string]any{"iss": ti.URL, "sub": "x", "aud": "a", "exp": now().Add(time.Hour).Unix()}
	}
	if _, err := v.Verify(t.Context(), ti.Sign(t, claims())); err != nil {
		t.Fatal(err)
	}
	ti.Rotate(t, "k2")
	if _, err := v.Verify(t.Context(), ti.Sign(t, claims())); !errors.Is(err, ErrSignature) {
		t.Fatalf("within the refetch interval: %v", err)
	}
	clock.Add(61)
	if _, err := v.Verify(t.Context(), ti.Sign(t, claims())); err != nil {
		t.Fatalf("after the interval: %v", err)
	}
}

// TestProviderConfigRefusals: a provider the verifier could not check
// tokens of safely is refused when the policy is read.
func TestProviderConfigRefusals(t *testing.T) {
	rules := []Rule{{Grants: grant("s", "*")}}
	for _, tc := range []struct {
		name string
		p    Provider
		want string
	}{
		{"http issuer", Provider{Issuer: "http://op.example", Audiences: []string{"a"}, Rules: rules}, "https"},
		{"no audience", Provider{Issuer: "https://op.example", Rules: rules}, "audience"},
		{"alg none", Provider{Issuer: "https://op.example", Audiences: []string{"a"}, Algorithms: []string{"none"}, Rules: rules}, "unsigned"},
		{"HS256", Provider{Issuer: "https://op.example", Audiences: []string{"a"}, Algorithms: []string{"HS256"}, Rules: rules}, "shared-secret"},
		{"no rules", Provider{Issuer: "https://op.example", Audiences: []string{"a"}}, "no rules"},
		{"match on iss", Provider{Issuer: "https://op.example", Audiences: []string{"a"}, Rules: []Rule{{Match: map[string]string{"iss": "x"}, Grants: grant("s", "*")}}}, "other than iss"},
		{"bad grant", Provider{Issuer: "https://op.example", Audiences: []string{"a"}, Rules: []Rule{{Grants: grant("*", "*")}}}, "server_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
