package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/schemas"
)

// readyz fetches /readyz and returns its status and the checks' names
// (sorted) with their messages.
func readyz(t *testing.T, base string) (int, []string, map[string]string) {
	t.Helper()
	code, body := httpGet(t, base+health.ReadyPath)
	var r health.Response
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("/readyz: %d %s: %v", code, body, err)
	}
	var names []string
	for n := range r.Checks {
		names = append(names, n)
	}
	sort.Strings(names)
	return code, names, r.Checks
}

// sendA2A posts one JSON-RPC body to an A2A endpoint with the dev
// capability (no token) and returns the response body.
func sendA2A(t *testing.T, url, body string) (string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Every process answers /healthz, /readyz (naming its checks) and
// /metrics (its own series), with no token; stopped NATS makes the
// standalone processes unready but still alive.
func TestProbesAndMetricsOfEveryProcess(t *testing.T) {
	t.Setenv(serviceTokenEnv, "")
	up := startUp(t)
	if out, err := sendA2A(t, up.httpURL+"/a2a", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m-probe","parts":[{"text":"world"}]}}}`); err != nil || !strings.Contains(out, "receiptId") {
		t.Fatalf("send through chio up: %v %s", err, out)
	}

	// The standalone processes share a NATS server of their own, so that
	// stopping it leaves chio up alone.
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	natsURL := ns.ClientURL()
	issuerPub := filepath.Join(up.dir, "keys", issuerPubFile)
	kernelPub := filepath.Join(up.dir, "keys", "kernel.pub")
	if _, err := os.Stat(kernelPub); err != nil {
		t.Fatal(err)
	}
	start := func(re string, args ...string) string {
		r := regexp.MustCompile(re)
		out, _ := startCommand(t, r, args...)
		return r.FindStringSubmatch(out)[1]
	}
	ledgerURL := start(`log API on (http://[0-9.:]+)`, "ledger", "--nats", natsURL, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0")
	// Started with no --reader-issuer or --service-token (nor
	// $CHIO_SERVICE_TOKEN, cleared above), the ledger serves only the public
	// half: no credential reads a receipt.
	if code, body := httpGetAs(t, "tok", ledgerURL+"/v1/receipts/query"); code != http.StatusUnauthorized {
		t.Fatalf("receipt query on a ledger with no readers: %d %s", code, body)
	}
	projURL := start(`API on (http://[0-9.:]+)`, "projections", "--nats", natsURL, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--service-token", "tok", "--kernel-key", kernelPub)
	edgeURL := start(`agent card (http://[0-9.:]+)/`, "edge", "a2a", "--nats", natsURL, "--listen", "127.0.0.1:0", "--issuer-pub", issuerPub)
	if out, err := sendA2A(t, edgeURL+"/a2a", `{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t-1"}}`); err != nil || !strings.Contains(out, "-31401") {
		t.Fatalf("tokenless call to chio edge a2a: %v %s", err, out)
	}

	cases := []struct {
		name       string
		base       string
		checks     string
		metrics    []string
		standalone bool
	}{
		{"chio up", up.httpURL, "event_store events_stream governance integration nats projections published_head storage streams", []string{
			`chio_edge_calls_total{decision="allow",edge="a2a",method="SendMessage"} 1`,
			"chio_guard_duration_seconds_bucket", "chio_kernel_decision_duration_seconds_bucket",
			`chio_edge_publish_duration_seconds_count{event="decision",result="ok"}`,
			`chio_projection_lag{projection="tasks"}`, "chio_projection_events_folded_total",
			"chio_ledger_checkpoint_age_seconds", "chio_ledger_tree_size", "chio_ledger_storage_unavailable 0",
			"chio_ledger_store_free_bytes", "chio_projection_storage_unavailable 0", "chio_projection_store_free_bytes", "go_goroutines"}, false},
		{"chio ledger", ledgerURL, "events_stream integration nats published_head storage", []string{"chio_ledger_checkpoint_age_seconds", "chio_ledger_integration_lag_seconds", "chio_ledger_batches_total", "chio_ledger_events_stream_reset 0", "process_cpu_seconds_total"}, true},
		{"chio projections", projURL, "nats storage", []string{`chio_projection_lag{projection="receipts"}`, "go_goroutines"}, true},
		{"chio edge a2a", edgeURL, "governance nats streams", []string{`chio_edge_calls_total{decision="deny",edge="a2a",method="GetTask"} 1`, "# TYPE chio_guard_duration_seconds histogram", "go_goroutines"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if code, body := httpGet(t, c.base+health.LivePath); code != 200 || strings.TrimSpace(string(body)) != `{"status":"ok"}` {
				t.Fatalf("/healthz: %d %s", code, body)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				code, names, checks := readyz(t, c.base)
				if strings.Join(names, " ") != c.checks {
					t.Fatalf("/readyz checks %v, want %s", names, c.checks)
				}
				if code == 200 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not ready: %d %v", code, checks)
				}
				time.Sleep(50 * time.Millisecond)
			}
			code, body := httpGet(t, c.base+"/metrics")
			if code != 200 {
				t.Fatalf("/metrics: %d", code)
			}
			for _, m := range c.metrics {
				if !strings.Contains(string(body), m) {
					t.Errorf("/metrics has no %s", m)
				}
			}
		})
	}

	// Health endpoints under a stopped NATS node: alive, not ready, and
	// the nats check says why.
	ns.Stop()
	for _, c := range cases {
		if !c.standalone {
			continue
		}
		t.Run(c.name+" without NATS", func(t *testing.T) {
			deadline := time.Now().Add(20 * time.Second)
			for {
				code, _, checks := readyz(t, c.base)
				if code == http.StatusServiceUnavailable && checks["nats"] != "ok" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("still ready with NATS stopped: %d %v", code, checks)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if code, _ := httpGet(t, c.base+health.LivePath); code != 200 {
				t.Fatalf("/healthz with NATS stopped: %d", code)
			}
		})
	}
}

// Stopping chio up (SIGINT/SIGTERM cancel the command's context) while a
// call runs: the server stops accepting connections, the call finishes
// and its events are durable before NATS closes — or, past
// --drain-timeout, the call is cancelled and its outcome recorded as
// such. Either way the restarted ledger signs its receipt.
func TestStopDrainsAnInFlightCall(t *testing.T) {
	cases := []struct {
		name         string
		drainTimeout string
		verdict      string // of the receipt
		answered     bool   // the caller gets its result
	}{
		{"finishes within the drain timeout", "15s", "allow", true},
		{"cancelled at the drain timeout", "500ms", "cancelled", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
			natsRE := regexp.MustCompile(`NATS JetStream on (nats://[0-9.:]+)`)
			args := []string{"up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--demo", "conformance", "--drain-timeout", c.drainTimeout}
			out, stop := startCommand(t, httpRE, args...)
			base, natsURL := httpRE.FindStringSubmatch(out)[1], natsRE.FindStringSubmatch(out)[1]
			nc := dialUp(t, natsURL, dir, natsauth.Reader)
			decisions, err := nc.SubscribeSync(schemas.SubjectDecision)
			if err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}

			// The conformance tool holds this call for 4 s.
			type answer struct {
				body string
				err  error
			}
			answered := make(chan answer, 1)
			go func() {
				b, err := sendA2A(t, base+"/a2a", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"test-resubscribe-message-id-drain","parts":[{"text":"hold"}]}}}`)
				answered <- answer{b, err}
			}()
			msg, err := decisions.NextMsg(20 * time.Second)
			if err != nil {
				t.Fatalf("no decision event: %v", err)
			}
			var dec schemas.DecisionEvent
			if err := json.Unmarshal(msg.Data, &dec); err != nil || dec.Decision.Verdict != schemas.VerdictAllow {
				t.Fatalf("decision %s: %v", msg.Data, err)
			}
			nc.Close() // before chio up's NATS goes away

			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			// The listener closes at once: new connections are refused
			// while the call in flight is drained.
			deadline := time.Now().Add(20 * time.Second)
			for {
				resp, err := http.Get(base + health.LivePath)
				if err != nil {
					break
				}
				resp.Body.Close()
				if time.Now().After(deadline) {
					t.Fatal("still accepting connections while stopping")
				}
				time.Sleep(20 * time.Millisecond)
			}
			a := <-answered
			if c.answered && (a.err != nil || !strings.Contains(a.body, dec.ReceiptID) || !strings.Contains(a.body, "TASK_STATE_COMPLETED")) {
				t.Fatalf("the call in flight was not answered: %v %s", a.err, a.body)
			}
			if err := <-stopped; err != nil {
				t.Fatalf("chio up stopped with %v", err)
			}

			// Restarted on the same data: the receipt is signed from the
			// events the drain made durable.
			out, _ = startCommand(t, httpRE, args...)
			base = httpRE.FindStringSubmatch(out)[1]
			r := awaitLogReceipt(t, base, upOperatorToken(t, dir), dec.ReceiptID)
			if r.Decision.Verdict != c.verdict {
				t.Fatalf("receipt %s: verdict %s, want %s", dec.ReceiptID, r.Decision.Verdict, c.verdict)
			}
		})
	}
}
