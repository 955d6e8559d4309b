package readauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"github.com/nats-io/nats.go/jetstream"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// proofFixture is an issuer, a reader R whose read token can delegate
// (chio.read/*:read,delegate), R's delegate H (chio.read/receipts), a
// plain reader P and a dpop_required reader D, behind an authenticator
// with a real revocation mirror and a real replay state on embedded
// JetStream.
type proofFixture struct {
	auth                *Authenticator
	rKey, hKey, pKey    ed25519.PrivateKey
	dKey                ed25519.PrivateKey
	parent, child       *schemas.CapabilityToken
	plain, dpopRequired *schemas.CapabilityToken
	now                 time.Time
	revs                Revocations
	issuerPub           string
}

// readState is the shared state a read authenticator needs, on a fresh
// embedded JetStream: the revocations bucket and its mirror, and the
// proofs' replay state.
func readState(t *testing.T) (jetstream.KeyValue, *revocation.Watcher, *dpopreplay.Store) {
	t.Helper()
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, schemas.RevocationsConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	revs, err := revocation.Watch(ctx, kv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(revs.Stop)
	store, err := dpopreplay.Open(ctx, js, 1, dpop.DefaultLifetime, dpop.DefaultSkew)
	if err != nil {
		t.Fatal(err)
	}
	return kv, revs, store
}

func newProofFixture(t *testing.T, opts ...Option) *proofFixture {
	t.Helper()
	_, revs, store := readState(t)
	key := func() (ed25519.PrivateKey, string) {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		return priv, schemas.EncodePublicKey(pub)
	}
	issuer, issuerPub := key()
	f := &proofFixture{now: time.Now(), revs: revs, issuerPub: issuerPub}
	var rPub, hPub, pPub, dPub string
	f.rKey, rPub = key()
	f.hKey, hPub = key()
	f.pKey, pPub = key()
	f.dKey, dPub = key()
	now := uint64(f.now.Unix())
	body := func(id, subject string, grants ...schemas.ToolGrant) schemas.CapabilityBody {
		return schemas.CapabilityBody{ID: id, Issuer: issuerPub, Subject: subject, Scope: schemas.Scope{Grants: grants},
			IssuedAt: now - 10, ExpiresAt: now + 3600}
	}
	all, _ := schemas.ReadGrant(schemas.ReadAll)
	receipts, _ := schemas.ReadGrant(schemas.ReadReceipts)
	delegating := all
	delegating.Operations = []schemas.Operation{schemas.OpRead, schemas.OpDelegate}
	required := all
	required.DPoPRequired = ptr(true)
	issue := func(b schemas.CapabilityBody) *schemas.CapabilityToken {
		tok, err := schemas.IssueCapability(issuer, b)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	f.parent = issue(body("cap-r", rPub, delegating))
	var err error
	f.child, err = schemas.Delegate(f.rKey, f.parent, schemas.CapabilityBody{ID: "cap-h", Subject: hPub,
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{receipts}}, IssuedAt: now - 5, ExpiresAt: now + 1800})
	if err != nil {
		t.Fatal(err)
	}
	f.plain = issue(body("cap-p", pPub, all))
	f.dpopRequired = issue(body("cap-d", dPub, required))
	f.auth = New(append([]Option{WithTrustedIssuers(issuerPub), WithRevocations(revs), WithServiceToken("op"), WithReplay(store)}, opts...)...)
	return f
}

func ptr[T any](v T) *T { return &v }

func header(t *testing.T, tok *schemas.CapabilityToken) string {
	t.Helper()
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// dpopHeaders is Authorization: DPoP token with proof.
func dpopHeaders(token, proof string) http.Header {
	return http.Header{"Authorization": {"DPoP " + token}, "Dpop": {proof}}
}

// wantRefused checks err is an *Error with status and check.
func wantRefused(t *testing.T, r *Reader, err error, status int, check dpop.Check) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || r != nil {
		t.Fatalf("got reader %+v, error %v; want a refusal %d %s", r, err, status, check)
	}
	if e.Status != status || e.Check != check {
		t.Fatalf("refusal %d %q (%s); want %d %q", e.Status, e.Check, e.Message, status, check)
	}
	if check != "" && !strings.HasPrefix(e.Message, "dpop "+string(check)+":") {
		t.Errorf("message %q does not name the check %s", e.Message, check)
	}
}

// TestProofOfPossession: a read token that can delegate reads only with a
// proof by its subject key; the token a delegate rebuilds from its own
// chain is worth nothing to it; a proof is used once and only for its
// request; plain read tokens and the service token stay bearer.
func TestProofOfPossession(t *testing.T) {
	f := newProofFixture(t)
	parent := header(t, f.parent)
	get := func(h http.Header) (*Reader, error) { return f.auth.Authenticate(request(http.MethodGet, testURL, h)) }

	// As bearer: missing proof.
	r, err := get(http.Header{"Authorization": {"Bearer " + parent}})
	wantRefused(t, r, err, 401, dpop.CheckMissing)
	r, err = get(http.Header{"X-Chio-Capability": {parent}})
	wantRefused(t, r, err, 401, dpop.CheckMissing)

	// The delegate H rebuilds its parent from its own chain.
	rebuilt := f.child.Ancestor(len(f.child.DelegationChain) - 1)
	if rebuilt.ID != f.parent.ID {
		t.Fatalf("rebuilt %s, want %s", rebuilt.ID, f.parent.ID)
	}
	rebuiltText := header(t, rebuilt)
	r, err = get(http.Header{"Authorization": {"Bearer " + rebuiltText}})
	wantRefused(t, r, err, 401, dpop.CheckMissing)
	// With a proof by H's key (NewSigner refuses a key that is not the
	// subject, so H signs the proof as a JWS of its own).
	hProof := dpoptest.ForgedProof(t, f.hKey, rebuiltText, http.MethodGet, testURL)
	r, err = get(dpopHeaders(rebuiltText, hProof))
	wantRefused(t, r, err, 401, dpop.CheckKey)

	// R itself, with a proof by its key: everything, bound by DPoP.
	rs := dpoptest.Signer(t, f.rKey, parent)
	proof := dpoptest.Proof(t, rs, http.MethodGet, testURL)
	r, err = get(dpopHeaders(parent, proof))
	if err != nil || !r.AllViews() || r.Binding != dpop.MethodDPoP || r.Thumbprint != dpop.Thumbprint(f.rKey.Public().(ed25519.PublicKey)) {
		t.Fatalf("R with a proof: %+v %v", r, err)
	}
	// The same proof again: replayed.
	r, err = get(dpopHeaders(parent, proof))
	wantRefused(t, r, err, 401, dpop.CheckReplayed)

	// H's own token is a leaf: bearer works, and reads only what it grants.
	r, err = get(http.Header{"Authorization": {"Bearer " + header(t, f.child)}})
	if err != nil || !r.AllReceipts() || r.AllViews() || r.Binding != dpop.MethodBearer {
		t.Fatalf("H's leaf token as bearer: %+v %v", r, err)
	}

	// Proofs that do not fit the request.
	mk := func(s *dpop.Signer, method, url string) string { return dpoptest.Proof(t, s, method, url) }
	other := f.plain
	otherText := header(t, other)
	stale := dpoptest.Signer(t, f.rKey, parent, dpop.WithClock(func() time.Time { return time.Now().Add(-2 * dpop.DefaultLifetime) }))
	future := dpoptest.Signer(t, f.rKey, parent, dpop.WithClock(func() time.Time { return time.Now().Add(time.Minute) }))
	// byR is a proof of parent for this request by R's key, made by hand
	// under header.
	byR := func(jti string, header map[string]any) string {
		return dpoptest.JWS(t, header, dpop.Claims{JTI: jti, HTM: http.MethodGet, HTU: testURL, IAT: time.Now().Unix(), ATH: dpop.TokenHash(parent)},
			func(b []byte) []byte { return ed25519.Sign(f.rKey, b) })
	}
	cases := []struct {
		name   string
		method string
		h      http.Header
		check  dpop.Check
	}{
		{"another URL", http.MethodGet, dpopHeaders(parent, mk(rs, http.MethodGet, "http://ledger.test/v1/receipts/r-2")), dpop.CheckURL},
		{"another host", http.MethodGet, dpopHeaders(parent, mk(rs, http.MethodGet, "http://elsewhere.test/v1/receipts/r-1")), dpop.CheckURL},
		{"another method", http.MethodGet, dpopHeaders(parent, mk(rs, http.MethodPost, testURL)), dpop.CheckMethod},
		{"HEAD with a GET proof", http.MethodHead, dpopHeaders(parent, mk(rs, http.MethodGet, testURL)), dpop.CheckMethod},
		{"another token", http.MethodGet, dpopHeaders(parent, mk(dpoptest.Signer(t, f.pKey, otherText), http.MethodGet, testURL)), dpop.CheckKey},
		{"ath of another token", http.MethodGet, dpopHeaders(parent, dpoptest.ForgedProof(t, f.rKey, otherText, http.MethodGet, testURL)), dpop.CheckToken},
		{"stale", http.MethodGet, dpopHeaders(parent, mk(stale, http.MethodGet, testURL)), dpop.CheckStale},
		{"future", http.MethodGet, dpopHeaders(parent, mk(future, http.MethodGet, testURL)), dpop.CheckFuture},
		{"alg ES256", http.MethodGet, dpopHeaders(parent, dpoptest.ES256Proof(t, parent, http.MethodGet, testURL)), dpop.CheckMalformed},
		{"jwk with d", http.MethodGet, dpopHeaders(parent, byR("jti-jwk-d",
			map[string]any{"typ": dpop.ProofType, "alg": "EdDSA", "jwk": &jose.JSONWebKey{Key: f.rKey}})), dpop.CheckMalformed},
		{"typ jwt", http.MethodGet, dpopHeaders(parent, byR("jti-typ-jwt",
			map[string]any{"typ": "JWT", "alg": "EdDSA", "jwk": &jose.JSONWebKey{Key: f.rKey.Public()}})), dpop.CheckMalformed},
		{"garbage", http.MethodGet, dpopHeaders(parent, "a.b.c"), dpop.CheckMalformed},
		{"DPoP scheme without a proof", http.MethodGet, http.Header{"Authorization": {"DPoP " + parent}}, dpop.CheckMissing},
		{"proof with Bearer", http.MethodGet, http.Header{"Authorization": {"Bearer " + parent}, "Dpop": {mk(rs, http.MethodGet, testURL)}}, dpop.CheckMalformed},
		{"two proofs", http.MethodGet, http.Header{"Authorization": {"DPoP " + parent},
			"Dpop": {mk(rs, http.MethodGet, testURL), mk(rs, http.MethodGet, testURL)}}, dpop.CheckMalformed},
		// A proof presented with a leaf token must be valid too.
		{"leaf token, proof by another key", http.MethodGet, dpopHeaders(otherText, dpoptest.ForgedProof(t, f.hKey, otherText, http.MethodGet, testURL)), dpop.CheckKey},
		// The service token has no key: a proof with it is refused.
		{"service token with a proof", http.MethodGet, dpopHeaders("op", mk(rs, http.MethodGet, testURL)), dpop.CheckMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := f.auth.Authenticate(request(c.method, testURL, c.h))
			wantRefused(t, r, err, 401, c.check)
		})
	}

	// A plain read token: bearer works; with a valid proof it is bound.
	r, err = get(http.Header{"Authorization": {"Bearer " + otherText}})
	if err != nil || !r.AllViews() || r.Binding != dpop.MethodBearer {
		t.Fatalf("plain token as bearer: %+v %v", r, err)
	}
	r, err = get(dpopHeaders(otherText, mk(dpoptest.Signer(t, f.pKey, otherText), http.MethodGet, testURL)))
	if err != nil || !r.AllViews() || r.Binding != dpop.MethodDPoP {
		t.Fatalf("plain token with a proof: %+v %v", r, err)
	}
	// The service token stays bearer.
	if r, err := get(http.Header{"Authorization": {"Bearer op"}}); err != nil || !r.AllViews() {
		t.Fatalf("service token: %+v %v", r, err)
	}

	// A dpop_required read grant is honoured, with a proof only.
	dText := header(t, f.dpopRequired)
	r, err = get(http.Header{"Authorization": {"Bearer " + dText}})
	wantRefused(t, r, err, 401, dpop.CheckMissing)
	r, err = get(dpopHeaders(dText, mk(dpoptest.Signer(t, f.dKey, dText), http.MethodGet, testURL)))
	if err != nil || !r.AllViews() || r.Binding != dpop.MethodDPoP {
		t.Fatalf("dpop_required grant with a proof: %+v %v", r, err)
	}
}

