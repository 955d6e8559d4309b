package mcp

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/schemas"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agentKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
)

func pub(k ed25519.PrivateKey) string { return govtest.Pub(k) }

var exposed = map[string]json.RawMessage{"mcp.expose": json.RawMessage(`true`)}

const pathSchema = `{"type":"object","properties":{"path":{"type":"string"}}}`

// testServer is a real in-process tool server: "explode" fails, "scalar"
// answers a JSON string, "http_fail" answers as an HTTP API that said 404,
// every other tool echoes its call.
type testServer struct {
	tools.Running
	id   string
	defs []schemas.ToolDefinition
}

func (s *testServer) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: s.id, Name: s.id, Version: "0.1.0", Tools: s.defs}
}
func (s *testServer) ServerID() string { return s.id }
func (s *testServer) ToolNames() []string {
	var n []string
	for _, d := range s.defs {
		n = append(n, d.Name)
	}
	return n
}
func (s *testServer) Invoke(_ context.Context, inv tools.Invocation) (json.RawMessage, error) {
	switch inv.ToolName {
	case "explode":
		return nil, errors.New("boom: the disk is on fire")
	case "scalar":
		return json.RawMessage(`"hi"`), nil
	case "http_fail":
		return json.RawMessage(`{"httpStatus":404,"method":"GET","path":"/pets/9","body":{"error":"no such pet"}}`), nil
	}
	return json.Marshal(map[string]any{"server": s.id, "tool": inv.ToolName, "arguments": inv.Arguments})
}
func (s *testServer) InvokeStream(context.Context, tools.Invocation, func(tools.Chunk) error) error {
	return errors.New("no streams")
}

// simServer can also simulate its calls.
type simServer struct{ testServer }

func (s *simServer) Simulate(_ context.Context, inv tools.Invocation) (json.RawMessage, error) {
	return json.Marshal(map[string]any{"would": "POST /pets", "tool": inv.ToolName, "arguments": inv.Arguments})
}

func testServers() []tools.Server {
	return []tools.Server{
		&testServer{id: "files-srv", defs: []schemas.ToolDefinition{
			{Name: "read", Description: "read a file", InputSchema: json.RawMessage(pathSchema), Metadata: exposed,
				OutputSchema: json.RawMessage(`{"type":"object"}`),
				Annotations:  &schemas.ToolAnnotations{ReadOnly: true, Idempotent: true}},
			{Name: "echo", Description: "echo", InputSchema: json.RawMessage(pathSchema), Metadata: exposed},
			{Name: "explode", Description: "fails", InputSchema: json.RawMessage(`{}`), Metadata: exposed,
				HasSideEffects: true, Annotations: &schemas.ToolAnnotations{Destructive: true}},
			{Name: "scalar", Description: "a string", InputSchema: json.RawMessage(`{}`), Metadata: exposed},
			{Name: "http_fail", Description: "an API that says 404", InputSchema: json.RawMessage(`{}`), Metadata: exposed},
			{Name: "secret", Description: "not for MCP", InputSchema: json.RawMessage(`{}`)},
			{Name: "bad_schema", Description: "takes a string", InputSchema: json.RawMessage(`{"type":"string"}`), Metadata: exposed},
		}},
		&testServer{id: "twin-srv", defs: []schemas.ToolDefinition{
			{Name: "echo", Description: "echo too", InputSchema: json.RawMessage(pathSchema), Metadata: exposed},
		}},
		&simServer{testServer{id: "sim-srv", defs: []schemas.ToolDefinition{
			{Name: "create_pet", Description: "adds a pet", InputSchema: json.RawMessage(`{"type":"object"}`),
				Metadata: exposed, HasSideEffects: true},
		}}},
	}
}

// allNames are the MCP names of every tool the full capability may call.
var allNames = []string{"files-srv__echo", "explode", "http_fail", "read", "scalar", "create_pet", "twin-srv__echo"}

type fixture struct {
	url  string
	js   jetstream.JetStream
	edge *Edge
	reg  *tools.Registry
}

