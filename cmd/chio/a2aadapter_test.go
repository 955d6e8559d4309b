package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	mcpedge "github.com/chio-ledger/chio/edges/mcp"
)

// Two hops across two organisations: a caller asks chio up A (an A2A
// adapter for partner B) through MCP; A's receipt R1 records the call to
// a2a:<B>/hello_task; the adapter calls B, a `chio up --require-capability`
// edge, with B's capability (B's card declares Bearer) and the extended
// call chain; B's receipt R2 signs that chain with R1 as its parent.
func TestA2AAdapterTwoHops(t *testing.T) {
	b := startUp(t, "--require-capability")
	bTok, err := os.ReadFile(filepath.Join(b.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	bearerFile := filepath.Join(t.TempDir(), "partner.token")
	if err := os.WriteFile(bearerFile, bTok, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startUp(t, "--a2a-target", b.httpURL, "--a2a-bearer-file", bearerFile, "--a2a-partner", "org-b",
		"--a2a-partner-server-id", "hello-a2a-srv", "--a2a-require-skill", "hello_task")
	aTok, err := os.ReadFile(filepath.Join(a.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	listed, err := mcpedge.ListTools(ctx, a.httpURL+mcpedge.Path, strings.TrimSpace(string(aTok)))
	if err != nil || len(listed) != 1 || listed[0].ToolName != "hello_task" || !strings.HasPrefix(listed[0].ServerID, "a2a:127.0.0.1:") {
		t.Fatalf("A's MCP tools: %+v %v", listed, err)
	}
	out, err := chio(ctx, "tools", "list", "--url", a.httpURL, "--token", "@"+filepath.Join(a.dir, "dev-capability.token"), "--server", listed[0].ServerID)
	if err != nil || !strings.Contains(out, listed[0].ServerID+"/hello_task") {
		t.Fatalf("chio tools list: %v %s", err, out)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "org-a-caller", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: a.httpURL + mcpedge.Path,
		HTTPClient: &http.Client{Transport: bearer{strings.TrimSpace(string(aTok)), http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: listed[0].Name, Arguments: map[string]any{"message": "world"}})
	if err != nil || res.IsError {
		t.Fatalf("call through the adapter: %v %+v", err, res)
	}
	r1 := receiptRef(t, res.Meta)
	var outv struct {
		ReceiptID string `json:"receiptId"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &outv); err != nil || outv.ReceiptID == "" {
		t.Fatalf("adapter output %s: %v", raw, err)
	}
	a1 := awaitLogReceipt(t, a.httpURL, a.token, r1)
	if !strings.HasPrefix(a1.ToolServer, "a2a:") || a1.Decision.Verdict != "allow" {
		t.Fatalf("R1 %+v", a1)
	}
	b2 := awaitLogReceipt(t, b.httpURL, b.token, outv.ReceiptID)
	gt := b2.Metadata.GovernedTransaction
	if gt == nil || gt.CallChain == nil || gt.CallChain.ParentReceiptID != r1 || gt.CallChain.ChainID == "" {
		t.Fatalf("R2's call chain does not extend R1 (%s): %+v", r1, gt)
	}
	code, receipt := httpGetAs(t, a.token, a.httpURL+"/v1/receipts/"+r1)
	if code != http.StatusOK {
		t.Fatalf("R1: %d", code)
	}
	verifyOffline(t, a, r1, receipt)
}

// chio a2a discover prints the report; a partner policy failure names the
// contract; http to a non-loopback host is refused before any request.
func TestA2ADiscoverCommand(t *testing.T) {
	b := startUp(t)
	ctx := context.Background()
	out, err := chio(ctx, "a2a", "discover", b.httpURL, "--partner", "org-b", "--require-skill", "hello_task")
	if err != nil || !strings.Contains(out, `"hello_task"`) || !regexp.MustCompile(`"a2a:127\.0\.0\.1:\d+"`).MatchString(out) {
		t.Fatalf("discover: %v %s", err, out)
	}
	if _, err := chio(ctx, "a2a", "discover", b.httpURL, "--require-skill", "research"); err == nil || !strings.Contains(err.Error(), "research") {
		t.Fatalf("a missing required skill: %v", err)
	}
	if _, err := chio(ctx, "a2a", "discover", "http://partner.example"); err == nil || !strings.Contains(err.Error(), "https") {
		t.Fatalf("http to a remote host: %v", err)
	}
}

// The --a2a-* flags describe one partner: with two targets and a
// credential, chio up refuses to start rather than send one partner's
// secret to the other; an API key on the command line is refused too.
func TestA2AFlagsDescribeOnePartner(t *testing.T) {
	ctx := context.Background()
	tok := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(tok, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--a2a-target", "https://a.example", "--a2a-target", "https://b.example", "--a2a-bearer-file", tok},
		{"--a2a-target", "https://a.example", "--a2a-api-key", "key=inline-secret"},
	} {
		_, err := chio(ctx, append([]string{"up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none"}, args...)...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Fatalf("%v: %v", args, err)
		}
	}
}
