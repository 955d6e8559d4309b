package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// delegatingAgent is the chain of an agent whose token, from up's issuer,
// can delegate (every edge honours it only with a proof by its key), and
// of the helper it delegated hello_task to; with the agent's token file
// and key file.
func delegatingAgent(t *testing.T, up *upProcess, id string) (*dpoptest.Chain, string, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(up.dir, "keys", issuerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := schemas.ParsePrivateKey(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	ch := dpoptest.NewChain(t, dpoptest.Spec{Issuer: issuer, AgentID: id, HelperID: id + "-helper",
		Agent: grantsFor("hello-a2a-srv/hello_task"),
		Helper: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "hello_task",
			Operations: []schemas.Operation{schemas.OpInvoke}}}})
	tokFile := filepath.Join(t.TempDir(), id+".token")
	if err := os.WriteFile(tokFile, []byte(ch.Agent+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ch, tokFile, (&agent{key: ch.AgentKey}).keyFile(t)
}

// The A2A adapter presents a delegating capability to a Chio partner with
// a DPoP proof per request (--a2a-bearer-key): without the key the partner
// refuses the call, with it the partner's receipt records the binding.
// chio tools list proves the same token with --key.
func TestA2AAdapterProvesItsCapability(t *testing.T) {
	b := startUp(t, "--require-capability", "--expose-all") // hello_task over MCP too, for tools list
	ch, tokFile, keyFile := delegatingAgent(t, b, "cap-adapter")
	ctx := context.Background()

	if _, err := chio(ctx, "tools", "list", "--url", b.httpURL, "--token", "@"+tokFile); err == nil {
		t.Fatal("tools list with a delegating token and no key succeeded")
	}
	out, err := chio(ctx, "tools", "list", "--url", b.httpURL, "--token", "@"+tokFile, "--key", keyFile)
	if err != nil || !strings.Contains(out, "hello-a2a-srv/hello_task") {
		t.Fatalf("tools list --key: %v %s", err, out)
	}

	call := func(t *testing.T, a *upProcess) (*sdk.CallToolResult, error) {
		t.Helper()
		aTok, err := os.ReadFile(filepath.Join(a.dir, "dev-capability.token"))
		if err != nil {
			t.Fatal(err)
		}
		listed, err := mcpedge.ListTools(ctx, a.httpURL+mcpedge.Path, strings.TrimSpace(string(aTok)))
		if err != nil || len(listed) != 1 {
			t.Fatalf("A's tools: %+v %v", listed, err)
		}
		client := sdk.NewClient(&sdk.Implementation{Name: "caller", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: a.httpURL + mcpedge.Path,
			HTTPClient: &http.Client{Transport: bearer{strings.TrimSpace(string(aTok)), http.DefaultTransport}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		return cs.CallTool(ctx, &sdk.CallToolParams{Name: listed[0].Name, Arguments: map[string]any{"message": "world"}})
	}
	partner := []string{"--a2a-target", b.httpURL, "--a2a-bearer-file", tokFile, "--a2a-partner", "org-b",
		"--a2a-partner-server-id", "hello-a2a-srv"}

	t.Run("without the key", func(t *testing.T) {
		a := startUp(t, partner...)
		res, err := call(t, a)
		if err == nil && !res.IsError {
			t.Fatalf("the partner honoured a delegating token sent as bearer: %+v", res)
		}
	})
	t.Run("with the key", func(t *testing.T) {
		a := startUp(t, append(partner, "--a2a-bearer-key", keyFile)...)
		res, err := call(t, a)
		if err != nil || res.IsError {
			t.Fatalf("call through the adapter: %v %+v", err, res)
		}
		var outv struct {
			ReceiptID string `json:"receiptId"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &outv); err != nil || outv.ReceiptID == "" {
			t.Fatalf("adapter output %s: %v", raw, err)
		}
		r := awaitLogReceipt(t, b.httpURL, b.token, outv.ReceiptID)
		bind := r.Metadata.Attribution.Binding
		if r.Decision.Verdict != "allow" || r.Metadata.Attribution.SubjectKey != ch.AgentToken.Subject || bind == nil ||
			bind.Method != dpop.MethodDPoP || bind.JKT != dpoptest.JKT(ch.AgentKey) {
			t.Fatalf("partner's receipt %+v binding %+v", r, bind)
		}
	})
}

// chio capability proof makes a proof the edge accepts once; chio
// capability ancestor rebuilds the parent, which the edge refuses without
// its key, with a deny receipt naming the check.
func TestCapabilityProofAndAncestor(t *testing.T) {
	up := startUp(t, "--require-capability")
	ch, tokFile, keyFile := delegatingAgent(t, up, "cap-cli-agent")
	ctx := context.Background()
	helperFile := filepath.Join(t.TempDir(), "helper.token")
	_ = os.WriteFile(helperFile, []byte(ch.Helper), 0o600)

	rebuilt, err := chio(ctx, "capability", "ancestor", "@"+helperFile)
	if err != nil || strings.TrimSpace(rebuilt) != ch.Agent {
		t.Fatalf("ancestor: %v\n%s", err, rebuilt)
	}

	body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"MID","parts":[{"text":"world"}]}}}`
	post := func(mid string, h http.Header) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, up.httpURL+"/a2a", strings.NewReader(strings.Replace(body, "MID", mid, 1)))
		req.Header = h
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("A2A-Version", "1.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	out, err := chio(ctx, "capability", "proof", "--key", keyFile, "--token", "@"+tokFile, "--method", "POST", "--url", up.httpURL+"/a2a", "--headers")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		h.Set(k, v)
	}
	if code, _, resp := post("m-proven", h.Clone()); code != 200 || !strings.Contains(resp, "TASK_STATE_COMPLETED") {
		t.Fatalf("proven call: %d %s", code, resp)
	}
	if code, hdr, resp := post("m-replayed", h.Clone()); code != 401 || !strings.Contains(resp, "-31401") ||
		!strings.Contains(hdr.Get("WWW-Authenticate"), `error="invalid_dpop_proof"`) || !strings.Contains(resp, "replayed") {
		t.Fatalf("replayed proof: %d %v %s", code, hdr, resp)
	}
	code, hdr, resp := post("m-rebuilt", http.Header{"Authorization": {"Bearer " + strings.TrimSpace(rebuilt)}})
	if code != 401 || !strings.Contains(resp, "missing_proof") || !strings.Contains(strings.Join(hdr.Values("WWW-Authenticate"), ","), "DPoP") {
		t.Fatalf("rebuilt parent as bearer: %d %v %s", code, hdr, resp)
	}
	if _, err := chio(ctx, "capability", "proof", "--key", (&agent{key: ch.HelperKey}).keyFile(t), "--token", strings.TrimSpace(rebuilt), "--method", "POST", "--url", up.httpURL+"/a2a"); err == nil {
		t.Fatal("proof made for a token with another subject's key")
	}
	// The helper's leaf token stays a bearer token.
	if code, _, resp := post("m-helper", http.Header{"Authorization": {"Bearer " + ch.Helper}}); code != 200 || !strings.Contains(resp, "TASK_STATE_COMPLETED") {
		t.Fatalf("helper as bearer: %d %s", code, resp)
	}
}
