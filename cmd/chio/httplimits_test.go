package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// clientFrom is an HTTP client whose connections come from the loopback
// address local: each address is a distinct client to a server on
// 127.0.0.1 (Linux routes all of 127.0.0.0/8 to the loopback interface).
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 15 * time.Second}
}

// do sends one request and returns its status, headers and JSON body.
func do(t *testing.T, c *http.Client, method, url, token, body string) (int, http.Header, map[string]any) {
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
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, resp.Header, m
}

// refusals is chio_rate_limited_total by "surface/reason", as /metrics
// serves it.
func refusals(t *testing.T, c *http.Client, base string) map[string]float64 {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	re := regexp.MustCompile(`(?m)^chio_rate_limited_total\{reason="([a-z]+)",surface="([a-z0-9-]+)"\} ([0-9.e+]+)$`)
	for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
		v, _ := strconv.ParseFloat(m[3], 64)
		out[m[2]+"/"+m[1]] = v
	}
	return out
}

const helloSendBody = `{"jsonrpc":"2.0","id":7,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"world"}]}}}`

// Every surface chio up serves on its one listener is behind the
// per-address limit: past it, a request is answered 429 with Retry-After,
// in the surface's own form (a JSON-RPC error with id null and code
// -31429 on the JSON-RPC endpoints, a JSON object elsewhere), and counted
// by surface; another address is not held back. Reads are also limited
// per principal: a principal past its limit is refused from any address,
// while another principal reads on.
func TestUpRateLimitsEverySurface(t *testing.T) {
	up := startUp(t, "--grpc-listen", "none", "--service-token", "svc-token-for-rate-limits",
		"--rate-limit-address", "0.001", "--rate-limit-address-burst", "1",
		"--rate-limit-principal", "0.001", "--rate-limit-principal-burst", "1")
	base := up.httpURL
	rpcRefused := func(m map[string]any) bool {
		e, _ := m["error"].(map[string]any)
		msg, _ := e["message"].(string)
		return m["jsonrpc"] == "2.0" && m["id"] == nil && e["code"] == float64(-31429) && strings.HasPrefix(msg, "too many requests from this address")
	}
	jsonRefused := func(m map[string]any) bool {
		msg, _ := m["error"].(string)
		return m["code"] == "rate_limited" && m["retry_after_seconds"] == float64(1000) && strings.HasPrefix(msg, "too many requests from this address")
	}
	for i, tc := range []struct {
		surface, method, path, body string
		refused                     func(map[string]any) bool
	}{
		{"a2a", http.MethodPost, "/a2a", helloSendBody, rpcRefused},
		{"a2a", http.MethodGet, "/a2a/rest/v1/card", "", jsonRefused},
		{"a2a", http.MethodGet, "/.well-known/agent-card.json", "", jsonRefused},
		{"openai", http.MethodGet, "/openai/v1/tools", "", jsonRefused},
		{"mcp", http.MethodPost, "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, rpcRefused},
		{"acp", http.MethodPost, "/acp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}`, rpcRefused},
		{"log", http.MethodGet, "/log/checkpoint", "", jsonRefused},
		{"projections", http.MethodGet, "/v1/tasks", "", jsonRefused},
	} {
		t.Run(tc.surface+tc.path, func(t *testing.T) {
			c := clientFrom(fmt.Sprintf("127.0.0.%d", 10+i))
			if status, _, m := do(t, c, tc.method, base+tc.path, "", tc.body); status == http.StatusTooManyRequests {
				t.Fatalf("first request refused: %v", m)
			}
			status, h, m := do(t, c, tc.method, base+tc.path, "", tc.body)
			if status != http.StatusTooManyRequests || h.Get("Retry-After") != "1000" || !tc.refused(m) {
				t.Fatalf("second request: HTTP %d, Retry-After %q, %v", status, h.Get("Retry-After"), m)
			}
		})
	}
	// One address being refused holds back no other: the tool still runs
	// for a fresh one.
	if status, _, m := do(t, clientFrom("127.0.0.40"), http.MethodPost, base+"/a2a", "", helloSendBody); status != http.StatusOK || m["result"] == nil {
		t.Fatalf("another address: HTTP %d %v", status, m)
	}

	// Per principal: the operator's second read is refused even from a
	// fresh address; the service token is another principal.
	if status, _, m := do(t, clientFrom("127.0.0.41"), http.MethodGet, base+"/v1/tasks", up.token, ""); status != http.StatusOK {
		t.Fatalf("operator's first read: HTTP %d %v", status, m)
	}
	status, h, m := do(t, clientFrom("127.0.0.42"), http.MethodGet, base+"/v1/receipts/query", up.token, "")
	if msg, _ := m["error"].(string); status != http.StatusTooManyRequests || m["code"] != "rate_limited" || h.Get("Retry-After") != "1000" ||
		!strings.HasPrefix(msg, "too many reads by this principal") {
		t.Fatalf("operator's second read, from another address: HTTP %d, Retry-After %q, %v", status, h.Get("Retry-After"), m)
	}
	if status, _, m := do(t, clientFrom("127.0.0.43"), http.MethodGet, base+"/v1/tasks", "svc-token-for-rate-limits", ""); status != http.StatusOK {
		t.Fatalf("another principal: HTTP %d %v", status, m)
	}

	got := refusals(t, clientFrom("127.0.0.44"), base)
	want := map[string]float64{"a2a/address": 3, "openai/address": 1, "mcp/address": 1, "acp/address": 1, "log/address": 1,
		"projections/address": 1, "reads/principal": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("chio_rate_limited_total %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// By default nothing is rate limited: a burst from one address far past
// any limit a test would set is served.
func TestUpDoesNotRateLimitByDefault(t *testing.T) {
	up := startUp(t, "--grpc-listen", "none")
	c := clientFrom("127.0.0.50")
	for i := range 300 {
		if status, _, m := do(t, c, http.MethodGet, up.httpURL+"/.well-known/agent-card.json", "", ""); status != http.StatusOK {
			t.Fatalf("request %d: HTTP %d %v", i, status, m)
		}
	}
}

// A header block past --max-header-bytes is answered 431 before any
// handler runs: no tool call, no event; the same call with a header under
// the bound runs.
func TestUpRefusesOversizedHeaders(t *testing.T) {
	up := startUp(t, "--grpc-listen", "none", "--max-header-bytes", "8192")
	nc := dialUp(t, up.natsURL, up.dir, natsauth.Edge)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	events := func() uint64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, schemas.EventsStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	call := func(pad int) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, up.httpURL+"/a2a", strings.NewReader(helloSendBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Pad", strings.Repeat("a", pad))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	before := events()
	for _, pad := range []int{16 << 10, 1 << 20} {
		if status, body := call(pad); status != http.StatusRequestHeaderFieldsTooLarge || bytes.Contains(body, []byte("result")) {
			t.Fatalf("a %d-byte header: HTTP %d %s", pad, status, body)
		}
	}
	// Events are written in the background: give a call that ran time to
	// have written its decision before counting.
	time.Sleep(500 * time.Millisecond)
	if after := events(); after != before {
		t.Fatalf("refused calls wrote %d events", after-before)
	}
	if status, body := call(4 << 10); status != http.StatusOK || !bytes.Contains(body, []byte(`"result"`)) {
		t.Fatalf("a 4 KiB header: HTTP %d %s", status, body)
	}
	for deadline := time.Now().Add(10 * time.Second); events() == before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call under the bound wrote no event")
		}
	}
}

// A client that stops reading an answer has its connection cut at the
// write timeout, whatever the handler: its write fails instead of
// blocking for ever. A handler that sets its own write deadlines keeps
// them.
func TestHTTPServerCutsAStalledReader(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  time.Duration // the handler's own deadline per write; 0: none
		want time.Duration // when the write must have failed by
	}{
		{"server's bound", 0, 5 * time.Second},
		{"handler's own deadline", 300 * time.Millisecond, 900 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := defaultHTTPLimits()
			l.writeTimeout = time.Second
			if tc.own > 0 {
				l.writeTimeout = time.Hour // the handler's deadline alone can cut it in time
			}
			failed := make(chan time.Duration, 1)
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				start := time.Now()
				for range 1 << 12 { // 256 MiB: far past any socket buffer
					if tc.own > 0 {
						_ = rc.SetWriteDeadline(time.Now().Add(tc.own))
					}
					if _, err := w.Write(chunk); err != nil {
						failed <- time.Since(start)
						return
					}
				}
				failed <- -1
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := newHTTPServer(context.WithValue(context.Background(), httpLimitsKey{}, l), h)
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			conn, err := stalledDialer.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			select {
			case took := <-failed:
				if took < 0 {
					t.Fatal("256 MiB written to a client that reads nothing")
				}
				t.Logf("the write to a stalled reader failed after %s", took.Round(time.Millisecond))
			case <-time.After(tc.want + 5*time.Second):
				t.Fatalf("the handler's write still blocked after %s", tc.want+5*time.Second)
			}
		})
	}
}

// The gRPC binding shares the per-address limit: past it a call is
// refused RESOURCE_EXHAUSTED with a RetryInfo, before it runs, counted
// as surface grpc; another address calls on.
func TestUpRateLimitsGRPC(t *testing.T) {
	grpcRE := regexp.MustCompile(`chio up: gRPC +([0-9.:]+) `)
	logRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	out, _ := startCommand(t, grpcRE, "up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none",
		"--rate-limit-address", "0.001", "--rate-limit-address-burst", "1")
	addr, base := grpcRE.FindStringSubmatch(out)[1], logRE.FindStringSubmatch(out)[1]
	send := func(local string) error { return grpcSendFrom(t, addr, local) }
	if err := send("127.0.0.60"); err != nil {
		t.Fatalf("first call: %v", err)
	}
	err := send("127.0.0.60")
	st, _ := status.FromError(err)
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, ok := d.(*errdetails.RetryInfo); ok {
			retry = r
		}
	}
	if st.Code() != codes.ResourceExhausted || retry == nil || retry.GetRetryDelay().AsDuration() < 999*time.Second ||
		!strings.HasPrefix(st.Message(), "too many requests from this address") {
		t.Fatalf("second call: %v (retry %v)", err, retry)
	}
	if err := send("127.0.0.61"); err != nil {
		t.Fatalf("another address: %v", err)
	}
	if got := refusals(t, clientFrom("127.0.0.62"), base); got["grpc/address"] != 1 {
		t.Fatalf("chio_rate_limited_total: %v", got)
	}
}

// Behind a --trusted-proxy, a gRPC call is charged to the address its
// x-forwarded-for metadata names, as an HTTP request is; a peer that is not
// trusted is charged to itself whatever it says.
func TestUpRateLimitsGRPCBehindProxy(t *testing.T) {
	grpcRE := regexp.MustCompile(`chio up: gRPC +([0-9.:]+) `)
	out, _ := startCommand(t, grpcRE, "up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none",
		"--rate-limit-address", "0.001", "--rate-limit-address-burst", "1", "--trusted-proxy", "127.0.0.70/32")
	addr := grpcRE.FindStringSubmatch(out)[1]
	send := func(local, forwardedFor string) error {
		return grpcSendFrom(t, addr, local, "x-forwarded-for", forwardedFor)
	}
	refused := func(err error) bool { return status.Code(err) == codes.ResourceExhausted }
	for _, tc := range []struct {
		name, peer, forwardedFor string
		refused                  bool
	}{
		{"a client through the proxy", "127.0.0.70", "198.51.100.7", false},
		{"the same client again", "127.0.0.70", "198.51.100.7", true},
		{"another client through the same proxy", "127.0.0.70", "198.51.100.8", false},
		{"an untrusted peer naming a fresh address", "127.0.0.71", "198.51.100.9", false},
		{"the untrusted peer naming another", "127.0.0.71", "198.51.100.10", true},
	} {
		if err := send(tc.peer, tc.forwardedFor); refused(err) != tc.refused || (!tc.refused && err != nil) {
			t.Fatalf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
	}
}

// grpcSendFrom makes one A2A SendMessage over gRPC to addr from the local
// address local (a distinct client on loopback), with metadata md (pairs).
func grpcSendFrom(t *testing.T, addr, local string, md ...string) error {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	_, err = pb.NewA2AServiceClient(conn).SendMessage(ctx, &pb.SendMessageRequest{Message: &pb.Message{
		MessageId: uuid.NewString(), Role: pb.Role_ROLE_USER, Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "world"}}}}})
	return err
}
