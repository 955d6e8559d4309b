package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mccutchen/go-httpbin/v2/httpbin"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/edges/protect"
	"github.com/chio-ledger/chio/internal/natsauth"
)

// bearer adds a capability to every request of an MCP client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// chio up --openapi: an unchanged MCP client (the official Go SDK) lists
// the bridged API's tools and calls one under the dev capability; its
// receipt is in the log and verifies offline. A write is denied by
// default (the dev capability's grant is a wildcard), with a deny
// receipt. The same API behind --openapi-protect-listen forwards a read
// and names its receipt.
func TestUpOpenAPIBridgeAndProtect(t *testing.T) {
	api := httptest.NewServer(httpbin.New())
	t.Cleanup(api.Close)
	spec := filepath.Join("..", "..", "edges", "openapi", "testdata", "httpbin.yaml")
	up := startUp(t, "--openapi", spec, "--openapi-server-id", "httpbin", "--openapi-upstream", api.URL,
		"--openapi-protect-listen", "127.0.0.1:0")
	tok, err := os.ReadFile(filepath.Join(up.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	dev := strings.TrimSpace(string(tok))
	ctx := context.Background()
	client := sdk.NewClient(&sdk.Implementation{Name: "chio-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: up.httpURL + mcpedge.Path,
		HTTPClient: &http.Client{Transport: bearer{dev, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range list.Tools {
		names[tl.Name] = true
	}
	if !names["httpGet"] || !names["status"] || names["httpPost"] || names["hello_task"] {
		t.Fatalf("tools %v: reads listed, the wildcard-unreachable write and the non-MCP demo not", names)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "httpGet", Arguments: map[string]any{"q": "mcp"}})
	if err != nil || res.IsError {
		t.Fatalf("httpGet: %v %+v", err, res)
	}
	var out struct {
		HTTPStatus int `json:"httpStatus"`
		Body       struct {
			Args map[string][]string `json:"args"`
		} `json:"body"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil || out.HTTPStatus != 200 || out.Body.Args["q"][0] != "mcp" {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	rid := receiptRef(t, res.Meta)
	awaitLogReceipt(t, up.httpURL, up.token, rid)
	code, receipt := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
	if code != http.StatusOK || !strings.Contains(string(receipt), `"protocol":"mcp"`) || !strings.Contains(string(receipt), `"tool_name":"httpGet"`) {
		t.Fatalf("receipt %d %s", code, receipt)
	}
	verifyOffline(t, up, rid, receipt)

	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "httpPost", Arguments: map[string]any{"body": map[string]any{"name": "rex"}}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, "denied by default") {
		t.Fatalf("httpPost under a wildcard: %v %+v", err, res)
	}
	awaitLogReceipt(t, up.httpURL, up.token, receiptRef(t, res.Meta))

	addr := regexp.MustCompile(`api protect  (http://[0-9.:]+)`).FindStringSubmatch(up.out)
	if addr == nil {
		t.Fatalf("no api protect address in:\n%s", up.out)
	}
	req, _ := http.NewRequest(http.MethodGet, addr[1]+"/get?q=protected", nil)
	req.Header.Set("X-Chio-Capability", dev)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(protect.ReceiptHeader) == "" {
		t.Fatalf("protected read: %d %v", resp.StatusCode, resp.Header)
	}
	awaitLogReceipt(t, up.httpURL, up.token, resp.Header.Get(protect.ReceiptHeader))
}

func receiptRef(t *testing.T, meta sdk.Meta) string {
	t.Helper()
	raw, _ := json.Marshal(meta["chio"])
	var v mcpedge.Verdict
	if err := json.Unmarshal(raw, &v); err != nil || v.ReceiptRef == "" {
		t.Fatalf("_meta.chio %s: %v", raw, err)
	}
	return v.ReceiptRef
}

// chio openapi manifest prints the manifest; a spec with nothing to
// publish and a bad header flag are refused with clear errors.
func TestOpenAPIManifestCommand(t *testing.T) {
	ctx := context.Background()
	out, err := chio(ctx, "openapi", "manifest", "--spec", filepath.Join("..", "..", "examples", "openapi", "chio-log-api.yaml"), "--server-id", "chio-log-api")
	var m struct {
		ServerID string `json:"server_id"`
		Tools    []struct {
			Name           string `json:"name"`
			HasSideEffects bool   `json:"has_side_effects"`
		} `json:"tools"`
	}
	if err != nil || json.Unmarshal([]byte(out), &m) != nil || m.ServerID != "chio-log-api" || len(m.Tools) != 3 {
		t.Fatalf("manifest: %v %s", err, out)
	}
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, []byte("openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := chio(ctx, "openapi", "manifest", "--spec", empty); err == nil || !strings.Contains(err.Error(), "no publishable operations") {
		t.Fatalf("empty spec: %v", err)
	}
	_, err = chio(ctx, "api", "protect", "--spec", filepath.Join("..", "..", "examples", "openapi", "chio-log-api.yaml"), "--upstream-header", "Bad Header=x")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "upstream header") {
		t.Fatalf("bad header: %v", err)
	}
}

// chio bridge openapi --stdio: an MCP session on stdin/stdout under
// --token, against chio up's NATS; the call's receipt reaches the log.
func TestBridgeOpenAPIStdio(t *testing.T) {
	api := httptest.NewServer(httpbin.New())
	t.Cleanup(api.Close)
	up := startUp(t)
	// A capability naming the write, issued with chio up's issuer key.
	keyFile := filepath.Join(up.dir, "keys", "issuer.key")
	pubOut, err := chio(context.Background(), "capability", "keygen", "--out", filepath.Join(t.TempDir(), "agent.key"))
	if err != nil {
		t.Fatal(err)
	}
	tokOut, err := chio(context.Background(), "capability", "issue", "--issuer-key", keyFile, "--subject", strings.TrimSpace(pubOut),
		"--grant", "httpbin/httpPost", "--output", "header")
	if err != nil {
		t.Fatal(err)
	}
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"httpPost","arguments":{"body":{"name":"rex"}}}}`,
	}, "\n") + "\n"
	root := newRoot()
	var out syncBuffer
	root.SetArgs([]string{"--log-level", "warn", "bridge", "openapi", "--stdio", "--spec", filepath.Join("..", "..", "edges", "openapi", "testdata", "httpbin.yaml"),
		"--server-id", "httpbin", "--upstream", api.URL, "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "openapi-bridge"), "--edge-credential", up.credFile("openapi-bridge"), "--issuer-pub", filepath.Join(up.dir, "keys", issuerPubFile),
		"--token", strings.TrimSpace(tokOut)})
	root.SetIn(strings.NewReader(in))
	root.SetOut(&out)
	root.SetErr(io.Discard)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("bridge: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`"receipt_ref":"([^"]+)"`).FindStringSubmatch(out.String())
	if m == nil || !strings.Contains(out.String(), `"id":2`) || !strings.Contains(out.String(), `\"name\":\"rex\"`) {
		t.Fatalf("stdio answers:\n%s", out.String())
	}
	awaitLogReceipt(t, up.httpURL, up.token, m[1])
}
