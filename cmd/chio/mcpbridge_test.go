package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/chio-ledger/chio/edges/mcpbridge/mcpbridgetest"
	"github.com/chio-ledger/chio/edges/openai"
)

// This test binary is also the MCP server chio up wraps (its first
// argument says so); init runs before TestMain.
func init() { mcpbridgetest.MaybeServeStdio() }

// chio up --mcp-server wraps a real MCP server (this binary over stdio):
// its tools are listed on the OpenAI edge, a call through the batch
// endpoint runs governed, and its receipt is in the log and verifies.
func TestUpWrapsMCPServer(t *testing.T) {
	up := startUp(t, "--mcp-server", "files="+shellQuote(os.Args[0])+" "+mcpbridgetest.StdioFlag, "--mcp-expose", "files=openai,mcp,a2a")
	code, body := httpGetAs(t, "", up.httpURL+openai.ToolsPath)
	if code != http.StatusOK || !strings.Contains(string(body), `"name":"echo"`) {
		t.Fatalf("tools: %d %s", code, body)
	}
	rid, content := upToolCall(t, up, "call_mcp_1", "echo", `{"text":"through chio"}`)
	if !strings.Contains(content, "through chio") {
		t.Fatalf("tool message: %s", content)
	}
	awaitLogReceipt(t, up.httpURL, up.token, rid)
	code, receipt := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
	var wrapped struct {
		Receipt struct {
			ToolServer string `json:"tool_server"`
			ToolName   string `json:"tool_name"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(receipt, &wrapped); code != http.StatusOK || err != nil || wrapped.Receipt.ToolServer != "files" || wrapped.Receipt.ToolName != "echo" {
		t.Fatalf("receipt: %d %v %s", code, err, receipt)
	}
	verifyOffline(t, up, rid, receipt)

	// The same tool from the a2a-go client, as an A2A skill.
	ctx := context.Background()
	client, err := a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	m := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewDataPart(map[string]any{"text": "through a2a"}))
	m.Metadata = map[string]any{"chio": map[string]any{"targetSkillId": "echo"}}
	res, err := client.SendMessage(ctx, &a2apb.SendMessageRequest{Message: m})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok || task.Status.State != a2apb.TaskStateCompleted {
		raw, _ := json.Marshal(res)
		t.Fatalf("A2A call: %s", raw)
	}
	rid, _ = task.Metadata["chio"].(map[string]any)["receiptId"].(string)
	awaitLogReceipt(t, up.httpURL, up.token, rid)
	_, receipt = httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
	if !strings.Contains(string(receipt), `"tool_server":"files"`) {
		t.Fatalf("A2A receipt: %s", receipt)
	}
	verifyOffline(t, up, rid, receipt)

	// chio a2a send is the same client from the command line.
	out, err := chio(ctx, "a2a", "send", up.httpURL, "--skill", "echo", "--data", `{"text":"from the cli"}`)
	if err != nil || !strings.Contains(out, `"receiptId":"`) || !strings.Contains(out, "from the cli") {
		t.Fatalf("chio a2a send: %v\n%s", err, out)
	}
	if _, err := chio(ctx, "a2a", "send", up.httpURL, "--data", `{"a":1,"A":2}`); err == nil {
		t.Fatal("chio a2a send took a data part with a repeated member")
	}
}

// shellQuote quotes s for SplitCommand.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// The flags of a wrapped server: its command split as a shell splits it,
// headers and env per server, exposure narrowed for all or one.
func TestMCPFlags(t *testing.T) {
	t.Setenv("CHIO_TEST_MCP_TOKEN", "tok-0123456789")
	dir := t.TempDir()
	keyFile := dir + "/key"
	if err := os.WriteFile(keyFile, []byte("file-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := mcpFlags{
		expose:  []string{"mcp,openai", "web=a2a"},
		headers: []string{"web:Authorization=$CHIO_TEST_MCP_TOKEN", "web:X-Key=@" + keyFile},
		env:     []string{"files:CHIO_TEST_MCP_TOKEN", "files:API_KEY=@" + keyFile, "files:MODE=ro"},
	}
	up, opts, err := m.upstream("files", `npx -y "@scope/server files" --root '/tmp/a b'`, nil, true)
	if err != nil || !slices.Equal(up.Command, []string{"npx", "-y", "@scope/server files", "--root", "/tmp/a b"}) ||
		!slices.Equal(up.Env, []string{"CHIO_TEST_MCP_TOKEN=tok-0123456789", "API_KEY=file-secret-0123456789", "MODE=ro"}) || len(up.Headers) != 0 || len(opts) != 1 {
		t.Fatalf("files: %+v %d %v", up, len(opts), err)
	}
	up, opts, err = m.upstream("web", "https://mcp.example/mcp", nil, true)
	if err != nil || up.URL != "https://mcp.example/mcp" || up.Headers.Get("Authorization") != "tok-0123456789" ||
		up.Headers.Get("X-Key") != "file-secret-0123456789" || len(up.Env) != 0 || len(opts) != 2 {
		t.Fatalf("web: %+v %d %v", up, len(opts), err)
	}
	bad := []struct {
		name string
		m    mcpFlags
		tgt  string
	}{
		{"unset env", mcpFlags{env: []string{"files:CHIO_TEST_UNSET_VAR"}}, "cmd"},
		{"unset header var", mcpFlags{headers: []string{"files:Authorization=$CHIO_TEST_UNSET_VAR"}}, "https://x/mcp"},
		{"unterminated quote", mcpFlags{}, `cmd "a`},
		{"no target", mcpFlags{}, ""},
	}
	for _, b := range bad {
		if _, _, err := b.m.upstream("files", b.tgt, nil, true); err == nil {
			t.Errorf("%s: accepted", b.name)
		}
	}
}
