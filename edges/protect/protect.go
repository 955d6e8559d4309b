// Package protect is `chio api protect`: a reverse proxy that puts Chio's
// governance in front of an HTTP API described by OpenAPI. Each request is
// matched to its operation (unknown routes never reach the upstream),
// checked as a governed call of that operation's tool (capability, guards
// on the parameters and body, a durable decision), forwarded when allowed,
// and recorded with the response status and a hash of the response body
// as its outcome. Side-effecting operations are deny-by-default: only a
// grant naming the operation's tool reaches them. A JSON body (or JSON
// parameter) strictjson refuses, such as one repeating a member name
// exactly or but for case, is answered 400 before the kernel: the API
// could read another value than the guards did.
//
// The proxy keeps no state; receipts come from the ledger like every
// other call's.
package protect

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// ReceiptHeader names the receipt of a forwarded or refused request.
const ReceiptHeader = "X-Chio-Receipt"

// Proxy serves one API. It is safe for concurrent use.
type Proxy struct {
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
	bridge   *openapi.Bridge
	serverID string
	exposure tools.Exposure
	log      *slog.Logger
	origin   string
}

// Option configures a Proxy.
type Option func(*Proxy)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(p *Proxy) { p.log = l } }

// WithPublicOrigin sets the origin ("https://api.example") clients address
// this proxy by, which DPoP proofs name; by default the request's Host and
// whether it came over TLS decide.
func WithPublicOrigin(origin string) Option { return func(p *Proxy) { p.origin = origin } }

