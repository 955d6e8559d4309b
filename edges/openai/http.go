package openai

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// The HTTP paths of the surface.
const (
	ToolsPath     = "/openai/v1/tools"
	ToolCallsPath = "/openai/v1/tool-calls"
)

// Register mounts GET /openai/v1/tools and POST /openai/v1/tool-calls,
// and, with WithUpstream, the governing proxy's two paths.
func (a *Adapter) Register(e *echo.Echo) {
	e.GET(ToolsPath, a.handleTools)
	e.POST(ToolCallsPath, a.handleToolCalls)
	if a.upstream != nil {
		a.registerProxy(e)
	}
}

// handleTools answers {"tools":[…]}: the function definitions the caller's
// capability may invoke.
func (a *Adapter) handleTools(c echo.Context) error {
	f, werr := ParseFormat(c.QueryParam("format"))
	if werr != nil {
		return writeError(c, werr)
	}
	r := c.Request()
	token, proof, _, werr := a.credential(r)
	if werr != nil {
		return writeError(c, werr)
	}
	id, dec := a.kernel.Identify(r.Context(), token, proof)
	if dec != nil {
		return writeError(c, unauthorized(dec, nil))
	}
	return c.JSON(http.StatusOK, map[string]any{"tools": a.Definitions(id, f)})
}

// handleToolCalls runs a batch. Request-level problems are answered before
// anything runs; a refused credential gets 401 after its calls' deny
// receipts are written.
//
// The batch is one request with one proof of possession: every call of it
// is decided under that proof, whose one-time id is claimed once.
//
// The body must be application/json: a browser cannot send that
// cross-site without a CORS preflight, which this surface never answers.
// A request acting under the dev capability (no credential presented) is
// also refused when the browser marks it cross-site, so a web page cannot
// run tools through a loopback `chio up`.
func (a *Adapter) handleToolCalls(c echo.Context) error {
	r := c.Request()
	if werr := requireJSON(r); werr != nil {
		return writeError(c, werr)
	}
	body, werr := readBody(r)
	if werr != nil {
		return writeError(c, werr)
	}
	b, werr := DecodeBatch(body)
	if werr != nil {
		return writeError(c, werr)
	}
	token, proof, dev, werr := a.credential(r)
	if werr != nil {
		return writeError(c, werr)
	}
	if dev {
		if werr := refuseCrossSite(r); werr != nil {
			return writeError(c, werr)
		}
	}
	ctx := r.Context()
	// Admit leaves the proof's one-time claim to the first governed
	// call's decision write; a batch with no governed call settles it now.
	check := a.kernel.Identify
	if a.governs(b) {
		check = a.kernel.Admit
	}
	if _, dec := check(ctx, token, proof); dec != nil {
		refs, err := a.Refuse(ctx, token, proof, b, dec)
		if err != nil {
			return writeError(c, &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "not_recorded", Message: err.Error()})
		}
		return writeError(c, unauthorized(dec, refs))
	}
	results := a.Run(ctx, token, proof, b)
	if werr := proofRefused(results); werr != nil {
		// The proof was spent before (its one-time id claimed by another
		// request): every governed call was refused on the record.
		return writeError(c, werr)
	}
	return c.JSON(http.StatusOK, Answer(b.Dialect, results))
}

// governs reports whether any item of b would reach the kernel.
func (a *Adapter) governs(b *Batch) bool {
	names := a.table()
	for _, it := range b.Items {
		if _, _, res := a.prepare(names, b.Dialect, it); res == nil {
			return true
		}
	}
	return false
}

// requireJSON refuses a body that is not declared application/json (415).
func requireJSON(r *http.Request) *Error {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return &Error{Status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: "unsupported_media_type",
		Message: fmt.Sprintf("Content-Type is %s: send the body as application/json", ct)}
}

