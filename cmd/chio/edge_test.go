package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
)

// chio up serves the A2A edge beside the log: an SDK client sends a message
// without a token (dev mode), and the receipt id it gets back is in the log
// (read under chio up's operator token) and verifies offline.
func TestUpServesA2AWithVerifiableReceipts(t *testing.T) {
	up := startUp(t)
	ctx := context.Background()
	card, err := agentcard.DefaultResolver.Resolve(ctx, up.httpURL)
	if err != nil {
		t.Fatal(err)
	}
	if len(card.Skills) == 0 || card.Skills[0].ID != "hello_task" {
		t.Fatalf("skills %+v", card.Skills)
	}
	client, err := a2aclient.NewFromCard(ctx, card)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("world"))})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2apb.Task)
	meta, _ := task.Metadata["chio"].(map[string]any)
	rid, _ := meta["receiptId"].(string)
	if task.Status.State != a2apb.TaskStateCompleted || rid == "" {
		t.Fatalf("task %+v", task)
	}
	if _, err := os.Stat(filepath.Join(up.dir, "dev-capability.token")); err != nil {
		t.Fatalf("dev capability not written: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	var receipt []byte
	for {
		code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
		if code == http.StatusOK {
			receipt = body
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipt %s never reached the log (%d)", rid, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var wrapped struct {
		Receipt json.RawMessage `json:"receipt"`
	}
	_ = json.Unmarshal(receipt, &wrapped)
	var r struct {
		ToolServer string                   `json:"tool_server"`
		ToolName   string                   `json:"tool_name"`
		Decision   struct{ Verdict string } `json:"decision"`
	}
	_ = json.Unmarshal(wrapped.Receipt, &r)
	if r.ToolServer != "hello-a2a-srv" || r.ToolName != "hello_task" || r.Decision.Verdict != "allow" {
		t.Fatalf("receipt %s", receipt)
	}
	_, proof := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid+"/tlog-proof")
	dir := t.TempDir()
	rf, pf := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.tlog-proof")
	_ = os.WriteFile(rf, receipt, 0o600)
	_ = os.WriteFile(pf, proof, 0o600)
	kernelPub, _ := os.ReadFile(filepath.Join(up.dir, "keys", kernelPubFile))
	out, err := chio(ctx, "verify", "--receipt", rf, "--proof", pf, "--vkey", filepath.Join(up.dir, "keys", checkpointVKeyFile), "--kernel-key", strings.TrimSpace(string(kernelPub)))
	if err != nil || !strings.Contains(out, "verify: OK") {
		t.Fatalf("verify: %v %s", err, out)
	}
}

// The hello-a2a stdio profile through the command, and its agent card.
func TestEdgeA2AStdioAndCard(t *testing.T) {
	out, err := chio(context.Background(), "edge", "a2a", "agent-card")
	if err != nil {
		t.Fatal(err)
	}
	var card struct {
		SupportedInterfaces []struct {
			URL             string `json:"url"`
			ProtocolBinding string `json:"protocolBinding"`
		} `json:"supportedInterfaces"`
		SecurityRequirements []any `json:"securityRequirements"`
		Skills               []struct {
			ID             string `json:"id"`
			BridgeFidelity struct {
				Kind    string   `json:"kind"`
				Caveats []string `json:"caveats"`
			} `json:"bridgeFidelity"`
		} `json:"skills"`
	}
	if err := json.Unmarshal([]byte(out), &card); err != nil || len(card.Skills) == 0 || card.Skills[0].ID != "hello_task" ||
		card.Skills[0].BridgeFidelity.Kind != "adapted" || len(card.Skills[0].BridgeFidelity.Caveats) != 3 {
		t.Fatalf("card: %v\n%s", err, out)
	}
	// The stdio profile's one interface, as in the example; no bearer asked.
	if len(card.SupportedInterfaces) != 1 || card.SupportedInterfaces[0].URL != "stdio://" ||
		card.SupportedInterfaces[0].ProtocolBinding != "json-rpc-stdio" || card.SecurityRequirements != nil {
		t.Fatalf("stdio card interfaces: %s", out)
	}

	dir := t.TempDir()
	root := newRoot()
	var buf syncBuffer
	root.SetArgs([]string{"--log-level", "warn", "edge", "a2a", "--stdio", "--data-dir", dir})
	root.SetIn(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"type":"text","text":"world"}]}}}` + "\n"))
	root.SetOut(&buf)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Result struct {
			Status   string `json:"status"`
			Metadata struct {
				Chio struct {
					ReceiptID     string `json:"receiptId"`
					AuthorityPath string `json:"authorityPath"`
				} `json:"chio"`
			} `json:"metadata"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(buf.String()), &resp); err != nil || resp.Result.Status != "completed" ||
		resp.Result.Metadata.Chio.ReceiptID == "" || resp.Result.Metadata.Chio.AuthorityPath != "cross_protocol_orchestrator" {
		t.Fatalf("stdio: %v %s", err, buf.String())
	}
}

func TestUpRefusesToShareTheDevCapability(t *testing.T) {
	_, err := chio(context.Background(), "up", "--data-dir", t.TempDir(), "--listen", "0.0.0.0:0", "--nats-listen", "none")
	if err == nil || !strings.Contains(err.Error(), "--require-capability") {
		t.Fatalf("non-loopback dev mode: %v", err)
	}
}

// With --await-receipt the answer embeds the signed receipt and its leaf
// index, as the ledger integrated it.
func TestAwaitReceipt(t *testing.T) {
	up := startUp(t, "--await-receipt", "10s")
	body := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"world"}]}}}`
	resp, err := http.Post(up.httpURL+"/a2a", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Result struct {
			Metadata struct {
				Chio struct {
					ReceiptID  string          `json:"receiptId"`
					Receipt    json.RawMessage `json:"receipt"`
					LeafIndex  *uint64         `json:"leafIndex"`
					AwaitError string          `json:"receiptAwaitError"`
				} `json:"chio"`
			} `json:"metadata"`
		} `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	c := m.Result.Metadata.Chio
	if c.ReceiptID == "" || c.LeafIndex == nil || !strings.Contains(string(c.Receipt), c.ReceiptID) || !strings.Contains(string(c.Receipt), `"signature"`) {
		t.Fatalf("no embedded receipt: %+v", c) // AwaitError says why
	}
}
