package acp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

func TestInvoke(t *testing.T) {
	f := start(t)
	full := wildcard(t)
	readOnly := token(t, "cap-ro", agentKey, grant("read_file"))
	cases := []struct {
		name, tok, capability string
		args                  any
		code                  int
		verdict               schemas.Verdict // of the decision event; "" when none
	}{
		{"allow", full, "read_file", map[string]any{"path": "/tmp/a"}, 0, schemas.VerdictAllow},
		{"alias", full, "search", nil, 0, schemas.VerdictAllow},
		{"denied by the kernel", readOnly, "search", map[string]any{}, CodeDenied, schemas.VerdictDeny},
		{"tool error", full, "explode", map[string]any{}, CodeToolFailed, schemas.VerdictAllow},
		{"unknown capability", full, "no_such_tool", map[string]any{}, CodeInvalidParams, ""},
		{"withheld capability", full, "delete_record", map[string]any{}, CodeInvalidParams, ""},
		{"arguments not an object", full, "read_file", []int{1}, CodeInvalidParams, ""},
		{"no capability id", full, "", map[string]any{}, CodeInvalidParams, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			method := MethodInvoke
			if c.name == "alias" {
				method = ExtensionPrefix + MethodInvoke
			}
			before := len(natstest.Decisions(t, f.js))
			a := f.call(t, c.tok, method, map[string]any{"capabilityId": c.capability, "arguments": c.args})
			if a.code() != c.code {
				t.Fatalf("code %d (%v), want %d", a.code(), a.Error, c.code)
			}
			var receipt string
			if c.code == 0 {
				var got struct {
					Result    map[string]any `json:"result"`
					ReceiptID string         `json:"receiptId"`
				}
				ok(t, a, &got)
				if got.Result["tool"] != c.capability {
					t.Errorf("result %v", got.Result)
				}
				receipt = got.ReceiptID
			} else if c.verdict != "" {
				v := verdict(t, a)
				receipt = v.ReceiptID
				if (c.code == CodeDenied && (v.Decision != DecisionDeny || v.Guard == "" || v.Reason == "")) ||
					(c.code == CodeToolFailed && (v.Decision != DecisionToolError || !strings.Contains(v.Reason, "boom"))) {
					t.Errorf("verdict %+v", v)
				}
			} else if c.capability != "" && !strings.Contains(a.Error.Message, c.capability) {
				t.Errorf("message %q does not name %q", a.Error.Message, c.capability)
			}
			decisions := natstest.Decisions(t, f.js)
			if c.verdict == "" {
				if len(decisions) != before {
					t.Fatalf("a call that never reached the kernel left a decision")
				}
				return
			}
			d, found := decisions[receipt]
			if !found {
				t.Fatalf("no decision event for receipt %q", receipt)
			}
			if d.Decision.Verdict != c.verdict || d.ToolName != c.capability || metaOf(t, d).Protocol != "acp" ||
				metaOf(t, d).ACP.Method != MethodInvoke {
				t.Errorf("decision %+v metadata %s", d.Decision, d.Metadata)
			}
		})
	}
}

func TestInvokeRefusedCapabilityIsRecorded(t *testing.T) {
	f := start(t)
	bad := tokenBy(t, otherKey, "cap-x", agentKey, grant("*"))
	a := f.call(t, bad, MethodInvoke, map[string]any{"capabilityId": "read_file", "arguments": map[string]any{}})
	if a.code() != CodeUnauthorized {
		t.Fatalf("code %d, want %d", a.code(), CodeUnauthorized)
	}
	var r Refused
	if err := json.Unmarshal(a.Error.Data, &r); err != nil || r.ReceiptID == "" {
		t.Fatalf("data %s", a.Error.Data)
	}
	if d, found := natstest.Decisions(t, f.js)[r.ReceiptID]; !found || d.Decision.Verdict != schemas.VerdictDeny {
		t.Fatalf("deny receipt %q: %+v", r.ReceiptID, d)
	}
}

func TestMetaCapabilityOverridesConnection(t *testing.T) {
	f := start(t)
	readOnly := token(t, "cap-ro", agentKey, grant("read_file"))
	params := map[string]any{"capabilityId": "search", "arguments": map[string]any{},
		"_meta": map[string]any{"chioCapability": wildcard(t)}}
	ok(t, f.call(t, readOnly, MethodInvoke, params), nil)
	delete(params, "_meta")
	if a := f.call(t, readOnly, MethodInvoke, params); a.code() != CodeDenied {
		t.Fatalf("without _meta: code %d, want %d", a.code(), CodeDenied)
	}
}
