package openai

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas"
)

// The HTTP paths of the surface.
const (
	ToolsPath     = "/openai/v1/tools"
	ToolCallsPath = "/openai/v1/tool-calls"
)

// Register mounts GET /openai/v1/tools and POST /openai/v1/tool-calls.
func (a *Adapter) Register(e *echo.Echo) {
	e.GET(ToolsPath, a.handleTools)
	e.POST(ToolCallsPath, a.handleToolCalls)
}

// handleTools answers {"tools":[…]}: the function definitions the caller's
// capability may invoke.
func (a *Adapter) handleTools(c echo.Context) error {
	f, werr := ParseFormat(c.QueryParam("format"))
	if werr != nil {
		return writeError(c, werr)
	}
	token, werr := a.token(c.Request().Header)
	if werr != nil {
		return writeError(c, werr)
	}
	id, dec := a.kernel.Identify(token)
	if dec != nil {
		return writeError(c, unauthorized(dec, nil))
	}
	return c.JSON(http.StatusOK, map[string]any{"tools": a.Definitions(id, f)})
}

// handleToolCalls runs a batch. Request-level problems are answered before
// anything runs; a refused credential gets 401 after its calls' deny
// receipts are written.
func (a *Adapter) handleToolCalls(c echo.Context) error {
	body, werr := readBody(c.Request())
	if werr != nil {
		return writeError(c, werr)
	}
	b, werr := DecodeBatch(body)
	if werr != nil {
		return writeError(c, werr)
	}
	token, werr := a.token(c.Request().Header)
	if werr != nil {
		return writeError(c, werr)
	}
	ctx := c.Request().Context()
	if _, dec := a.kernel.Identify(token); dec != nil {
		refs, err := a.Refuse(ctx, token, b, dec)
		if err != nil {
			return writeError(c, &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "not_recorded", Message: err.Error()})
		}
		return writeError(c, unauthorized(dec, refs))
	}
	return c.JSON(http.StatusOK, Answer(b.Dialect, a.Run(ctx, token, b)))
}

// readBody reads at most MaxBodyBytes.
func readBody(r *http.Request) ([]byte, *Error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || len(body) > MaxBodyBytes:
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "body_too_large",
			Message: fmt.Sprintf("the body is over %d bytes", MaxBodyBytes)}
	case err != nil:
		return nil, invalid("invalid_body", "", "read the body: %v", err)
	}
	return body, nil
}

// token is the caller's capability (Authorization: Bearer or
// X-Chio-Capability), or the dev capability for a caller that sends no
// credential at all.
func (a *Adapter) token(h http.Header) (string, *Error) {
	tok, err := schemas.CapabilityFromHeaders(h)
	if err == nil {
		return tok, nil
	}
	if h.Get("Authorization") == "" && h.Get("X-Chio-Capability") == "" && a.devToken != "" {
		return a.devToken, nil
	}
	return "", &Error{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "missing_capability",
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
