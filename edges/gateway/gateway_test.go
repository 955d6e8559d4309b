package gateway

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agentKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
)

type fixture struct {
	url string
	js  jetstream.JetStream
}

// start runs the decision point for the bridge's httpbin spec with a real
// kernel, dispatcher and JetStream. Its upstream is never called: the
// openapi server is registered only so that the kernel knows the tools.
func start(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	spec, err := openapi.Load(ctx, "../openapi/testdata/httpbin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := openapi.Build(spec, openapi.Config{ServerID: "httpbin"})
	if err != nil {
		t.Fatal(err)
	}
	never, _ := url.Parse("http://127.0.0.1:1")
	srv, err := openapi.NewServer(b, openapi.Upstream{BaseURL: never, Headers: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	env := govtest.New(t, govtest.WithServers(srv), govtest.WithIssuers(issuerKey), govtest.WithEdgeID("gateway-test"))
	s := httptest.NewServer(New(env.Kernel, env.Dispatch, WithAPI(b)).Handler())
	t.Cleanup(s.Close)
	return &fixture{url: s.URL, js: env.JS}
}

func forward(t testing.TB, f *fixture, h http.Header) (*http.Response, denial) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.url+ForwardPath, nil)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d denial
	_ = json.NewDecoder(resp.Body).Decode(&d)
	return resp, d
}

// Forward authentication reads either convention for the original
// request (nginx's first when both are sent), refuses a request without
// one as a configuration error, and records each decided request: an
// allow with the not_observed outcome, or a deny.
func TestForwardAuthConventions(t *testing.T) {
	f := start(t)
	tok := govtest.Valid(t, issuerKey, agentKey, "cap-get", govtest.Invoke("httpbin", "httpGet"))
	bearer := "Bearer " + tok
	for _, c := range []struct {
		name   string
		h      http.Header
		status int
		via    string
	}{
		{"nginx", http.Header{"Authorization": {bearer}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/get?q=1"}}, 200, "auth_request"},
		{"caddy", http.Header{"Authorization": {bearer}, "X-Forwarded-Method": {"GET"}, "X-Forwarded-Uri": {"/get?q=2"}}, 200, "forward_auth"},
		// One pair is the client's when both come: never decided.
		{"both conventions", http.Header{"Authorization": {bearer}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/get"},
			"X-Forwarded-Method": {"DELETE"}, "X-Forwarded-Uri": {"/delete?reason=x"}}, 400, ""},
		{"half of the other", http.Header{"Authorization": {bearer}, "X-Forwarded-Method": {"GET"}, "X-Forwarded-Uri": {"/get"},
			"X-Original-Uri": {"/delete?reason=x"}}, 400, ""},
		{"lower-case method", http.Header{"Authorization": {bearer}, "X-Original-Method": {"get"}, "X-Original-Uri": {"/get"}}, 400, ""},
		// What the operation does not declare would reach the upstream
		// undecided.
		{"undeclared query", http.Header{"Authorization": {bearer}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/get?q=1&Q=2"}}, 403, ""},
		{"path parameters", http.Header{"Authorization": {bearer}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/get;admin"}}, 403, ""},
		{"not granted", http.Header{"Authorization": {bearer}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/headers"}}, 403, "auth_request"},
		{"no original request", http.Header{"Authorization": {bearer}}, 400, ""},
		{"not a path", http.Header{"Authorization": {bearer}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"http://elsewhere/get"}}, 400, ""},
		{"not an operation", http.Header{"Authorization": {bearer}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/nowhere"}}, 403, ""},
		{"no credential", http.Header{"X-Original-Method": {"GET"}, "X-Original-Uri": {"/get"}}, 401, ""},
	} {
		resp, d := forward(t, f, c.h)
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d %+v, want %d", c.name, resp.StatusCode, d, c.status)
		}
		rid := resp.Header.Get(ReceiptHeader)
		if c.via == "" {
			if rid != "" {
				t.Fatalf("%s: a receipt for a request nothing decided", c.name)
			}
			continue
		}
		ev, ok := natstest.Decisions(t, f.js)[rid]
		var meta map[string]any
		if !ok || json.Unmarshal(ev.Metadata, &meta) != nil || meta["gateway"] != c.via {
			t.Fatalf("%s: decision %q %s", c.name, rid, ev.Metadata)
		}
		out, hasOutcome := natstest.Outcomes(t, f.js)[rid]
		switch {
		case c.status == 200 && (!hasOutcome || out.Outcome != schemas.OutcomeNotObserved || out.ContentHash != schemas.EmptyContentHash):
			t.Fatalf("%s: outcome %+v", c.name, out)
		case c.status != 200 && (hasOutcome || ev.Decision.Verdict != schemas.VerdictDeny):
			t.Fatalf("%s: a refused request's events %+v %+v", c.name, ev.Decision, out)
		}
	}
}

// A holder-bound capability works through forward authentication: the
// proof names the URL the client called (X-Forwarded-Proto and
// X-Forwarded-Host, as the gateway saw them), and a proof for another
// URL, or the same proof again, is refused with DPoP's challenge.
func TestForwardAuthDPoP(t *testing.T) {
	f := start(t)
	required := true
	tok := govtest.Valid(t, issuerKey, agentKey, "cap-dpop", schemas.ToolGrant{ServerID: "httpbin", ToolName: "httpGet",
		Operations: []schemas.Operation{schemas.OpInvoke}, DPoPRequired: &required})
	s := dpoptest.Signer(t, agentKey, tok)
	const called = "https://api.example/get"
	orig := func(proof string) http.Header {
		return http.Header{"Authorization": {"DPoP " + tok}, "Dpop": {proof}, "X-Original-Method": {"GET"},
			"X-Original-Uri": {"/get?q=1"}, "X-Forwarded-Host": {"api.example"}, "X-Forwarded-Proto": {"https"}}
	}
	p := dpoptest.Proof(t, s, "GET", called)
	if resp, d := forward(t, f, orig(p)); resp.StatusCode != http.StatusOK {
		t.Fatalf("bound call: %d %+v", resp.StatusCode, d)
	}
	if resp, d := forward(t, f, orig(p)); resp.StatusCode != http.StatusUnauthorized || d.DPoPCheck != string(dpop.CheckReplayed) ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), "chio") {
		t.Fatalf("replayed proof: %d %+v", resp.StatusCode, d)
	}
	if resp, d := forward(t, f, orig(dpoptest.Proof(t, s, "GET", "https://other.example/get"))); resp.StatusCode != http.StatusUnauthorized || d.DPoPCheck == "" {
		t.Fatalf("a proof for another URL: %d %+v", resp.StatusCode, d)
	}
	if resp, d := forward(t, f, http.Header{"Authorization": {"Bearer " + tok}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/get"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bound capability as a bearer token: %d %+v", resp.StatusCode, d)
	}
}

// BenchmarkForwardAuth is one forward-authentication decision over
// loopback HTTP: the kernel's checks, the decision and the not_observed
// outcome made durable on JetStream.
func BenchmarkForwardAuth(b *testing.B) {
	f := start(b)
	tok := govtest.Token(b, issuerKey, agentKey, "cap-bench", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), govtest.Invoke("httpbin", "httpGet"))
	h := http.Header{"Authorization": {"Bearer " + tok}, "X-Original-Method": {"GET"}, "X-Original-Uri": {"/get?q=bench"}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if resp, d := forward(b, f, h); resp.StatusCode != http.StatusOK {
			b.Fatalf("%d %+v", resp.StatusCode, d)
		}
	}
}
