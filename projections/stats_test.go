package projections

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// statsMinute is the minute the stats tests' receipts start in.
const statsMinute = 1759999980 // a multiple of 60

// statsReceipt signs a receipt of the given outcome as the ledger does.
func statsReceipt(t *testing.T, key ed25519.PrivateKey, id string, ts uint64, verdict schemas.Verdict, guard, server, tool string) []byte {
	t.Helper()
	d := schemas.Decision{Verdict: verdict}
	if verdict != schemas.VerdictAllow {
		d.Reason, d.Guard = "because", guard
	}
	body := schemas.ReceiptBody{ID: id, Timestamp: ts, CapabilityID: "cap-stats", ToolServer: server, ToolName: tool,
		Action: schemas.ToolCallAction{Parameters: json.RawMessage(`{}`)}, Decision: d,
		ContentHash: schemas.EmptyContentHash, PolicyHash: schemas.SHA256Hex([]byte("policy")), TrustLevel: schemas.TrustMediated}
	leaf, err := schemas.SignReceiptLeaf(key, body)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// statsWorkload publishes receipts over four minutes, one of them twice
// (a republished tail) and one signed by an untrusted key.
func statsWorkload(t *testing.T, h *harness) {
	t.Helper()
	m := uint64(statsMinute)
	type r struct {
		id      string
		key     ed25519.PrivateKey
		ts      uint64
		verdict schemas.Verdict
		guard   string
		server  string
		tool    string
	}
	rs := []r{
		{"st-1", kernelPriv, m + 5, schemas.VerdictAllow, "", "shop", "buy"},
		{"st-2", kernelPriv, m + 30, schemas.VerdictDeny, "velocity", "shop", "buy"},
		{"st-3", kernelPriv, m + 90, schemas.VerdictDeny, "scope", "shop", "sell"},
		{"st-4", kernelPriv, m + 200, schemas.VerdictCancelled, "", "shop", "buy"},
		{"st-5", kernelPriv, m + 201, schemas.VerdictIncomplete, "", "shop", "buy"},
		{"st-6", kernelPriv, m + 59, schemas.VerdictDeny, "velocity", "mail", "send"},
		{"st-forged", otherPriv, m + 1, schemas.VerdictAllow, "", "shop", "buy"}, // does not verify: not counted
	}
	for i, x := range rs {
		h.receipt(x.id, uint64(i), statsReceipt(t, x.key, x.id, x.ts, x.verdict, x.guard, x.server, x.tool))
	}
	// The same receipt again: counted once.
	h.republish("st-2", 1, statsReceipt(t, kernelPriv, "st-2", m+30, schemas.VerdictDeny, "velocity", "shop", "buy"))
}

func TestStatsCalls(t *testing.T) {
	h := newHarness(t)
	statsWorkload(t, h)
	live := h.start("live")
	h.caughtUp(live)
	srv := server(t, live.Service)
	m := uint64(statsMinute)
	hour := m - m%3600

	cases := []struct {
		name  string
		query string
		want  CallStats
	}{
		{"minutes", fmt.Sprintf("since=%d&until=%d", m, m+180), CallStats{BucketSeconds: 60, Since: m, Until: m + 180,
			Series:         []CallBucket{{T: m, Allow: 1, Deny: 2}, {T: m + 60, Deny: 1}, {T: m + 120}, {T: m + 180, Cancelled: 1, Incomplete: 1}},
			DenialsByGuard: []GuardCount{{m, "velocity", 2}, {m + 60, "scope", 1}},
			DenialsByTool:  []ToolCount{{m, "mail/send", 1}, {m, "shop/buy", 1}, {m + 60, "shop/sell", 1}}}},
		{"mid-minute range counts whole buckets", fmt.Sprintf("since=%d&until=%d&bucket=60", m+59, m+61), CallStats{BucketSeconds: 60, Since: m + 59, Until: m + 61,
			Series:         []CallBucket{{T: m, Allow: 1, Deny: 2}, {T: m + 60, Deny: 1}},
			DenialsByGuard: []GuardCount{{m, "velocity", 2}, {m + 60, "scope", 1}},
			DenialsByTool:  []ToolCount{{m, "mail/send", 1}, {m, "shop/buy", 1}, {m + 60, "shop/sell", 1}}}},
		{"two-minute buckets", fmt.Sprintf("since=%d&until=%d&bucket=120", m, m+239), CallStats{BucketSeconds: 120, Since: m, Until: m + 239,
			// m is the middle of a two-minute bucket
			Series:         []CallBucket{{T: m - 60, Allow: 1, Deny: 2}, {T: m + 60, Deny: 1}, {T: m + 180, Cancelled: 1, Incomplete: 1}},
			DenialsByGuard: []GuardCount{{m - 60, "velocity", 2}, {m + 60, "scope", 1}},
			DenialsByTool:  []ToolCount{{m - 60, "mail/send", 1}, {m - 60, "shop/buy", 1}, {m + 60, "shop/sell", 1}}}},
		{"one hour bucket", fmt.Sprintf("since=%d&until=%d&bucket=3600", m, m+180), CallStats{BucketSeconds: 3600, Since: m, Until: m + 180,
			Series:         []CallBucket{{T: hour, Allow: 1, Deny: 3, Cancelled: 1, Incomplete: 1}},
			DenialsByGuard: []GuardCount{{hour, "scope", 1}, {hour, "velocity", 2}},
			DenialsByTool:  []ToolCount{{hour, "mail/send", 1}, {hour, "shop/buy", 1}, {hour, "shop/sell", 1}}}},
		{"nothing in range", "since=60&until=179", CallStats{BucketSeconds: 60, Since: 60, Until: 179,
			Series: []CallBucket{{T: 60}, {T: 120}}, DenialsByGuard: []GuardCount{}, DenialsByTool: []ToolCount{}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, raw := get(t, srv.URL, "/v1/stats/calls?"+c.query, opToken)
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, raw)
			}
			var got CallStats
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}

	t.Run("default range is the last hour", func(t *testing.T) {
		code, body, raw := get(t, srv.URL, "/v1/stats/calls", opToken)
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, raw)
		}
		since, until := uint64(body["since"].(float64)), uint64(body["until"].(float64))
		if until-since != 3600 || len(body["series"].([]any)) < 60 || body["bucket_seconds"] != float64(60) {
			t.Errorf("default range: %s", raw)
		}
	})

	// The counters are part of the fold: a rebuild counts the same (byte
	// for byte) and serves the same answer; a restart counts nothing twice.
	want, _, wantRaw := get(t, srv.URL, fmt.Sprintf("/v1/stats/calls?since=%d&until=%d", m, m+180), opToken)
	if want != http.StatusOK {
		t.Fatal(string(wantRaw))
	}
	liveDigest, err := live.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if res := h.rebuild("rebuilt"); res.Digest != liveDigest {
		t.Errorf("rebuild digest %s, live %s", res.Digest, liveDigest)
	}
	rebuilt, err := Open(filepath.Join(h.dir, "rebuilt"), WithLogger(h.log), WithKernelKey(kernelPriv.Public().(ed25519.PublicKey)), WithServiceToken(opToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rebuilt.Close() })
	if _, _, raw := get(t, server(t, rebuilt).URL, fmt.Sprintf("/v1/stats/calls?since=%d&until=%d", m, m+180), opToken); string(raw) != string(wantRaw) {
		t.Errorf("rebuilt store answers %s, live %s", raw, wantRaw)
	}
	if err := live.stop(); err != nil {
		t.Fatal(err)
	}
	again := h.start("live")
	h.caughtUp(again)
	if _, _, raw := get(t, server(t, again.Service).URL, fmt.Sprintf("/v1/stats/calls?since=%d&until=%d", m, m+180), opToken); string(raw) != string(wantRaw) {
		t.Errorf("after a restart %s, before %s", raw, wantRaw)
	}
}

