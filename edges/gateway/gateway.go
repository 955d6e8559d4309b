// Package gateway makes Chio the decision point behind a gateway that
// users already run: the gateway enforces, Chio decides and records.
//
//   - Forward authentication (nginx auth_request, Caddy forward_auth,
//     Traefik ForwardAuth): GET ForwardPath with the original method and
//     URI in X-Original-Method/X-Original-URI or
//     X-Forwarded-Method/X-Forwarded-Uri, and the caller's own
//     Authorization (and DPoP) passed through.
//   - Envoy's ext_authz over gRPC (envoy.service.auth.v3.Authorization).
//   - An OpenID AuthZEN Authorization API 1.0 decision point: one
//     evaluation, a batch, and the metadata document.
//
// A request is matched to an OpenAPI operation with the route matching
// of `chio api protect` (forward authentication and ext_authz), or names
// its tool (AuthZEN), and is decided by the kernel with the same
// validation order, guards and budgets as every edge. Each decision ends
// in one signed receipt. Nothing runs here: an allowed call's receipt
// records its outcome as not_observed (dispatch.Authorize), since the
// gateway, not Chio, carries it out and does not report the result.
//
// The point keeps no state; receipts come from the ledger like every
// other call's.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// ReceiptHeader carries the receipt id of every decided request: on the
// answer to the gateway and, through it, to the upstream and the client.
const ReceiptHeader = "Chio-Receipt-Id"

// Point is the decision point. It is safe for concurrent use.
type Point struct {
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
	bridge   *openapi.Bridge // nil: no API, so no forward authentication or ext_authz
	serverID string
	exposure tools.Exposure // of the API's operations
	authzen  tools.Exposure // of the tools AuthZEN requests name
	registry *tools.Registry
	log      *slog.Logger
	origin   string
}

// Option configures a Point.
type Option func(*Point)

// WithAPI sets the API the gateway fronts: its operations are what
// forward authentication and ext_authz match requests to. b's
// tools.Server (openapi.NewServer) must be registered in the kernel's
// registry; it is never invoked.
func WithAPI(b *openapi.Bridge) Option {
	return func(p *Point) { p.bridge, p.serverID = b, b.Manifest().ServerID }
}

// WithTools sets the registry AuthZEN requests name tools of (the
// kernel's), and which of its tools they may name: by default all of
// them, within the hard floor.
func WithTools(reg *tools.Registry, e tools.Exposure) Option {
	return func(p *Point) { p.registry, p.authzen = reg, e }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(p *Point) { p.log = l } }

// WithAPIOrigin sets the origin ("https://api.example") clients address
// the gateway's API by, which their DPoP proofs name. By default the
// Host and protocol the gateway reports decide, and those are the
// client's own Host header: set it wherever holder-bound capabilities
// are used, so that a proof made for another origin is refused.
func WithAPIOrigin(origin string) Option {
	return func(p *Point) { p.origin = strings.TrimRight(origin, "/") }
}

