package dpop_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var t0 = time.Unix(1_800_000_000, 0)

// holder is a token and its subject's key.
type holder struct {
	key   ed25519.PrivateKey
	token string
	subj  string
}

func newHolder(t testing.TB, id string) holder {
	t.Helper()
	_, issuer, _ := ed25519.GenerateKey(rand.Reader)
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	subj := schemas.EncodePublicKey(key.Public().(ed25519.PublicKey))
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: id, Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)), Subject: subj,
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "srv", ToolName: "*",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}}},
		IssuedAt: uint64(t0.Unix()) - 10, ExpiresAt: uint64(t0.Unix()) + 3600,
	})
	if err != nil {
		t.Fatal(err)
	}
	text, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return holder{key: key, token: text, subj: subj}
}

func (h holder) signer(t testing.TB, at time.Time) *dpop.Signer {
	t.Helper()
	s, err := dpop.NewSigner(h.key, h.token, dpop.WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const url = "https://edge.example/a2a"

func expect(h holder) dpop.Expect {
	return dpop.Expect{Subject: h.subj, Token: h.token, Method: "POST", URL: url, Now: t0}
}

// jws signs claims with a header of the test's choosing, for the proofs
// a correct signer never makes.
func jws(t *testing.T, header map[string]any, claims any, sign func([]byte) []byte) string {
	t.Helper()
	hb, _ := json.Marshal(header)
	cb, _ := json.Marshal(claims)
	in := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString(cb)
	return in + "." + base64.RawURLEncoding.EncodeToString(sign([]byte(in)))
}

func TestVerify(t *testing.T) {
	agent, other := newHolder(t, "cap-agent"), newHolder(t, "cap-other")
	good := func(t *testing.T) string {
		p, err := agent.signer(t, t0).Proof("POST", url)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pubJWK := func(k ed25519.PrivateKey) map[string]any {
		return map[string]any{"kty": "OKP", "crv": "Ed25519", "x": base64.RawURLEncoding.EncodeToString(k.Public().(ed25519.PublicKey))}
	}
	claims := map[string]any{"jti": "j1", "htm": "POST", "htu": url, "iat": t0.Unix(), "ath": dpop.TokenHash(agent.token)}
	edSign := func(b []byte) []byte { return ed25519.Sign(agent.key, b) }

	cases := []struct {
		name   string
		proof  func(t *testing.T) string
		expect func(e *dpop.Expect)
		want   dpop.Check
	}{
		{"valid", good, nil, ""},
		{"another URL", good, func(e *dpop.Expect) { e.URL = "https://edge.example/v1/tools" }, dpop.CheckURL},
		{"another host", good, func(e *dpop.Expect) { e.URL = "https://other.example/a2a" }, dpop.CheckURL},
		{"same URL, default port and query", good, func(e *dpop.Expect) { e.URL = "HTTPS://edge.example:443/a2a?x=1" }, ""},
		{"another method", good, func(e *dpop.Expect) { e.Method = "GET" }, dpop.CheckMethod},
		{"another token", good, func(e *dpop.Expect) { e.Token = other.token }, dpop.CheckToken},
		{"another key", good, func(e *dpop.Expect) { e.Subject = other.subj }, dpop.CheckKey},
		{"signed by another holder", func(t *testing.T) string {
			p, _ := other.signer(t, t0).Proof("POST", url)
			return p
		}, nil, dpop.CheckKey},
		{"expired", func(t *testing.T) string {
			p, _ := agent.signer(t, t0.Add(-dpop.DefaultLifetime-dpop.DefaultSkew-time.Second)).Proof("POST", url)
			return p
		}, nil, dpop.CheckStale},
		{"within the lifetime", func(t *testing.T) string {
			p, _ := agent.signer(t, t0.Add(-dpop.DefaultLifetime+time.Second)).Proof("POST", url)
			return p
		}, nil, ""},
		{"from the future", func(t *testing.T) string {
			p, _ := agent.signer(t, t0.Add(dpop.DefaultSkew+time.Second)).Proof("POST", url)
			return p
		}, nil, dpop.CheckFuture},
		{"alg ES256", func(t *testing.T) string {
			ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: ec}, (&jose.SignerOptions{EmbedJWK: true}).WithType(dpop.ProofType))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(claims)
			o, _ := s.Sign(b)
			c, _ := o.CompactSerialize()
			return c
		}, nil, dpop.CheckMalformed},
		{"alg none", func(t *testing.T) string {
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "none", "jwk": pubJWK(agent.key)}, claims, func([]byte) []byte { return nil })
		}, nil, dpop.CheckMalformed},
		{"jwk with a private member", func(t *testing.T) string {
			jwk := pubJWK(agent.key)
			jwk["d"] = base64.RawURLEncoding.EncodeToString(agent.key.Seed())
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": jwk}, claims, edSign)
		}, nil, dpop.CheckMalformed},
		{"typ jwt", func(t *testing.T) string {
			return jws(t, map[string]any{"typ": "JWT", "alg": "EdDSA", "jwk": pubJWK(agent.key)}, claims, edSign)
		}, nil, dpop.CheckMalformed},
		{"no jwk", func(t *testing.T) string {
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA"}, claims, edSign)
		}, nil, dpop.CheckMalformed},
		{"hand-made, valid", func(t *testing.T) string {
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": pubJWK(agent.key)}, claims, edSign)
		}, nil, ""},
		{"signature by another key under the agent's jwk", func(t *testing.T) string {
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": pubJWK(agent.key)}, claims,
				func(b []byte) []byte { return ed25519.Sign(other.key, b) })
		}, nil, dpop.CheckMalformed},
		{"no ath", func(t *testing.T) string {
			c := map[string]any{"jti": "j1", "htm": "POST", "htu": url, "iat": t0.Unix()}
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": pubJWK(agent.key)}, c, edSign)
		}, nil, dpop.CheckToken},
		{"no jti", func(t *testing.T) string {
			c := map[string]any{"htm": "POST", "htu": url, "iat": t0.Unix(), "ath": dpop.TokenHash(agent.token)}
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": pubJWK(agent.key)}, c, edSign)
		}, nil, dpop.CheckMalformed},
		{"repeated claim", func(t *testing.T) string {
			hb, _ := json.Marshal(map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": pubJWK(agent.key)})
			cb := `{"jti":"j1","htm":"POST","htm":"GET","htu":"` + url + `","iat":1800000000,"ath":"` + dpop.TokenHash(agent.token) + `"}`
			in := base64.RawURLEncoding.EncodeToString(hb) + "." + base64.RawURLEncoding.EncodeToString([]byte(cb))
			return in + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(agent.key, []byte(in)))
		}, nil, dpop.CheckMalformed},
		{"a claim in another case", func(t *testing.T) string {
			c := map[string]any{"jti": "j1", "htm": "POST", "HTU": url, "iat": t0.Unix(), "ath": dpop.TokenHash(agent.token)}
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": pubJWK(agent.key)}, c, edSign)
		}, nil, dpop.CheckMalformed},
		{"an extra claim", func(t *testing.T) string {
			c := map[string]any{"jti": "j1", "htm": "POST", "htu": url, "iat": t0.Unix(), "ath": dpop.TokenHash(agent.token), "x": 1}
			return jws(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": pubJWK(agent.key)}, c, edSign)
		}, nil, ""},
		{"not a JWS", func(*testing.T) string { return "abc" }, nil, dpop.CheckMalformed},
		{"oversized", func(*testing.T) string { return strings.Repeat("a.", dpop.MaxProofBytes) }, nil, dpop.CheckMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := expect(agent)
			if c.expect != nil {
				c.expect(&e)
			}
			p, err := dpop.Parse(c.proof(t))
			if err == nil {
				err = p.Verify(e)
			}
			var de *dpop.Error
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && !errors.As(err, &de):
				t.Fatalf("want %s, got %v", c.want, err)
			case c.want != "" && de.Check != c.want:
				t.Fatalf("want %s, got %s (%v)", c.want, de.Check, err)
			case c.want != "" && dpop.CheckOf(err.Error()) != c.want:
				t.Fatalf("CheckOf(%q) = %q", err.Error(), dpop.CheckOf(err.Error()))
			}
			if err == nil && p.Thumbprint != dpop.Thumbprint(agent.key.Public().(ed25519.PublicKey)) {
				t.Fatalf("thumbprint %s", p.Thumbprint)
			}
		})
	}
}