func TestStatsBadParameters(t *testing.T) {
	h := newHarness(t)
	r := h.start("live")
	srv := server(t, r.Service)
	cases := []struct{ query, param string }{
		{"bucket=90", "bucket"},
		{"bucket=30", "bucket"},
		{"bucket=7200", "bucket"},
		{"bucket=x", "bucket"},
		{"since=abc", "since"},
		{"until=-1", "until"},
		{"since=200&until=100", "since"},
		{"since=0&until=604801", "since"},
		{"since=1&since=2", "since"},
		{"limit=5", "limit"},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			code, body, raw := get(t, srv.URL, "/v1/stats/calls?"+c.query, opToken)
			if code != http.StatusBadRequest || body["code"] != CodeInvalidParameter || body["param"] != c.param {
				t.Errorf("%d %s, want 400 invalid_parameter on %s", code, raw, c.param)
			}
		})
	}
	// The largest range is accepted.
	if code, _, raw := get(t, srv.URL, "/v1/stats/calls?since=0&until=604800&bucket=3600", opToken); code != http.StatusOK {
		t.Errorf("7 days: %d %s", code, raw)
	}
}

// TestStatsIsForReadersOfEveryReceipt: counts across tenants are an
// operator's or an auditor's; a tenant's reader is refused outright.
func TestStatsIsForReadersOfEveryReceipt(t *testing.T) {
	f := newScopeFixture(t)
	cases := []struct {
		reader string
		code   int
	}{
		{"operator", http.StatusOK},
		{"read-all", http.StatusOK},
		{"auditor", http.StatusOK},
		{"A", http.StatusForbidden},
		{"C", http.StatusForbidden},
		{"B", http.StatusForbidden},
		{"tenant-A", http.StatusForbidden},
		{"anonymous", http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.reader, func(t *testing.T) {
			code, body, raw := f.get(t, "/v1/stats/calls?since=0&until=3599&bucket=3600", f.readers[c.reader])
			if code != c.code {
				t.Fatalf("%d %s, want %d", code, raw, c.code)
			}
			switch code {
			case http.StatusOK:
				// The fixture's five governed calls, all allowed, at 1000..1004.
				series := body["series"].([]any)
				if len(series) != 1 || series[0].(map[string]any)["allow"] != float64(5) {
					t.Errorf("%s", raw)
				}
			case http.StatusForbidden:
				if body["code"] != "forbidden" || body["error"] == "" || len(body) != 2 {
					t.Errorf("%s", raw)
				}
			}
			f.noLeak(t, c.reader, "/v1/stats/calls", raw)
		})
	}
}
