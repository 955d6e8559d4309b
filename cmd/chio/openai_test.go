package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	oa "github.com/openai/openai-go/v3"

	"github.com/chio-ledger/chio/edges/openai"
)

// chio up serves the OpenAI adapter beside the A2A edge: the demo tool is
// listed for the dev capability, a Chat Completions batch runs it, and its
// receipt (protocol openai.chat, the tool_call_id) is in the log and
// verifies offline.
func TestUpServesOpenAIWithVerifiableReceipts(t *testing.T) {
	up := startUp(t)
	code, body := httpGetAs(t, "", up.httpURL+openai.ToolsPath)
	if code != http.StatusOK || !strings.Contains(string(body), `"name":"hello_task"`) {
		t.Fatalf("tools: %d %s", code, body)
	}
	msg := oa.ChatCompletionAssistantMessageParam{ToolCalls: []oa.ChatCompletionMessageToolCallUnionParam{{
		OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{ID: "call_up_1",
			Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "hello_task", Arguments: `{"text":"world"}`}}}}}
	raw, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(up.httpURL+openai.ToolCallsPath, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		Messages []struct {
			ToolCallID string      `json:"tool_call_id"`
			Chio       openai.Chio `json:"chio"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &ans); resp.StatusCode != http.StatusOK || err != nil || len(ans.Messages) != 1 ||
		ans.Messages[0].Chio.Denied || ans.Messages[0].Chio.ReceiptRef == "" {
		t.Fatalf("tool-calls: %d %v %s", resp.StatusCode, err, body)
	}
	rid := ans.Messages[0].Chio.ReceiptRef
	awaitLogReceipt(t, up.httpURL, up.token, rid)
	code, receipt := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
	var wrapped struct {
		Receipt struct {
			ToolName string `json:"tool_name"`
			Metadata struct {
				Protocol string `json:"protocol"`
				OpenAI   struct {
					ToolCallID string `json:"tool_call_id"`
				} `json:"openai"`
			} `json:"metadata"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(receipt, &wrapped); code != http.StatusOK || err != nil || wrapped.Receipt.ToolName != "hello_task" ||
		wrapped.Receipt.Metadata.Protocol != "openai.chat" || wrapped.Receipt.Metadata.OpenAI.ToolCallID != "call_up_1" {
		t.Fatalf("receipt: %d %v %s", code, err, receipt)
	}
	code, proof := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid+"/tlog-proof")
	if code != http.StatusOK {
		t.Fatalf("proof: %d %s", code, proof)
	}
	dir := t.TempDir()
	rf, pf := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.tlog-proof")
	if err := os.WriteFile(rf, receipt, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pf, proof, 0o600); err != nil {
		t.Fatal(err)
	}
	kernelPub, err := os.ReadFile(filepath.Join(up.dir, "keys", kernelPubFile))
	if err != nil {
		t.Fatal(err)
	}
	out, err := chio(context.Background(), "verify", "--receipt", rf, "--proof", pf, "--vkey", filepath.Join(up.dir, "keys", checkpointVKeyFile), "--kernel-key", strings.TrimSpace(string(kernelPub)))
	if err != nil || !strings.Contains(out, "verify: OK") {
		t.Fatalf("verify: %v %s", err, out)
	}
}

// chio edge openai runs as its own replica against chio up's NATS.
func TestEdgeOpenAIReplica(t *testing.T) {
	up := startUp(t)
	re := regexp.MustCompile(`tools (http://[0-9.:]+)/openai`)
	out, _ := startCommand(t, re, "edge", "openai", "--nats", up.natsURL, "--listen", "127.0.0.1:0",
		"--issuer-pub", filepath.Join(up.dir, "keys", issuerPubFile), "--edge-id", "openai-replica")
	base := re.FindStringSubmatch(out)[1]
	tok, err := os.ReadFile(filepath.Join(up.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	code, body := httpGetAs(t, strings.TrimSpace(string(tok)), base+openai.ToolsPath+"?format=responses")
	if code != http.StatusOK || !strings.Contains(string(body), `"name":"hello_task"`) || !strings.Contains(string(body), `"strict":false`) {
		t.Fatalf("tools: %d %s", code, body)
	}
	// No dev capability on a replica: a tokenless caller is refused.
	if code, _ := httpGetAs(t, "", base+openai.ToolsPath); code != http.StatusUnauthorized {
		t.Fatalf("tokenless: %d", code)
	}
}
