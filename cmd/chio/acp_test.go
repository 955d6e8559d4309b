package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/edges/acp"
	"github.com/chio-ledger/chio/internal/natsauth"
)

// chio up serves the ACP profile at /acp: the demo tool is an ACP
// capability for the dev capability, and tool/invoke runs it with a
// receipt that reaches the log. chio edge acp --stdio does the same
// against chio up's NATS.
func TestUpServesACP(t *testing.T) {
	up := startUp(t)
	post := func(body string) map[string]json.RawMessage {
		t.Helper()
		resp, err := http.Post(up.httpURL+acp.Path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil || m["error"] != nil {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
		return m
	}
	list := post(`{"jsonrpc":"2.0","id":1,"method":"session/list_capabilities","params":{}}`)
	if !bytes.Contains(list["result"], []byte(`"id":"hello_task"`)) {
		t.Fatalf("capabilities: %s", list["result"])
	}
	inv := post(`{"jsonrpc":"2.0","id":2,"method":"tool/invoke","params":{"capabilityId":"hello_task","arguments":{"text":"world"}}}`)
	var res struct {
		ReceiptID string `json:"receiptId"`
	}
	if err := json.Unmarshal(inv["result"], &res); err != nil || res.ReceiptID == "" {
		t.Fatalf("invoke: %s", inv["result"])
	}
	awaitLogReceipt(t, up.httpURL, up.token, res.ReceiptID)

	root := newRoot()
	var out syncBuffer
	root.SetArgs([]string{"--log-level", "warn", "edge", "acp", "--stdio", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "acp-stdio"), "--edge-credential", up.credFile("acp-stdio"),
		"--issuer-pub", filepath.Join(up.dir, "keys", issuerPubFile), "--token", "@" + filepath.Join(up.dir, "dev-capability.token")})
	root.SetIn(strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"_chio/tool/invoke","params":{"capabilityId":"hello_task","arguments":{"text":"stdio"}}}` + "\n"))
	root.SetOut(&out)
	root.SetErr(io.Discard)
	if err := root.ExecuteContext(t.Context()); err != nil || !strings.Contains(out.String(), `"receiptId":"`) {
		t.Fatalf("stdio: %v %s", err, out.String())
	}
}
