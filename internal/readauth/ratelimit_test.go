package readauth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/ratelimit"
	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/schemas"
)

// Reads are limited per root principal: the capabilities a holder
// delegates share its budget, another principal and anonymous readers are
// not held back, and a refusal is a 429 with Retry-After, counted.
func TestRateLimitPerPrincipal(t *testing.T) {
	issuerPub, issuer, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	readGrant, _ := schemas.ReadGrant(schemas.ReadReceipts)
	delegating := readGrant
	delegating.Operations = append([]schemas.Operation{schemas.OpDelegate}, readGrant.Operations...)
	root := func(id string, subject ed25519.PublicKey, grant schemas.ToolGrant) *schemas.CapabilityToken {
		tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: id, Issuer: schemas.EncodePublicKey(issuerPub),
			Subject: schemas.EncodePublicKey(subject), Scope: schemas.Scope{Grants: []schemas.ToolGrant{grant}},
			IssuedAt: uint64(now.Unix() - 10), ExpiresAt: uint64(now.Unix() + 60)})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	header := func(tok *schemas.CapabilityToken) string {
		h, err := schemas.EncodeCapabilityHeader(tok)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	aPub, aKey, _ := ed25519.GenerateKey(rand.Reader)
	parent := root("a", aPub, delegating) // presented only through its delegates, which are bearer tokens
	child := func(id string) string {
		sub, _, _ := ed25519.GenerateKey(rand.Reader)
		tok, err := schemas.Delegate(aKey, parent, schemas.CapabilityBody{ID: id, Subject: schemas.EncodePublicKey(sub),
			Scope: schemas.Scope{Grants: []schemas.ToolGrant{readGrant}}, IssuedAt: uint64(now.Unix() - 5), ExpiresAt: uint64(now.Unix() + 30)})
		if err != nil {
			t.Fatal(err)
		}
		return header(tok)
	}
	dPub, _, _ := ed25519.GenerateKey(rand.Reader)
	other := header(root("d", dPub, readGrant))

	_, _, js := natstest.Start(t)
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, schemas.RevocationsConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	live, err := revocation.Watch(ctx, kv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(live.Stop)
	m := ratelimit.NewMetrics(prometheus.NewRegistry())
	a := New(WithTrustedIssuers(schemas.EncodePublicKey(issuerPub)), WithServiceToken("op"), WithRevocations(live),
		WithRateLimit(ratelimit.New(ratelimit.Config{Rate: 0.001, Burst: 2}), m))
	e := echo.New()
	deny := func(c echo.Context, e *Error) error {
		return c.JSON(e.Status, map[string]string{"error": e.Message, "code": e.Code})
	}
	e.GET("/v1/receipts/r-1", func(c echo.Context) error { return c.String(http.StatusOK, "ok") }, Middleware(a, deny))
	srv := httptest.NewServer(e)
	defer srv.Close()

	read := func(token string) (int, http.Header, map[string]string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/receipts/r-1", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, resp.Header, body
	}
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"a's first delegate", child("a1"), http.StatusOK},
		{"a's second delegate", child("a2"), http.StatusOK},
		{"a third delegate of a, past a's burst", child("a3"), http.StatusTooManyRequests},
		{"another principal", other, http.StatusOK},
		{"the service token", "op", http.StatusOK},
		{"anonymous", "", http.StatusOK},
	} {
		status, h, body := read(tc.token)
		if status != tc.status {
			t.Fatalf("%s: HTTP %d %v, want %d", tc.name, status, body, tc.status)
		}
		if status == http.StatusTooManyRequests && (body["code"] != CodeRateLimited || h.Get("Retry-After") != "1000") {
			t.Fatalf("%s: Retry-After %q, %v", tc.name, h.Get("Retry-After"), body)
		}
	}
	var pb dto.Metric
	if err := m.Collector().(*prometheus.CounterVec).WithLabelValues("reads", ratelimit.ReasonPrincipal).Write(&pb); err != nil {
		t.Fatal(err)
	}
	if n := pb.GetCounter().GetValue(); n != 1 {
		t.Fatalf("%v refusals counted, want 1", n)
	}
}