// TestRequireDPoP: with the operator's requirement every capability needs
// a proof; the service token does not.
func TestRequireDPoP(t *testing.T) {
	f := newProofFixture(t, WithRequireDPoP(true))
	plain := header(t, f.plain)
	r, err := f.auth.Authenticate(request(http.MethodGet, testURL, http.Header{"Authorization": {"Bearer " + plain}}))
	wantRefused(t, r, err, 401, dpop.CheckMissing)
	p := dpoptest.Proof(t, dpoptest.Signer(t, f.pKey, plain), http.MethodGet, testURL)
	if r, err := f.auth.Authenticate(request(http.MethodGet, testURL, dpopHeaders(plain, p))); err != nil || !r.AllViews() {
		t.Fatalf("with a proof: %+v %v", r, err)
	}
	if r, err := f.auth.Authenticate(request(http.MethodGet, testURL, http.Header{"Authorization": {"Bearer op"}})); err != nil || !r.AllViews() {
		t.Fatalf("service token: %+v %v", r, err)
	}
}

// TestProofStateFailsClosed: without a replay state, or with one that
// cannot answer, a valid proof is refused with 503; bearer tokens that
// need none are unaffected.
func TestProofStateFailsClosed(t *testing.T) {
	f := newProofFixture(t)
	ns, _, _ := natstest.Start(t)
	nc, js := natstest.Connect(t, ns)
	broken, err := dpopreplay.Open(context.Background(), js, 1, dpop.DefaultLifetime, dpop.DefaultSkew)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	parent := header(t, f.parent)
	for name, a := range map[string]*Authenticator{
		"no replay state": New(WithTrustedIssuers(f.issuerPub), WithRevocations(f.revs)),
		"state unreachable": New(WithTrustedIssuers(f.issuerPub), WithRevocations(f.revs),
			WithReplay(broken)),
	} {
		t.Run(name, func(t *testing.T) {
			p := dpoptest.Proof(t, dpoptest.Signer(t, f.rKey, parent), http.MethodGet, testURL)
			r, err := a.Authenticate(request(http.MethodGet, testURL, dpopHeaders(parent, p)))
			wantRefused(t, r, err, 503, dpop.CheckState)
			if r, err := a.Authenticate(request(http.MethodGet, testURL, http.Header{"Authorization": {"Bearer " + header(t, f.plain)}})); err != nil || r == nil {
				t.Fatalf("bearer leaf: %+v %v", r, err)
			}
		})
	}
}