func start(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	env := govtest.New(t, govtest.WithServers(testServers()...), govtest.WithIssuers(issuerKey), govtest.WithEdgeID("mcp-test"))
	js, k, reg, d := env.JS, env.Kernel, env.Registry, env.Dispatch
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := New(k, reg, d, append([]Option{WithLogger(quietLog), WithServerInfo("chio-test", "1.2.3")}, opts...)...)
	ec := echo.New()
	e.Register(ec)
	srv := httptest.NewServer(ec)
	t.Cleanup(srv.Close)
	return &fixture{url: srv.URL, js: js, edge: e, reg: reg}
}

// capability issues a token with id granting servers, valid from..until.
func capability(t testing.TB, id string, from, until time.Time, servers ...string) string {
	t.Helper()
	return govtest.Token(t, issuerKey, agentKey, id, from, until, govtest.AllOf(servers...)...)
}

func valid(t testing.TB, id string, servers ...string) string {
	return capability(t, id, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), servers...)
}

func fullToken(t testing.TB) string { return valid(t, "cap-full", "files-srv", "twin-srv", "sim-srv") }

func expiredToken(t testing.TB) string {
	return capability(t, "cap-old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "files-srv", "twin-srv")
}

// bearer sends every request with its token, as an MCP client configured
// with a capability does.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connect is the official SDK client over streamable HTTP; version ""
// is the SDK's default (server/discover, then the legacy handshake).
func connect(t testing.TB, url, token, version string) (*sdk.ClientSession, error) {
	t.Helper()
	tr := &sdk.StreamableClientTransport{Endpoint: url + Path, HTTPClient: &http.Client{Transport: bearer{token}},
		DisableStandaloneSSE: true, MaxRetries: -1}
	var opts *sdk.ClientSessionOptions
	if version != "" {
		opts = &sdk.ClientSessionOptions{ProtocolVersion: version}
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, nil).Connect(context.Background(), tr, opts)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func mustConnect(t testing.TB, url, token, version string) *sdk.ClientSession {
	t.Helper()
	cs, err := connect(t, url, token, version)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cs
}

// rpcAnswer is a JSON-RPC response read off the wire.
type rpcAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// post sends one raw JSON-RPC body, with no session and no initialize,
// as a stateless client may; h adds or (with "") removes headers.
func post(t testing.TB, url, token string, body string, h map[string]string) (int, http.Header, rpcAnswer) {
	t.Helper()
	return request(t, http.MethodPost, url, token, body, h)
}

// request is post with any method.
func request(t testing.TB, method, url, token string, body string, h map[string]string) (int, http.Header, rpcAnswer) {
	t.Helper()
	req, err := http.NewRequest(method, url+Path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range h {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var a rpcAnswer
	if len(bytes.TrimSpace(raw)) > 0 && json.Unmarshal(raw, &a) != nil {
		t.Fatalf("answer %d is not JSON-RPC: %s", resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header, a
}

// callBody is a raw tools/call request.
func callBody(id any, name, args string) string {
	idRaw, _ := json.Marshal(id)
	return `{"jsonrpc":"2.0","id":` + string(idRaw) + `,"method":"tools/call","params":{"name":` + quote(name) + `,"arguments":` + args + `}}`
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// eventMeta is the MCP part of a decision event's metadata.
type eventMeta struct {
	Protocol string `json:"protocol"`
	MCP      struct {
		Tool      string `json:"tool"`
		RequestID any    `json:"request_id"`
	} `json:"mcp"`
}

func metaOf(t testing.TB, d schemas.DecisionEvent) eventMeta {
	t.Helper()
	var m eventMeta
	if err := json.Unmarshal(d.Metadata, &m); err != nil {
		t.Fatalf("metadata %s: %v", d.Metadata, err)
	}
	return m
}

// verdictOf reads a result's _meta.chio.
func verdictOf(t testing.TB, meta sdk.Meta) Verdict {
	t.Helper()
	raw, err := json.Marshal(meta["chio"])
	if err != nil {
		t.Fatal(err)
	}
	var v Verdict
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("_meta.chio %s: %v", raw, err)
	}
	return v
}

// textOf is a result's one text content.
func textOf(t testing.TB, res *sdk.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("%d contents", len(res.Content))
	}
	tc, ok := res.Content[0].(*sdk.TextContent)
	if !ok {
		t.Fatalf("content %T", res.Content[0])
	}
	return tc.Text
}

// rpcCode is the JSON-RPC code of an error the client surfaced, or 0.
func rpcCode(err error) int64 {
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return werr.Code
	}
	return 0
}
