package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/openaitest"
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
	rid, _ := upToolCall(t, up, "call_up_1", "hello_task", `{"text":"world"}`)
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
	verifyOffline(t, up, rid, receipt)
}

// verifyOffline checks, with chio verify, that receipt (as the log API
// serves it) is in the log under rid: its inclusion proof, checkpoint and
// kernel signature.
func verifyOffline(t *testing.T, up *upProcess, rid string, receipt []byte) {
	t.Helper()
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

// chio up --openai-upstream: an unchanged official client, its API key
// the dev capability, asks a model through the proxy; the model's call to
// the demo tool runs in chio, with a receipt that is in the log and
// verifies; the upstream saw the operator's key from --openai-key-file.
func TestUpOpenAIProxy(t *testing.T) {
	const key = "sk-test-upstream-key"
	m := openaitest.Start(t, key)
	keyFile := filepath.Join(t.TempDir(), "openai.key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	up := startUp(t, "--openai-upstream", m.BaseURL(), "--openai-key-file", keyFile)
	tok, err := os.ReadFile(filepath.Join(up.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := oa.NewClient(option.WithBaseURL(up.httpURL+"/openai/v1/"), option.WithAPIKey(strings.TrimSpace(string(tok))), option.WithMaxRetries(0))
	var hr *http.Response
	resp, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "test-model",
		Input: responses.ResponseNewParamsInputUnion{OfString: oa.String("use hello_task")}}, option.WithResponseInto(&hr))
	if err != nil {
		t.Fatal(err)
	}
	rid := hr.Header.Get(openai.ReceiptsHeader)
	if !strings.Contains(resp.OutputText(), "hello from a2a") || rid == "" || resp.Metadata["chio_receipts"] != rid || m.Count() != 2 || m.Auth(0) != "Bearer "+key {
		t.Fatalf("answer %q, receipts %q, metadata %v, upstream requests %d", resp.OutputText(), rid, resp.Metadata, m.Count())
	}
	awaitLogReceipt(t, up.httpURL, up.token, rid)
	code, receipt := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
	if code != http.StatusOK || !strings.Contains(string(receipt), `"protocol":"openai.responses"`) || !strings.Contains(string(receipt), `"call_id":"call_1_0"`) {
		t.Fatalf("receipt: %d %s", code, receipt)
	}
	verifyOffline(t, up, rid, receipt)
}

// Proxy flag mistakes are usage errors before anything starts.
func TestOpenAIProxyFlags(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.key")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"key file without upstream", []string{"--openai-key-file", empty}, "needs --openai-upstream"},
		{"not a URL", []string{"--openai-upstream", "api.openai.com"}, "want an http(s) base URL"},
		{"credentials in the URL", []string{"--openai-upstream", "https://u:p@api.example/v1"}, "without credentials"},
		{"empty key file", []string{"--openai-upstream", "https://api.example/v1", "--openai-key-file", empty}, "is empty"},
		{"key in clear over the network", []string{"--openai-upstream", "http://model.example/v1"}, "plain http"},
		{"zero rounds", []string{"--openai-upstream", "https://api.example/v1", "--openai-max-rounds", "0"}, "at least 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := chio(context.Background(), append([]string{"up", "--data-dir", t.TempDir()}, c.args...)...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error()+out, c.want) {
				t.Fatalf("err %v, out %s", err, out)
			}
		})
	}
}

// chio edge openai runs as its own replica against chio up's NATS.
func TestEdgeOpenAIReplica(t *testing.T) {
	up := startUp(t)
	re := regexp.MustCompile(`tools (http://[0-9.:]+)/openai`)
	out, _ := startCommand(t, re, "edge", "openai", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "openai-edge"), "--edge-credential", up.credFile("openai-edge"), "--listen", "127.0.0.1:0",
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

// upToolCall runs one Chat Completions tool call through up's OpenAI
// batch endpoint and returns its receipt id and the tool message's
// content; a denied or unanswered call fails the test.
func upToolCall(t *testing.T, up *upProcess, callID, name, args string) (string, string) {
	t.Helper()
	msg := oa.ChatCompletionAssistantMessageParam{ToolCalls: []oa.ChatCompletionMessageToolCallUnionParam{{
		OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{ID: callID,
			Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: name, Arguments: args}}}}}
	raw, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(up.httpURL+openai.ToolCallsPath, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var ans struct {
		Messages []struct {
			Content string      `json:"content"`
			Chio    openai.Chio `json:"chio"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &ans); resp.StatusCode != http.StatusOK || err != nil || len(ans.Messages) != 1 ||
		ans.Messages[0].Chio.Denied || ans.Messages[0].Chio.ReceiptRef == "" {
		t.Fatalf("tool-calls: %d %v %s", resp.StatusCode, err, body)
	}
	return ans.Messages[0].Chio.ReceiptRef, ans.Messages[0].Content
}