// TestPublicOrigin: behind a proxy, htu is the public origin plus the
// request's path, not the Host the server sees.
func TestPublicOrigin(t *testing.T) {
	f := newProofFixture(t, WithPublicOrigin("https://ledger.example/"))
	parent := header(t, f.parent)
	rs := dpoptest.Signer(t, f.rKey, parent)
	internal, _ := rs.Proof(http.MethodGet, testURL)
	r, err := f.auth.Authenticate(request(http.MethodGet, testURL, dpopHeaders(parent, internal)))
	wantRefused(t, r, err, 401, dpop.CheckURL)
	public, _ := rs.Proof(http.MethodGet, "https://ledger.example/v1/receipts/r-1")
	if r, err := f.auth.Authenticate(request(http.MethodGet, testURL+"?x=1", dpopHeaders(parent, public))); err != nil || !r.AllViews() {
		t.Fatalf("public origin proof: %+v %v", r, err)
	}
}

// TestMiddlewareChallenges: a refused proof answers 401 with DPoP's
// challenge naming the check; a refused or missing bearer credential
// with Bearer's and DPoP's.
func TestMiddlewareChallenges(t *testing.T) {
	f := newProofFixture(t)
	e := echo.New()
	deny := func(c echo.Context, e *Error) error {
		return c.JSON(e.Status, map[string]string{"error": e.Message, "code": e.Code, "check": string(e.Check)})
	}
	e.GET("/x", func(c echo.Context) error { return c.String(200, From(c).Binding) }, Middleware(f.auth, deny), Require("x", deny))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	parent := header(t, f.parent)
	do := func(h http.Header) (*http.Response, map[string]string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp, body
	}
	resp, body := do(http.Header{"Authorization": {"Bearer " + parent}})
	if resp.StatusCode != 401 || body["check"] != "missing_proof" || body["code"] != CodeInvalidProof ||
		strings.Join(resp.Header.Values("WWW-Authenticate"), "|") != dpop.Challenge(dpop.CheckMissing) {
		t.Errorf("bearer parent: %d %v %q", resp.StatusCode, body, resp.Header.Values("WWW-Authenticate"))
	}
	resp, body = do(nil)
	if resp.StatusCode != 401 || body["code"] != "unauthorized" ||
		strings.Join(resp.Header.Values("WWW-Authenticate"), "|") != `Bearer realm="chio"|`+dpop.Challenge("") {
		t.Errorf("anonymous: %d %v %q", resp.StatusCode, body, resp.Header.Values("WWW-Authenticate"))
	}
	// Through a real client transport that proves every request.
	client := &http.Client{Transport: &dpop.Transport{Signer: dpoptest.Signer(t, f.rKey, parent)}}
	for range 2 {
		resp, err := client.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != dpop.MethodDPoP {
			t.Fatalf("dpop.Transport: %d %s", resp.StatusCode, b)
		}
	}
}
