package api

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/ledger/tlogproof"
	"github.com/chio-ledger/chio/ledger/verify"
	"github.com/chio-ledger/chio/schemas"
)

// deepParams are arguments nested 9,999 levels deep (an object around
// 9,998 arrays, 20 KB): what an edge once accepted. The kernel can sign
// them (each level is within the JCS reader's 10,000), but the receipt
// around them is two levels deeper than encoding/json reads.
func deepParams() json.RawMessage { return json.RawMessage(`{"x":` + hostilejson.Nested(9998) + `}`) }

// tamper changes the first hex digit of a leaf's signature.
func tamper(t *testing.T, leaf []byte) []byte {
	t.Helper()
	i := bytes.Index(leaf, []byte(`"signature":"`))
	if i < 0 {
		t.Fatal("leaf has no signature")
	}
	out := bytes.Clone(leaf)
	i += len(`"signature":"`)
	if out[i] == '0' {
		out[i] = '1'
	} else {
		out[i] = '0'
	}
	return out
}

// hostileLeaves makes r-004 (cap-1, allow) and r-005 (cap-2, deny: the
// call of a garbage bearer token) receipts of deep arguments, properly
// signed; r-007 a readable receipt whose signature does not verify; r-010
// a deep one whose signature does not verify.
func hostileLeaves(t *testing.T) leafFunc {
	return func(i int, kernel ed25519.PrivateKey, body schemas.ReceiptBody) []byte {
		switch i {
		case 4, 5, 10:
			body.Action = schemas.ToolCallAction{Parameters: deepParams()}
		case 7:
		default:
			return nil
		}
		leaf, err := schemas.SignReceiptLeaf(kernel, body)
		if err != nil {
			t.Fatal(err)
		}
		if i == 7 || i == 10 {
			leaf = tamper(t, leaf)
		}
		return leaf
	}
}

