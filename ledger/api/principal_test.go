package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// TestQueryByPrincipal: principal= keeps the receipts made under an
// authority path, intersected with a scoped reader's own: receipts r-NNN
// were made by A (N%3 == 0), A's delegate A1 (1) and B (2); odd ones are
// denials.
func TestQueryByPrincipal(t *testing.T) {
	f := newFixture(t, 12)
	pA, pA1, pB := f.tenants.paths[0][0], f.tenants.paths[1][1], f.tenants.paths[2][0]
	const (
		byA   = "r-000 r-003 r-006 r-009"
		byA1  = "r-001 r-004 r-007 r-010"
		byB   = "r-002 r-005 r-008 r-011"
		treeA = "r-000 r-001 r-003 r-004 r-006 r-007 r-009 r-010"
	)
	cases := []struct {
		reader, query, want string
	}{
		{"operator", "principal=" + pA, treeA}, // A's and its delegate's
		{"operator", "principal=" + pA1, byA1},
		{"operator", "principal=" + pB, byB},
		{"operator", "principal=" + pA + "&outcome=deny", "r-001 r-003 r-007 r-009"},
		{"operator", "principal=" + pA + "&capabilityId=cap-1", byA1},
		{"operator", "principal=" + pA + "&capabilityId=cap-0", byA},
		{"operator", "principal=" + pA + "&since=1003&until=1007", "r-003 r-004 r-006 r-007"},
		{"operator", "principal=p:" + strings.Repeat("0", 64), ""},
		{"auditor", "principal=" + pB, byB},
		{"all", "principal=" + pA1, byA1},
		{"A", "principal=" + pA, treeA},
		{"A", "principal=" + pA1, byA1},
		{"A", "principal=" + pB, ""},    // outside its scope: empty, not an error
		{"A1", "principal=" + pA, byA1}, // its delegator's path: only its own part
		{"A1", "principal=" + pB, ""},
		{"B", "principal=" + pA, ""},
		{"B", "principal=" + pB + "&outcome=deny", "r-005 r-011"},
		{"tenantA", "principal=" + pA1, byA1},
		{"tenantA", "principal=" + pB, ""},
	}
	for _, c := range cases {
		t.Run(c.reader+"?"+c.query, func(t *testing.T) {
			status, _, body := f.getAs(t, f.tenants.tokens[c.reader], "/v1/receipts/query?limit=100&"+c.query)
			var q queryBody
			if status != http.StatusOK || json.Unmarshal(body, &q) != nil {
				t.Fatalf("%d %s", status, body)
			}
			var ids []string
			for _, r := range q.Receipts {
				var rc schemas.Receipt
				if err := json.Unmarshal(r, &rc); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, rc.ID)
			}
			if got := strings.Join(ids, " "); got != c.want || q.TotalCount != uint64(len(ids)) {
				t.Errorf("got [%s] (total %d), want [%s]", got, q.TotalCount, c.want)
			}
			if c.want == "" && strings.Contains(string(body), "secret-") {
				t.Errorf("empty page leaks: %s", body)
			}
		})
	}
	// Paging through a principal's receipts.
	_, _, body := f.get(t, "/v1/receipts/query?limit=3&principal="+pA)
	var q struct {
		queryBody
		NextCursor *uint64 `json:"nextCursor"`
	}
	if err := json.Unmarshal(body, &q); err != nil || len(q.Receipts) != 3 || q.TotalCount != 8 || q.NextCursor == nil || *q.NextCursor != 4 {
		t.Errorf("first page: %s", body)
	}

	for _, bad := range []string{"p:xyz", "not-a-principal", "p:" + strings.Repeat("A", 64)} {
		status, _, body := f.get(t, "/v1/receipts/query?principal="+url.QueryEscape(bad))
		var e Error
		if status != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Code != "bad_parameter" {
			t.Errorf("principal=%s: %d %s", bad, status, body)
		}
	}
}
