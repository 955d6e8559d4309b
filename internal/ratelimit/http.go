package ratelimit

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Reasons a request is refused, the reason label of Metrics.
const (
	// ReasonAddress: the client's address (or its /64, over IPv6) asked
	// faster than the per-address limit.
	ReasonAddress = "address"
	// ReasonPrincipal: the authenticated principal asked faster than the
	// per-principal limit, whatever addresses it came from.
	ReasonPrincipal = "principal"
)

// CodeRateLimited is the JSON-RPC error code of a refusal: the A2A edge's
// RESOURCE_EXHAUSTED (HTTP 429), used on every JSON-RPC surface alike.
const CodeRateLimited = -31429

// Form is how a surface words its errors.
type Form int

const (
	// JSON: {"error": message, "code": "rate_limited", "retry_after_seconds": n}.
	JSON Form = iota
	// JSONRPC: a JSON-RPC 2.0 error response with id null (the request
	// was not read, so its id is unknown) and code CodeRateLimited.
	JSONRPC
)

// ClientAddr is the address a request is charged to: the connection's
// peer, unless the peer is one of trusted (a reverse proxy), in which case
// the X-Forwarded-For hops are read right to left and the first one not
// trusted is taken. A hop that does not parse ends the walk at the last
// address known good, so a client cannot pick its key by writing garbage.
func ClientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	return ForwardedAddr(addrOf(r.RemoteAddr), r.Header.Values("X-Forwarded-For"), trusted)
}

// ForwardedAddr is ClientAddr for a connection's peer and the values of
// its X-Forwarded-For header (or gRPC's x-forwarded-for metadata, which a
// proxy in front of a gRPC server sets the same way).
func ForwardedAddr(peer netip.Addr, forwardedFor []string, trusted []netip.Prefix) netip.Addr {
	if !peer.IsValid() || !contains(trusted, peer) {
		return peer
	}
	hops := strings.Split(strings.Join(forwardedFor, ","), ",")
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return client
		}
		client = a.Unmap()
		if !contains(trusted, client) {
			return client
		}
	}
	return client
}

// AddressKey is the key an address is limited under: an IPv4 address as
// is, an IPv6 address by its /64, the smallest block a site is given, so
// one site cannot spread itself over fresh buckets.
func AddressKey(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func addrOf(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func contains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Guard refuses requests beyond the per-address limit before the handler
// it wraps reads them.
type Guard struct {
	// Address is the per-address limit (nil: none).
	Address *Keyed
	// Trusted are the reverse proxies whose X-Forwarded-For is believed.
	Trusted []netip.Prefix
	// Metrics counts refusals (nil: not counted).
	Metrics *Metrics
	// Surface names the surface a request is for, the surface label of
	// the refusals counted, and Form how it answers; nil: "http", JSON.
	Surface func(*http.Request) (string, Form)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Wrap returns next behind g.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	if g == nil || g.Address == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now
		if g.Now != nil {
			now = g.Now
		}
		ok, wait := g.Address.Allow(AddressKey(ClientAddr(r, g.Trusted)), now())
		if ok {
			next.ServeHTTP(w, r)
			return
		}
		surface, form := "http", JSON
		if g.Surface != nil {
			surface, form = g.Surface(r)
		}
		g.Metrics.Refused(surface, ReasonAddress)
		Refuse(w, form, "too many requests from this address", wait)
	})
}

// Refuse answers 429 Too Many Requests in form, with Retry-After (whole
// seconds, at least 1) and msg followed by when to retry.
func Refuse(w http.ResponseWriter, form Form, msg string, wait time.Duration) {
	secs := RetryAfterSeconds(wait)
	msg = fmt.Sprintf("%s: retry after %ds", msg, secs)
	var body any
	switch form {
	case JSONRPC:
		type rpcError struct {
			Code    int            `json:"code"`
			Message string         `json:"message"`
			Data    map[string]any `json:"data"`
		}
		body = struct {
			JSONRPC string   `json:"jsonrpc"`
			ID      any      `json:"id"`
			Error   rpcError `json:"error"`
		}{"2.0", nil, rpcError{CodeRateLimited, msg, map[string]any{"reason": "RATE_LIMITED", "retryAfterSeconds": secs}}}
	default:
		body = struct {
			Error      string `json:"error"`
			Code       string `json:"code"`
			RetryAfter int    `json:"retry_after_seconds"`
		}{msg, "rate_limited", secs}
	}
	b, _ := json.Marshal(body) // plain structs: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", strconv.Itoa(secs))
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(append(b, '\n'))
}

// RetryAfterSeconds is wait in whole seconds for Retry-After, rounded up
// and at least 1.
func RetryAfterSeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}
