package protect

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var helperKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))

func pubOf(k ed25519.PrivateKey) string {
	return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey))
}

// lineage is an agent's token that can delegate, the helper's token it
// delegated, and the agent's token as the helper rebuilds it from its own
// delegation chain.
type lineage struct {
	agent, helper, rebuilt string
}

// delegated issues the agent httpGet with invoke and delegate, and has
// the agent delegate httpGet (invoke only) to the helper's key.
func delegated(t *testing.T) lineage {
	t.Helper()
	now := time.Now()
	agent, err := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{ID: "cap-agent", Issuer: pubOf(issuerKey), Subject: pubOf(agentKey),
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "httpbin", ToolName: "httpGet",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	helper, err := schemas.Delegate(agentKey, agent, schemas.CapabilityBody{ID: "cap-helper", Subject: pubOf(helperKey),
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "httpbin", ToolName: "httpGet",
			Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: agent.IssuedAt, ExpiresAt: agent.ExpiresAt})
	if err != nil {
		t.Fatal(err)
	}
	rebuilt := helper.Ancestor(len(helper.DelegationChain) - 1)
	if rebuilt.ID != agent.ID || rebuilt.VerifySignature() != nil {
		t.Fatalf("the rebuilt parent %+v does not stand for the agent's token", rebuilt)
	}
	return lineage{agent: header(t, agent), helper: header(t, helper), rebuilt: header(t, rebuilt)}
}

func header(t *testing.T, tok *schemas.CapabilityToken) string {
	t.Helper()
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func signer(t *testing.T, key ed25519.PrivateKey, token string, opts ...dpop.SignerOption) *dpop.Signer {
	t.Helper()
	s, err := dpop.NewSigner(key, token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sendHeaders sends a request with exactly the headers h.
func sendHeaders(t *testing.T, method, u string, h http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// dpopHeaders presents token with proof.
func dpopHeaders(token, proof string) http.Header {
	return http.Header{"Authorization": {"DPoP " + token}, "Dpop": {proof}}
}

// binding is a decision event's metadata.attribution.binding.
func binding(t *testing.T, ev schemas.DecisionEvent) map[string]string {
	t.Helper()
	var m struct {
		Attribution struct {
			Binding map[string]string `json:"binding"`
		} `json:"attribution"`
	}
	if err := json.Unmarshal(ev.Metadata, &m); err != nil {
		t.Fatalf("metadata %s: %v", ev.Metadata, err)
	}
	return m.Attribution.Binding
}

// refusedProof checks a 401 for a refused proof: the DPoP challenge
// naming the check, the denial naming it, and a deny receipt whose reason
// names it (on the decision, or on the refused outcome of a proof found
// replayed after the decision was written).
func refusedProof(t *testing.T, f *fixture, resp *http.Response, body []byte, check dpop.Check) {
	t.Helper()
	var d denial
	if err := json.Unmarshal(body, &d); err != nil || resp.StatusCode != http.StatusUnauthorized || d.Error != "chio_access_denied" ||
		d.Guard != kernel.StepDPoP || d.DPoPCheck != string(check) || !strings.Contains(d.Message, "dpop "+string(check)+":") {
		t.Fatalf("%d %s, want 401 naming %s", resp.StatusCode, body, check)
	}
	ch := resp.Header.Values("WWW-Authenticate")
	if len(ch) != 1 || ch[0] != dpop.Challenge(check) || !strings.Contains(ch[0], `error="invalid_dpop_proof"`) {
		t.Fatalf("challenge %q", ch)
	}
	ev, ok := natstest.Decisions(t, f.js)[d.ReceiptID]
	if !ok || resp.Header.Get(ReceiptHeader) != d.ReceiptID {
		t.Fatalf("no decision for receipt %q", d.ReceiptID)
	}
	reason := ev.Decision.Reason
	if ev.Decision.Verdict == schemas.VerdictAllow {
		o, ok := natstest.Outcomes(t, f.js)[d.ReceiptID]
		if !ok || o.Outcome != schemas.OutcomeRefused || o.Guard != kernel.StepDPoP {
			t.Fatalf("allowed decision %+v without its refused outcome %+v", ev.Decision, o)
		}
		reason = o.Reason
	} else if ev.Decision.Guard != kernel.StepDPoP {
		t.Fatalf("deny %+v", ev.Decision)
	}
	if dpop.CheckOf(reason) != check {
		t.Fatalf("receipt reason %q, want check %s", reason, check)
	}
}

// The rebuilt-parent attack: a helper that rebuilds its parent's token
// from its own delegation chain cannot act as the parent, as a bearer
// token or with a proof by its own key; the agent can, with a proof by
// its key, and its receipt records the binding; the helper's own leaf
// token still works as a bearer token.
func TestRebuiltParentRefused(t *testing.T) {
	f := start(t)
	l := delegated(t)
	u := f.url + "/get"

	resp, body := send(t, "GET", u, l.rebuilt, "", nil)
	refusedProof(t, f, resp, body, dpop.CheckMissing)
	resp, body = sendHeaders(t, "GET", u, http.Header{"Authorization": {"Bearer " + l.agent}})
	refusedProof(t, f, resp, body, dpop.CheckMissing)

	p, err := signer(t, helperKey, l.helper).Proof("GET", u)
	if err != nil {
		t.Fatal(err)
	}
	resp, body = sendHeaders(t, "GET", u, dpopHeaders(l.rebuilt, p))
	refusedProof(t, f, resp, body, dpop.CheckKey)

	h := http.Header{}
	if err := signer(t, agentKey, l.agent).Authorize(h, "GET", u); err != nil {
		t.Fatal(err)
	}
	resp, body = sendHeaders(t, "GET", u, h)
	rid := resp.Header.Get(ReceiptHeader)
	if resp.StatusCode != http.StatusOK || rid == "" {
		t.Fatalf("the agent with its proof: %d %s", resp.StatusCode, body)
	}
	ev := natstest.Decisions(t, f.js)[rid]
	if b := binding(t, ev); ev.Decision.Verdict != schemas.VerdictAllow || b["method"] != dpop.MethodDPoP ||
		b["jkt"] != dpop.Thumbprint(agentKey.Public().(ed25519.PublicKey)) {
		t.Fatalf("agent's receipt %+v binding %v", ev.Decision, b)
	}

	resp, body = send(t, "GET", u, l.helper, "", nil)
	rid = resp.Header.Get(ReceiptHeader)
	if resp.StatusCode != http.StatusOK || binding(t, natstest.Decisions(t, f.js)[rid])["method"] != dpop.MethodBearer {
		t.Fatalf("the helper's leaf token as bearer: %d %s", resp.StatusCode, body)
	}
	if n := f.upstream.Load(); n != 2 {
		t.Fatalf("the API received %d requests, want 2", n)
	}
}

// Proofs that do not fit the request are refused: 401 with the DPoP
// challenge, and a deny receipt naming the check. Nothing reaches the API.
func TestRefusedProofs(t *testing.T) {
	f := start(t)
	l := delegated(t)
	u := f.url + "/get"
	agent := signer(t, agentKey, l.agent)
	mustProof := func(s *dpop.Signer, method, url string) string {
		p, err := s.Proof(method, url)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Another token of the same subject: its proofs carry its ath.
	other := valid(t, "httpGet")
	es256 := func() string {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{EmbedJWK: true}).WithType(dpop.ProofType))
		if err != nil {
			t.Fatal(err)
		}
		claims, _ := json.Marshal(dpop.Claims{JTI: "es256-1", HTM: "GET", HTU: u, IAT: time.Now().Unix(), ATH: dpop.TokenHash(l.agent)})
		jws, err := s.Sign(claims)
		if err != nil {
			t.Fatal(err)
		}
		out, err := jws.CompactSerialize()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// A jwk with the private member: built by hand, signed with the key.
	privateJWK := func() string {
		b64 := base64.RawURLEncoding.EncodeToString
		hdr, _ := json.Marshal(map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": map[string]string{
			"kty": "OKP", "crv": "Ed25519", "x": b64(agentKey.Public().(ed25519.PublicKey)), "d": b64(agentKey.Seed())}})
		claims, _ := json.Marshal(dpop.Claims{JTI: "private-1", HTM: "GET", HTU: u, IAT: time.Now().Unix(), ATH: dpop.TokenHash(l.agent)})
		input := b64(hdr) + "." + b64(claims)
		return input + "." + b64(ed25519.Sign(agentKey, []byte(input)))
	}
	cases := []struct {
		name  string
		proof string
		check dpop.Check
		why   string // in the reason, when the check alone does not say it
	}{
		{"another URL", mustProof(agent, "GET", f.url+"/headers"), dpop.CheckURL, ""},
		{"another method", mustProof(agent, "POST", u), dpop.CheckMethod, ""},
		{"another token", mustProof(signer(t, agentKey, other), "GET", u), dpop.CheckToken, ""},
		{"another key", mustProof(signer(t, helperKey, l.helper), "GET", u), dpop.CheckKey, ""},
		{"expired", mustProof(signer(t, agentKey, l.agent, dpop.WithClock(func() time.Time { return time.Now().Add(-5 * time.Minute) })), "GET", u), dpop.CheckStale, ""},
		{"from the future", mustProof(signer(t, agentKey, l.agent, dpop.WithClock(func() time.Time { return time.Now().Add(5 * time.Minute) })), "GET", u), dpop.CheckFuture, ""},
		{"alg ES256", es256(), dpop.CheckMalformed, "signature algorithm"},
		{"private jwk", privateJWK(), dpop.CheckMalformed, "private"},
		{"not a JWS", "not.a.proof", dpop.CheckMalformed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.agent, c.proof))
			refusedProof(t, f, resp, body, c.check)
			if !strings.Contains(string(body), c.why) {
				t.Fatalf("%s does not say %q", body, c.why)
			}
		})
	}
	// A leaf token needs no proof, but one it presents must hold.
	t.Run("leaf token with a bad proof", func(t *testing.T) {
		resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.helper, mustProof(signer(t, helperKey, l.helper), "GET", f.url+"/headers")))
		refusedProof(t, f, resp, body, dpop.CheckURL)
	})
	// A proof is used once: its replay is refused, and nothing more runs.
	t.Run("replayed", func(t *testing.T) {
		p := mustProof(agent, "GET", u)
		if resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.agent, p)); resp.StatusCode != http.StatusOK {
			t.Fatalf("first use: %d %s", resp.StatusCode, body)
		}
		resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.agent, p))
		refusedProof(t, f, resp, body, dpop.CheckReplayed)
	})
	if n := f.upstream.Load(); n != 1 {
		t.Fatalf("the API received %d requests, want the one with a good proof", n)
	}
}

