package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mccutchen/go-httpbin/v2/httpbin"

	"github.com/chio-ledger/chio/edges/gateway"
	"github.com/chio-ledger/chio/schemas"
)

// gatewayConfig is the configuration block of docs/gateways.md that
// follows `<!-- gateway-config: name -->`, with its example addresses
// replaced: the tests run what the page shows.
func gatewayConfig(t *testing.T, name string, addrs map[string]string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "gateways.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), "<!-- gateway-config: "+name+" -->\n")
	if !ok {
		t.Fatalf("docs/gateways.md has no %s configuration", name)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the ``` line
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("docs/gateways.md: the %s block does not end", name)
	}
	for from, to := range addrs {
		if !strings.Contains(block, from) {
			t.Fatalf("the %s configuration does not name %s", name, from)
		}
		block = strings.ReplaceAll(block, from, to)
	}
	return block
}

// The example addresses of docs/gateways.md.
const (
	docProxy   = "127.0.0.1:8088"
	docChio    = "127.0.0.1:9191"
	docChioRPC = "9192"
	docAPI     = "127.0.0.1:8000"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// countingAPI is the upstream behind the gateway: httpbin, counting what
// reaches it and keeping the receipt id each request came with.
type countingAPI struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string // "METHOD /path receipt-id"
}

func newCountingAPI(t *testing.T) *countingAPI {
	a := &countingAPI{}
	bin := httpbin.New()
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.requests = append(a.requests, r.Method+" "+r.URL.Path+" "+r.Header.Get(gateway.ReceiptHeader))
		a.mu.Unlock()
		bin.ServeHTTP(w, r)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *countingAPI) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.requests...)
}

// startGatewayUp runs chio up with the httpbin API and the decision point
// on both listeners; it returns the process, the HTTP decision point's
// address and ext_authz's.
func startGatewayUp(t *testing.T, api string) (*upProcess, string, string) {
	t.Helper()
	spec := filepath.Join("..", "..", "edges", "openapi", "testdata", "httpbin.yaml")
	up := startUp(t, "--openapi", spec, "--openapi-server-id", "httpbin", "--openapi-upstream", api,
		"--gateway-listen", "127.0.0.1:0", "--gateway-grpc-listen", "127.0.0.1:0")
	h := regexp.MustCompile(`gateway decisions  http://([0-9.:]+)`).FindStringSubmatch(up.out)
	g := regexp.MustCompile(`envoy ext_authz  ([0-9.:]+)`).FindStringSubmatch(up.out)
	if h == nil || g == nil {
		t.Fatalf("no gateway addresses in:\n%s", up.out)
	}
	return up, h[1], g[1]
}

func devToken(t *testing.T, up *upProcess) string {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(up.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(tok))
}

// gatewayReceipt is what the gateway tests read of a receipt.
type gatewayReceipt struct {
	ToolName    string `json:"tool_name"`
	ContentHash string `json:"content_hash"`
	Decision    struct {
		Verdict string `json:"verdict"`
		Guard   string `json:"guard"`
	} `json:"decision"`
	Metadata map[string]any `json:"metadata"`
}

func readGatewayReceipt(t *testing.T, up *upProcess, id string) gatewayReceipt {
	t.Helper()
	awaitLogReceipt(t, up.httpURL, up.token, id)
	code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id)
	var w struct {
		Receipt gatewayReceipt `json:"receipt"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &w) != nil {
		t.Fatalf("receipt %s: %d %s", id, code, body)
	}
	return w.Receipt
}

// checkAllowed checks an allowed request's receipt: an allow that says
// the gateway carried it out and nobody reported the result.
func checkAllowed(t *testing.T, up *upProcess, id, tool, via string) {
	t.Helper()
	r := readGatewayReceipt(t, up, id)
	if r.Decision.Verdict != "allow" || r.ToolName != tool || r.ContentHash != schemas.EmptyContentHash ||
		r.Metadata["outcome"] != "not_observed" || (via != "" && r.Metadata["gateway"] != via) {
		t.Fatalf("receipt of an allowed request: %+v", r)
	}
}

func checkDenied(t *testing.T, up *upProcess, id, guard string) {
	t.Helper()
	r := readGatewayReceipt(t, up, id)
	if r.Decision.Verdict != "deny" || (guard != "" && r.Decision.Guard != guard) || r.Metadata["outcome"] != nil {
		t.Fatalf("receipt of a refused request (guard %s): %+v", guard, r)
	}
}

func proxyDo(t *testing.T, method, url, token string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// exerciseProxy sends the same requests through a gateway: an allowed
// read reaches the upstream with its receipt id; a write the capability
// does not name, a request with no credential, one with a forged
// credential, an operation with a body the gateway does not show, and a
// route that is not an operation are refused, and none of them reaches
// the upstream. clientReceipt says whether the gateway gives the client
// the receipt id of an allowed request.
func exerciseProxy(t *testing.T, up *upProcess, api *countingAPI, proxy, via string, clientReceipt bool) {
	t.Helper()
	dev := devToken(t, up)
	before := len(api.seen())

	resp, body := proxyDo(t, http.MethodGet, proxy+"/get?q=gateway", dev, "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"gateway"`) {
		t.Fatalf("allowed read: %d %s", resp.StatusCode, body)
	}
	seen := api.seen()
	if len(seen) != before+1 || !strings.HasPrefix(seen[before], "GET /get ") {
		t.Fatalf("upstream saw %v", seen[before:])
	}
	rid := strings.TrimPrefix(seen[before], "GET /get ")
	if rid == "" || (clientReceipt && resp.Header.Get(gateway.ReceiptHeader) != rid) {
		t.Fatalf("receipt id: upstream %q, client %q", rid, resp.Header.Get(gateway.ReceiptHeader))
	}
	checkAllowed(t, up, rid, "httpGet", via)

	resp, body = proxyDo(t, http.MethodDelete, proxy+"/delete?reason=gateway", dev, "")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("write not granted: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	checkDenied(t, up, refusedReceipt(t, up, resp, "httpDelete", 1), "")

	resp, body = proxyDo(t, http.MethodGet, proxy+"/get", "", "")
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no credential: %d %v %s", resp.StatusCode, resp.Header, body)
	}

	resp, body = proxyDo(t, http.MethodGet, proxy+"/get", "eyJub3QiOiJhIGNhcGFiaWxpdHkifQ", "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged credential: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	checkDenied(t, up, refusedReceipt(t, up, resp, "httpGet", 1), "")

	resp, body = proxyDo(t, http.MethodPost, proxy+"/post", dev, `{"name":"rex"}`)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a body the decision point cannot see: %d %s", resp.StatusCode, body)
	}
	resp, body = proxyDo(t, http.MethodGet, proxy+"/not-an-operation", dev, "")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("not an operation: %d %s", resp.StatusCode, body)
	}
	if after := api.seen(); len(after) != before+1 {
		t.Fatalf("refused requests reached the upstream: %v", after[before+1:])
	}
}

