package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/chio-ledger/chio/internal/redact"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// MaxResponseBytes is the default bound on an upstream response body.
const MaxResponseBytes = 4 << 20

// DefaultTimeout bounds an upstream call when Upstream.Client is nil.
const DefaultTimeout = 30 * time.Second

// Upstream is where and how the bridge calls the API.
type Upstream struct {
	// BaseURL is prefixed to every operation path. Nil: the spec's first
	// usable server (its variables at their defaults; a relative URL
	// resolved against the spec's URL). It must be http or https, and
	// carry no user info (credentials go in Headers) nor fragment.
	BaseURL *url.URL
	// Headers are the operator's headers (credentials), added to every
	// upstream request after the arguments, so they override any argument
	// header of the same name. They are never returned in outputs,
	// simulations or errors.
	Headers http.Header
	// Client sends the requests; nil: one with DefaultTimeout. Either way
	// redirects are not followed (a 3xx is an output), so the operator's
	// headers never reach another host.
	Client *http.Client
	// MaxResponseBytes bounds a response body; 0: MaxResponseBytes.
	MaxResponseBytes int64
}

// Server is the tools.Server that performs the bridge's calls. The embedded
// Running provides Cancel. It is safe for concurrent use.
type Server struct {
	tools.Running
	bridge  *Bridge
	base    *url.URL
	headers http.Header
	client  *http.Client
	maxResp int64
	// redactor removes the operator headers' values from answers.
	redactor *redact.Redactor
}

var _ tools.Server = (*Server)(nil)

// NewServer returns the server calling up for b's tools.
func NewServer(b *Bridge, up Upstream) (*Server, error) {
	if b == nil {
		return nil, errors.New("new openapi server: bridge is nil")
	}
	base := up.BaseURL
	if base == nil {
		var err error
		if base, err = specBaseURL(b.spec); err != nil {
			return nil, fmt.Errorf("new openapi server: %w", err)
		}
	}
	if err := usableBase(base); err != nil {
		return nil, fmt.Errorf("new openapi server: base URL: %w", err)
	}
	// Canonical names, so that an operator header replaces the argument
	// header of the same name however either is spelt.
	headers := make(http.Header, len(up.Headers))
	for k, vs := range up.Headers {
		ck := http.CanonicalHeaderKey(k)
		headers[ck] = append(headers[ck], vs...)
		for _, v := range vs {
			// The value is the operator's secret: name the header only.
			if err := checkHeaderValue(v); err != nil {
				return nil, fmt.Errorf("new openapi server: header %s: invalid value", k)
			}
		}
	}
	client := &http.Client{Timeout: DefaultTimeout}
	if up.Client != nil {
		c := *up.Client // a shallow copy, so the caller's client keeps its own redirect policy
		client = &c
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	maxResp := up.MaxResponseBytes
	if maxResp <= 0 {
		maxResp = MaxResponseBytes
	}
	b2 := *base
	return &Server{bridge: b, base: &b2, headers: headers, client: client, maxResp: maxResp, redactor: redact.FromHeader(headers)}, nil
}

// specBaseURL is the spec's first usable server URL. With no servers the
// default server is "/", usable only when the spec came from a URL.
func specBaseURL(s *Spec) (*url.URL, error) {
	if len(s.Doc.Servers) == 0 && s.URL != nil {
		return s.URL.ResolveReference(&url.URL{Path: "/"}), nil
	}
	for _, sv := range s.Doc.Servers {
		if sv == nil {
			continue
		}
		raw := sv.URL
		for name, v := range sv.Variables {
			if v != nil {
				raw = strings.ReplaceAll(raw, "{"+name+"}", v.Default)
			}
		}
		u, err := url.Parse(raw)
		if err != nil || strings.ContainsAny(raw, "{}") {
			continue
		}
		if !u.IsAbs() {
			if s.URL == nil {
				continue
			}
			u = s.URL.ResolveReference(u)
		}
		if usableBase(u) == nil {
			return u, nil
		}
	}
	return nil, fmt.Errorf("%w: the spec has no absolute http(s) server URL; give one", ErrNoUpstream)
}

func usableBase(u *url.URL) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: scheme %q is not http or https", ErrNoUpstream, u.Scheme)
	case u.Host == "":
		return fmt.Errorf("%w: no host", ErrNoUpstream)
	case u.User != nil:
		return fmt.Errorf("%w: user info in the URL; put credentials in the upstream headers", ErrNoUpstream)
	case u.Fragment != "":
		return fmt.Errorf("%w: the URL has a fragment", ErrNoUpstream)
	case u.RawQuery != "":
		// A query would be copied into every request, and with it into
		// errors, receipts and simulations: credentials belong in the
		// upstream headers.
		return fmt.Errorf("%w: the URL has a query; put credentials in the upstream headers", ErrNoUpstream)
	}
	return nil
}