// TestThumbprint checks RFC 7638 against the RFC 8037 appendix A.3 example.
func TestThumbprint(t *testing.T) {
	x, _ := base64.RawURLEncoding.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	if got, want := dpop.Thumbprint(ed25519.PublicKey(x)), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"; got != want {
		t.Fatalf("thumbprint %s, want %s", got, want)
	}
}

func TestReplayKeyDiffersPerJTIAndKey(t *testing.T) {
	agent := newHolder(t, "cap-agent")
	s := agent.signer(t, t0)
	a, _ := s.Proof("POST", url)
	b, _ := s.Proof("POST", url)
	pa, err1 := dpop.Parse(a)
	pb, err2 := dpop.Parse(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if pa.ReplayKey() == pb.ReplayKey() {
		t.Fatal("two proofs share a replay key")
	}
	if again, _ := dpop.Parse(a); again.ReplayKey() != pa.ReplayKey() {
		t.Fatal("one proof, two replay keys")
	}
}

func TestToolProof(t *testing.T) {
	agent, other := newHolder(t, "cap-agent"), newHolder(t, "cap-other")
	args := json.RawMessage(`{"b":2,"a":1}`)
	tp, err := agent.signer(t, t0).ToolProof("srv", "tool", args)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(tp)
	call := dpop.Call{Subject: agent.subj, CapabilityID: "cap-agent", ToolServer: "srv", ToolName: "tool",
		Arguments: json.RawMessage(`{"a":1,"b":2}`), Now: t0}
	cases := []struct {
		name string
		raw  func() []byte
		call func(c *dpop.Call)
		want dpop.Check
	}{
		{"valid (same arguments, other order)", func() []byte { return raw }, nil, ""},
		{"other arguments", func() []byte { return raw }, func(c *dpop.Call) { c.Arguments = json.RawMessage(`{"a":2}`) }, dpop.CheckCall},
		{"other tool", func() []byte { return raw }, func(c *dpop.Call) { c.ToolName = "other" }, dpop.CheckCall},
		{"other capability", func() []byte { return raw }, func(c *dpop.Call) { c.CapabilityID = "cap-x" }, dpop.CheckCall},
		{"other key", func() []byte { return raw }, func(c *dpop.Call) { c.Subject = other.subj }, dpop.CheckKey},
		{"stale", func() []byte { return raw }, func(c *dpop.Call) { c.Now = t0.Add(2 * dpop.DefaultLifetime) }, dpop.CheckStale},
		{"future", func() []byte { return raw }, func(c *dpop.Call) { c.Now = t0.Add(-time.Minute) }, dpop.CheckFuture},
		{"tampered", func() []byte { return []byte(strings.Replace(string(raw), `"tool"`, `"tool2"`, 1)) }, nil, dpop.CheckMalformed},
		{"wrong schema", func() []byte { return []byte(strings.Replace(string(raw), dpop.ToolProofSchema, "x", 1)) }, nil, dpop.CheckMalformed},
		{"an unknown member", func() []byte { return []byte(strings.Replace(string(raw), `{`, `{"x":1,`, 1)) }, nil, dpop.CheckMalformed},
		{"a member in another case", func() []byte { return []byte(strings.Replace(string(raw), `"nonce"`, `"NONCE"`, 1)) }, nil, dpop.CheckMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := call
			if c.call != nil {
				c.call(&cl)
			}
			p, err := dpop.ParseToolProof(c.raw())
			if err == nil {
				err = p.VerifyCall(cl)
			}
			var de *dpop.Error
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (!errors.As(err, &de) || de.Check != c.want):
				t.Fatalf("want %s, got %v", c.want, err)
			}
		})
	}
}