// refusedReceipt is the receipt id of a refused request: from the answer
// when the gateway passes it on, else the log's n-th deny of tool (nginx
// does not set auth_request_set variables on a 401 or 403).
func refusedReceipt(t *testing.T, up *upProcess, resp *http.Response, tool string, n int) string {
	t.Helper()
	if id := resp.Header.Get(gateway.ReceiptHeader); id != "" {
		return id
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/query?toolServer=httpbin&outcome=deny&toolName="+tool)
		var q struct {
			Receipts []struct {
				ID string `json:"id"`
			} `json:"receipts"`
		}
		if err := json.Unmarshal(body, &q); code != http.StatusOK || err != nil {
			t.Fatalf("query: %d %v %s", code, err, body)
		}
		if len(q.Receipts) >= n {
			return q.Receipts[n-1].ID
		}
		if time.Now().After(deadline) {
			t.Fatalf("no deny receipt of %s in the log", tool)
		}
	}
}

// gatewayBinary finds a proxy's executable; CHIO_GATEWAY_TEST=1 (set by
// CI) makes a missing one a failure rather than a skip.
func gatewayBinary(t *testing.T, name string, paths ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("CHIO_GATEWAY_TEST") == "1" {
		t.Fatalf("%s is not installed", name)
	}
	t.Skipf("%s is not installed (CHIO_GATEWAY_TEST=1 makes this a failure)", name)
	return ""
}