// A presentation wrong in form reaches the kernel as a refused proof: a
// 401 with the DPoP challenge naming the check and a deny receipt whose
// reason names it ("dpop missing_proof: ..." or "dpop malformed: ...").
// Nothing reaches the API.
func TestMalformedPresentation(t *testing.T) {
	f := start(t)
	l := delegated(t)
	u := f.url + "/get"
	agent := signer(t, agentKey, l.agent)
	proof := func() string {
		p, err := agent.Proof("GET", u)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name  string
		h     http.Header
		check dpop.Check
	}{
		{"DPoP scheme without a proof", http.Header{"Authorization": {"DPoP " + l.agent}}, dpop.CheckMissing},
		{"two proofs", http.Header{"Authorization": {"DPoP " + l.agent}, "Dpop": {proof(), proof()}}, dpop.CheckMalformed},
		{"a proof beside Bearer", http.Header{"Authorization": {"Bearer " + l.agent}, "Dpop": {proof()}}, dpop.CheckMalformed},
		{"a proof beside X-Chio-Capability", http.Header{"X-Chio-Capability": {l.agent}, "Dpop": {proof()}}, dpop.CheckMalformed},
		{"a leaf token's proof beside Bearer", http.Header{"Authorization": {"Bearer " + l.helper}, "Dpop": {proof()}}, dpop.CheckMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := sendHeaders(t, "GET", u, c.h)
			refusedProof(t, f, resp, body, c.check)
		})
	}
	if n := f.upstream.Load(); n != 0 {
		t.Fatalf("the API received %d requests", n)
	}
}

