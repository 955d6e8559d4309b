package protect

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mccutchen/go-httpbin/v2/httpbin"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agentKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
)

const operatorSecret = "operator-secret-value-0123456789"

type fixture struct {
	url      string
	js       jetstream.JetStream
	upstream *atomic.Int64 // requests the API received
}

// start runs the proxy for testdata/httpbin.yaml (the bridge's) in front
// of a real go-httpbin, with a real kernel, dispatcher and JetStream.
func start(t testing.TB) *fixture {
	t.Helper()
	return startBounded(t, 0)
}

// startBounded is start with the upstream answer bounded to maxResp bytes
// (0: openapi.MaxResponseBytes).
func startBounded(t testing.TB, maxResp int64) *fixture {
	t.Helper()
	var hits atomic.Int64
	hb := httpbin.New()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		hb.ServeHTTP(w, r)
	}))
	t.Cleanup(api.Close)
	ctx := context.Background()
	spec, err := openapi.Load(ctx, "../openapi/testdata/httpbin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := openapi.Build(spec, openapi.Config{ServerID: "httpbin"})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(api.URL)
	srv, err := openapi.NewServer(b, openapi.Upstream{BaseURL: base, Headers: http.Header{"X-Api-Key": {operatorSecret}}, MaxResponseBytes: maxResp})
	if err != nil {
		t.Fatal(err)
	}
	env := govtest.New(t, govtest.WithServers(srv), govtest.WithIssuers(issuerKey), govtest.WithEdgeID("protect-test"))
	js, k, d := env.JS, env.Kernel, env.Dispatch
	proxy := httptest.NewServer(New(k, d, b))
	t.Cleanup(proxy.Close)
	return &fixture{url: proxy.URL, js: js, upstream: &hits}
}

// capability grants tools of httpbin ("*" for all), valid from..until.
func capability(t testing.TB, from, until time.Time, toolNames ...string) string {
	t.Helper()
	var grants []schemas.ToolGrant
	for _, n := range toolNames {
		grants = append(grants, govtest.Invoke("httpbin", n))
	}
	id := "cap-" + strings.ReplaceAll(strings.Join(toolNames, "-"), "*", "all")
	return govtest.Token(t, issuerKey, agentKey, id, from, until, grants...)
}

func valid(t testing.TB, toolNames ...string) string {
	return capability(t, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), toolNames...)
}

