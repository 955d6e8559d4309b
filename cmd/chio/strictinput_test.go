package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/internal/hostilejson"
)

// One caller once made the log's reads fail for everyone: arguments nested
// 9,998 deep were under the size bound, were recorded in a signed receipt,
// and then no reader could parse the receipt back (encoding/json stops at
// 10,000 levels). Now the strict reader refuses them before the kernel
// decides, for a caller without a credential and for a tenant with a grant
// alike: no tool runs, no receipt is written, and every read still answers.
func TestUpRefusesArgumentsNoReaderCouldReadBack(t *testing.T) {
	up := startUp(t, "--require-capability")
	ch, _, _ := delegatingAgent(t, up, "cap-deep")
	deep := `{"text":"world","x":` + hostilejson.Nested(9998) + `}`

	call := func(auth, args string) (int, []byte) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
			"id": "call_deep", "type": "function", "function": map[string]any{"name": "hello_task", "arguments": args}}}})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, up.httpURL+openai.ToolCallsPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for name, auth := range map[string]string{"no credential": "Bearer garbage", "tenant with a grant": "Bearer " + ch.Helper} {
		// Refused for its credential (401, no receipt for the call) or for
		// its arguments; never recorded, never run.
		code, body := call(auth, deep)
		refused := code == http.StatusUnauthorized && strings.Contains(string(body), `"receipts":[]`) ||
			strings.Contains(string(body), "nesting deeper than")
		if !refused || strings.Contains(string(body), `"receipt_ref":"`) {
			t.Errorf("%s: %d %s", name, code, body)
		}
	}

	// The tenant's ordinary call runs and is recorded, and every read of
	// the log answers with it.
	code, body := call("Bearer "+ch.Helper, `{"text":"world"}`)
	var ans struct {
		Messages []struct {
			Chio openai.Chio `json:"chio"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || code != http.StatusOK || len(ans.Messages) != 1 || ans.Messages[0].Chio.ReceiptRef == "" {
		t.Fatalf("ordinary call: %d %s", code, body)
	}
	rid := ans.Messages[0].Chio.ReceiptRef
	awaitLogReceipt(t, up.httpURL, up.token, rid)
	for _, path := range []string{
		"/v1/receipts/" + rid,
		"/v1/receipts/query?limit=200",
		"/v1/reports/authorization-context?capabilityId=" + ch.HelperToken.ID,
	} {
		code, body := httpGetAs(t, up.token, up.httpURL+path)
		if code != http.StatusOK || !strings.Contains(string(body), rid) && !strings.Contains(path, "reports") {
			t.Errorf("GET %s: %d %.300s", path, code, body)
		}
	}
	code, body = httpGetAs(t, up.token, up.httpURL+"/v1/receipts/query?limit=200")
	if n := strings.Count(string(body), `"tool_name":"hello_task"`); code != http.StatusOK || n != 1 {
		t.Errorf("query: %d, %d hello_task receipts, want only the ordinary call's: %.500s", code, n, body)
	}
}
