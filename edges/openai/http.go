package openai

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas"
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
	token, _, werr := a.token(c.Request().Header)
	if werr != nil {
		return writeError(c, werr)
	}
	id, dec := a.kernel.Identify(c.Request().Context(), token, nil)
	if dec != nil {
		return writeError(c, unauthorized(dec, nil))
	}
	return c.JSON(http.StatusOK, map[string]any{"tools": a.Definitions(id, f)})
}

// handleToolCalls runs a batch. Request-level problems are answered before
// anything runs; a refused credential gets 401 after its calls' deny
// receipts are written.
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
	token, dev, werr := a.token(r.Header)
	if werr != nil {
		return writeError(c, werr)
	}
	if dev {
		if werr := refuseCrossSite(r); werr != nil {
			return writeError(c, werr)
		}
	}
	ctx := c.Request().Context()
	if _, dec := a.kernel.Identify(c.Request().Context(), token, nil); dec != nil {
		refs, err := a.Refuse(ctx, token, b, dec)
		if err != nil {
			return writeError(c, &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "not_recorded", Message: err.Error()})
		}
		return writeError(c, unauthorized(dec, refs))
	}
	return c.JSON(http.StatusOK, Answer(b.Dialect, a.Run(ctx, token, b)))
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
			"): present a capability as Authorization: Bearer or X-Chio-Capability, or call from the same origin"}
}

// readBody reads at most MaxBodyBytes.
func readBody(r *http.Request) ([]byte, *Error) { return readBodyMax(r, MaxBodyBytes) }

// token is the caller's capability (Authorization: Bearer or
// X-Chio-Capability), or the dev capability (dev true) for a caller that
// sends no credential at all.
func (a *Adapter) token(h http.Header) (tok string, dev bool, _ *Error) {
	tok, err := schemas.CapabilityFromHeaders(h)
	if err == nil {
		return tok, false, nil
	}
	if h.Get("Authorization") == "" && h.Get("X-Chio-Capability") == "" && a.devToken != "" {
		return a.devToken, true, nil
	}
	return "", false, &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "missing_capability",
		Message: "a chio.capability.v1 token is required, as Authorization: Bearer or X-Chio-Capability: " + err.Error()}
}

// unauthorized is the 401 of a capability the kernel refused, naming the
// deny receipts of the refused calls, if any.
func unauthorized(dec *kernel.Decision, refs []Refusal) *Error {
	e := &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_capability",
		Message: fmt.Sprintf("capability refused at %s: %s", dec.Guard, dec.Reason)}
	if refs != nil {
		e.Extra = map[string]any{"denied": true, "decision": DecisionDeny, "receipts": refs}
	}
	return e
}

// writeError answers an OpenAI-style error; a 401 names the Bearer scheme.
func writeError(c echo.Context, e *Error) error {
	if e.Status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="chio", charset="UTF-8"`)
	}
	return c.JSON(e.Status, e)
}