// Manifest returns a copy of the bridge's manifest.
func (s *Server) Manifest() *schemas.ToolManifest { return s.bridge.Manifest() }

// ServerID returns the manifest's server id.
func (s *Server) ServerID() string { return s.bridge.manifest.ServerID }

// ToolNames returns the tools in manifest order.
func (s *Server) ToolNames() []string {
	names := make([]string, len(s.bridge.routes))
	for i, rt := range s.bridge.routes {
		names[i] = rt.Tool
	}
	return names
}

// route resolves an invocation's tool.
func (s *Server) route(inv tools.Invocation) (*Route, error) {
	rt, ok := s.bridge.byTool[inv.ToolName]
	if !ok || inv.ServerID != "" && inv.ServerID != s.ServerID() {
		return nil, fmt.Errorf("tool %q on server %q: %w", abbreviate(inv.ToolName), abbreviate(inv.ServerID), tools.ErrUnknownTool)
	}
	return rt, nil
}

// Invoke validates the arguments (a refusal wraps ErrBadArguments and
// nothing is sent), sends the upstream request and returns
// {"httpStatus", "method", "path" (the template), "body"}: the body parsed
// as JSON when it is JSON, else as a string, null when empty (a body that is
// not UTF-8 text is base64, with "bodyEncoding": "base64"). Any HTTP status
// is an output; transport failures are errors. In raw mode (WithRawResponse)
// the response goes to the sink and the output is {"httpStatus", "method",
// "path", "bodySha256", "bodyBytes"}. Operator header values are redacted
// from the response (see redact). A body over MaxResponseBytes fails the
// call (ErrResponseTooLarge) without being read further; in parsed mode, a
// JSON answer strictjson refuses fails it too (ErrUnreadableResponse).
func (s *Server) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	rt, err := s.route(inv)
	if err != nil {
		return nil, fmt.Errorf("invoke: %w", err)
	}
	runCtx, finish, err := s.Start(ctx, inv.ID)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", rt.Tool, err)
	}
	defer finish()
	ob, err := build(runCtx, rt, s.base, inv.Arguments)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", rt.Tool, err)
	}
	for k, vs := range s.headers {
		if k == "Host" && len(vs) > 0 {
			ob.req.Host = vs[0] // net/http sends req.Host, not the header
			continue
		}
		ob.req.Header[k] = slices.Clone(vs)
	}
	resp, err := s.client.Do(ob.req)
	if err != nil {
		if runCtx.Err() != nil {
			err = context.Cause(runCtx)
		}
		// The error names the route template, never the upstream URL (its
		// host is the operator's business) nor a header.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("invoke %s: %s %s: %w", rt.Tool, rt.Method, rt.Path, err)
	}
	defer resp.Body.Close()
	body, err := readBounded(resp.Body, s.maxResp, ErrResponseTooLarge)
	if err != nil {
		if runCtx.Err() != nil {
			err = context.Cause(runCtx)
		}
		return nil, fmt.Errorf("invoke %s: read response: %w", rt.Tool, err)
	}
	body, redacted := s.redactor.Bytes(body)
	if sink := rawSink(ctx); sink != nil {
		return rawOutput(sink, rt, resp, body, redacted, s.redactor.Bytes)
	}
	out, err := parsedOutput(rt, resp, body)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", rt.Tool, err)
	}
	return out, nil
}

// InvokeStream is refused: the bridge does not stream.
func (s *Server) InvokeStream(_ context.Context, inv tools.Invocation, _ func(tools.Chunk) error) error {
	return fmt.Errorf("invoke stream %s: %w", abbreviate(inv.ToolName), ErrNoStreaming)
}

// Simulate validates the arguments and builds the upstream request as
// Invoke does, but sends nothing. It returns {"bridgeMode": "simulation",
// "method", "path" (the template), "url" (with the query), "headers" (the
// argument headers only, never the operator's), "body"}.
func (s *Server) Simulate(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	rt, err := s.route(inv)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	ob, err := build(ctx, rt, s.base, inv.Arguments)
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", rt.Tool, err)
	}
	headers := make(map[string]string, len(ob.argHeaders))
	for k := range ob.argHeaders {
		headers[k] = ob.argHeaders.Get(k)
	}
	body := ob.body
	if body == nil {
		body = json.RawMessage(`null`)
	}
	out, err := marshal(struct {
		BridgeMode string            `json:"bridgeMode"`
		Method     string            `json:"method"`
		Path       string            `json:"path"`
		URL        string            `json:"url"`
		Headers    map[string]string `json:"headers"`
		Body       json.RawMessage   `json:"body"`
	}{"simulation", rt.Method, rt.Path, ob.req.URL.String(), headers, body})
	if err != nil {
		return nil, fmt.Errorf("simulate %s: %w", rt.Tool, err)
	}
	return out, nil
}
