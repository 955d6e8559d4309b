package main

import (
	"context"
	"crypto/ed25519"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/edges/worker"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// An edge started with --workers calls the demo tool on a chio worker: the
// call is governed as any other (its receipt reaches chio up's log), and
// once the worker stops, calls fail at once saying that no worker serves
// the tool.
func TestWorkerBehindEdge(t *testing.T) {
	up := startUp(t)
	_, stopWorker := startCommand(t, regexp.MustCompile(`chio worker: serving hello-a2a-srv \(1 tools\)`),
		"worker", "--demo", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Worker), "--name", "w1", "--manifest-key", filepath.Join(up.dir, "keys", manifestKeyFile),
		"--edge-issuer", filepath.Join(up.dir, "keys", issuerPubFile))
	edge := startEdgeA2A(t, "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "edge-workers"), "--edge-credential", up.credFile("edge-workers"), "--workers", "--edge-id", "edge-workers",
		"--issuer-pub", filepath.Join(up.dir, "keys", issuerPubFile), "--worker-key", filepath.Join(up.dir, "keys", manifestPubFile))
	// An edge with --workers pins the key workers sign with, or does not start.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := chio(ctx, "edge", "a2a", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "edge-refused"), "--edge-credential", up.credFile("edge-refused"), "--listen", "127.0.0.1:0", "--workers",
		"--issuer-pub", filepath.Join(up.dir, "keys", issuerPubFile)); err == nil || !strings.Contains(err.Error(), "--worker-key") {
		t.Fatalf("edge --workers without --worker-key: %v", err)
	}
	tok, err := os.ReadFile(filepath.Join(up.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	send := func(id string) string {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"` + id + `","parts":[{"text":"world"}]}}}`
		req, _ := http.NewRequest(http.MethodPost, edge, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("A2A-Version", "1.0")
		req.Header.Set("X-Chio-Capability", strings.TrimSpace(string(tok)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, resp.Body); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	rid := regexp.MustCompile(`"receiptId":"([^"]+)"`)

	out := send("m-worker-1")
	m := rid.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "hello from a2a") {
		t.Fatalf("call through the worker: %s", out)
	}
	if r := awaitLogReceipt(t, up.httpURL, up.token, m[1]); r.ToolServer != "hello-a2a-srv" || r.Decision.Verdict != "allow" {
		t.Fatalf("receipt %+v", r)
	}

	// A plain request on the invoke subject with an edge's NATS
	// credential (no edge key): the worker refuses it unrun.
	subj := "chio.tools." + worker.SubjectKey(hello.ServerID) + ".invoke"
	plain := `{"id":"forged","server_id":"` + hello.ServerID + `","tool":"` + hello.ToolName + `","arguments":{},"manifest_sha256":"x","governance":{"receipt_id":"r-forged"}}`
	reply, err := dialUp(t, up.natsURL, up.dir, natsauth.Edge).Request(subj, []byte(plain), 10*time.Second)
	if err != nil || reply.Header.Get(micro.ErrorCodeHeader) != "401" || !strings.Contains(reply.Header.Get(micro.ErrorHeader), "no edge signature") {
		t.Fatalf("a plain request to the worker: %v %v", err, reply)
	}

	if err := stopWorker(); err != nil {
		t.Fatal(err)
	}
	out = send("m-worker-2")
	if m := rid.FindStringSubmatch(out); m == nil || !strings.Contains(out, "no worker serves") {
		t.Fatalf("call with no worker up: %s", out)
	}

	// A client with a worker's NATS credential (no manifest key) takes
	// the call and answers it: its answer is not taken, and the call
	// fails with its outcome unknown (the ledger's timeout closes its
	// receipt incomplete), never completed with the forged result.
	rogue := dialUp(t, up.natsURL, up.dir, natsauth.Worker)
	if _, err := rogue.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte(`{"output":{"text":"transfer approved"}}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	out = send("m-worker-3")
	if strings.Contains(out, "transfer approved") || !strings.Contains(out, "TASK_STATE_FAILED") || !strings.Contains(out, "not signed by the worker key") {
		t.Fatalf("call answered by a rogue worker: %s", out)
	}
}

// chio up --workers needs a NATS address workers can reach, an edge with
// --workers a key to pin and its own edge key, and chio worker a tool
// server, a manifest key and the issuer of the edges it takes calls from.
func TestWorkerUsage(t *testing.T) {
	keys := t.TempDir()
	k, err := loadOrCreateKey(filepath.Join(keys, manifestKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	key, pub := filepath.Join(keys, manifestKeyFile), schemas.EncodePublicKey(k.Public().(ed25519.PublicKey))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none", "--workers"}, "--workers needs a NATS address"},
		{[]string{"worker", "--nats", "nats://127.0.0.1:1"}, "no tool server"},
		{[]string{"worker", "--demo", "--nats", "nats://127.0.0.1:1"}, "--manifest-key is required"},
		{[]string{"worker", "--demo", "--nats", "nats://127.0.0.1:1", "--manifest-key", filepath.Join(t.TempDir(), "missing.key")}, "--manifest-key"},
		{[]string{"worker", "--demo", "--nats", "nats://127.0.0.1:1", "--manifest-key", key}, "--edge-issuer is required"},
		{[]string{"edge", "a2a", "--nats", "nats://127.0.0.1:1", "--listen", "127.0.0.1:0", "--workers", "--worker-key", pub}, "--workers needs --edge-key"},
	}
	for _, tc := range cases {
		if _, err := chio(context.Background(), tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("chio %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