// New builds the proxy for bridge b, whose tools.Server (openapi.NewServer)
// is registered in the registry of kernel k and dispatcher d.
func New(k *kernel.Kernel, d *dispatch.Dispatcher, b *openapi.Bridge, opts ...Option) *Proxy {
	p := &Proxy{kernel: k, dispatch: d, bridge: b, serverID: b.Manifest().ServerID, log: slog.Default(),
		// The operator chose to protect this API: every operation of the
		// spec is reachable, and the hard floor still holds.
		exposure: tools.Exposure{Protocol: "http", ExposeAll: true}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// denial is the JSON body of a refused request, as the reference gives it
// ({"error":"chio_access_denied","message","receipt_id","suggestion"}).
type denial struct {
	Error     string `json:"error"`
	Message   string `json:"message"`
	ReceiptID string `json:"receipt_id,omitempty"`
	Guard     string `json:"guard,omitempty"`
	// DPoPCheck names the failed check of a refused proof of possession
	// (dpop.Check), as the 401's challenge does.
	DPoPCheck  string `json:"dpop_check,omitempty"`
	Suggestion string `json:"suggestion,omitempty"`
}

// ServeHTTP matches, governs and forwards one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, params, err := p.bridge.Match(r)
	switch {
	case errors.Is(err, openapi.ErrMethodNotAllowed):
		w.Header().Set("Allow", strings.Join(p.allowed(r), ", ")) // RFC 9110 §15.5.6
		writeJSON(w, http.StatusMethodNotAllowed, denial{Error: "method_not_allowed", Message: err.Error()})
		return
	case err != nil:
		writeJSON(w, http.StatusNotFound, denial{Error: "not_found",
			Message: fmt.Sprintf("%s %s is not an operation of the protected API", r.Method, r.URL.Path)})
		return
	}
	presented, err := dpop.FromRequest(r, p.origin)
	if err != nil {
		dpop.SetChallenge(w.Header(), "", `Bearer realm="chio"`)
		writeJSON(w, http.StatusUnauthorized, denial{Error: "chio_capability_required",
			Message:    "a chio.capability.v1 token is required for " + rt.Tool + ": " + err.Error(),
			Suggestion: "send it as Authorization: DPoP with a DPoP proof, or (a token that cannot delegate) as X-Chio-Capability or Authorization: Bearer"})
		return
	}
	token, proof := presented.Token, kernel.FromPresented(presented)
	args, err := p.bridge.Arguments(rt, r, params)
	if err != nil {
		status, code := http.StatusBadRequest, "bad_request"
		if errors.Is(err, openapi.ErrBodyTooLarge) {
			status, code = http.StatusRequestEntityTooLarge, "body_too_large"
		}
		writeJSON(w, status, denial{Error: code, Message: err.Error()})
		return
	}
	call := dispatch.Call{Token: token, Proof: proof, ServerID: p.serverID, ToolName: rt.Tool, Arguments: args, Exposure: &p.exposure,
		Metadata: map[string]any{"protocol": "http", "http": map[string]any{"method": rt.Method, "route": rt.Path}}}
	ctx := r.Context()
	if _, dec := p.kernel.Admit(ctx, token, proof); dec != nil {
		res, err := p.dispatch.Refuse(ctx, call, dec)
		p.refused(w, http.StatusUnauthorized, res, err, dec)
		return
	}
	var raw openapi.RawResponse
	res, err := p.dispatch.Do(openapi.WithRawResponse(ctx, &raw), call)
	switch {
	case err != nil:
		p.refused(w, 0, nil, err, nil)
	case !res.Decision.Allow:
		p.refused(w, http.StatusForbidden, res, nil, res.Decision)
	case res.ToolErr != nil:
		// The cause (an address, a timeout) is the operator's: it is in
		// the log and the receipt, not in the client's answer.
		p.log.Warn("protect: upstream call failed", "receipt_id", res.ReceiptID, "tool", rt.Tool, "err", res.ToolErr)
		w.Header().Set(ReceiptHeader, res.ReceiptID)
		writeJSON(w, http.StatusBadGateway, denial{Error: "upstream_error", ReceiptID: res.ReceiptID,
			Message: "the upstream API did not answer " + rt.Method + " " + rt.Path})
	default:
		h := w.Header()
		for k, vs := range raw.Header {
			h[k] = vs
		}
		h.Set(ReceiptHeader, res.ReceiptID)
		w.WriteHeader(raw.Status)
		if _, err := w.Write(raw.Body); err != nil {
			p.log.Debug("protect: client went away", "receipt_id", res.ReceiptID, "err", err)
		}
	}
}

// allowed are the methods of r's path that the spec publishes.
func (p *Proxy) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, _, err := p.bridge.Match(probe); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// RetryAfterSeconds is the Retry-After of a 503 answering a request whose
// proof could not be checked because the replay state is unreachable.
const RetryAfterSeconds = 1

// refused answers a request that did not reach the upstream: a denial
// (its receipt named), or bad arguments, or a decision that could not be
// recorded (then nothing ran and there is no receipt).
func (p *Proxy) refused(w http.ResponseWriter, status int, res *dispatch.Result, err error, dec *kernel.Decision) {
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		code := http.StatusBadRequest
		if strings.Contains(err.Error(), "at most") {
			code = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, code, denial{Error: "bad_request", Message: err.Error()})
		return
	case err != nil:
		p.log.Error("protect: call not recorded", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, denial{Error: "not_recorded",
			Message: "the call could not be recorded, so it was not forwarded: " + err.Error()})
		return
	}
	w.Header().Set(ReceiptHeader, res.ReceiptID)
	d := denial{Error: "chio_access_denied", ReceiptID: res.ReceiptID, Guard: dec.Guard, DPoPCheck: string(dec.DPoPCheck()),
		Message: fmt.Sprintf("denied at %s: %s", dec.Guard, dec.Reason)}
	switch check := dec.DPoPCheck(); {
	case check == dpop.CheckState:
		// The replay state cannot be reached: a server condition, not
		// the caller's fault; the same request with a fresh proof may
		// pass later.
		w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		d.Error, d.Message = "dpop_state_unavailable", "the proof could not be checked, so the request was not forwarded; retry: "+dec.Reason
		d.Suggestion = "retry with a fresh proof"
		writeJSON(w, http.StatusServiceUnavailable, d)
		return
	case check != "":
		status = http.StatusUnauthorized
		dpop.SetChallenge(w.Header(), check, "")
	case status == http.StatusUnauthorized:
		dpop.SetChallenge(w.Header(), "", `Bearer realm="chio", error="invalid_token"`)
	}
	switch dec.Guard {
	case kernel.StepGrant:
		d.Suggestion = "ask for a capability whose grant names this operation's tool"
	case kernel.StepTime, kernel.StepRevocation, kernel.StepSignature:
		d.Suggestion = "present a current, unrevoked capability"
	case kernel.StepDPoP:
		d.Suggestion = "send a fresh DPoP proof, signed by the token's subject key, for this method and URL (one proof per request)"
	}
	writeJSON(w, status, d)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