// refuseCrossSite refuses (403) a browser request from another site: one
// whose Sec-Fetch-Site is neither same-origin nor none (a navigation the
// user made), or whose Origin is not the request's own host. Requests
// without these headers (every non-browser client) pass.
func refuseCrossSite(r *http.Request) *Error {
	why := ""
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		why = "Sec-Fetch-Site is " + site
	} else if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			why = fmt.Sprintf("Origin %q is not this host (%s)", origin, r.Host)
		}
	}
	if why == "" {
		return nil
	}
	return &Error{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "cross_site_request",
		Message: "a cross-site browser request cannot run tools under the dev capability (" + why +
			"): present a capability (Authorization: DPoP, Authorization: Bearer or X-Chio-Capability), or call from the same origin"}
}

// readBody reads at most MaxBodyBytes.
func readBody(r *http.Request) ([]byte, *Error) { return readBodyMax(r, MaxBodyBytes) }

// credential is the caller's capability and its proof of possession
// (Authorization: DPoP with a DPoP proof; or, without a proof,
// Authorization: Bearer or X-Chio-Capability), or the dev capability (dev
// true) for a caller that sends no credential at all.
func (a *Adapter) credential(r *http.Request) (token string, proof *kernel.Proof, dev bool, _ *Error) {
	p, err := dpop.FromRequest(r, a.origin)
	if err == nil {
		return p.Token, kernel.FromPresented(p), false, nil
	}
	if !dpop.Presents(r.Header) && a.devToken != "" {
		return a.devToken, nil, true, nil
	}
	return "", nil, false, &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "missing_capability",
		Message: "a chio.capability.v1 token is required, as Authorization: DPoP with a DPoP proof, or as Authorization: Bearer or X-Chio-Capability: " + err.Error()}
}

// Codes of a 401's error, and of the 503 of a proof that could not be
// checked.
const (
	codeInvalidCapability = "invalid_capability"
	codeInvalidProof      = "invalid_dpop_proof"
	codeProofState        = "dpop_state_unavailable"
)

// RetryAfterSeconds is the Retry-After of a 503 answering a request whose
// proof could not be checked because the replay state is unreachable.
const RetryAfterSeconds = 1

// unauthorized is the 401 of a capability the kernel refused, naming the
// deny receipts of the refused calls, if any. A refused proof of
// possession is code invalid_dpop_proof, its check under chio.dpop_check.
// A proof that could not be checked because the replay state is
// unreachable is a server condition, not the caller's fault: a 503
// server_error, code dpop_state_unavailable, with Retry-After.
func unauthorized(dec *kernel.Decision, refs []Refusal) *Error {
	e := &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: codeInvalidCapability,
		Message: fmt.Sprintf("capability refused at %s: %s", dec.Guard, dec.Reason), check: dec.DPoPCheck()}
	extra := map[string]any{}
	if refs != nil {
		extra["denied"], extra["decision"], extra["receipts"] = true, DecisionDeny, refs
	}
	if e.check != "" {
		e.Code, extra["dpop_check"] = codeInvalidProof, string(e.check)
	}
	if e.check == dpop.CheckState {
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, "server_error", codeProofState
		e.Message = "the proof could not be checked, so nothing ran; retry: " + dec.Reason
	}
	if len(extra) > 0 {
		e.Extra = extra
	}
	return e
}

// proofRefused is the 401 of a batch whose governed calls were refused
// for their shared proof after their decisions were written (a replayed
// proof), naming their receipts; nil when none was.
func proofRefused(results []Result) *Error {
	var dec *kernel.Decision
	refs := []Refusal{}
	for _, r := range results {
		if r.refusal != nil && r.refusal.DPoPCheck() != "" {
			dec = r.refusal
			refs = append(refs, Refusal{CallID: r.Item.CallID, ReceiptRef: r.Chio.ReceiptRef})
		}
	}
	if dec == nil {
		return nil
	}
	return unauthorized(dec, refs)
}

// writeError answers an OpenAI-style error. A 401 challenges with the
// DPoP scheme and, unless a proof was refused, the Bearer scheme too; the
// 503 of an unreachable replay state says when to retry.
func writeError(c echo.Context, e *Error) error {
	switch {
	case e.Status == http.StatusUnauthorized:
		dpop.SetChallenge(c.Response().Header(), e.check, `Bearer realm="chio", charset="UTF-8"`)
	case e.check == dpop.CheckState:
		c.Response().Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
	}
	return c.JSON(e.Status, e)
}
