package projections

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas"
)

// deepReceipt publishes a receipt of tn signed by the trusted kernel that
// no reader can decode whole: deep arguments (an object around 9,998
// arrays, 20 KB, what an edge once accepted) or, with deepMeta, a deep
// member of an otherwise governed metadata. The kernel can sign either
// (each part is within the JCS reader's 10,000 levels); the receipt
// around it is beyond encoding/json's.
func (f *scopeFixture) deepReceipt(t *testing.T, tn *tenant, capabilityID, id string, ts uint64, d schemas.Decision, deepMeta bool) {
	t.Helper()
	deep := json.RawMessage(`{"x":` + hostilejson.Nested(9998) + `}`)
	body := schemas.ReceiptBody{ID: id, Timestamp: ts, CapabilityID: capabilityID, ToolServer: tn.server, ToolName: tn.tool,
		Action: schemas.ToolCallAction{Parameters: deep}, Decision: d, ContentHash: schemas.EmptyContentHash,
		PolicyHash: schemas.SHA256Hex([]byte("policy")), TrustLevel: schemas.TrustMediated}
	if deepMeta {
		tx, err := (&schemas.GovernedIntent{ID: "intent-" + id, ServerID: tn.server, ToolName: tn.tool, Purpose: "purpose " + tn.secret}).
			Transaction(schemas.EvidenceAsserted)
		if err != nil {
			t.Fatal(err)
		}
		body.Action.Parameters = json.RawMessage(`{"note":"n"}`)
		body.Metadata, _ = json.Marshal(map[string]any{
			"governed_transaction": tx,
			"attribution": schemas.Attribution{SubjectKey: tn.tok.Subject, IssuerKey: tn.tok.Issuer,
				DelegationDepth: len(tn.tok.DelegationChain), GrantIndex: 0},
			"deep": json.RawMessage(hostilejson.Nested(9999)),
		})
	}
	leaf, err := schemas.SignReceiptLeaf(kernelPriv, body)
	if err != nil {
		t.Fatal(err)
	}
	if json.Valid(leaf) {
		t.Fatalf("%s: the fixture is meant to be beyond encoding/json", id)
	}
	f.h.receipt(id, f.leaf, leaf)
	f.leaf++
}

// TestHostileReceiptsFailOnlyTheirOwnReports: signed receipts nested too
// deep for any reader, next to ordinary ones. A kernel denial of a
// garbage token with deep arguments (the receipt of an attack) fails no
// report; an authorized one fails, naming itself, only the reports whose
// reader may see it and whose selection holds it; every other read
// answers as before, and a rebuild folds them to the same bytes.
func TestHostileReceiptsFailOnlyTheirOwnReports(t *testing.T) {
	f := newScopeFixture(t)
	denied := schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "invalid capability token", Guard: "capability"}
	allowed := schemas.Decision{Verdict: schemas.VerdictAllow}
	f.deepReceipt(t, f.B, "cap-B-root", "rcpt-deny-deep", 1005, denied, false)
	f.deepReceipt(t, f.A, "unknown", "rcpt-deny-unknown-deep", 1006, denied, false)
	f.deepReceipt(t, f.B, "cap-B-root", "rcpt-B-deep", 1007, allowed, false)
	f.deepReceipt(t, f.C, "cap-A-child", "rcpt-C-deep-meta", 1008, allowed, true)
	f.h.caughtUp(f.r)

	allRows := []string{"rcpt-A1", "rcpt-B1", "rcpt-C1", "rcpt-A2", "rcpt-B2"}
	for _, c := range []struct {
		reader, query string
		rows          []string // want 200 with these rows
		failing       string   // want 422 naming this receipt
	}{
		{"operator", "", nil, "rcpt-B-deep"},
		{"operator", "until=1006", allRows, ""}, // the denials are in no selection
		{"operator", "since=1005&until=1006", nil, ""},
		{"operator", "capabilityId=cap-A-root", []string{"rcpt-A1", "rcpt-A2"}, ""},
		{"operator", "capabilityId=cap-A-child", nil, "rcpt-C-deep-meta"},
		{"operator", "capabilityId=cap-B-root", nil, "rcpt-B-deep"},
		{"operator", "capabilityId=unknown", nil, ""},
		{"operator", "toolName=tool-alpha-A", []string{"rcpt-A1", "rcpt-A2"}, ""},
		{"operator", "toolServer=srv-A", nil, "rcpt-C-deep-meta"},
		{"read-all", "since=1008", nil, "rcpt-C-deep-meta"},
		{"A", "", nil, "rcpt-C-deep-meta"},
		{"A", "capabilityId=cap-A-root", []string{"rcpt-A1", "rcpt-A2"}, ""},
		{"A", "until=1007", []string{"rcpt-A1", "rcpt-C1", "rcpt-A2"}, ""},
		{"C", "", nil, "rcpt-C-deep-meta"},
		{"tenant-A", "", nil, "rcpt-C-deep-meta"},
		{"B", "", nil, "rcpt-B-deep"},
		{"B", "until=1006", []string{"rcpt-B1", "rcpt-B2"}, ""},
		{"B", "capabilityId=cap-A-child", nil, ""},
		{"auditor", "", nil, ""},
	} {
		t.Run(c.reader+"?"+c.query, func(t *testing.T) {
			path := "/v1/reports/authorization-context?" + c.query
			code, body, raw := f.get(t, path, f.readers[c.reader])
			f.noLeak(t, c.reader, path, raw, c.query)
			if c.failing != "" {
				if code != http.StatusUnprocessableEntity || body["code"] != CodeUnprojectable || body["receiptId"] != c.failing ||
					!strings.Contains(body["error"].(string), "unreadable: "+schemas.ErrReceiptTooDeep.Error()) {
					t.Fatalf("%d %s, want 422 naming %s as unreadable", code, raw, c.failing)
				}
				return
			}
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, raw)
			}
			if got := reportRows(body); !reflect.DeepEqual(got, c.rows) && !(len(got) == 0 && len(c.rows) == 0) {
				t.Errorf("rows %v, want %v", got, c.rows)
			}
		})
	}

	// The other reads answer as before.
	for _, c := range []struct {
		reader, path string
		want         int
	}{
		{"operator", "/v1/tasks?limit=200", http.StatusOK},
		{"A", "/v1/tasks", http.StatusOK},
		{"B", "/v1/tasks/task-B1", http.StatusOK},
		{"operator", "/v1/lineage/cap-B-root", http.StatusOK},
		{"A", "/v1/lineage/cap-A-child/chain", http.StatusOK},
	} {
		if code, _, raw := f.get(t, c.path, f.readers[c.reader]); code != c.want {
			t.Errorf("%s as %s: %d %s", c.path, c.reader, code, raw)
		}
	}
	if code, body, _ := f.get(t, "/v1/tasks?limit=200", f.readers["operator"]); code != http.StatusOK || len(taskIDs(body)) != 9 {
		t.Errorf("operator's tasks: %v", body)
	}

	// The fold decides from the stream alone: a rebuild agrees.
	want, err := f.r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	pos := f.r.Positions()
	if err := f.r.stop(); err != nil {
		t.Fatal(err)
	}
	if res := f.h.rebuild("rebuilt-hostile"); res.Digest != want || res.Positions != pos {
		t.Fatal(fmt.Sprintf("live digest %s at %+v, rebuild %s at %+v", want, pos, res.Digest, res.Positions))
	}
}
