package acp

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/schemas"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agentKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	otherKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
)

func pub(k ed25519.PrivateKey) string { return govtest.Pub(k) }

var exposed = map[string]json.RawMessage{"acp.expose": json.RawMessage(`true`)}

const (
	srvID      = "acp-srv"
	pathSchema = `{"type":"object","properties":{"path":{"type":"string"}}}`
)

// testServer is a real in-process tool server: "explode" fails, every
// other tool echoes its call; streamed, every tool emits two chunks.
type testServer struct {
	tools.Running
	defs []schemas.ToolDefinition
	// hold, when set before the fixture starts, is called first by every
	// Invoke: a test holds a call there while the client goes away.
	hold func(inv tools.Invocation)
}

func (s *testServer) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: srvID, Name: srvID, Version: "0.1.0", Tools: s.defs}
}
func (s *testServer) ServerID() string { return srvID }
func (s *testServer) ToolNames() []string {
	var n []string
	for _, d := range s.defs {
		n = append(n, d.Name)
	}
	return n
}
func (s *testServer) Invoke(_ context.Context, inv tools.Invocation) (json.RawMessage, error) {
	if s.hold != nil {
		s.hold(inv)
	}
	if inv.ToolName == "explode" {
		return nil, errors.New("boom: the disk is on fire")
	}
	return json.Marshal(map[string]any{"tool": inv.ToolName, "arguments": inv.Arguments})
}

// InvokeStream emits two chunks.
func (s *testServer) InvokeStream(_ context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	for i, line := range []string{`"line 1"`, `"line 2"`} {
		if err := emit(tools.Chunk{Data: json.RawMessage(line), Last: i == 1}); err != nil {
			return fmt.Errorf("emit: %w", err)
		}
	}
	return nil
}

func readOnly() *schemas.ToolAnnotations { return &schemas.ToolAnnotations{ReadOnly: true} }

func testServer1() *testServer {
	obj := json.RawMessage(pathSchema)
	return &testServer{defs: []schemas.ToolDefinition{
		{Name: "read_file", Description: "read a file", InputSchema: obj, Metadata: exposed, Annotations: readOnly()},
		{Name: "exec_command", Description: "run a command", InputSchema: obj, Metadata: exposed, HasSideEffects: true},
		{Name: "browser_click", Description: "click", InputSchema: obj, Metadata: exposed},
		{Name: "delete_record", Description: "deletes", InputSchema: obj, Metadata: exposed, HasSideEffects: true},
		{Name: "search", Description: "search", InputSchema: obj, Metadata: exposed, Annotations: readOnly()},
		{Name: "explode", Description: "fails", InputSchema: obj, Metadata: exposed},
		{Name: "tail_terminal", Description: "streams a terminal", Metadata: exposed,
			InputSchema: json.RawMessage(`{"type":"object","x-chio-streaming":true}`)},
		{Name: "fs_hidden", Description: "unpublished", Metadata: exposed,
			InputSchema: json.RawMessage(`{"type":"object","x-chio-publish":false}`)},
		{Name: "secret", Description: "not for ACP", InputSchema: obj},
	}}
}

type fixture struct {
	url  string
	js   jetstream.JetStream
	edge *Edge
	reg  *tools.Registry
}

func start(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	return startWith(t, testServer1(), opts...)
}

// startWith is start over srv.
func startWith(t testing.TB, srv *testServer, opts ...Option) *fixture {
	t.Helper()
	env := govtest.New(t, govtest.WithServers(srv), govtest.WithIssuers(issuerKey), govtest.WithEdgeID("acp-test"))
	js, k, reg, d := env.JS, env.Kernel, env.Registry, env.Dispatch
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := New(k, reg, d, js, append([]Option{WithLogger(quiet), WithAgentInfo("chio-test", "1.2.3")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ec := echo.New()
	e.Register(ec)
	hs := httptest.NewServer(ec)
	t.Cleanup(hs.Close)
	return &fixture{url: hs.URL, js: js, edge: e, reg: reg}
}

// token issues a capability for subject with grants, valid for an hour.
func token(t testing.TB, id string, subject ed25519.PrivateKey, grants ...schemas.ToolGrant) string {
	t.Helper()
	return tokenBy(t, issuerKey, id, subject, grants...)
}

// tokenBy is token issued by issuer.
func tokenBy(t testing.TB, issuer ed25519.PrivateKey, id string, subject ed25519.PrivateKey, grants ...schemas.ToolGrant) string {
	t.Helper()
	return govtest.Valid(t, issuer, subject, id, grants...)
}

func grant(tool string) schemas.ToolGrant { return govtest.Invoke(srvID, tool) }

// wildcard grants every tool of the server, by "*".
func wildcard(t testing.TB) string { return token(t, "cap-all", agentKey, grant("*")) }

// answer is a JSON-RPC response read off the wire.
type answer struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (a answer) code() int {
	if a.Error == nil {
		return 0
	}
	return a.Error.Code
}

// post sends one raw body to POST /acp with tok as Bearer ("" for none).
func (f *fixture) post(t testing.TB, tok, body string, h map[string]string) (int, []byte) {
	t.Helper()
	status, raw, err := f.send(tok, body, h)
	if err != nil {
		t.Fatal(err)
	}
	return status, raw
}

// send is post without a testing.TB, for goroutines.
func (f *fixture) send(tok, body string, h map[string]string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, f.url+Path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// call makes one JSON-RPC request over HTTP under tok.
func (f *fixture) call(t testing.TB, tok, method string, params any) answer {
	t.Helper()
	a, err := f.try(tok, method, params)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// try is call without a testing.TB, for goroutines.
func (f *fixture) try(tok, method string, params any) (answer, error) {
	var a answer
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return a, err
	}
	status, raw, err := f.send(tok, string(body), nil)
	if err != nil {
		return a, err
	}
	if status != http.StatusOK {
		return a, fmt.Errorf("%s: HTTP %d: %s", method, status, raw)
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, fmt.Errorf("%s: answer %s: %w", method, raw, err)
	}
	return a, nil
}

// ok fails unless a succeeded, and decodes its result into v.
func ok(t testing.TB, a answer, v any) {
	t.Helper()
	if a.Error != nil {
		t.Fatalf("error %d %s: %s", a.Error.Code, a.Error.Message, a.Error.Data)
	}
	if v != nil {
		if err := json.Unmarshal(a.Result, v); err != nil {
			t.Fatalf("result %s: %v", a.Result, err)
		}
	}
}

// verdict decodes an error's data.
func verdict(t testing.TB, a answer) Verdict {
	t.Helper()
	if a.Error == nil {
		t.Fatalf("no error: %s", a.Result)
	}
	var v Verdict
	if err := json.Unmarshal(a.Error.Data, &v); err != nil {
		t.Fatalf("data %s: %v", a.Error.Data, err)
	}
	return v
}

// acpMeta is the ACP part of a decision event's metadata.
type acpMeta struct {
	Protocol string `json:"protocol"`
	ACP      struct {
		Method string `json:"method"`
		TaskID string `json:"task_id"`
	} `json:"acp"`
}

func metaOf(t testing.TB, d schemas.DecisionEvent) acpMeta {
	t.Helper()
	var m acpMeta
	if err := json.Unmarshal(d.Metadata, &m); err != nil {
		t.Fatalf("metadata %s: %v", d.Metadata, err)
	}
	return m
}
