package main

import (
	"context"
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

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/mccutchen/go-httpbin/v2/httpbin"
	"go.yaml.in/yaml/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chio-ledger/chio/edges/gateway"
	"github.com/chio-ledger/chio/internal/natsauth"
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

// parsedCapability parses a capability token (the dev one), for its subject.
func parsedCapability(t *testing.T, token string) *schemas.CapabilityToken {
	t.Helper()
	raw, err := schemas.DecodeCapabilityText(token)
	if err != nil {
		t.Fatal(err)
	}
	c, err := schemas.ParseCapability(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
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
	resp, b := httpSend(t, method, token, url, rd)
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
	// The client's own copy of either convention's headers: whichever
	// pair the gateway sets, the other is the client's, so the decision
	// point refuses rather than pick.
	req, _ := http.NewRequest(http.MethodDelete, proxy+"/delete?reason=injected", nil)
	req.Header.Set("Authorization", "Bearer "+dev)
	for k, v := range map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/get", "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/get"} {
		req.Header.Set(k, v)
	}
	injected, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	injected.Body.Close()
	if injected.StatusCode == http.StatusOK {
		t.Fatalf("a client's own original-request headers were decided: %d", injected.StatusCode)
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
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", caddy, ".")
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

// Envoy's configuration in docs/gateways.md is a valid bootstrap: it
// decodes into go-control-plane's protos (every typed_config resolved)
// and passes their validation rules. No Envoy binary is packaged here;
// TestGatewayEnvoyExtAuthz drives the service Envoy would call.
func TestGatewayEnvoyConfig(t *testing.T) {
	conf := gatewayConfig(t, "envoy", map[string]string{"port_value: " + docChioRPC: "port_value: 19192"})
	var doc any
	if err := yaml.Unmarshal([]byte(conf), &doc); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(raw, &b); err != nil {
		t.Fatalf("the Envoy configuration is not a bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("the Envoy configuration: %v", err)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	ea := &extauthzv3.ExtAuthz{}
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(ea); err != nil {
		t.Fatal(err)
	}
	if ea.GetFailureModeAllow() || ea.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "chio" || ea.GetWithRequestBody() == nil ||
		ea.GetWithRequestBody().GetAllowPartialMessage() || !ea.GetWithRequestBody().GetPackAsBytes() {
		t.Fatalf("ext_authz filter: %v", ea)
	}
}

// The ext_authz service, called as Envoy calls it (a client generated
// from the published protos): an allowed request gets OK and its receipt
// id for the upstream and the client; a write the capability does not
// name is denied 403 with the body in the decision; a body Envoy cut
// short is refused undecided; no credential is a 401; and a check with
// no HTTP attributes is denied.
func TestGatewayEnvoyExtAuthz(t *testing.T) {
	api := newCountingAPI(t)
	up, _, rpcAddr := startGatewayUp(t, api.URL)
	conn, err := grpc.NewClient(rpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := authv3.NewAuthorizationClient(conn)
	dev := devToken(t, up)
	check := func(method, path string, headers map[string]string, body string, size int64) *authv3.CheckResponse {
		t.Helper()
		h := map[string]string{":authority": "api.example", ":method": method, ":path": path}
		for k, v := range headers {
			h[k] = v
		}
		res, err := client.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Id: "req-1", Method: method, Path: path, Host: "api.example", Scheme: "http", Protocol: "HTTP/1.1",
				Headers: h, Body: body, Size: size}}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	receiptOf := func(hs []*corev3.HeaderValueOption) string {
		for _, h := range hs {
			if h.GetHeader().GetKey() == strings.ToLower(gateway.ReceiptHeader) {
				return h.GetHeader().GetValue()
			}
		}
		return ""
	}
	bearer := map[string]string{"authorization": "Bearer " + dev}

	res := check(http.MethodGet, "/get?q=envoy", bearer, "", 0)
	ok := res.GetOkResponse()
	if codes.Code(res.GetStatus().GetCode()) != codes.OK || ok == nil || receiptOf(ok.GetHeaders()) == "" ||
		receiptOf(ok.GetHeaders()) != receiptOf(ok.GetResponseHeadersToAdd()) {
		t.Fatalf("allowed: %v", res)
	}
	checkAllowed(t, up, receiptOf(ok.GetHeaders()), "httpGet", "ext_authz")

	res = check(http.MethodDelete, "/delete?reason=envoy", bearer, "", 0)
	deny := res.GetDeniedResponse()
	if codes.Code(res.GetStatus().GetCode()) != codes.PermissionDenied || deny.GetStatus().GetCode() != typev3.StatusCode_Forbidden ||
		!strings.Contains(deny.GetBody(), "chio_access_denied") {
		t.Fatalf("write not granted: %v", res)
	}
	checkDenied(t, up, receiptOf(deny.GetHeaders()), "")

	body := `{"name":"rex"}`
	cl := fmt.Sprint(len(body))
	// Buffered whole (with_request_body): Envoy marks it not partial.
	withBody := map[string]string{"authorization": "Bearer " + dev, "content-type": "application/json", "content-length": cl,
		"x-envoy-auth-partial-body": "false"}
	res = check(http.MethodPost, "/post", withBody, body, int64(len(body)))
	rid := receiptOf(res.GetDeniedResponse().GetHeaders())
	if res.GetDeniedResponse().GetStatus().GetCode() != typev3.StatusCode_Forbidden || rid == "" {
		t.Fatalf("write with its body: %v", res)
	}
	checkDenied(t, up, rid, "")
	if _, raw := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid); !strings.Contains(string(raw), `"name":"rex"`) {
		t.Fatalf("the decision did not see the body: %s", raw)
	}

	for name, c := range map[string]struct {
		headers map[string]string
		body    string
		size    int64
	}{
		"a body cut short": {map[string]string{"content-length": cl, "x-envoy-auth-partial-body": "true"}, body[:5], 5},
		// Without with_request_body the check runs at header time: size
		// (bytes received so far) is 0 and no body is sent.
		"no body buffering":   {map[string]string{"content-length": cl}, "", 0},
		"shorter than sent":   {map[string]string{"content-length": cl, "x-envoy-auth-partial-body": "false"}, body[:5], 5},
		"chunked, unbuffered": {map[string]string{"transfer-encoding": "chunked"}, "", 0},
	} {
		h := map[string]string{"authorization": "Bearer " + dev, "content-type": "application/json"}
		for k, v := range c.headers {
			h[k] = v
		}
		res = check(http.MethodPost, "/post", h, c.body, c.size)
		if d := res.GetDeniedResponse(); d.GetStatus().GetCode() != typev3.StatusCode_Forbidden || receiptOf(d.GetHeaders()) != "" ||
			!strings.Contains(d.GetBody(), "body_not_visible") {
			t.Fatalf("%s: %v", name, res)
		}
	}

	res = check(http.MethodGet, "/get", nil, "", 0)
	if codes.Code(res.GetStatus().GetCode()) != codes.Unauthenticated || res.GetDeniedResponse().GetStatus().GetCode() != typev3.StatusCode_Unauthorized {
		t.Fatalf("no credential: %v", res)
	}

	// A body for an operation that takes none would reach the upstream
	// undecided.
	res = check(http.MethodGet, "/get?q=x", map[string]string{"authorization": "Bearer " + dev, "content-length": "3"}, "", 0)
	if d := res.GetDeniedResponse(); d.GetStatus().GetCode() != typev3.StatusCode_Forbidden || !strings.Contains(d.GetBody(), "takes no request body") {
		t.Fatalf("a body for an operation without one: %v", res)
	}

	res, err = client.Check(context.Background(), &authv3.CheckRequest{})
	if err != nil || codes.Code(res.GetStatus().GetCode()) != codes.PermissionDenied {
		t.Fatalf("no attributes: %v %v", res, err)
	}
	if n := len(api.seen()); n != 0 {
		t.Fatalf("the decision point called the upstream %d times", n)
	}
}

// pep is a policy enforcement point written from the AuthZEN
// Authorization API 1.0: it discovers the decision point's endpoints from
// its metadata and posts evaluations to them.
type pep struct {
	t                       *testing.T
	pdp                     string
	evaluation, evaluations string
}

func discoverPDP(t *testing.T, base string) *pep {
	t.Helper()
	code, body := httpGet(t, base+gateway.MetadataPath)
	var md struct {
		PDP         string `json:"policy_decision_point"`
		Evaluation  string `json:"access_evaluation_endpoint"`
		Evaluations string `json:"access_evaluations_endpoint"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &md) != nil || md.PDP != base || md.Evaluation == "" || md.Evaluations == "" {
		t.Fatalf("metadata %d %s", code, body)
	}
	return &pep{t: t, pdp: md.PDP, evaluation: md.Evaluation, evaluations: md.Evaluations}
}

// post sends body (JSON text) with an X-Request-ID, which the decision
// point must echo.
func (p *pep) post(url, body string) (int, []byte) {
	p.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rid := fmt.Sprintf("pep-%d", time.Now().UnixNano())
	req.Header.Set("X-Request-ID", rid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("X-Request-ID") != rid {
		p.t.Fatalf("X-Request-ID not echoed: %v", resp.Header)
	}
	return resp.StatusCode, raw
}

type authzenDecision struct {
	Decision bool `json:"decision"`
	Context  struct {
		ReceiptID string `json:"receipt_id"`
		Guard     string `json:"guard"`
		Error     *struct {
			Status  int    `json:"status"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"context"`
}

func (p *pep) evaluate(body string) authzenDecision {
	p.t.Helper()
	code, raw := p.post(p.evaluation, body)
	var d authzenDecision
	if code != http.StatusOK || json.Unmarshal(raw, &d) != nil {
		p.t.Fatalf("evaluation %s: %d %s", body, code, raw)
	}
	return d
}

func (p *pep) evaluateAll(body string) []authzenDecision {
	p.t.Helper()
	code, raw := p.post(p.evaluations, body)
	var d struct {
		Evaluations []authzenDecision `json:"evaluations"`
	}
	if code != http.StatusOK || json.Unmarshal(raw, &d) != nil {
		p.t.Fatalf("evaluations %s: %d %s", body, code, raw)
	}
	return d.Evaluations
}

// refused expects an AuthZEN error: the status, with a JSON string saying
// what was wrong.
func (p *pep) refused(url, body string, status int, says string) {
	p.t.Helper()
	code, raw := p.post(url, body)
	var msg string
	if code != status || json.Unmarshal(raw, &msg) != nil || !strings.Contains(msg, says) {
		p.t.Fatalf("%s: %d %s, want %d saying %q", body, code, raw, status, says)
	}
}

// The AuthZEN decision point, asked by a PEP written from the
// specification: each evaluation of a tool call is decided by the kernel
// and ends in one receipt; denies are decisions, not errors; unknown
// subjects are denied with a receipt; the specification's own example
// requests (about todos, not tools) are denied as naming nothing Chio
// governs; malformed requests and oversized batches are 400s; and a batch
// follows its evaluation semantics.
func TestGatewayAuthZEN(t *testing.T) {
	api := newCountingAPI(t)
	up, decide, _ := startGatewayUp(t, api.URL)
	p := discoverPDP(t, "http://"+decide)
	dev := devToken(t, up)
	capability := parsedCapability(t, dev)
	subject := fmt.Sprintf(`{"type":"agent","id":%q,"properties":{"token":%q}}`, capability.Subject, dev)
	call := func(tool, args string) string {
		return fmt.Sprintf(`{"subject":%s,"action":{"name":"tools/call"},"resource":{"type":"tool","id":%q},"context":{"arguments":%s}}`, subject, tool, args)
	}

	d := p.evaluate(call("httpGet", `{"q":"authzen"}`))
	if !d.Decision || d.Context.ReceiptID == "" {
		t.Fatalf("allowed: %+v", d)
	}
	checkAllowed(t, up, d.Context.ReceiptID, "httpGet", "")
	if r := readGatewayReceipt(t, up, d.Context.ReceiptID); r.Metadata["protocol"] != "authzen" {
		t.Fatalf("receipt metadata %v", r.Metadata)
	}

	d = p.evaluate(call("httpDelete", `{"reason":"authzen"}`))
	if d.Decision || d.Context.ReceiptID == "" || d.Context.Guard == "" {
		t.Fatalf("a write the capability does not name: %+v", d)
	}
	checkDenied(t, up, d.Context.ReceiptID, d.Context.Guard)

	for name, body := range map[string]string{
		"no credential": `{"subject":{"type":"agent","id":"someone"},"action":{"name":"tools/call"},"resource":{"type":"tool","id":"httpGet"}}`,
		"forged":        `{"subject":{"type":"agent","id":"someone","properties":{"token":"eyJub3QiOiJhIGNhcGFiaWxpdHkifQ"}},"action":{"name":"tools/call"},"resource":{"type":"tool","id":"httpGet"}}`,
	} {
		d = p.evaluate(body)
		if d.Decision || d.Context.Error == nil || d.Context.Error.Status != http.StatusUnauthorized || d.Context.ReceiptID == "" {
			t.Fatalf("unknown subject (%s): %+v", name, d)
		}
		checkDenied(t, up, d.Context.ReceiptID, "")
	}
	d = p.evaluate(strings.Replace(call("httpGet", `{}`), capability.Subject, "somebody-else", 1))
	if d.Decision || d.Context.Guard != "subject" {
		t.Fatalf("a subject id that is not the credential's: %+v", d)
	}
	checkDenied(t, up, d.Context.ReceiptID, "subject")
	if d = p.evaluate(call("no_such_tool", `{}`)); d.Decision || d.Context.Error == nil || d.Context.Error.Status != http.StatusNotFound || d.Context.ReceiptID != "" {
		t.Fatalf("an unknown tool: %+v", d)
	}
	named := strings.Replace(call("no_such_tool", `{}`), `"id":"no_such_tool"`, `"id":"no_such_tool","properties":{"server":"httpbin"}`, 1)
	if d = p.evaluate(named); d.Decision || d.Context.Guard != "tool_resolution" || d.Context.ReceiptID == "" {
		t.Fatalf("an unknown tool of a named server: %+v", d)
	}
	checkDenied(t, up, d.Context.ReceiptID, "tool_resolution")

	// The specification's examples: well formed, about a todo list.
	for _, body := range []string{
		`{"subject":{"type":"user","id":"alice@acmecorp.com"},"resource":{"type":"todo","id":"1"},"action":{"name":"can_read"},"context":{"time":"1985-10-26T01:22-07:00"}}`,
		`{"subject":{"type":"user","id":"alice@acmecorp.com"},"resource":{"type":"account","id":"123"},"action":{"name":"can_read","properties":{"method":"GET"}},"context":{"time":"1985-10-26T01:22-07:00"}}`,
	} {
		if d = p.evaluate(body); d.Decision || d.Context.Error == nil || d.Context.Error.Status != http.StatusNotFound || d.Context.ReceiptID != "" {
			t.Fatalf("the specification's example %s: %+v", body, d)
		}
	}
	all := p.evaluateAll(`{"subject":{"type":"user","id":"alice@acmecorp.com"},"action":{"name":"can_read"},
		"evaluations":[{"resource":{"type":"document","id":"boxcarring.md"}},{"resource":{"type":"document","id":"subject-search.md"}},
		{"action":{"name":"can_edit"},"resource":{"type":"document","id":"resource-search.md"}}]}`)
	if len(all) != 3 || all[0].Decision || all[2].Context.Error == nil {
		t.Fatalf("the specification's batch example: %+v", all)
	}

	// Malformed requests: AuthZEN's error form.
	p.refused(p.evaluation, `{"action":{"name":"tools/call"},"resource":{"type":"tool","id":"httpGet"}}`, http.StatusBadRequest, "subject is required")
	p.refused(p.evaluation, `{"subject":{"type":"agent"},"action":{"name":"tools/call"},"resource":{"type":"tool","id":"httpGet"}}`, http.StatusBadRequest, "subject: type and id")
	p.refused(p.evaluation, `{"subject":{"type":"a","id":"b"},"action":{"name":"tools/call"},"resource":{"type":"tool","id":"x","id":"y"}}`, http.StatusBadRequest, "request body")
	p.refused(p.evaluation, `not json`, http.StatusBadRequest, "request body")
	p.refused(p.evaluation, strings.Replace(call("httpGet", `{}`), `"arguments":{}`, `"arguments":[1]`, 1), http.StatusBadRequest, "context.arguments")

	// Batches: defaults, item overrides, and the three semantics.
	batch := func(semantic string) string {
		return fmt.Sprintf(`{"subject":%s,"action":{"name":"tools/call"},"options":{"evaluations_semantic":%q},"evaluations":[
			{"resource":{"type":"tool","id":"httpGet"},"context":{"arguments":{"q":"1"}}},
			{"resource":{"type":"tool","id":"httpDelete"},"context":{"arguments":{"reason":"2"}}},
			{"resource":{"type":"tool","id":"httpGet"},"context":{"arguments":{"q":"3"}}}]}`, subject, semantic)
	}
	for semantic, want := range map[string][]bool{
		"execute_all":            {true, false, true},
		"deny_on_first_deny":     {true, false},
		"permit_on_first_permit": {true},
	} {
		got := p.evaluateAll(batch(semantic))
		if len(got) != len(want) {
			t.Fatalf("%s: %d decisions, want %d", semantic, len(got), len(want))
		}
		for i := range want {
			if got[i].Decision != want[i] || got[i].Context.ReceiptID == "" {
				t.Fatalf("%s: item %d: %+v", semantic, i, got[i])
			}
		}
	}
	items := `{"subject":{"type":"a","id":"b"},"action":{"name":"tools/call"},"evaluations":[{"resource":{"type":"tool","id":"httpGet"}},{"action":{"name":"x"}}]}`
	if got := p.evaluateAll(items); len(got) != 2 || got[1].Context.Error == nil || got[1].Context.Error.Status != http.StatusBadRequest {
		t.Fatalf("an item with no resource: %+v", got)
	}
	var many []string
	for range gateway.MaxEvaluations + 1 {
		many = append(many, `{"resource":{"type":"tool","id":"httpGet"}}`)
	}
	p.refused(p.evaluations, fmt.Sprintf(`{"subject":%s,"action":{"name":"tools/call"},"evaluations":[%s]}`, subject, strings.Join(many, ",")),
		http.StatusBadRequest, "at most 64")
	p.refused(p.evaluations, strings.Replace(batch("x"), `"x"`, `"first_wins"`, 1), http.StatusBadRequest, "evaluations_semantic")
	if n := len(api.seen()); n != 0 {
		t.Fatalf("the decision point called the upstream %d times", n)
	}
}

// chio gateway on its own, as docs/gateways.md runs it: an edge on chio
// up's NATS with the edge role's credential and a certified edge key. Its
// decisions reach chio up's ledger, which signs them.
func TestStandaloneGateway(t *testing.T) {
	api := newCountingAPI(t)
	spec := filepath.Join("..", "..", "edges", "openapi", "testdata", "httpbin.yaml")
	// chio up bridges the same API only so that its dev capability grants
	// the API's tools; the gateway is a replica of its own.
	up := startUp(t, "--openapi", spec, "--openapi-server-id", "httpbin", "--openapi-upstream", api.URL)
	re := regexp.MustCompile(`gateway decisions  http://([0-9.:]+)`)
	out, _ := startCommand(t, re, "gateway", "--spec", spec,
		"--server-id", "httpbin", "--upstream", api.URL, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
		"--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "gateway"),
		"--edge-credential", up.credFile("gateway"), "--issuer-pub", filepath.Join(up.dir, "keys", issuerPubFile))
	if !strings.Contains(out, "envoy ext_authz") {
		t.Fatalf("no ext_authz listener in:\n%s", out)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+re.FindStringSubmatch(out)[1]+gateway.ForwardPath, nil)
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Uri", "/get?q=standalone")
	req.Header.Set("Authorization", "Bearer "+devToken(t, up))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(gateway.ReceiptHeader) == "" {
		t.Fatalf("forward auth: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	checkAllowed(t, up, resp.Header.Get(gateway.ReceiptHeader), "httpGet", "forward_auth")
	if n := len(api.seen()); n != 0 {
		t.Fatalf("the decision point called the upstream %d times", n)
	}
	if _, err := chio(context.Background(), "gateway", "--listen", "", "--nats", up.natsURL); err == nil || !strings.Contains(err.Error(), "nothing to serve") {
		t.Fatalf("no listener: %v", err)
	}
}
