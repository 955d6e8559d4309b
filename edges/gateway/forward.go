package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
)

// ForwardPath is the forward-authentication endpoint.
const ForwardPath = "/v1/authz/forward"

// The headers that carry the original request. The gateway must set them
// itself, over anything the client sent (nginx's proxy_set_header and
// Caddy's forward_auth do), and the decision point must be reachable by
// the gateway only.
const (
	headerOriginalMethod  = "X-Original-Method"  // nginx
	headerOriginalURI     = "X-Original-URI"     // nginx
	headerForwardedMethod = "X-Forwarded-Method" // Caddy, Traefik
	headerForwardedURI    = "X-Forwarded-Uri"    // Caddy, Traefik
	headerForwardedHost   = "X-Forwarded-Host"
	headerForwardedProto  = "X-Forwarded-Proto"
)

// ServeForward answers one forward-authentication request: 200 with
// ReceiptHeader when the call is allowed, 401 or 403 with ReceiptHeader
// (when a receipt was signed) and a JSON body when it is not. The
// original request's body is never sent by these gateways, so an
// operation that takes one is refused.
func (p *Point) ServeForward(w http.ResponseWriter, r *http.Request) {
	h := r.Header.Clone()
	method, uri, via := h.Get(headerOriginalMethod), h.Get(headerOriginalURI), "auth_request"
	nginx, forwarded := method != "" || uri != "", h.Get(headerForwardedMethod) != "" || h.Get(headerForwardedURI) != ""
	if nginx && forwarded {
		// Each gateway sets its own pair over the client's and passes
		// the other through: with both, one pair is the client's, and
		// which one depends on the gateway. Never pick.
		writeJSON(w, http.StatusBadRequest, denial{Error: "bad_request",
			Message:    "both X-Original-Method/X-Original-URI and X-Forwarded-Method/X-Forwarded-Uri were sent: one pair came from the client",
			Suggestion: "have the gateway remove the other pair (nginx: proxy_set_header X-Forwarded-Method \"\"; proxy_set_header X-Forwarded-Uri \"\"; Caddy: header_up -X-Original-*)"})
		return
	}
	if !nginx {
		method, uri, via = h.Get(headerForwardedMethod), h.Get(headerForwardedURI), "forward_auth"
	}
	host, proto := h.Get(headerForwardedHost), h.Get(headerForwardedProto)
	if host == "" {
		host = r.Host
	}
	if proto != "https" {
		proto = "http"
	}
	for _, k := range []string{headerOriginalMethod, headerOriginalURI, headerForwardedMethod, headerForwardedURI} {
		h.Del(k)
	}
	orig, err := rebuild(r.Context(), method, uri, host, h)
	if err != nil {
		// A gateway configured without the original request: nginx
		// answers its client 500 for this status, which is what a
		// misconfiguration should get, never an allow.
		writeJSON(w, http.StatusBadRequest, denial{Error: "bad_request", Message: err.Error(),
			Suggestion: "send the original request as X-Original-Method and X-Original-URI (nginx) or X-Forwarded-Method and X-Forwarded-Uri (Caddy, Traefik)"})
		return
	}
	a := p.decideHTTP(r.Context(), original{req: orig, origin: proto + "://" + host, via: via})
	if a.receiptID != "" {
		w.Header().Set(ReceiptHeader, a.receiptID)
	}
	if a.status == http.StatusOK {
		w.WriteHeader(http.StatusOK)
		return
	}
	if a.challenge != "" {
		w.Header().Set("WWW-Authenticate", a.challenge)
	}
	if a.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, a.status, a.denial)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// headerOf is a Header from a lower-case map (Envoy's), without the
// HTTP/2 pseudo-headers.
func headerOf(m map[string]string) http.Header {
	h := make(http.Header, len(m))
	for k, v := range m {
		if strings.HasPrefix(k, ":") {
			continue
		}
		h.Set(k, v)
	}
	return h
}
