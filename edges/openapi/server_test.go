package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/mccutchen/go-httpbin/v2/httpbin"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/chio-ledger/chio/edges/tools"
)

// Operator credentials the tests give the bridge; the bearer token is long
// enough to be redacted.
const (
	operatorToken = "op-s3cr3t-token-42"
	operatorKey   = "op-api-key-0123456789"
)

// seen is one request the upstream received.
type seen struct {
	Method, EscapedPath, RawQuery string
	Header                        http.Header
	Body                          []byte
}

// upstream is go-httpbin behind a recorder.
type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []seen
	arrived chan struct{}
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{arrived: make(chan struct{}, 64)}
	hb := httpbin.New(httpbin.WithMaxDuration(10 * time.Second))
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.mu.Lock()
		u.reqs = append(u.reqs, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), body})
		u.mu.Unlock()
		u.arrived <- struct{}{}
		hb.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

func (u *upstream) last(t *testing.T) seen {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	return u.reqs[len(u.reqs)-1]
}

// newHTTPBinServer is the bridge of testdata/httpbin.yaml against u, with
// the operator's credentials.
func newHTTPBinServer(t *testing.T, u *upstream, maxResp int64) *Server {
	t.Helper()
	b := mustBuild(t, "httpbin.yaml", Config{ServerID: "httpbin", OutputSchemas: true})
	base, err := url.Parse(u.URL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(b, Upstream{
		BaseURL:          base,
		Headers:          http.Header{"Authorization": {"Bearer " + operatorToken}, "x-api-key": {operatorKey}},
		MaxResponseBytes: maxResp,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// invocation has a unique id, as a receipt id is.
func invocation(tool, args string) tools.Invocation {
	return tools.Invocation{ID: uuid.NewString(), ServerID: "httpbin", ToolName: tool, Arguments: json.RawMessage(args)}
}

// output is Invoke's parsed-mode result.
type output struct {
	HTTPStatus   int             `json:"httpStatus"`
	Method       string          `json:"method"`
	Path         string          `json:"path"`
	Body         json.RawMessage `json:"body"`
	BodyEncoding string          `json:"bodyEncoding"`
}

func TestInvoke(t *testing.T) {
	up := newUpstream(t)
	srv := newHTTPBinServer(t, up, 0)
	tests := []struct {
		name, tool, args string
		status           int
		method, template string
		// what the upstream must have seen
		path   string
		query  url.Values
		header map[string]string
		body   string
		// substrings of the output's body
		outBody []string
	}{
		{
			name: "query, header, cookie, operator credentials", tool: "httpGet",
			args:   `{"q":"a b&c","n":5,"flag":false,"tags":["x","y"],"ids":[1,2],"X-Trace":"t-1","X-Api-Key":"caller-key","session":"s1"}`,
			status: 200, method: "GET", template: "/get", path: "/get",
			query: url.Values{"q": {"a b&c"}, "n": {"5"}, "flag": {"false"}, "tags": {"x", "y"}, "ids": {"1,2"}},
			// The operator's X-Api-Key overrides the argument's.
			header:  map[string]string{"X-Trace": "t-1", "X-Api-Key": operatorKey, "Authorization": "Bearer " + operatorToken, "Cookie": "session=s1"},
			outBody: []string{`"q":["a b&c"]`, `"X-Trace":["t-1"]`},
		},
		{
			name: "JSON body", tool: "httpPost", args: `{"body": {"name": "rex", "count": 2}}`,
			status: 200, method: "POST", template: "/post", path: "/post",
			header: map[string]string{"Content-Type": "application/json"}, body: `{"name":"rex","count":2}`,
			outBody: []string{`"json":{"count":2,"name":"rex"}`},
		},
		{
			name: "DELETE with a query", tool: "httpDelete", args: `{"reason":"done"}`,
			status: 200, method: "DELETE", template: "/delete", path: "/delete", query: url.Values{"reason": {"done"}},
		},
		{
			name: "any status is an output", tool: "status", args: `{"code":418}`,
			status: 418, method: "GET", template: "/status/{code}", path: "/status/418",
		},
		{
			name: "path parameter escaped", tool: "get_anything_path", args: `{"path":"a b;c?d#e%41"}`,
			status: 200, method: "GET", template: "/anything/{path}", path: "/anything/a%20b%3Bc%3Fd%23e%2541",
			outBody: []string{`"method":"GET"`},
		},
		{
			name: "text body", tool: "post_anything_path", args: `{"path":"notes","body":"hello\nworld"}`,
			status: 200, method: "POST", template: "/anything/{path}", path: "/anything/notes",
			header: map[string]string{"Content-Type": "text/plain"}, body: "hello\nworld",
			outBody: []string{`"data":"hello\nworld"`},
		},
		{
			// httpbin echoes the token: the output must not carry it.
			name: "credential echoed by the upstream is redacted", tool: "bearer", args: `{}`,
			status: 200, method: "GET", template: "/bearer", path: "/bearer",
			header:  map[string]string{"Authorization": "Bearer " + operatorToken},
			outBody: []string{`"authenticated":true`, `"token":"[REDACTED]"`},
		},
		{
			name: "echoed headers are redacted", tool: "headers", args: `{}`,
			status: 200, method: "GET", template: "/headers", path: "/headers",
			outBody: []string{`"Authorization":["[REDACTED]"]`, `"X-Api-Key":["[REDACTED]"]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := srv.Invoke(context.Background(), invocation(tt.tool, tt.args))
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			var out output
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatalf("output %s: %v", raw, err)
			}
			// MCP clients check structured content against the output
			// schema: every answer, whatever its status, must match it.
			if err := matchesOutputSchema(srv, tt.tool, raw); err != nil {
				t.Errorf("output does not match the tool's output schema: %v\n%s", err, raw)
			}
			if out.HTTPStatus != tt.status || out.Method != tt.method || out.Path != tt.template {
				t.Errorf("output = %d %s %s, want %d %s %s", out.HTTPStatus, out.Method, out.Path, tt.status, tt.method, tt.template)
			}
			for _, s := range tt.outBody {
				if !strings.Contains(string(out.Body), s) {
					t.Errorf("output body lacks %s: %s", s, out.Body)
				}
			}
			for _, secret := range []string{operatorToken, operatorKey} {
				if strings.Contains(string(raw), secret) {
					t.Errorf("output carries an operator credential: %s", raw)
				}
			}
			got := up.last(t)
			if got.Method != tt.method || got.EscapedPath != tt.path {
				t.Errorf("upstream saw %s %s, want %s %s", got.Method, got.EscapedPath, tt.method, tt.path)
			}
			q, err := url.ParseQuery(got.RawQuery)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(q) != fmt.Sprint(tt.query) && !(len(q) == 0 && len(tt.query) == 0) {
				t.Errorf("upstream query = %v, want %v", q, tt.query)
			}
			for k, v := range tt.header {
				if got.Header.Get(k) != v {
					t.Errorf("upstream header %s = %q, want %q", k, got.Header.Get(k), v)
				}
			}
			if string(got.Body) != tt.body {
				t.Errorf("upstream body = %q, want %q", got.Body, tt.body)
			}
		})
	}
}

// matchesOutputSchema validates a tool's output against its manifest
// output schema.
func matchesOutputSchema(srv *Server, tool string, out []byte) error {
	for _, td := range srv.Manifest().Tools {
		if td.Name != tool {
			continue
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(td.OutputSchema))
		if err != nil {
			return err
		}
		c := newCompiler()
		if err := c.AddResource("output.json", doc); err != nil {
			return err
		}
		sch, err := c.Compile("output.json")
		if err != nil {
			return err
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
		if err != nil {
			return err
		}
		return sch.Validate(inst)
	}
	return fmt.Errorf("no tool %s", tool)
}

// TestInvokeRefused: bad arguments and path traversal never reach the
// upstream.
func TestInvokeRefused(t *testing.T) {
	up := newUpstream(t)
	srv := newHTTPBinServer(t, up, 0)
	tests := []struct {
		name, tool, args string
		wantErr          error
	}{
		{"dot-dot", "get_anything_path", `{"path":".."}`, ErrBadArguments},
		{"encoded dot-dot", "get_anything_path", `{"path":"%2e%2e"}`, ErrBadArguments},
		{"double-encoded dot-dot", "get_anything_path", `{"path":"%252E%252E"}`, ErrBadArguments},
		{"slash", "get_anything_path", `{"path":"a/b"}`, ErrBadArguments},
		{"encoded slash", "get_anything_path", `{"path":"a%2fb"}`, ErrBadArguments},
		{"climbing", "get_anything_path", `{"path":"../../admin"}`, ErrBadArguments},
		{"backslash", "get_anything_path", `{"path":"..\\x"}`, ErrBadArguments},
		{"dot", "get_anything_path", `{"path":"."}`, ErrBadArguments},
		{"empty", "get_anything_path", `{"path":""}`, ErrBadArguments},
		{"missing path parameter", "get_anything_path", `{}`, ErrBadArguments},
		{"unknown argument", "httpGet", `{"q":"x","admin":true}`, ErrBadArguments},
		{"wrong type", "httpGet", `{"n":"five"}`, ErrBadArguments},
		{"not an integer", "status", `{"code":4.5}`, ErrBadArguments},
		{"array item with the delimiter", "httpGet", `{"ids":["1,2"]}`, ErrBadArguments},
		{"header splitting", "httpGet", `{"X-Trace":"a\r\nX-Evil: 1"}`, ErrBadArguments},
		{"invalid cookie", "httpGet", `{"session":"a;b"}`, ErrBadArguments},
		{"required body missing", "httpPost", `{}`, ErrBadArguments},
		{"body against its schema", "httpPost", `{"body":{"count":1}}`, ErrBadArguments},
		{"text body not a string", "post_anything_path", `{"path":"x","body":{"a":1}}`, ErrBadArguments},
		{"argument given twice", "httpGet", `{"q":"a","q":"b"}`, ErrBadArguments},
		{"not an object", "httpGet", `["q"]`, ErrBadArguments},
		{"not JSON", "httpGet", `{"q":`, ErrBadArguments},
		{"unknown tool", "nope", `{}`, tools.ErrUnknownTool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := up.count()
			inv := invocation(tt.tool, tt.args)
			if _, err := srv.Invoke(context.Background(), inv); !errors.Is(err, tt.wantErr) {
				t.Errorf("Invoke: err = %v, want %v", err, tt.wantErr)
			}
			if _, err := srv.Simulate(context.Background(), inv); !errors.Is(err, tt.wantErr) {
				t.Errorf("Simulate: err = %v, want %v", err, tt.wantErr)
			}
			if n := up.count() - before; n != 0 {
				t.Errorf("the upstream was contacted %d times", n)
			}
		})
	}
	wrongServer := invocation("httpGet", `{}`)
	wrongServer.ServerID = "other"
	if _, err := srv.Invoke(context.Background(), wrongServer); !errors.Is(err, tools.ErrUnknownTool) {
		t.Errorf("Invoke on another server id: err = %v, want ErrUnknownTool", err)
	}
}

func TestRawMode(t *testing.T) {
	up := newUpstream(t)
	srv := newHTTPBinServer(t, up, 0)
	tests := []struct {
		name, tool, args string
		status           int
		contentType      string
	}{
		{"JSON", "httpGet", `{"q":"raw"}`, 200, "application/json; charset=utf-8"},
		{"status", "status", `{"code":404}`, 404, "text/plain; charset=utf-8"},
		{"binary", "bytes", `{"n":300}`, 200, "application/octet-stream"},
		{"redacted body", "bearer", `{}`, 200, "application/json; charset=utf-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sink RawResponse
			raw, err := srv.Invoke(WithRawResponse(context.Background(), &sink), invocation(tt.tool, tt.args))
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			var out struct {
				HTTPStatus int    `json:"httpStatus"`
				Method     string `json:"method"`
				Path       string `json:"path"`
				BodySHA256 string `json:"bodySha256"`
				BodyBytes  int    `json:"bodyBytes"`
				Body       any    `json:"body"`
			}
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(sink.Body)
			if out.HTTPStatus != tt.status || sink.Status != tt.status {
				t.Errorf("status = %d (sink %d), want %d", out.HTTPStatus, sink.Status, tt.status)
			}
			if out.BodySHA256 != hex.EncodeToString(sum[:]) || out.BodyBytes != len(sink.Body) || out.Body != nil {
				t.Errorf("output %s does not describe the sink's %d bytes", raw, len(sink.Body))
			}
			if got := sink.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tt.contentType)
			}
			if bytes.Contains(sink.Body, []byte(operatorToken)) {
				t.Errorf("the raw body carries the operator token")
			}
			if cl := sink.Header.Get("Content-Length"); cl != "" && cl != fmt.Sprint(len(sink.Body)) {
				t.Errorf("Content-Length %s for %d bytes", cl, len(sink.Body))
			}
		})
	}
}

func TestRemoveHopByHop(t *testing.T) {
	h := http.Header{
		"Connection":        {"close, X-Session-Hop"},
		"X-Session-Hop":     {"1"},
		"Keep-Alive":        {"timeout=5"},
		"Transfer-Encoding": {"chunked"},
		"Upgrade":           {"h2c"},
		"Content-Type":      {"application/json"},
		"X-Request-Id":      {"r1"},
	}
	removeHopByHop(h)
	if len(h) != 2 || h.Get("Content-Type") == "" || h.Get("X-Request-Id") == "" {
		t.Errorf("left %v, want Content-Type and X-Request-Id only", h)
	}
}

func TestSimulate(t *testing.T) {
	up := newUpstream(t)
	srv := newHTTPBinServer(t, up, 0)
	tests := []struct {
		name, tool, args string
		want             string // canonical JSON, with UPSTREAM for the base URL
	}{
		{
			name: "query, headers, cookie", tool: "httpGet",
			args: `{"q":"a b","tags":["x","y"],"X-Trace":"t-1","X-Api-Key":"caller-key","session":"s1"}`,
			want: `{"body":null,"bridgeMode":"simulation","headers":{"Cookie":"session=s1","X-Api-Key":"caller-key","X-Trace":"t-1"},` +
				`"method":"GET","path":"/get","url":"UPSTREAM/get?q=a+b\u0026tags=x\u0026tags=y"}`,
		},
		{
			name: "JSON body", tool: "httpPost", args: `{"body":{"name":"rex"}}`,
			want: `{"body":{"name":"rex"},"bridgeMode":"simulation","headers":{},"method":"POST","path":"/post","url":"UPSTREAM/post"}`,
		},
		{
			name: "escaped path and text body", tool: "post_anything_path", args: `{"path":"a b","body":"hi"}`,
			want: `{"body":"hi","bridgeMode":"simulation","headers":{},"method":"POST","path":"/anything/{path}","url":"UPSTREAM/anything/a%20b"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := up.count()
			raw, err := srv.Simulate(context.Background(), invocation(tt.tool, tt.args))
			if err != nil {
				t.Fatalf("Simulate: %v", err)
			}
			want := strings.ReplaceAll(tt.want, "UPSTREAM", up.URL)
			if got := canonical(t, raw); got != canonical(t, []byte(want)) {
				t.Errorf("Simulate = %s\nwant       %s", got, want)
			}
			if strings.Contains(string(raw), operatorToken) || strings.Contains(string(raw), operatorKey) {
				t.Errorf("the simulation shows an operator header: %s", raw)
			}
			if up.count() != before {
				t.Error("the simulation contacted the upstream")
			}
		})
	}
}

func TestResponseBound(t *testing.T) {
	up := newUpstream(t)
	srv := newHTTPBinServer(t, up, 1000)
	tests := []struct {
		name    string
		n       int
		wantErr error
	}{
		{"under the bound", 999, nil},
		{"at the bound", 1000, nil},
		{"over the bound", 1001, ErrResponseTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := srv.Invoke(context.Background(), invocation("bytes", fmt.Sprintf(`{"n":%d}`, tt.n)))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Invoke: err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var out output
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatal(err)
			}
			// Random bytes are not UTF-8 text: the body comes base64-encoded.
			var b64 string
			if err := json.Unmarshal(out.Body, &b64); err != nil || out.BodyEncoding != "base64" || len(b64) != base64.StdEncoding.EncodedLen(tt.n) {
				t.Errorf("body = %.40s… (%s), want base64 of the bytes", out.Body, out.BodyEncoding)
			}
		})
	}
}

// TestRedirectNotFollowed: a 3xx is an output; the operator's credentials
// never reach the redirect target.
func TestRedirectNotFollowed(t *testing.T) {
	up := newUpstream(t)
	elsewhere := newUpstream(t)
	srv := newHTTPBinServer(t, up, 0)
	raw, err := srv.Invoke(context.Background(), invocation("redirectTo", fmt.Sprintf(`{"url":%q,"status_code":307}`, elsewhere.URL+"/headers")))
	if err != nil {
		t.Fatal(err)
	}
	var out output
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.HTTPStatus != http.StatusTemporaryRedirect {
		t.Errorf("httpStatus = %d, want 307", out.HTTPStatus)
	}
	if n := elsewhere.count(); n != 0 {
		t.Errorf("the redirect target was contacted %d times", n)
	}
}

func TestCancel(t *testing.T) {
	up := newUpstream(t)
	srv := newHTTPBinServer(t, up, 0)
	inv := invocation("delay", `{"seconds":5}`)
	done := make(chan error, 1)
	go func() {
		_, err := srv.Invoke(context.Background(), inv)
		done <- err
	}()
	select {
	case <-up.arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the call never reached the upstream")
	}
	if err := srv.Cancel(context.Background(), inv.ID); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, tools.ErrCanceled) {
			t.Errorf("Invoke: err = %v, want ErrCanceled", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("Invoke did not stop on Cancel")
	}
	if err := srv.Cancel(context.Background(), inv.ID); !errors.Is(err, tools.ErrNotRunning) {
		t.Errorf("Cancel after the end: err = %v, want ErrNotRunning", err)
	}
}

func TestInvokeStreamRefused(t *testing.T) {
	srv := newHTTPBinServer(t, newUpstream(t), 0)
	err := srv.InvokeStream(context.Background(), invocation("httpGet", `{}`), func(tools.Chunk) error { return nil })
	if !errors.Is(err, ErrNoStreaming) {
		t.Errorf("InvokeStream: err = %v, want ErrNoStreaming", err)
	}
}

func TestNewServer(t *testing.T) {
	zoo := mustBuild(t, "zoo-3.0.yaml", Config{ServerID: "zoo"})
	catalog := mustBuild(t, "catalog-3.1.json", Config{ServerID: "catalog"})
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	tests := []struct {
		name    string
		b       *Bridge
		up      Upstream
		wantURL string // of a simulated listAnimals / listItems call
		wantErr error
		hidden  string // must not appear in the error
	}{
		{name: "the spec's server, variables at their defaults", b: zoo, wantURL: "https://eu.zoo.example/v1/animals"},
		{name: "BaseURL wins", b: zoo, up: Upstream{BaseURL: mustURL("http://127.0.0.1:9/api/")}, wantURL: "http://127.0.0.1:9/api/animals"},
		{name: "relative server without a spec URL", b: catalog, wantErr: ErrNoUpstream},
		{name: "BaseURL for a relative server", b: catalog, up: Upstream{BaseURL: mustURL("https://catalog.example")}, wantURL: "https://catalog.example/items"},
		{name: "user info refused", b: zoo, up: Upstream{BaseURL: mustURL("https://u:p@zoo.example")}, wantErr: ErrNoUpstream},
		{name: "query refused (credentials belong in headers)", b: zoo, up: Upstream{BaseURL: mustURL("https://zoo.example/?api_key=s3cret")}, wantErr: ErrNoUpstream},
		{name: "not http", b: zoo, up: Upstream{BaseURL: mustURL("ftp://zoo.example")}, wantErr: ErrNoUpstream},
		{name: "bad operator header, value not echoed", b: zoo, up: Upstream{Headers: http.Header{"X-Key": {"secret-value\r\nX: y"}}}, hidden: "secret-value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewServer(tt.b, tt.up)
			if tt.wantErr != nil || tt.hidden != "" {
				if err == nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("NewServer: err = %v, want %v", err, tt.wantErr)
				}
				if tt.hidden != "" && strings.Contains(err.Error(), tt.hidden) {
					t.Errorf("the error shows the header value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewServer: %v", err)
			}
			tool := s.ToolNames()[0]
			raw, err := s.Simulate(context.Background(), tools.Invocation{ToolName: tool, Arguments: json.RawMessage(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			var out struct{ URL string }
			if err := json.Unmarshal(raw, &out); err != nil || out.URL != tt.wantURL {
				t.Errorf("url = %q, want %q", out.URL, tt.wantURL)
			}
		})
	}
}
