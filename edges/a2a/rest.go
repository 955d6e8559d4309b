package a2a

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// The HTTP+JSON (REST) binding.

// RESTPath is where the HTTP+JSON binding is mounted: the 1.0 paths under
// it (RESTPath+"/message:send"), the 0.3 ones under RESTPath+"/v1".
const RESTPath = "/a2a/rest"

// serveREST answers the HTTP+JSON binding. The core is the JSON-RPC one:
// the same operations with the same params, only framed differently.
//
// sentPath, if set, is the request's escaped path as the client sent it, for a
// request routed here under another path (the 0.3 routes under /a2a/v1):
// the URL its proof of possession names.
func (e *Edge) serveREST(c echo.Context, hc HTTPConfig, sentPath string) error {
	ctx, rec := e.begin(c.Request().Context(), "rest", httpRequestID(c))
	defer rec.release()
	c.SetRequest(c.Request().WithContext(ctx))
	r := c.Request()
	path := strings.TrimPrefix(r.URL.EscapedPath(), RESTPath)
	route, ok := wire.MatchREST(r.Method, path)
	if !ok {
		return restUnmatched(c, rec, path, route)
	}
	rec.setMethod(route.Op.String())
	fail := func(werr *wire.Error) error {
		rec.fail(werr)
		status, body := wire.EncodeRESTError(werr)
		challenge(c, werr)
		return c.Blob(status, wire.RESTResponseContentType, body)
	}
	body, werr := restBody(r)
	if werr != nil {
		return fail(werr)
	}
	if _, verr := wire.NegotiateVersion(r.Header.Get(wire.HeaderVersion), r.URL.Query().Get(wire.HeaderVersion)); verr != nil {
		return fail(verr)
	}
	// The path decides the dialect: /v1 is 0.3, the rest 1.0.
	dialect := wire.DialectOf(route.ResultVersion())
	if route.Op.PushConfig() && e.cfg.Push == nil {
		return fail(wire.PushNotSupported())
	}
	params, werr := wire.DecodeRESTRequest(route, r.URL.Query(), body)
	if werr != nil {
		return fail(werr)
	}
	cl, cerr := e.httpCaller(r, hc, sentPath)
	if cerr != nil {
		return fail(cerr)
	}
	rc := rpcCall{caller: cl, dialect: dialect, origin: publicURL(r, hc), remote: remoteHost(r.RemoteAddr)}
	if route.Op.Streaming() {
		st, werr := e.openStream(withLastEventID(r.Context(), r.Header), rc, route.Op, params)
		if werr != nil {
			return fail(werr)
		}
		s := newSSE(c.Response(), func(ev json.RawMessage) []byte { return ev },
			func(werr *wire.Error) []byte { _, b := wire.EncodeRESTError(werr); return b })
		st.run(r.Context(), s, e.cfg.KeepAlive)
		return nil
	}
	result, werr := e.do(r.Context(), rc, route.Op, params)
	if werr != nil {
		return fail(werr)
	}
	raw, werr := restResult(result)
	if werr != nil {
		return fail(werr)
	}
	return c.Blob(http.StatusOK, wire.RESTResponseContentType, raw)
}

// restUnmatched answers a request no route matches (404, or 405 with
// Allow when the path exists for other methods).
func restUnmatched(c echo.Context, rec *callRecord, path string, route wire.RESTRoute) error {
	r := c.Request()
	rec.fail(wire.MethodNotFound(r.Method + " " + path))
	status, body := wire.EncodeRESTUnmatched(r.Method, path, route)
	if len(route.Allow) > 0 {
		c.Response().Header().Set("Allow", strings.Join(route.Allow, ", "))
	}
	return c.Blob(status, wire.RESTResponseContentType, body)
}

// restBody reads a POST's body (nil for the other methods), checking its
// content type and size.
func restBody(r *http.Request) ([]byte, *wire.Error) {
	if r.Method != http.MethodPost {
		return nil, nil
	}
	if ct := r.Header.Get("Content-Type"); !wire.RESTContentTypeOK(ct) {
		return nil, wire.ContentTypeNotSupported(ct)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, wire.MaxRequestBytes+1))
	if err != nil {
		return nil, wire.ParseError("could not read the request body")
	}
	if len(body) > wire.MaxRequestBytes {
		return nil, wire.InvalidRequest(fmt.Sprintf("request larger than %d bytes", wire.MaxRequestBytes))
	}
	return body, nil
}

// restResult is the body of a result: the core's encoded JSON as is.
func restResult(result any) (json.RawMessage, *wire.Error) {
	raw, ok := result.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(result)
		if err != nil {
			return nil, wire.InternalError(err.Error())
		}
		raw = b
	}
	return raw, nil
}
