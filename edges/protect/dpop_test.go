package protect

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var helperKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))

// delegated issues the agent httpGet with invoke and delegate, and has
// the agent delegate httpGet (invoke only) to the helper's key.
func delegated(t *testing.T) *dpoptest.Chain {
	t.Helper()
	return dpoptest.NewChain(t, dpoptest.Spec{Issuer: issuerKey, AgentKey: agentKey, HelperKey: helperKey,
		Agent: []schemas.ToolGrant{{ServerID: "httpbin", ToolName: "httpGet",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}},
		Helper: []schemas.ToolGrant{{ServerID: "httpbin", ToolName: "httpGet",
			Operations: []schemas.Operation{schemas.OpInvoke}}}})
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
	if resp.Header.Get(ReceiptHeader) != d.ReceiptID {
		t.Fatalf("receipt header %q, body %q", resp.Header.Get(ReceiptHeader), d.ReceiptID)
	}
	dpoptest.WantDeny(t, natstest.Decisions(t, f.js), natstest.Outcomes(t, f.js), d.ReceiptID, kernel.StepDPoP, check)
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

	resp, body := send(t, "GET", u, l.Rebuilt, "", nil)
	refusedProof(t, f, resp, body, dpop.CheckMissing)
	resp, body = sendHeaders(t, "GET", u, http.Header{"Authorization": {"Bearer " + l.Agent}})
	refusedProof(t, f, resp, body, dpop.CheckMissing)

	p := dpoptest.Proof(t, dpoptest.Signer(t, helperKey, l.Helper), "GET", u)
	resp, body = sendHeaders(t, "GET", u, dpopHeaders(l.Rebuilt, p))
	refusedProof(t, f, resp, body, dpop.CheckKey)

	h := http.Header{}
	if err := dpoptest.Signer(t, agentKey, l.Agent).Authorize(h, "GET", u); err != nil {
		t.Fatal(err)
	}
	resp, body = sendHeaders(t, "GET", u, h)
	rid := resp.Header.Get(ReceiptHeader)
	if resp.StatusCode != http.StatusOK || rid == "" {
		t.Fatalf("the agent with its proof: %d %s", resp.StatusCode, body)
	}
	ev := natstest.Decisions(t, f.js)[rid]
	if b := dpoptest.Binding(t, ev); ev.Decision.Verdict != schemas.VerdictAllow || b["method"] != dpop.MethodDPoP ||
		b["jkt"] != dpoptest.JKT(agentKey) {
		t.Fatalf("agent's receipt %+v binding %v", ev.Decision, b)
	}

	resp, body = send(t, "GET", u, l.Helper, "", nil)
	rid = resp.Header.Get(ReceiptHeader)
	if resp.StatusCode != http.StatusOK || dpoptest.Binding(t, natstest.Decisions(t, f.js)[rid])["method"] != dpop.MethodBearer {
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
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	// Another token of the same subject: its proofs carry its ath.
	other := valid(t, "httpGet")
	// A jwk with the private member: built by hand, signed with the key.
	b64 := base64.RawURLEncoding.EncodeToString
	privateJWK := dpoptest.JWS(t, map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": map[string]string{
		"kty": "OKP", "crv": "Ed25519", "x": b64(agentKey.Public().(ed25519.PublicKey)), "d": b64(agentKey.Seed())}},
		dpop.Claims{JTI: "private-1", HTM: "GET", HTU: u, IAT: time.Now().Unix(), ATH: dpop.TokenHash(l.Agent)},
		func(b []byte) []byte { return ed25519.Sign(agentKey, b) })
	cases := []struct {
		name  string
		proof string
		check dpop.Check
		why   string // in the reason, when the check alone does not say it
	}{
		{"another URL", dpoptest.Proof(t, agent, "GET", f.url+"/headers"), dpop.CheckURL, ""},
		{"another method", dpoptest.Proof(t, agent, "POST", u), dpop.CheckMethod, ""},
		{"another token", dpoptest.Proof(t, dpoptest.Signer(t, agentKey, other), "GET", u), dpop.CheckToken, ""},
		{"another key", dpoptest.Proof(t, dpoptest.Signer(t, helperKey, l.Helper), "GET", u), dpop.CheckKey, ""},
		{"expired", dpoptest.Proof(t, dpoptest.Signer(t, agentKey, l.Agent, dpop.WithClock(func() time.Time { return time.Now().Add(-5 * time.Minute) })), "GET", u), dpop.CheckStale, ""},
		{"from the future", dpoptest.Proof(t, dpoptest.Signer(t, agentKey, l.Agent, dpop.WithClock(func() time.Time { return time.Now().Add(5 * time.Minute) })), "GET", u), dpop.CheckFuture, ""},
		{"alg ES256", dpoptest.ES256Proof(t, l.Agent, "GET", u), dpop.CheckMalformed, "signature algorithm"},
		{"private jwk", privateJWK, dpop.CheckMalformed, "private"},
		{"not a JWS", "not.a.proof", dpop.CheckMalformed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.Agent, c.proof))
			refusedProof(t, f, resp, body, c.check)
			if !strings.Contains(string(body), c.why) {
				t.Fatalf("%s does not say %q", body, c.why)
			}
		})
	}
	// A leaf token needs no proof, but one it presents must hold.
	t.Run("leaf token with a bad proof", func(t *testing.T) {
		resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.Helper, dpoptest.Proof(t, dpoptest.Signer(t, helperKey, l.Helper), "GET", f.url+"/headers")))
		refusedProof(t, f, resp, body, dpop.CheckURL)
	})
	// A proof is used once: its replay is refused, and nothing more runs.
	t.Run("replayed", func(t *testing.T) {
		p := dpoptest.Proof(t, agent, "GET", u)
		if resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.Agent, p)); resp.StatusCode != http.StatusOK {
			t.Fatalf("first use: %d %s", resp.StatusCode, body)
		}
		resp, body := sendHeaders(t, "GET", u, dpopHeaders(l.Agent, p))
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
	agent := dpoptest.Signer(t, agentKey, l.Agent)
	proof := func() string { return dpoptest.Proof(t, agent, "GET", u) }
	for _, c := range []struct {
		name  string
		h     http.Header
		check dpop.Check
	}{
		{"DPoP scheme without a proof", http.Header{"Authorization": {"DPoP " + l.Agent}}, dpop.CheckMissing},
		{"two proofs", http.Header{"Authorization": {"DPoP " + l.Agent}, "Dpop": {proof(), proof()}}, dpop.CheckMalformed},
		{"a proof beside Bearer", http.Header{"Authorization": {"Bearer " + l.Agent}, "Dpop": {proof()}}, dpop.CheckMalformed},
		{"a proof beside X-Chio-Capability", http.Header{"X-Chio-Capability": {l.Agent}, "Dpop": {proof()}}, dpop.CheckMalformed},
		{"a leaf token's proof beside Bearer", http.Header{"Authorization": {"Bearer " + l.Helper}, "Dpop": {proof()}}, dpop.CheckMalformed},
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
	natstest.BreakProofState(t, f.js)
	h := http.Header{}
	if err := dpoptest.Signer(t, agentKey, l.Agent).Authorize(h, "GET", u); err != nil {
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
	if resp, body := send(t, "GET", u, l.Helper, "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the helper's leaf token: %d %s", resp.StatusCode, body)
	}
	if n := f.upstream.Load(); n != 1 {
		t.Fatalf("the API received %d requests, want the bearer one", n)
	}
}
