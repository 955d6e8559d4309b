package a2a

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// HTTPConfig configures the HTTP binding.
type HTTPConfig struct {
	// PublicURL is the origin advertised in the card, and one whose card
	// is signed; empty derives it from each request (signing only those
	// for Config.PublicURL or AddOrigin's origins).
	PublicURL string
	// TrustedProxies may set X-Forwarded-Proto and X-Forwarded-Host.
	TrustedProxies []netip.Prefix
	// ServeRoot also serves JSON-RPC at "/".
	ServeRoot bool
}

// Register mounts the agent card and the JSON-RPC binding on e.
func (e *Edge) Register(ec *echo.Echo, hc HTTPConfig) {
	card := func(c echo.Context) error { return e.serveCard(c, hc) }
	ec.GET(cardPath, card)
	ec.GET(legacyCardPath, card) // pre-1.0 clients: the 0.3-compatible card
	ec.GET(cardsig.JWKSPath, e.serveJWKS)
	rpc := func(c echo.Context) error { return e.serveJSONRPC(c, hc) }
	ec.POST("/a2a", rpc)
	ec.POST("/a2a/", rpc)
	if hc.ServeRoot {
		ec.POST("/", rpc)
	}
	rest := func(c echo.Context) error { return e.serveREST(c, hc, "") }
	ec.Any(RESTPath, rest)
	ec.Any(RESTPath+"/*", rest)
	// 0.3 clients given the JSON-RPC URL build REST paths on it (the 0.3
	// kit asks GET {url}/v1/card) and GET the URL itself for the card: the
	// 0.3 routes answer under /a2a/v1 too, and GET /a2a is the card.
	ec.Any("/a2a/v1/*", func(c echo.Context) error {
		r := c.Request()
		u := *r.URL
		u.Path = RESTPath + strings.TrimPrefix(u.Path, "/a2a")
		if u.RawPath != "" {
			u.RawPath = RESTPath + strings.TrimPrefix(u.RawPath, "/a2a")
		}
		r2 := r.Clone(r.Context())
		r2.URL = &u
		c.SetRequest(r2)
		return e.serveREST(c, hc, r.URL.EscapedPath())
	})
	ec.GET("/a2a", card)
}

// serveCard serves the agent card in the dialect the request asks for
// (cardDialect), with ETag (over the bytes served, signature included) and
// Last-Modified validators. It is signed when the edge has a card key and
// the card is for the edge's own origin (Config.PublicURL or
// hc.PublicURL); a card for an origin a request named (Host,
// X-Forwarded-*) that is not its own is served unsigned.
func (e *Edge) serveCard(c echo.Context, hc HTTPConfig) error {
	r := c.Request()
	en, err := e.cardEntry(publicURL(r, hc), cardDialect(r, e.cfg.CardDialect), hc.PublicURL)
	if err != nil {
		return c.JSON(http.StatusInternalServerError, map[string]string{"error": "agent card: " + err.Error(), "code": "card_encoding"})
	}
	h := c.Response().Header()
	h.Set("ETag", en.etag)
	h.Set("Last-Modified", e.cards.modified.Format(http.TimeFormat))
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("Vary", cardVary)
	if notModified(r, en.etag, e.cards.modified) {
		return c.NoContent(http.StatusNotModified)
	}
	return c.Blob(http.StatusOK, "application/json", en.body)
}