func TestFromRequest(t *testing.T) {
	agent := newHolder(t, "cap-agent")
	proof, _ := agent.signer(t, t0).Proof("POST", "http://edge.example/a2a")
	cases := []struct {
		name    string
		headers map[string][]string
		token   string
		proof   bool
		err     string
		invalid dpop.Check
	}{
		{"dpop", map[string][]string{"Authorization": {"DPoP " + agent.token}, "Dpop": {proof}}, agent.token, true, "", ""},
		{"bearer", map[string][]string{"Authorization": {"Bearer " + agent.token}}, agent.token, false, "", ""},
		{"x-chio-capability", map[string][]string{"X-Chio-Capability": {agent.token}}, agent.token, false, "", ""},
		{"dpop scheme without a proof", map[string][]string{"Authorization": {"DPoP " + agent.token}}, agent.token, false, "", dpop.CheckMissing},
		{"proof with bearer", map[string][]string{"Authorization": {"Bearer " + agent.token}, "Dpop": {proof}}, agent.token, true, "", dpop.CheckMalformed},
		{"proof with x-chio-capability", map[string][]string{"X-Chio-Capability": {agent.token}, "Dpop": {proof}}, agent.token, true, "", dpop.CheckMalformed},
		{"two proofs", map[string][]string{"Authorization": {"DPoP " + agent.token}, "Dpop": {proof, proof}}, agent.token, false, "", dpop.CheckMalformed},
		{"dpop scheme without a token", map[string][]string{"Authorization": {"DPoP "}, "Dpop": {proof}}, "", false, "not \"DPoP <capability>\"", ""},
		{"nothing", map[string][]string{}, "", false, "no capability", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "http://edge.example/a2a?x=1", nil)
			for k, v := range c.headers {
				r.Header[k] = v
			}
			p, err := dpop.FromRequest(r, "")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("want error %q, got %v", c.err, err)
				}
				return
			}
			if err != nil || p.Token != c.token || (p.Proof != "") != c.proof || p.URL != "http://edge.example/a2a" || p.Method != "POST" {
				t.Fatalf("got %+v, %v", p, err)
			}
			switch {
			case c.invalid == "" && p.Invalid != nil:
				t.Fatalf("invalid: %v", p.Invalid)
			case c.invalid != "" && (p.Invalid == nil || p.Invalid.Check != c.invalid):
				t.Fatalf("want invalid %s, got %v", c.invalid, p.Invalid)
			}
		})
	}
	r := httptest.NewRequest(http.MethodGet, "http://10.0.0.1:8080/v1/tasks", nil)
	if got := dpop.RequestURL(r, "https://public.example/"); got != "https://public.example/v1/tasks" {
		t.Fatalf("RequestURL with origin: %s", got)
	}
}

