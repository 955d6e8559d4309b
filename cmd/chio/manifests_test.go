package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"

	"github.com/chio-ledger/chio/edges/mcpbridge/mcpbridgetest"
	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/schemas"
)

// openaiCall calls a tool through chio up's OpenAI tool-calls endpoint
// and returns its receipt id.
func openaiCall(t *testing.T, up *upProcess, token, name, args string) string {
	t.Helper()
	msg := oa.ChatCompletionAssistantMessageParam{ToolCalls: []oa.ChatCompletionMessageToolCallUnionParam{{
		OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{ID: "call_" + name,
			Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: name, Arguments: args}}}}}
	raw, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, up.httpURL+openai.ToolCallsPath, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans struct {
		Messages []struct {
			Chio openai.Chio `json:"chio"`
		} `json:"messages"`
	}
	if err != nil || json.Unmarshal(body, &ans) != nil || len(ans.Messages) != 1 || ans.Messages[0].Chio.Denied || ans.Messages[0].Chio.ReceiptRef == "" {
		t.Fatalf("%s: %d %v %s", name, resp.StatusCode, err, body)
	}
	return ans.Messages[0].Chio.ReceiptRef
}

// signedManifests is chio tools list --manifests, by server id.
func signedManifests(t *testing.T, up *upProcess) map[string]string {
	t.Helper()
	out, err := chio(context.Background(), "tools", "list", "--manifests", "--url", up.httpURL, "--token", up.token)
	if err != nil {
		t.Fatalf("tools list --manifests: %v %s", err, out)
	}
	docs := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		s, err := schemas.ParseSignedManifest([]byte(line))
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		var m schemas.ToolManifest
		if err := json.Unmarshal(s.Manifest, &m); err != nil {
			t.Fatal(err)
		}
		docs[m.ServerID] = line
	}
	return docs
}

func manifestHash(t *testing.T, doc string) string {
	t.Helper()
	s, err := schemas.ParseSignedManifest([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s.ManifestHash
}

// chio up signs every manifest with DATA_DIR/keys/manifest.key: tools list
// shows each server's origin and exposure and prints the signed manifests,
// which chio verify checks against the key (and refuses once tampered
// with); a call's signed receipt names the manifest's hash and signer, and
// once the wrapped server's tools change, later receipts name the new one.
func TestUpSignsManifests(t *testing.T) {
	up := startUp(t, "--mcp-server", "files="+shellQuote(os.Args[0])+" "+mcpbridgetest.StdioFlag, "--mcp-expose", "files=openai,mcp")
	ctx := context.Background()
	pubFile := filepath.Join(up.dir, "keys", manifestPubFile)
	pubText, err := os.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	pub := strings.TrimSpace(string(pubText))

	out, err := chio(ctx, "tools", "list", "--all", "--url", up.httpURL, "--token", "@"+filepath.Join(up.dir, operatorTokenFile))
	if err != nil {
		t.Fatalf("tools list --all: %v %s", err, out)
	}
	for _, want := range []string{
		"SERVER\tTOOL\tORIGIN\tEXPOSED TO\tFIDELITY\tMANIFEST\n",
		"files\techo\tmcp\tmcp,openai\ta2a:lossless acp:",
		"files\twrite_note\tmcp\tmcp,openai\ta2a:adapted acp:",
		"hello-a2a-srv\thello_task\tin-process\t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tools list --all lacks %q:\n%s", want, out)
		}
	}
	if _, err := chio(ctx, "tools", "list", "--all", "--url", up.httpURL); err == nil {
		t.Error("tools list --all without the operator's credential succeeded")
	}

	docs := signedManifests(t, up)
	manifestF := filepath.Join(t.TempDir(), "files.manifest.json")
	if err := os.WriteFile(manifestF, []byte(docs["files"]), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := chio(ctx, "verify", "--manifest", manifestF, "--manifest-key", pubFile); err != nil || !strings.Contains(out, "verify: OK manifest "+manifestHash(t, docs["files"])) {
		t.Fatalf("verify --manifest: %v %s", err, out)
	}
	tampered := filepath.Join(t.TempDir(), "tampered.json")
	if err := os.WriteFile(tampered, []byte(strings.Replace(docs["files"], "Echo the text back", "Echo the text back, and mail it", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var ee *exitError
	if _, err := chio(ctx, "verify", "--manifest", tampered, "--manifest-key", pub); !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "FAILED manifest_hash") {
		t.Fatalf("tampered manifest: %v", err)
	}
	other := strings.Repeat("ab", 32)
	if _, err := chio(ctx, "verify", "--manifest", manifestF, "--manifest-key", other); !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "FAILED signer_key") {
		t.Fatalf("another key: %v", err)
	}

	// receiptManifest calls echo and returns the manifest its receipt names.
	receiptManifest := func() (hash, signer string) {
		rid := openaiCall(t, up, "", "echo", `{"text":"signed"}`)
		awaitLogReceipt(t, up.httpURL, up.token, rid)
		code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
		var w struct {
			Receipt struct {
				Metadata struct {
					Manifest struct {
						Hash      string `json:"hash"`
						SignerKey string `json:"signer_key"`
					} `json:"manifest"`
				} `json:"metadata"`
			} `json:"receipt"`
		}
		if err := json.Unmarshal(body, &w); code != http.StatusOK || err != nil {
			t.Fatalf("receipt: %d %v %s", code, err, body)
		}
		verifyOffline(t, up, rid, body) // metadata.manifest is under the kernel's signature
		return w.Receipt.Metadata.Manifest.Hash, w.Receipt.Metadata.Manifest.SignerKey
	}
	first := manifestHash(t, docs["files"])
	if h, s := receiptManifest(); h != first || s != pub {
		t.Fatalf("receipt names manifest %s by %s, want %s by %s", h, s, first, pub)
	}

	// add_tool makes the server announce a new tool list: chio signs the
	// new manifest, and later receipts name it.
	// add_tool has side effects: only a grant naming it reaches it.
	_, agent, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := writeLocalToken(filepath.Join(up.dir, "keys"), filepath.Join(t.TempDir(), "add.token"), "add-tool", agent.Public().(ed25519.PublicKey),
		[]schemas.ToolGrant{{ServerID: "files", ToolName: "add_tool", Operations: []schemas.Operation{schemas.OpInvoke}}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	openaiCall(t, up, tok, "add_tool", `{}`)
	deadline := time.Now().Add(30 * time.Second)
	var second string
	for second = manifestHash(t, signedManifests(t, up)["files"]); second == first; second = manifestHash(t, signedManifests(t, up)["files"]) {
		if time.Now().After(deadline) {
			t.Fatal("the manifest was not replaced after list_changed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h, s := receiptManifest(); h != second || s != pub {
		t.Fatalf("after the change the receipt names %s by %s, want %s", h, s, second)
	}
}
