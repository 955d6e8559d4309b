package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/acp/proxy"
	"github.com/chio-ledger/chio/internal/acptest"
	"github.com/chio-ledger/chio/internal/natsauth"
)

// agentEnv makes this test binary the scripted ACP agent (a real process
// for chio edge acp --proxy to start).
const agentEnv = "CHIO_ACPTEST_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) == "1" {
		acptest.RunStdio()
		os.Exit(0)
	}
	// The commands under test run in this process: --memory-limit's
	// default would set the whole test binary's soft limit. Off, as it is
	// when the environment says so.
	os.Setenv("GOMEMLIMIT", "off")
	os.Exit(m.Run())
}

// TestACPProxy: an editor on the official ACP SDK runs an agent process
// through chio edge acp --proxy against chio up's NATS. The agent reads
// and writes the editor's files and runs a command; each call has a
// receipt in the log that verifies offline; a read of a forbidden file is
// denied and never reaches the editor; when the agent crashes while the
// editor holds its request, chio reports it and the ledger signs that
// call as incomplete.
func TestACPProxy(t *testing.T) {
	up := startUp(t, "--incomplete-after", "1s")
	keys := filepath.Join(up.dir, "keys")
	out, err := chio(context.Background(), "capability", "issue", "--issuer-key", filepath.Join(keys, issuerKeyFile),
		"--subject", strings.Repeat("ab", 32), "--grant", "acp/*", "--grant", "acp/"+proxy.MethodWrite,
		"--grant", "acp/"+proxy.MethodTerminal, "--ttl", "1h", "--output", "header")
	if err != nil {
		t.Fatalf("issue: %v %s", err, out)
	}
	tokFile := filepath.Join(t.TempDir(), "editor.tok")
	if err := os.WriteFile(tokFile, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(agentEnv, "1")

	edR, edW := io.Pipe()
	peR, peW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetArgs([]string{"--log-level", "warn", "edge", "acp", "--proxy", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "acp-proxy"), "--edge-credential", up.credFile("acp-proxy"),
			"--issuer-pub", filepath.Join(keys, issuerPubFile), "--token", "@" + tokFile, "--", self})
		root.SetIn(edR)
		root.SetOut(peW)
		root.SetErr(io.Discard)
		done <- root.ExecuteContext(t.Context())
		peW.Close()
	}()
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "a.txt"), []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	ed := &acptest.Editor{Root: project}
	defer ed.Close()
	conn := ed.Connect(edW, peR)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := filepath.Join(project, "b.txt")
	said, err := ed.Run(ctx, conn, strings.Join([]string{"read " + filepath.Join(project, "a.txt"), "write " + b + " governed",
		"run echo hi", "read /etc/shadow"}, "\n"))
	if err != nil {
		t.Fatalf("%v: %s", err, said)
	}
	var rids []string
	for _, l := range strings.Split(said, "\n") {
		if _, id, ok := strings.Cut(l, " receipt="); ok {
			rids = append(rids, id)
		}
	}
	if len(rids) != 2 || !strings.Contains(said, `read: ok "alpha"`) || !strings.Contains(said, `run: ok exit=0 output="hi\n"`) ||
		!strings.Contains(said, "read: error") || !strings.Contains(said, "PathGuard") {
		t.Fatalf("the agent said:\n%s", said)
	}
	if got, _ := os.ReadFile(b); string(got) != "governed" {
		t.Fatalf("b.txt: %q", got)
	}
	for i, tool := range []string{proxy.MethodRead, proxy.MethodWrite} {
		awaitLogReceipt(t, up.httpURL, up.token, rids[i])
		code, receipt := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rids[i])
		var w struct {
			Receipt struct {
				ToolServer string `json:"tool_server"`
				ToolName   string `json:"tool_name"`
				Metadata   struct {
					ACP struct {
						SessionID string `json:"session_id"`
					} `json:"acp"`
				} `json:"metadata"`
			} `json:"receipt"`
		}
		if err := json.Unmarshal(receipt, &w); code != http.StatusOK || err != nil || w.Receipt.ToolServer != proxy.ServerID ||
			w.Receipt.ToolName != tool || w.Receipt.Metadata.ACP.SessionID != "sess-1" {
			t.Fatalf("receipt: %d %v %s", code, err, receipt)
		}
		verifyOffline(t, up, rids[i], receipt)
	}

	// A crash mid-call: the agent process is killed while the editor holds
	// its terminal/wait_for_exit; the editor's prompt fails and chio
	// reports it.
	wait := make(chan struct{}, 1)
	ed.WaitStarted = wait
	killed := make(chan error, 1)
	go func() {
		<-wait
		_, rest, _ := strings.Cut(ed.Said(), "pid: ok ")
		pid, _, _ := strings.Cut(rest, "\n")
		n, err := strconv.Atoi(pid)
		if err == nil {
			err = syscall.Kill(n, syscall.SIGKILL)
		}
		killed <- err
	}()
	if _, err := ed.Run(ctx, conn, "pid\nstart sleep 30\nwait"); err == nil {
		t.Fatal("the prompt of a crashed agent succeeded")
	}
	if err := <-killed; err != nil {
		t.Fatalf("kill the agent: %v", err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "agent exited") {
			t.Fatalf("chio edge acp --proxy: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("chio edge acp --proxy did not end with its agent")
	}
	edW.Close()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/query?toolServer=acp&outcome=incomplete")
		var q struct {
			Receipts []struct {
				ToolName string `json:"tool_name"`
				Decision struct {
					Verdict string `json:"verdict"`
				} `json:"decision"`
			} `json:"receipts"`
		}
		if err := json.Unmarshal(body, &q); code != http.StatusOK || err != nil {
			t.Fatalf("query: %d %v %s", code, err, body)
		}
		if len(q.Receipts) == 1 {
			if r := q.Receipts[0]; r.ToolName != proxy.MethodWait || r.Decision.Verdict != "incomplete" {
				t.Fatalf("incomplete receipt: %s", body)
			}
			break
		}
		if len(q.Receipts) > 1 || time.Now().After(deadline) {
			_, all := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/query?toolServer=acp")
			t.Fatalf("incomplete receipts: %s\nall: %s", body, all)
		}
	}
}

// TestACPProxyUsage: the proxy's command line is checked before anything
// starts.
func TestACPProxyUsage(t *testing.T) {
	for _, args := range [][]string{
		{"edge", "acp", "--proxy"},
		{"edge", "acp", "--proxy", "--stdio", "--", "true"},
	} {
		_, err := chio(context.Background(), args...)
		var ee *exitError
		if err == nil || !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%v: %v", args, err)
		}
	}
}
