package readauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/schemas"
)

// testURL is the request URL of the unit tests (httptest's Host).
const testURL = "http://ledger.test/v1/receipts/r-1"

// request is a request as a server receives it, with headers h.
func request(method, url string, h http.Header) *http.Request {
	r := httptest.NewRequest(method, url, nil)
	for k, v := range h {
		r.Header[k] = v
	}
	return r
}

func TestAuthenticate(t *testing.T) {
	pub, issuer, _ := ed25519.GenerateKey(rand.Reader)
	issuerPub := schemas.EncodePublicKey(pub)
	subjectPub, _, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	token := func(id string, grants ...schemas.ToolGrant) string {
		tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: id, Issuer: issuerPub, Subject: schemas.EncodePublicKey(subjectPub),
			Scope: schemas.Scope{Grants: grants}, IssuedAt: uint64(now.Unix() - 10), ExpiresAt: uint64(now.Unix() + 60)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := schemas.EncodeCapabilityHeader(tok)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	// A real revocation mirror on embedded JetStream; "down" is a stopped one.
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, schemas.RevocationsConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(schemas.Revocation{CapabilityID: "c5", RevokedAt: uint64(now.Unix()), Reason: "test"})
	if _, err := kv.Put(ctx, schemas.KVKey("c5"), raw); err != nil {
		t.Fatal(err)
	}
	live, err := revocation.Watch(ctx, kv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(live.Stop)
	down, err := revocation.Watch(ctx, kv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	down.Stop()
	tenant := schemas.Principal(issuerPub, "someone")
	readTenant, _ := schemas.ReadGrant(tenant)
	readAll, _ := schemas.ReadGrant(schemas.ReadAll)
	readReceipts, _ := schemas.ReadGrant(schemas.ReadReceipts)
	invoke := schemas.ToolGrant{ServerID: "srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}
	own := schemas.Principal(issuerPub, schemas.EncodePublicKey(subjectPub))
	cases := []struct {
		name    string
		header  http.Header
		mirror  Revocations
		status  int // 0: accepted
		all     bool
		receipt bool
		sees    []string
	}{
		{name: "anonymous", header: http.Header{}},
		{name: "service token", header: http.Header{"Authorization": {"Bearer op"}}, all: true, receipt: true},
		{name: "service token needs no mirror", header: http.Header{"Authorization": {"Bearer op"}}, mirror: down, all: true, receipt: true},
		{name: "not bearer", header: http.Header{"Authorization": {"Basic op"}}, status: 401},
		{name: "two different credentials", header: http.Header{"Authorization": {"Bearer op"}, "X-Chio-Capability": {"other"}}, status: 401},
		{name: "garbage", header: http.Header{"Authorization": {"Bearer nope"}}, status: 401},
		{name: "invoke capability reads its own path", header: http.Header{"X-Chio-Capability": {token("c1", invoke)}}, sees: []string{own}},
		{name: "tenant grant", header: http.Header{"Authorization": {"Bearer " + token("c2", readTenant)}}, sees: []string{own, tenant}},
		{name: "receipts grant", header: http.Header{"Authorization": {"Bearer " + token("c3", readReceipts)}}, receipt: true, sees: []string{own}},
		{name: "all grant", header: http.Header{"Authorization": {"Bearer " + token("c4", readAll)}}, all: true, receipt: true, sees: []string{own}},
		{name: "revoked", header: http.Header{"Authorization": {"Bearer " + token("c5", readAll)}}, status: 401},
		{name: "revocation state down", header: http.Header{"Authorization": {"Bearer " + token("c6", readAll)}}, mirror: down, status: 503},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mirror := c.mirror
			if mirror == nil {
				mirror = live
			}
			a := New(WithTrustedIssuers(issuerPub), WithServiceToken("op"), WithRevocations(mirror))
			r, err := a.Authenticate(request(http.MethodGet, testURL, c.header))
			if c.status != 0 {
				var e *Error
				if !errors.As(err, &e) || e.Status != c.status || r != nil {
					t.Fatalf("got %v, %v; want status %d", r, err, c.status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "anonymous" {
				if r != nil {
					t.Fatalf("anonymous got reader %+v", r)
				}
				return
			}
			if r.AllViews() != c.all || r.AllReceipts() != c.receipt || !slices.Equal(r.Principals, c.sees) {
				t.Fatalf("reader %+v", r)
			}
		})
	}
	// Without trusted issuers only the service token is accepted.
	a := New(WithServiceToken("op"))
	if _, err := a.Authenticate(request(http.MethodGet, testURL, http.Header{"Authorization": {"Bearer " + token("c7", readAll)}})); err == nil {
		t.Fatal("a capability was accepted by an authenticator that trusts no issuer")
	}
}
