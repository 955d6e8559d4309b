package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// HTTPConfig configures the HTTP binding.
type HTTPConfig struct {
	// PublicURL is the origin advertised in the card; empty derives it
	// from each request.
	PublicURL string
	// TrustedProxies may set X-Forwarded-Proto and X-Forwarded-Host.
	TrustedProxies []netip.Prefix
	// ServeRoot also serves JSON-RPC at "/".
	ServeRoot bool
}

// Register mounts the agent card and the JSON-RPC binding on e.
func (e *Edge) Register(ec *echo.Echo, hc HTTPConfig) {
	card := func(c echo.Context) error { return e.serveCard(c, hc) }
	ec.GET(cardPath, card)
	ec.GET(legacyCardPath, card) // pre-1.0 clients: the 0.3-compatible card
	ec.GET(cardsig.JWKSPath, e.serveJWKS)
	rpc := func(c echo.Context) error { return e.serveJSONRPC(c, hc) }
	ec.POST("/a2a", rpc)
	ec.POST("/a2a/", rpc)
	if hc.ServeRoot {
		ec.POST("/", rpc)
	}
	rest := func(c echo.Context) error { return e.serveREST(c, hc) }
	ec.Any(RESTPath, rest)
	ec.Any(RESTPath+"/*", rest)
	// 0.3 clients given the JSON-RPC URL build REST paths on it (the 0.3
	// kit asks GET {url}/v1/card) and GET the URL itself for the card: the
	// 0.3 routes answer under /a2a/v1 too, and GET /a2a is the card.
	ec.Any("/a2a/v1/*", func(c echo.Context) error {
		r := c.Request()
		u := *r.URL
		u.Path = RESTPath + strings.TrimPrefix(u.Path, "/a2a")
		if u.RawPath != "" {
			u.RawPath = RESTPath + strings.TrimPrefix(u.RawPath, "/a2a")
		}
		r2 := r.Clone(r.Context())
		r2.URL = &u
		c.SetRequest(r2)
		return e.serveREST(c, hc)
	})
	ec.GET("/a2a", card)
}

// RESTPath is where the HTTP+JSON binding is mounted: the 1.0 paths under
// it (RESTPath+"/message:send"), the 0.3 ones under RESTPath+"/v1".
const RESTPath = "/a2a/rest"

// serveREST answers the HTTP+JSON binding. The core is the JSON-RPC one:
// the same operations with the same params, only framed differently.
func (e *Edge) serveREST(c echo.Context, hc HTTPConfig) error {
	ctx, rec := e.begin(c.Request().Context(), "rest", httpRequestID(c))
	defer rec.release()
	c.SetRequest(c.Request().WithContext(ctx))
	r := c.Request()
	path := strings.TrimPrefix(r.URL.EscapedPath(), RESTPath)
	route, ok := wire.MatchREST(r.Method, path)
	if !ok {
		rec.fail(wire.MethodNotFound(r.Method + " " + path))
		status, body := wire.EncodeRESTUnmatched(r.Method, path, route)
		if len(route.Allow) > 0 {
			c.Response().Header().Set("Allow", strings.Join(route.Allow, ", "))
		}
		return c.Blob(status, wire.RESTResponseContentType, body)
	}
	rec.setMethod(route.Op.String())
	fail := func(werr *wire.Error) error {
		rec.fail(werr)
		status, body := wire.EncodeRESTError(werr)
		challenge(c, werr)
		return c.Blob(status, wire.RESTResponseContentType, body)
	}
	var body []byte
	if r.Method == http.MethodPost {
		if ct := r.Header.Get("Content-Type"); !wire.RESTContentTypeOK(ct) {
			return fail(wire.ContentTypeNotSupported(ct))
		}
		var err error
		body, err = io.ReadAll(io.LimitReader(r.Body, wire.MaxRequestBytes+1))
		if err != nil {
			return fail(wire.ParseError("could not read the request body"))
		}
		if len(body) > wire.MaxRequestBytes {
			return fail(wire.InvalidRequest(fmt.Sprintf("request larger than %d bytes", wire.MaxRequestBytes)))
		}
	}
	if _, verr := wire.NegotiateVersion(r.Header.Get(wire.HeaderVersion), r.URL.Query().Get(wire.HeaderVersion)); verr != nil {
		return fail(verr)
	}
	// The path decides the dialect: /v1 is 0.3, the rest 1.0.
	version := route.ResultVersion()
	if route.Op.PushConfig() && e.cfg.Push == nil {
		return fail(wire.PushNotSupported())
	}
	params, werr := wire.DecodeRESTRequest(route, r.URL.Query(), body)
	if werr != nil {
		return fail(werr)
	}
	cl, cerr := e.callerFrom(r.Header)
	if cerr != nil {
		return fail(cerr)
	}
	rc := rpcCall{caller: cl, version: version, origin: publicURL(r, hc)}
	if route.Op.Streaming() {
		st, werr := e.openStream(withLastEventID(r.Context(), r.Header), rc, version, route.Op, params)
		if werr != nil {
			return fail(werr)
		}
		s := newSSE(c.Response(), func(ev json.RawMessage) []byte { return ev },
			func(werr *wire.Error) []byte { _, b := wire.EncodeRESTError(werr); return b })
		st.run(r.Context(), s, e.cfg.KeepAlive)
		return nil
	}
	result, werr := e.do(r.Context(), rc, version, route.Op, params)
	if werr != nil {
		return fail(werr)
	}
	raw, ok := result.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(result)
		if err != nil {
			return fail(wire.InternalError(err.Error()))
		}
		raw = b
	}
	return c.Blob(http.StatusOK, wire.RESTResponseContentType, raw)
}