// New builds the decision point on kernel k and dispatcher d.
func New(k *kernel.Kernel, d *dispatch.Dispatcher, opts ...Option) *Point {
	p := &Point{kernel: k, dispatch: d, log: slog.Default(),
		// The operator put Chio behind this gateway for this API: every
		// operation of the spec can be decided, and the hard floor holds.
		exposure: tools.Exposure{Protocol: "http", ExposeAll: true},
		authzen:  tools.Exposure{Protocol: "authzen", ExposeAll: true}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// original is a request as the gateway received it, rebuilt from what
// the gateway tells the decision point.
type original struct {
	req *http.Request
	// body is the request body when the gateway sent it (Envoy's
	// with_request_body); seen is false when the request may carry a body
	// the decision point was not shown.
	body []byte
	seen bool
	// sent is true when the request is known to carry a body (Envoy
	// reports its headers; nginx drops Content-Length from the
	// subrequest, so forward authentication cannot tell).
	sent bool
	// origin is the scheme and host the client addressed, as the
	// gateway reports them (WithPublicOrigin overrides it).
	origin string
	// via names the convention, for the receipt: "auth_request",
	// "forward_auth" or "ext_authz".
	via string
}

// answer is a decision as the gateway is to apply it.
type answer struct {
	status    int // 200 allows; 401, 403 or 503 refuse
	receiptID string
	denial    denial
	challenge string // WWW-Authenticate of a 401
}

// denial is the JSON body of a refused request, in the form `chio api
// protect` answers.
type denial struct {
	Error      string `json:"error"`
	Message    string `json:"message"`
	ReceiptID  string `json:"receipt_id,omitempty"`
	Guard      string `json:"guard,omitempty"`
	DPoPCheck  string `json:"dpop_check,omitempty"`
	Suggestion string `json:"suggestion,omitempty"`
}

func refusal(status int, code, msg string) answer {
	return answer{status: status, denial: denial{Error: code, Message: msg}}
}

// decideHTTP decides one original request against the API. Every refusal
// is a 401 or 403 (or a 503 when the event store is down), never a 404 or
// 400: nginx turns any status but 2xx, 401 and 403 into a 500.
func (p *Point) decideHTTP(ctx context.Context, o original) answer {
	if p.bridge == nil {
		return refusal(http.StatusForbidden, "no_api", "this decision point was started without an API to match requests to")
	}
	r := o.req
	rt, params, err := p.bridge.Match(r)
	if err != nil {
		return refusal(http.StatusForbidden, "not_an_operation",
			fmt.Sprintf("%s %s is not an operation of the API: %v", r.Method, r.URL.EscapedPath(), err))
	}
	if msg := undecided(rt, r); msg != "" {
		// chio api protect rebuilds the upstream request from the
		// arguments; a gateway forwards the client's. What the guards do
		// not see must not reach the upstream.
		return refusal(http.StatusForbidden, "undeclared_input", msg)
	}
	if rt.Body == nil && o.sent {
		return refusal(http.StatusForbidden, "undeclared_input", rt.Method+" "+rt.Path+" takes no request body, and this request carries one")
	}
	if rt.Body != nil && !o.seen {
		// The guards would decide on arguments without the body the
		// upstream then receives: refused, not decided on half a call.
		return refusal(http.StatusForbidden, "body_not_visible",
			rt.Method+" "+rt.Path+" takes a request body, and the gateway did not send it with the authorization request: "+
				"put chio api protect in front of this operation, or send the body (Envoy's with_request_body)")
	}
	origin := p.origin
	if origin == "" {
		origin = o.origin
	}
	presented, err := dpop.FromRequest(r, origin)
	if err != nil {
		a := refusal(http.StatusUnauthorized, "chio_capability_required", "a capability or access token is required for "+rt.Tool+": "+err.Error())
		a.challenge = `Bearer realm="chio"`
		return a
	}
	if o.seen && len(o.body) > 0 {
		r.Body = io.NopCloser(strings.NewReader(string(o.body)))
		r.ContentLength = int64(len(o.body))
	} else {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	args, err := p.bridge.Arguments(rt, r, params)
	if err != nil {
		return refusal(http.StatusForbidden, "bad_request", err.Error())
	}
	token, proof := presented.Token, kernel.FromPresented(presented)
	call := dispatch.Call{Token: token, Proof: proof, ServerID: p.serverID, ToolName: rt.Tool, Arguments: args, Exposure: &p.exposure,
		Metadata: map[string]any{"protocol": "http", "http": map[string]any{"method": rt.Method, "route": rt.Path},
			"gateway": o.via}}
	if _, dec := p.kernel.Admit(ctx, token, proof); dec != nil {
		res, err := p.dispatch.Refuse(ctx, call, dec)
		return p.refused(http.StatusUnauthorized, res, err, dec)
	}
	res, err := p.dispatch.Authorize(ctx, call)
	switch {
	case err != nil:
		return p.refused(0, nil, err, nil)
	case !res.Decision.Allow:
		return p.refused(http.StatusForbidden, res, nil, res.Decision)
	}
	return answer{status: http.StatusOK, receiptID: res.ReceiptID}
}

// refused is the answer to a call the kernel denied (or whose decision
// could not be made durable: err).
func (p *Point) refused(status int, res *dispatch.Result, err error, dec *kernel.Decision) answer {
	if err != nil {
		p.log.Warn("gateway: decision not recorded", "err", err)
		a := refusal(http.StatusServiceUnavailable, "unavailable", "the decision could not be recorded; nothing was allowed")
		if !errors.Is(err, dispatch.ErrEventStoreUnavailable) {
			a = refusal(http.StatusForbidden, "bad_request", err.Error())
		}
		return a
	}
	a := answer{status: status, receiptID: res.ReceiptID,
		denial: denial{Error: "chio_access_denied", Message: dec.Reason, ReceiptID: res.ReceiptID, Guard: dec.Guard}}
	if c := dec.DPoPCheck(); c != "" {
		a.denial.DPoPCheck = string(c)
		a.status = http.StatusUnauthorized
	}
	if a.status == http.StatusUnauthorized {
		a.challenge = `Bearer realm="chio", error="invalid_token"`
	}
	return a
}

// rebuild is the original request from its method, URI (path and query,
// as the client sent it), host and the headers the gateway passed on.
func rebuild(ctx context.Context, method, uri, host string, h http.Header) (*http.Request, error) {
	if method == "" || uri == "" {
		return nil, errors.New("the original method and URI are required")
	}
	if !strings.HasPrefix(uri, "/") {
		return nil, fmt.Errorf("original URI %q is not a path", abbreviate(uri))
	}
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, fmt.Errorf("original URI: %w", err)
	}
	if method != strings.ToUpper(method) {
		// The upstream may read "get" otherwise than the operation GET.
		return nil, fmt.Errorf("original method %q is not upper case", abbreviate(method))
	}
	r, err := http.NewRequestWithContext(ctx, method, uri, http.NoBody)
	if err != nil {
		return nil, fmt.Errorf("original request: %w", err)
	}
	r.URL, r.RequestURI, r.Header, r.Host = u, uri, h, host
	return r, nil
}

// undecided says what of r the operation does not declare, which the
// upstream would receive without a decision: a query parameter it does
// not name (exactly, as upstreams differ in case and in how they read
// "q[]"), or a path with ';' parameters (which some servers strip).
func undecided(rt *openapi.Route, r *http.Request) string {
	if strings.Contains(r.URL.EscapedPath(), ";") || strings.Contains(strings.ToLower(r.URL.EscapedPath()), "%3b") {
		return "the path carries ';' parameters, which some upstreams strip before routing"
	}
	declared := map[string]bool{}
	for _, p := range rt.Params {
		if p.In == openapi.InQuery {
			declared[p.Name] = true
		}
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "the query does not parse: " + err.Error()
	}
	for name := range q {
		if !declared[name] {
			return fmt.Sprintf("query parameter %q is not one %s %s declares", abbreviate(name), rt.Method, rt.Path)
		}
	}
	return ""
}

func abbreviate(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// Handler serves forward authentication (any method: Traefik may keep the
// original one) and the AuthZEN API with its metadata.
func (p *Point) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(ForwardPath, p.ServeForward)
	mux.HandleFunc(EvaluationPath, p.ServeEvaluation)
	mux.HandleFunc(EvaluationsPath, p.ServeEvaluations)
	mux.HandleFunc("GET "+MetadataPath, p.ServeMetadata)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, denial{Error: "not_found", Message: r.URL.Path + " is not a path of this decision point"})
	})
	return mux
}
