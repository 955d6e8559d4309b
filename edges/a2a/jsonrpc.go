package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// HandleJSONRPC answers one JSON-RPC request body, and returns the error
// it answered with (the HTTP binding sets its status from it). It returns
// a nil response for a notification (JSON-RPC sends no response to one).
func (e *Edge) handleJSONRPC(ctx context.Context, rc rpcCall, body []byte, callerErr *wire.Error) (resp []byte, werr *wire.Error) {
	rec := callFrom(ctx)
	req, werr := wire.DecodeRequest(body)
	if werr != nil {
		rec.fail(werr)
		return wire.EncodeError(req.ResponseID(), werr), werr
	}
	defer func() {
		// A bug must not take the process down, nor leave the caller
		// without an answer.
		if r := recover(); r != nil {
			e.log.Error("a2a: panic while handling a request", "method", req.Method, "panic", fmt.Sprint(r))
			werr = wire.InternalError("internal error")
			rec.fail(werr)
			resp = wire.EncodeError(req.ResponseID(), werr)
		}
	}()
	result, werr := e.call(ctx, rc, req, callerErr)
	rec.fail(werr)
	if req.IsNotification {
		return nil, werr
	}
	if werr != nil {
		return wire.EncodeError(req.ResponseID(), werr), werr
	}
	return wire.EncodeResult(req.ResponseID(), result), nil
}

func (e *Edge) call(ctx context.Context, rc rpcCall, req *wire.Request, callerErr *wire.Error) (any, *wire.Error) {
	m, ok := wire.LookupMethod(req.Method, rc.negotiated)
	if !ok {
		return nil, wire.MethodNotFound(req.Method)
	}
	callFrom(ctx).setMethod(m.Op.String())
	version := m.Version
	if rc.stdio {
		version = wire.VHelloStdio
	}
	if m.Op == wire.OpSubscribeToTask || (m.Op == wire.OpSendStreamingMessage && !rc.stdio) {
		// Streams are served by the HTTP bindings (stream.go); a stream
		// method reaching here came over stdio.
		return nil, wire.UnsupportedOperation("streaming is served over HTTP (SSE), not on the stdio profile")
	}
	if m.Op.PushConfig() && e.cfg.Push == nil {
		return nil, wire.PushNotSupported() // whatever the params
	}
	params, werr := m.DecodeParams(req.Params)
	if werr != nil {
		return nil, werr
	}
	if callerErr != nil {
		return nil, callerErr
	}
	if rc.stdio {
		rc.caller.proof = stdioProof(req.Method, m.Op, req.Params)
	}
	rc.dialect = wire.DialectOf(version)
	return e.do(ctx, rc, m.Op, params)
}

func (e *Edge) serveJSONRPC(c echo.Context, hc HTTPConfig) error {
	ctx, rec := e.begin(c.Request().Context(), "jsonrpc", httpRequestID(c))
	defer rec.release()
	c.SetRequest(c.Request().WithContext(ctx))
	r := c.Request()
	refuse := func(id json.RawMessage, werr *wire.Error) error {
		rec.fail(werr)
		return c.Blob(challenge(c, werr), "application/json", wire.EncodeError(id, werr))
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/a2a+json") {
			return refuse(nil, wire.ContentTypeNotSupported(ct))
		}
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, wire.MaxRequestBytes+1))
	if err != nil {
		return refuse(nil, wire.ParseError("could not read the request body"))
	}
	if len(body) > wire.MaxRequestBytes {
		return refuse(nil, wire.InvalidRequest(fmt.Sprintf("request larger than %d bytes", wire.MaxRequestBytes)))
	}
	version, verr := wire.NegotiateVersion(r.Header.Get(wire.HeaderVersion), r.URL.Query().Get(wire.HeaderVersion))
	if verr != nil {
		req, _ := wire.DecodeRequest(body)
		return refuse(req.ResponseID(), verr)
	}
	cl, cerr := e.httpCaller(r, hc, "")
	rc := rpcCall{caller: cl, negotiated: version, origin: publicURL(r, hc), remote: remoteHost(r.RemoteAddr)}
	if req, werr := wire.DecodeRequest(body); werr == nil {
		if m, ok := wire.LookupMethod(req.Method, version); ok && m.Op.Streaming() && !req.IsNotification {
			return e.serveRPCStream(c, rc, req, m, cerr)
		}
	}
	resp, werr := e.handleJSONRPC(ctx, rc, body, cerr)
	if resp == nil {
		return c.NoContent(http.StatusNoContent)
	}
	return c.Blob(challenge(c, werr), "application/json", resp)
}

// serveRPCStream answers a JSON-RPC streaming method with SSE: each data
// line is a JSON-RPC response carrying one StreamResponse. An error before
// the stream opens is an ordinary JSON-RPC error response.
func (e *Edge) serveRPCStream(c echo.Context, rc rpcCall, req *wire.Request, m wire.Method, cerr *wire.Error) error {
	id := req.ResponseID()
	rec := callFrom(c.Request().Context())
	rec.setMethod(m.Op.String())
	params, werr := m.DecodeParams(req.Params)
	if werr == nil {
		werr = cerr
	}
	var st *stream
	if werr == nil {
		rc.dialect = wire.DialectOf(m.Version)
		st, werr = e.openStream(withLastEventID(c.Request().Context(), c.Request().Header), rc, m.Op, params)
	}
	if werr != nil {
		rec.fail(werr)
		return c.Blob(challenge(c, werr), "application/json", wire.EncodeError(id, werr))
	}
	s := newSSE(c.Response(), func(ev json.RawMessage) []byte { return wire.EncodeResult(id, ev) },
		func(werr *wire.Error) []byte { return wire.EncodeError(id, werr) })
	st.run(c.Request().Context(), s, e.cfg.KeepAlive)
	return nil
}