// serveCard serves the agent card in the dialect the request asks for
// (cardDialect), signed when the edge has a card key, with ETag (over the
// bytes served, signature included) and Last-Modified validators.
func (e *Edge) serveCard(c echo.Context, hc HTTPConfig) error {
	r := c.Request()
	en, err := e.cardEntry(publicURL(r, hc), cardDialect(r, e.cfg.CardDialect))
	if err != nil {
		return c.JSON(http.StatusInternalServerError, map[string]string{"error": "agent card: " + err.Error(), "code": "card_encoding"})
	}
	h := c.Response().Header()
	h.Set("ETag", en.etag)
	h.Set("Last-Modified", e.cards.modified.Format(http.TimeFormat))
	h.Set("Cache-Control", "public, max-age=300")
	h.Set("Vary", cardVary)
	if notModified(r, en.etag, e.cards.modified) {
		return c.NoContent(http.StatusNotModified)
	}
	return c.Blob(http.StatusOK, "application/json", en.body)
}

// publicURL is the configured origin, else the request's, honouring
// X-Forwarded-* only from trusted proxies.
func publicURL(r *http.Request, hc HTTPConfig) string {
	if hc.PublicURL != "" {
		return strings.TrimRight(hc.PublicURL, "/")
	}
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if trusted(r.RemoteAddr, hc.TrustedProxies) {
		if p := lastValue(r.Header.Get("X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := lastValue(r.Header.Get("X-Forwarded-Host")); h != "" && !strings.ContainsAny(h, "/ @\\") {
			host = h
		}
	}
	return scheme + "://" + host
}

// lastValue is the right-most entry of a forwarded header: the one the
// trusted proxy appended, never one a client sent ahead of it.
func lastValue(v string) string {
	if i := strings.LastIndex(v, ","); i >= 0 {
		v = v[i+1:]
	}
	return strings.TrimSpace(v)
}

func trusted(remote string, proxies []netip.Prefix) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	for _, p := range proxies {
		if p.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
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
	cl, cerr := e.callerFrom(r.Header)
	rc := rpcCall{caller: cl, version: version, origin: publicURL(r, hc)}
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

// challenge is the HTTP status of a JSON-RPC answer: 200, except that a
// caller without valid credentials gets 401 and one without the authority
// 403, as A2A asks of every binding. On those it sets the RFC 6750
// challenge (error="invalid_token" when a credential was presented).
func challenge(c echo.Context, werr *wire.Error) int {
	if werr == nil {
		return http.StatusOK
	}
	h := c.Request().Header
	presented := h.Get("Authorization") != "" || h.Get("X-Chio-Capability") != ""
	switch werr.Code {
	case wire.CodeUnauthenticated:
		v := `Bearer realm="chio"`
		if presented {
			v += `, error="invalid_token"`
		}
		c.Response().Header().Set("WWW-Authenticate", v)
		return http.StatusUnauthorized
	case wire.CodePermissionDenied:
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="chio", error="insufficient_scope"`)
		return http.StatusForbidden
	}
	return http.StatusOK
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
		st, werr = e.openStream(withLastEventID(c.Request().Context(), c.Request().Header), rc, m.Version, m.Op, params)
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

// sse is a sink writing Server-Sent Events, flushed one by one.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	data    func(json.RawMessage) []byte
	errData func(*wire.Error) []byte
}

// newSSE sends the stream's headers at once, so the client knows the
// stream is open before the first event.
func newSSE(w http.ResponseWriter, data func(json.RawMessage) []byte, errData func(*wire.Error) []byte) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx and friends: do not buffer
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w), data: data, errData: errData}
	_ = s.rc.Flush()
	return s
}

func (s *sse) write(b []byte) error {
	// A server-wide write timeout must not cut a long stream; each write
	// gets its own deadline instead.
	_ = s.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sse) event(id string, ev json.RawMessage) error {
	return s.write(wire.SSEFrame(id, s.data(ev)))
}
func (s *sse) fail(werr *wire.Error) { _ = s.write(wire.SSEFrame("", s.errData(werr))) }
func (s *sse) keepAlive() error      { return s.write([]byte(wire.SSEKeepAlive)) }

// ServeStdio runs the hello-a2a stdio profile: one JSON-RPC request per
// line in, one response per line out, as the edge's dev capability holder.
// A line over the size limit is answered with -32600 and skipped; the loop
// goes on.
func (e *Edge) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriter(out)
	var cerr *wire.Error
	if e.cfg.DevToken == "" {
		cerr = wire.Unauthenticated("the stdio edge has no capability to act under")
	}
	// Lines are read on their own goroutine so that a stop (SIGTERM) ends
	// the session while it waits for input; that reader is left blocked
	// in Read, which ends with the process.
	type read struct {
		line    []byte
		tooLong bool
		err     error
	}
	lines := make(chan read)
	go func() {
		for {
			line, tooLong, err := readLine(r, wire.MaxRequestBytes)
			select {
			case lines <- read{line, tooLong, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var next read
		select {
		case next = <-lines:
		case <-ctx.Done():
			return nil // a requested stop, not a failure
		}
		line, tooLong, err := next.line, next.tooLong, next.err
		if err != nil && err != io.EOF {
			return fmt.Errorf("stdio: read: %w", err)
		}
		var resp []byte
		switch {
		case tooLong:
			werr := wire.InvalidRequest(fmt.Sprintf("request larger than %d bytes", wire.MaxRequestBytes))
			_, rec := e.begin(ctx, "stdio", "")
			rec.fail(werr)
			rec.release()
			resp = wire.EncodeError(nil, werr)
		case len(strings.TrimSpace(string(line))) > 0:
			lctx, rec := e.begin(ctx, "stdio", "")
			resp, _ = e.handleJSONRPC(lctx, rpcCall{caller: caller{token: e.cfg.DevToken}, version: wire.V03, stdio: true}, line, cerr)
			rec.release()
		}
		if resp != nil {
			if _, werr := w.Write(append(resp, '\n')); werr != nil {
				return fmt.Errorf("stdio: write: %w", werr)
			}
			if werr := w.Flush(); werr != nil {
				return fmt.Errorf("stdio: flush: %w", werr)
			}
		}
		if err == io.EOF || ctx.Err() != nil {
			return nil
		}
	}
}

// readLine reads one line of at most limit bytes; a longer one is read to
// its end and reported as tooLong, so the next line starts cleanly.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, rerr := r.ReadLine()
		if len(line)+len(chunk) > limit {
			tooLong, line = true, nil
		} else if !tooLong {
			line = append(line, chunk...)
		}
		if rerr != nil {
			return line, tooLong, rerr
		}
		if !isPrefix {
			return line, tooLong, nil
		}
	}
}
