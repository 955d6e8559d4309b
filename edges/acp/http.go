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

	"github.com/chio-ledger/chio/schemas"
)

// Path is where Register mounts the profile over HTTP.
const Path = "/acp"

// MaxBodyBytes bounds an HTTP request body.
const MaxBodyBytes = MaxLineBytes

// Register mounts POST /acp: one JSON-RPC request, notification or batch
// per POST, answered in the response body (204 when there is nothing to
// answer).
func (e *Edge) Register(ec *echo.Echo) { ec.POST(Path, e.handleHTTP) }

// handleHTTP reads the caller's capability from Authorization: Bearer or
// X-Chio-Capability; a caller that sends neither acts under the dev
// capability, if any, unless it is a cross-site browser request. The body
// must be application/json: a browser cannot send that cross-site without
// a CORS preflight, which this surface never answers.
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
	token, err := schemas.CapabilityFromHeaders(r.Header)
	if err != nil {
		if r.Header.Get("Authorization") != "" || r.Header.Get("X-Chio-Capability") != "" {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="chio", charset="UTF-8"`)
			return c.JSON(http.StatusUnauthorized, errorResponse(nil, rpcErr(CodeUnauthorized, nil, "chio: %v", err)))
		}
		// No credential: the dev capability, if any; otherwise each call
		// may still carry params._meta.chioCapability.
		token = e.opts.devToken
		if token != "" {
			if why := crossSite(r); why != "" {
				return c.JSON(http.StatusForbidden, errorResponse(nil, rpcErr(CodeForbidden, nil,
					"a cross-site browser request cannot run tools under the dev capability (%s): present a capability as Authorization: Bearer or X-Chio-Capability", why)))
			}
		}
	}
	ans := e.process(r.Context(), token, body)
	if ans == nil {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, ans)
}

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