// publicURL is the configured origin, else the request's, honouring
// X-Forwarded-* only from trusted proxies.
func publicURL(r *http.Request, hc HTTPConfig) string {
	if hc.PublicURL != "" {
		return strings.TrimRight(hc.PublicURL, "/")
	}
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if trusted(r.RemoteAddr, hc.TrustedProxies) {
		if p := lastValue(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := lastValue(r.Header.Get("X-Forwarded-Host")); h != "" && !strings.ContainsAny(h, "/ @\\") {
			host = h
		}
	}
	return scheme + "://" + host
}

// lastValue is the right-most entry of a forwarded header: the one the
// trusted proxy appended, never one a client sent ahead of it.
func lastValue(v string) string {
	if i := strings.LastIndex(v, ","); i >= 0 {
		v = v[i+1:]
	}
	return strings.TrimSpace(v)
}

func trusted(remote string, proxies []netip.Prefix) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	for _, p := range proxies {
		if p.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
}

// challenge is the HTTP status of a JSON-RPC answer: 200, except that a
// caller without valid credentials gets 401 and one without the authority
// 403, as A2A asks of every binding. On those it sets the challenges: for
// a refused proof of possession, RFC 9449's DPoP challenge naming the
// check (error="invalid_dpop_proof"); for any other 401, the RFC 6750
// Bearer challenge (error="invalid_token" when a credential was
// presented) and the plain DPoP one beside it, since a capability that can
// delegate must come as Authorization: DPoP. An Unavailable error (the
// replay state out of reach) is 503 with Retry-After.
func challenge(c echo.Context, werr *wire.Error) int {
	if werr == nil {
		return http.StatusOK
	}
	h := c.Response().Header()
	if werr.RetryAfter > 0 {
		h.Set("Retry-After", werr.RetryAfterSeconds())
		return http.StatusServiceUnavailable
	}
	switch werr.Code {
	case wire.CodeUnauthenticated:
		if check := dpopCheckOf(werr); check != "" {
			dpop.SetChallenge(h, check, "")
			return http.StatusUnauthorized
		}
		v := `Bearer realm="chio"`
		if dpop.Presents(c.Request().Header) {
			v += `, error="invalid_token"`
		}
		dpop.SetChallenge(h, "", v)
		return http.StatusUnauthorized
	case wire.CodePermissionDenied:
		h.Set("WWW-Authenticate", `Bearer realm="chio", error="insufficient_scope"`)
		return http.StatusForbidden
	case wire.CodeResourceExhausted:
		return http.StatusTooManyRequests
	}
	return http.StatusOK
}

// Agent card paths.
const (
	cardPath       = "/.well-known/agent-card.json"
	legacyCardPath = "/.well-known/agent.json"
)

// cardVary names the request headers the served card depends on: the
// origin (its URLs) and A2A-Version (its dialect).
const cardVary = "Host, X-Forwarded-Host, X-Forwarded-Proto, A2A-Version"

// cardDialect is the card a request gets. An explicit A2A-Version (the
// header, else the query parameter) decides: "1.0", or "0.3" (and 0.3.x)
// for the 0.3-compatible card. Without one (or with a version this edge
// does not serve) the path does: /.well-known/agent-card.json gives def,
// the 1.0 card unless configured otherwise, since 1.0 clients (the a2a-go
// v2 resolver, the 1.0 conformance kit) fetch it without the header;
// /.well-known/agent.json, the pre-1.0 path, and the 0.3 REST GET /v1/card
// give the 0.3-compatible card.
func cardDialect(r *http.Request, def wire.Version) wire.Version {
	v := strings.TrimSpace(r.Header.Get(wire.HeaderVersion))
	if v == "" {
		v = strings.TrimSpace(r.URL.Query().Get(wire.HeaderVersion))
	}
	switch {
	case v == string(wire.V10):
		return wire.V10
	case v == string(wire.V03) || strings.HasPrefix(v, string(wire.V03)+"."):
		return wire.V03
	}
	if r.URL.Path == cardPath {
		if def == wire.V03 {
			return wire.V03
		}
		return wire.V10
	}
	return wire.V03
}

// etagMatches applies If-None-Match (weak comparison, RFC 9110 §13.1.2).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// notModified applies the card's validators: If-None-Match when present
// (it takes precedence, RFC 9110 §13.2.2), else If-Modified-Since.
func notModified(r *http.Request, etag string, modified time.Time) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		return etagMatches(inm, etag)
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" {
		if t, err := http.ParseTime(ims); err == nil {
			return !modified.After(t)
		}
	}
	return false
}

// serveJWKS serves the card key's public half; 404 without a card key.
func (e *Edge) serveJWKS(c echo.Context) error {
	e.cardInit()
	if e.cards.signer == nil {
		return c.JSON(http.StatusNotFound, map[string]string{"error": "this edge does not sign its agent card", "code": "no_card_key"})
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "application/jwk-set+json", e.cards.signer.JWKS())
}

// httpRequestID reads the caller's X-Request-Id and echoes it back; it
// returns "" for none or one not fit to log.
func httpRequestID(c echo.Context) string {
	id := c.Request().Header.Get(HeaderRequestID)
	if id == "" || len(id) > maxHTTPRequestID {
		return ""
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return ""
		}
	}
	c.Response().Header().Set(HeaderRequestID, id)
	return id
}

// withLastEventID carries h's Last-Event-ID, if any, in ctx for a
// SubscribeToTask opened with it. The HTTP bindings call it.
func withLastEventID(ctx context.Context, h http.Header) context.Context {
	return withResumeFrom(ctx, h.Get("Last-Event-ID"))
}