func send(t *testing.T, method, u, token, ctype string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Chio-Capability", token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// An allowed request is forwarded with what the guards saw and the
// operator's credential; the client gets the API's answer as is, with
// its receipt named, and the outcome records the status and the body's
// hash.
func TestForwardsAllowedRequests(t *testing.T) {
	f := start(t)
	cases := []struct {
		name, method, path, route, token, ctype, body string
		want                                          string
	}{
		{"read under a wildcard grant", "GET", "/get?q=hello%20world&undeclared=dropped", "/get", valid(t, "*"), "", "", `"q"`},
		{"write under a grant naming it", "POST", "/post", "/post", valid(t, "httpPost"), "application/json", `{"name":"rex","count":2}`, `"rex"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.upstream.Load()
			resp, body := send(t, c.method, f.url+c.path, c.token, c.ctype, []byte(c.body))
			rid := resp.Header.Get(ReceiptHeader)
			if resp.StatusCode != http.StatusOK || rid == "" || !strings.Contains(string(body), c.want) || f.upstream.Load() != before+1 {
				t.Fatalf("%d %q %s", resp.StatusCode, rid, body)
			}
			// The operator's key reached the API (httpbin echoes headers),
			// redacted in what the client gets; an undeclared query
			// parameter did not reach it.
			if c.method == "GET" && (strings.Contains(string(body), "undeclared") || !strings.Contains(string(body), `"X-Api-Key"`) || !strings.Contains(string(body), `[REDACTED]`)) {
				t.Fatalf("forwarded request: %s", body)
			}
			if strings.Contains(string(body), operatorSecret) || strings.Contains(string(mustJSON(t, natstest.Outcomes(t, f.js))), operatorSecret) {
				t.Fatalf("the operator's credential reached the client or the record: %s", body)
			}
			d, ok := natstest.Decisions(t, f.js)[rid]
			if !ok || d.Decision.Verdict != schemas.VerdictAllow || !strings.Contains(string(d.Metadata), `"protocol":"http"`) {
				t.Fatalf("decision %+v %s", d, d.Metadata)
			}
			// The outcome's content hash covers the status and the hash of
			// exactly the body the client got.
			sum := sha256.Sum256(body)
			canon, err := schemas.CanonicalizeJSON(mustJSON(t, map[string]any{"httpStatus": 200, "method": c.method, "path": c.route,
				"bodySha256": hex.EncodeToString(sum[:]), "bodyBytes": len(body)}))
			if err != nil {
				t.Fatal(err)
			}
			o, ok := natstest.Outcomes(t, f.js)[rid]
			if !ok || o.Outcome != schemas.OutcomeCompleted || o.ContentHash != schemas.SHA256Hex(canon) {
				t.Fatalf("outcome %+v, want content hash of %s", o, canon)
			}
		})
	}
}

// Requests Chio refuses never reach the API. Those that reached the
// kernel have a deny receipt, named in the answer.
func TestRefusesBeforeTheAPI(t *testing.T) {
	f := start(t)
	expired := capability(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), "*")
	huge := `{"name":"` + strings.Repeat("x", openapi.MaxBodyBytes) + `"}`
	big := `{"name":"` + strings.Repeat("x", schemas.MaxParametersBytes) + `"}`
	cases := []struct {
		name, method, path, token, ctype, body string
		status                                 int
		errCode, guard                         string
	}{
		{"unknown route", "GET", "/nowhere", valid(t, "*"), "", "", 404, "not_found", ""},
		{"method the route lacks", "PUT", "/get", valid(t, "*"), "", "", 405, "method_not_allowed", ""},
		{"no capability", "GET", "/get", "", "", "", 401, "chio_capability_required", ""},
		{"expired capability", "GET", "/get", expired, "", "", 401, "chio_access_denied", kernel.StepTime},
		{"grant for another operation", "GET", "/get", valid(t, "headers"), "", "", 403, "chio_access_denied", kernel.StepGrant},
		{"side effect under a wildcard grant", "POST", "/post", valid(t, "*"), "application/json", `{"name":"rex"}`, 403, "chio_access_denied", kernel.StepGrant},
		{"guard: a secret in the body", "POST", "/post", valid(t, "httpPost"), "application/json", `{"name":"AKIAIOSFODNN7EXAMPLE"}`, 403, "chio_access_denied", "SecretLeakGuard"},
		{"traversal in a path parameter", "GET", "/status/..", valid(t, "*"), "", "", 400, "bad_request", ""},
		{"encoded traversal", "GET", "/anything/%2e%2e", valid(t, "*"), "", "", 400, "bad_request", ""},
		{"encoded slash", "GET", "/anything/a%2Fb", valid(t, "*"), "", "", 400, "bad_request", ""},
		{"body over the bridge's bound", "POST", "/post", valid(t, "httpPost"), "application/json", huge, 413, "body_too_large", ""},
		{"body over the call's bound", "POST", "/post", valid(t, "httpPost"), "application/json", big, 413, "bad_request", ""},
		{"body not JSON", "POST", "/post", valid(t, "httpPost"), "application/json", `{"name":`, 400, "bad_request", ""},
		{"an id beyond 2^53 would reach the API rounded", "GET", "/status/9007199254740993", valid(t, "*"), "", "", 400, "bad_request", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := send(t, c.method, f.url+c.path, c.token, c.ctype, []byte(c.body))
			var d denial
			if err := json.Unmarshal(body, &d); resp.StatusCode != c.status || err != nil || d.Error != c.errCode {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, body, c.status, c.errCode)
			}
			if c.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != "GET" {
				t.Fatalf("Allow: %q", resp.Header.Get("Allow"))
			}
			if c.guard == "" {
				if d.ReceiptID != "" {
					t.Fatalf("a receipt for a request that never reached the kernel: %s", body)
				}
				return
			}
			ev, ok := natstest.Decisions(t, f.js)[d.ReceiptID]
			if d.ReceiptID == "" || resp.Header.Get(ReceiptHeader) != d.ReceiptID || !ok || ev.Decision.Verdict != schemas.VerdictDeny ||
				!strings.HasPrefix(ev.Decision.Guard, c.guard) {
				t.Fatalf("deny receipt %q: %+v (%s)", d.ReceiptID, ev.Decision, body)
			}
		})
	}
	if n := f.upstream.Load(); n != 0 {
		t.Fatalf("the API received %d refused requests", n)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