// TestHostileReceiptsBreakNoRead: receipts no reader can decode whole, in
// the log next to ordinary ones, are each served as one item marked
// unreadable (with their signed bytes when asked for by id); every list,
// query, proof and entry bundle still answers, and the marked bytes
// verify offline against their proofs.
func TestHostileReceiptsBreakNoRead(t *testing.T) {
	f := newFixture(t, 12, hostileLeaves(t))
	decode := func(t *testing.T, path string, status int, body []byte) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: %d, not JSON a client reads: %v", path, status, err)
		}
		return v
	}
	unreadable := schemas.ErrReceiptTooDeep.Error()

	t.Run("by id", func(t *testing.T) {
		for _, id := range []string{"r-004", "r-005", "r-010"} {
			status, _, body := f.get(t, "/v1/receipts/"+id)
			v := decode(t, id, status, body)
			if status != http.StatusOK || v["unreadable"] != unreadable || v["receipt_id"] != id || v["receipt"] != nil {
				t.Fatalf("%s: %d %.300s", id, status, body)
			}
			var served UnreadableReceipt
			_ = json.Unmarshal(body, &served)
			stored, err := f.store.Entry(served.LeafIndex)
			if err != nil || !bytes.Equal(served.Raw, stored) {
				t.Fatalf("%s: raw is not the stored leaf %d (%v)", id, served.LeafIndex, err)
			}
		}
		for _, id := range []string{"r-003", "r-007"} {
			status, _, body := f.get(t, "/v1/receipts/"+id)
			if v := decode(t, id, status, body); status != http.StatusOK || v["receipt"] == nil || v["unreadable"] != nil {
				t.Fatalf("%s: %d %.300s", id, status, body)
			}
		}
	})

	// items lists a query page's receipt ids, "!" before a marked one.
	items := func(t *testing.T, token, query string) []string {
		t.Helper()
		status, _, body := f.getAs(t, token, "/v1/receipts/query"+query)
		v := decode(t, query, status, body)
		if status != http.StatusOK {
			t.Fatalf("query%s as %s: %d %s", query, token, status, body)
		}
		out := []string{}
		for _, it := range v["receipts"].([]any) {
			m := it.(map[string]any)
			switch {
			case m["unreadable"] == unreadable && len(m) == 3 && m["leaf_index"] != nil:
				out = append(out, "!"+m["id"].(string))
			case m["unreadable"] == nil && m["signature"] != nil:
				out = append(out, m["id"].(string))
			default:
				t.Fatalf("query%s: item %v is neither a receipt nor marked unreadable", query, m)
			}
		}
		return out
	}
	for _, c := range []struct {
		token, query string
		want         []string
	}{
		{operatorToken, "?limit=200", []string{"r-000", "r-001", "r-002", "r-003", "!r-004", "!r-005", "r-006", "r-007", "r-008", "r-009", "!r-010", "r-011"}},
		{operatorToken, "", []string{"r-000", "r-001", "r-002", "r-003", "!r-004", "!r-005", "r-006", "r-007", "r-008", "r-009", "!r-010", "r-011"}},
		{operatorToken, "?capabilityId=cap-1", []string{"r-001", "!r-004", "r-007", "!r-010"}},
		{operatorToken, "?outcome=deny", []string{"r-001", "r-003", "!r-005", "r-007", "r-009", "r-011"}},
		{operatorToken, "?toolServer=fs&toolName=read&since=1004&until=1005", []string{"!r-004", "!r-005"}},
		{operatorToken, "?limit=2&cursor=4", []string{"!r-004", "!r-005"}},
		{f.tenants.tokens["B"], "", []string{"r-002", "!r-005", "r-008", "r-011"}},
		{f.tenants.tokens["tenantA"], "?outcome=allow", []string{"r-000", "!r-004", "r-006", "!r-010"}},
	} {
		if got := items(t, c.token, c.query); !reflect.DeepEqual(got, c.want) {
			t.Errorf("query%s: %v, want %v", c.query, got, c.want)
		}
	}
	// Scoping is the log's index, not the unreadable bytes: B does not
	// learn of A1's receipt.
	if status, _, body := f.getAs(t, f.tenants.tokens["B"], "/v1/receipts/r-004"); status != http.StatusNotFound {
		t.Errorf("B reads A1's unreadable receipt: %d %s", status, body)
	}

	t.Run("proofs verify over the served bytes", func(t *testing.T) {
		_, _, cp := f.get(t, "/log/checkpoint")
		for _, c := range []struct {
			id, failed string // failed: the check that fails; "" verifies
		}{{"r-004", ""}, {"r-005", ""}, {"r-010", "receipt-signature"}, {"r-007", "receipt-signature"}, {"r-006", ""}} {
			_, _, receipt := f.get(t, "/v1/receipts/"+c.id)
			for _, kind := range []string{"inclusion-proof", "tlog-proof"} {
				status, _, proof := f.get(t, "/v1/receipts/"+c.id+"/"+kind)
				if status != http.StatusOK {
					t.Fatalf("%s %s: %d %s", c.id, kind, status, proof)
				}
				if kind == "tlog-proof" && !tlogproof.Is(proof) {
					t.Fatalf("%s: not a tlog-proof: %s", c.id, proof)
				}
				res, err := verify.Verify(verify.Inputs{Receipt: receipt, Proof: proof, Checkpoint: cp, VKey: f.vkey,
					KernelKey: schemas.EncodePublicKey(f.kernel.Public().(ed25519.PublicKey))})
				var fail *verify.Failure
				switch {
				case c.failed == "" && err != nil:
					t.Errorf("%s with its %s: %v", c.id, kind, err)
				case c.failed == "" && (res.ReceiptID != c.id || (res.Unreadable != "") != strings.Contains(string(receipt), `"unreadable"`)):
					t.Errorf("%s with its %s: %+v", c.id, kind, res)
				case c.failed != "" && (!errors.As(err, &fail) || fail.Check != c.failed):
					t.Errorf("%s with its %s: %v, want the %s check to fail", c.id, kind, err, c.failed)
				}
			}
		}
	})

	t.Run("entry bundle", func(t *testing.T) {
		status, _, bundle := f.get(t, "/log/tile/entries/000.p/12")
		if status != http.StatusOK {
			t.Fatalf("%d %s", status, bundle)
		}
		leaf, _ := f.store.Entry(4)
		if !bytes.Contains(bundle, leaf) {
			t.Error("the bundle lacks the unreadable leaf")
		}
	})
}
