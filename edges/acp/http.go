package acp

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Path is where Register mounts the profile over HTTP.
const Path = "/acp"

// MaxBodyBytes bounds an HTTP request body.
const MaxBodyBytes = MaxLineBytes

// Register mounts POST /acp: one JSON-RPC request, notification or batch
// per POST, answered in the response body (204 when there is nothing to
// answer).
func (e *Edge) Register(ec *echo.Echo) { ec.POST(Path, e.handleHTTP) }

// handleHTTP reads the caller's capability and its proof of possession
// (Authorization: DPoP with a DPoP proof; without one, Authorization:
// Bearer or X-Chio-Capability); a caller that sends no credential at all
// acts under the dev capability, if any, unless it is a cross-site
// browser request. The body must be application/json: a browser cannot
// send that cross-site without a CORS preflight, which this surface never
// answers. A single request refused for its proof is answered 401 with
// the DPoP challenge naming the check; one whose proof could not be
// checked because the replay state is unreachable, 503 with Retry-After.
// A presentation wrong in form (Authorization: DPoP without a DPoP
// header, two DPoP headers, a DPoP header beside a bearer token) is
// refused by the kernel for every message under its token, a
// tool/invoke's or tool/stream's with its deny receipt.
func (e *Edge) handleHTTP(c echo.Context) error {
	r := c.Request()
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return c.JSON(http.StatusUnsupportedMediaType, errorResponse(nil,
			rpcErr(CodeInvalidRequest, nil, "Content-Type must be application/json")))
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return c.JSON(http.StatusRequestEntityTooLarge, errorResponse(nil,
			rpcErr(CodeInvalidRequest, nil, "the body is larger than %d bytes", MaxBodyBytes)))
	case err != nil:
		return c.JSON(http.StatusBadRequest, errorResponse(nil, rpcErr(CodeInvalidRequest, nil, "read body: %v", err)))
	}
	var conn credential
	presented, err := dpop.FromRequest(r, e.opts.origin)
	switch {
	case err == nil:
		conn = credential{token: presented.Token, proof: kernel.FromPresented(presented), invalid: presented.Invalid != nil}
	case dpop.Presents(r.Header):
		dpop.SetChallenge(c.Response().Header(), "", bearerChallenge)
		return c.JSON(http.StatusUnauthorized, errorResponse(nil, rpcErr(CodeUnauthorized, nil, "chio: %v", err)))
	default:
		// No credential: the dev capability, if any; otherwise each call
		// may still carry params._meta.chioCapability.
		conn.token = e.opts.devToken
		if conn.token != "" {
			if why := crossSite(r); why != "" {
				return c.JSON(http.StatusForbidden, errorResponse(nil, rpcErr(CodeForbidden, nil,
					"a cross-site browser request cannot run tools under the dev capability (%s): present a capability "+
						"(Authorization: DPoP, Authorization: Bearer or X-Chio-Capability)", why)))
			}
		}
	}
	ans := e.process(r.Context(), conn, body)
	if ans == nil {
		return c.NoContent(http.StatusNoContent)
	}
	if one, ok := ans.(*response); ok && one.Error != nil && one.Error.check != "" {
		if one.Error.check == dpop.CheckState {
			c.Response().Header().Set("Retry-After", retryAfter)
			return c.JSON(http.StatusServiceUnavailable, ans)
		}
		dpop.SetChallenge(c.Response().Header(), one.Error.check, "")
		return c.JSON(http.StatusUnauthorized, ans)
	}
	return c.JSON(http.StatusOK, ans)
}

// bearerChallenge is a 401's Bearer challenge, where a bearer token could
// have done.
const bearerChallenge = `Bearer realm="chio", charset="UTF-8"`

// crossSite says why r is a cross-site browser request, or "": one whose
// Sec-Fetch-Site is neither same-origin nor none, or whose Origin is not
// the request's own host. Requests without these headers (every
// non-browser client) pass.
func crossSite(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return "Sec-Fetch-Site is " + site
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Sprintf("Origin %q is not this host (%s)", origin, r.Host)
		}
	}
	return ""
}