// startProxy runs a proxy until the test ends and waits for addr to
// accept connections.
func startProxy(t *testing.T, addr string, logf string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	// A file, not a pipe: nginx's workers would hold a pipe open past
	// the master, and Wait with it.
	out, err := os.Create(filepath.Join(t.TempDir(), "output"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM) // nginx's master stops its workers
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			printed, _ := os.ReadFile(out.Name())
			logged, _ := os.ReadFile(logf)
			t.Logf("%s output:\n%s\n%s", name, printed, logged)
		}
		out.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listened on %s", name, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Debian's nginx, configured as docs/gateways.md shows, asks chio up
// before each request: the allowed one reaches the upstream with its
// receipt id, the refused ones never do, and each decision has its
// receipt.
func TestGatewayNginxAuthRequest(t *testing.T) {
	nginx := gatewayBinary(t, "nginx", "/usr/sbin/nginx")
	api := newCountingAPI(t)
	up, decide, _ := startGatewayUp(t, api.URL)
	proxy := freeAddr(t)
	server := gatewayConfig(t, "nginx", map[string]string{docProxy: proxy, docChio: decide, docAPI: strings.TrimPrefix(api.URL, "http://")})

	dir := t.TempDir()
	for _, d := range []string{"tmp", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n" // the workers must reach the test's directory
	}
	conf := fmt.Sprintf(`%sworker_processes 1;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/logs/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path %[2]s/tmp/body;
    proxy_temp_path %[2]s/tmp/proxy;
    fastcgi_temp_path %[2]s/tmp/fastcgi;
    uwsgi_temp_path %[2]s/tmp/uwsgi;
    scgi_temp_path %[2]s/tmp/scgi;
%[3]s
}
`, user, dir, server)
	confFile := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	startProxy(t, proxy, filepath.Join(dir, "logs", "error.log"), nginx, "-p", dir, "-c", confFile, "-e", filepath.Join(dir, "logs", "error.log"))
	exerciseProxy(t, up, api, "http://"+proxy, "auth_request", true)
}

// The repository's Caddy (the deploy/caddy build, the image's binary),
// configured as docs/gateways.md shows, does the same with forward_auth.
func TestGatewayCaddyForwardAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Caddy")
	}
	dir := t.TempDir()
	caddy := filepath.Join(dir, "caddy")
	build := exec.Command("go", "build", "-trimpath", "-o", caddy, ".")
	build.Dir = filepath.Join("..", "..", "deploy", "caddy")
	build.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build caddy: %v\n%s", err, out)
	}
	api := newCountingAPI(t)
	up, decide, _ := startGatewayUp(t, api.URL)
	proxy := freeAddr(t)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(gatewayConfig(t, "caddy", map[string]string{docProxy: proxy, docChio: decide,
		docAPI: strings.TrimPrefix(api.URL, "http://")})), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := []string{"run", "--config", file, "--adapter", "caddyfile"}
	t.Setenv("XDG_DATA_HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir)
	startProxy(t, proxy, "", caddy, cmd...)
	exerciseProxy(t, up, api, "http://"+proxy, "forward_auth", false)

	// Caddy hands Chio's own refusal to the client: its JSON body too.
	resp, body := proxyDo(t, http.MethodDelete, "http://"+proxy+"/delete?reason=gateway", devToken(t, up), "")
	var d struct {
		Error     string `json:"error"`
		ReceiptID string `json:"receipt_id"`
	}
	if resp.StatusCode != http.StatusForbidden || json.Unmarshal([]byte(body), &d) != nil || d.Error != "chio_access_denied" ||
		d.ReceiptID != resp.Header.Get(gateway.ReceiptHeader) {
		t.Fatalf("refusal through Caddy: %d %s", resp.StatusCode, body)
	}
}