// TestTransport checks that the RoundTripper signs each request for its
// own method and URL, and leaves the caller's request untouched.
func TestTransport(t *testing.T) {
	agent := newHolder(t, "cap-agent")
	var got []dpop.Presented
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := dpop.FromRequest(r, "")
		if err != nil {
			http.Error(w, err.Error(), 401)
			return
		}
		pr, err := dpop.Parse(p.Proof)
		if err == nil {
			err = pr.Verify(dpop.Expect{Subject: agent.subj, Token: p.Token, Method: p.Method, URL: p.URL})
		}
		if err != nil {
			http.Error(w, err.Error(), 401)
			return
		}
		got = append(got, p)
	}))
	defer srv.Close()
	s, err := dpop.NewSigner(agent.key, agent.token)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &dpop.Transport{Signer: s}}
	for _, m := range []string{"GET", "POST"} {
		req, _ := http.NewRequest(m, srv.URL+"/v1/things?q=1", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", m, resp.StatusCode)
		}
		if req.Header.Get("Authorization") != "" {
			t.Fatal("the caller's request was changed")
		}
	}
	if len(got) != 2 || got[0].Proof == got[1].Proof {
		t.Fatalf("want two distinct proofs, got %d", len(got))
	}
	if _, err := dpop.NewSigner(newHolder(t, "x").key, agent.token); err == nil {
		t.Fatal("a signer with a key that is not the token's subject")
	}
}

// FuzzParse: no input panics Parse, and whatever it accepts verifies by
// the key it reports and has the claims it promises.
func FuzzParse(f *testing.F) {
	agent := newHolder(f, "cap-agent")
	p, _ := agent.signer(f, t0).Proof("POST", url)
	f.Add(p)
	f.Add("e30.e30.")
	f.Add("")
	f.Add(strings.Repeat(".", 3))
	f.Fuzz(func(t *testing.T, s string) {
		pr, err := dpop.Parse(s)
		if err != nil {
			var de *dpop.Error
			if !errors.As(err, &de) || de.Check != dpop.CheckMalformed {
				t.Fatalf("error is not a malformed *dpop.Error: %v", err)
			}
			return
		}
		if pr.JTI == "" || pr.HTM == "" || pr.HTU == "" || pr.IAT <= 0 || len(pr.Key) != ed25519.PublicKeySize {
			t.Fatalf("accepted an incomplete proof: %+v", pr.Claims)
		}
	})
}

// FuzzParseToolProof: no input panics, and what is accepted is signed by
// its agent_key.
func FuzzParseToolProof(f *testing.F) {
	agent := newHolder(f, "cap-agent")
	tp, _ := agent.signer(f, t0).ToolProof("srv", "tool", json.RawMessage(`{}`))
	raw, _ := json.Marshal(tp)
	f.Add(raw)
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := dpop.ParseToolProof(b)
		if err != nil {
			return
		}
		if p.Schema != dpop.ToolProofSchema || p.Nonce == "" || p.Signature == "" {
			t.Fatalf("accepted %+v", p)
		}
	})
}