// An unreachable replay state is a server condition: 503
// dpop_state_unavailable with Retry-After and no challenge, the receipt
// kept (the decision allowed, its outcome refused at the proof step).
// Nothing reaches the API; a bearer token that needs no proof still does.
func TestProofStateUnavailable(t *testing.T) {
	f := start(t)
	l := delegated(t)
	u := f.url + "/get"
	if err := f.js.DeleteKeyValue(context.Background(), schemas.ProofsBucket); err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	if err := signer(t, agentKey, l.agent).Authorize(h, "GET", u); err != nil {
		t.Fatal(err)
	}
	resp, body := sendHeaders(t, "GET", u, h)
	var d denial
	if err := json.Unmarshal(body, &d); err != nil || resp.StatusCode != http.StatusServiceUnavailable || d.Error != "dpop_state_unavailable" ||
		d.DPoPCheck != string(dpop.CheckState) || resp.Header.Get("Retry-After") == "" || resp.Header.Get("WWW-Authenticate") != "" ||
		d.ReceiptID == "" || resp.Header.Get(ReceiptHeader) != d.ReceiptID {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, body)
	}
	ev := natstest.Decisions(t, f.js)[d.ReceiptID]
	o := natstest.Outcomes(t, f.js)[d.ReceiptID]
	if ev.Decision.Verdict != schemas.VerdictAllow || o.Outcome != schemas.OutcomeRefused || dpop.CheckOf(o.Reason) != dpop.CheckState {
		t.Fatalf("decision %+v outcome %+v", ev.Decision, o)
	}
	if resp, body := send(t, "GET", u, l.helper, "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the helper's leaf token: %d %s", resp.StatusCode, body)
	}
	if n := f.upstream.Load(); n != 1 {
		t.Fatalf("the API received %d requests, want the bearer one", n)
	}
}
