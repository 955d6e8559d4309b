package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/ledger/monitor"
	"github.com/chio-ledger/chio/schemas"
)

// monitorDeny logs n deny receipts through up's NATS and waits until the
// checkpoint covers want leaves.
func monitorDeny(t *testing.T, natsURL, dataDir, httpURL string, n int, want uint64) {
	t.Helper()
	nc := dialUp(t, natsURL, dataDir, natsauth.Edge)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		publishCall(t, js, upSigner(t, filepath.Join(dataDir, "keys")), schemas.VerdictDeny)
	}
	deadline := time.Now().Add(20 * time.Second)
	for logSize(t, httpURL) != want {
		if time.Now().After(deadline) {
			t.Fatalf("log size %d, want %d", logSize(t, httpURL), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// monitorUpWithKeys starts a chio up whose data dir holds a copy of keys:
// another log signed by the same log key.
func monitorUpWithKeys(t *testing.T, keys string) (httpURL, natsURL, dataDir string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(keys, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "keys", e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	natsRE := regexp.MustCompile(`NATS JetStream on (nats://[0-9.:]+)`)
	out, _ := startCommand(t, httpRE, "up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
	return httpRE.FindStringSubmatch(out)[1], natsRE.FindStringSubmatch(out)[1], dir
}

func readMonitorState(t *testing.T, path string) *monitor.State {
	t.Helper()
	s, err := monitor.LoadState(path)
	if err != nil || s == nil {
		t.Fatalf("state %s: %v %v", path, s, err)
	}
	return s
}

func monitorCopyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// monitorWaitFor polls a public path until its body matches, or fails
// after a bounded wait.
func monitorWaitFor(t *testing.T, url string, line *regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := httpGet(t, url)
		if status == 200 && line.Match(body) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %s:\n%s", url, line, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMonitor(t *testing.T) {
	ctx := context.Background()
	up := startUp(t)
	vkey := filepath.Join(up.dir, "keys", checkpointVKeyFile)
	files := t.TempDir()
	state := filepath.Join(files, "state.json")
	run := func(url, state string, extra ...string) (string, error) {
		return chio(ctx, append([]string{"monitor", "--url", url, "--vkey", vkey, "--state", state}, extra...)...)
	}

	// A fresh log, then the same log after more receipts: OK, and the
	// state follows.
	for _, step := range []struct {
		add  int
		size uint64
	}{{0, 0}, {3, 3}, {2, 5}} {
		if step.add > 0 {
			monitorDeny(t, up.natsURL, up.dir, up.httpURL, step.add, step.size)
		} else {
			// A new ledger signs its size-0 checkpoint just after it starts;
			// before, a check concludes nothing (exit 3).
			monitorWaitFor(t, up.httpURL+"/log/checkpoint", regexp.MustCompile(`^`+regexp.QuoteMeta(DefaultOrigin)+`\n0\n`))
		}
		out, err := run(up.httpURL, state)
		if err != nil || !strings.Contains(out, "monitor: OK size "+strconv.FormatUint(step.size, 10)+" ") {
			t.Fatalf("size %d: %v\n%s", step.size, err, out)
		}
		if s := readMonitorState(t, state); s.Size != step.size {
			t.Fatalf("state at size %d after a check of size %d", s.Size, step.size)
		}
	}

	// Another log under the same key, with other receipts: a fork of the
	// first from the first's state, and the first a rollback from its own.
	otherURL, otherNATS, otherDir := monitorUpWithKeys(t, filepath.Join(up.dir, "keys"))
	monitorDeny(t, otherNATS, otherDir, otherURL, 7, 7)
	otherState := filepath.Join(files, "other.json")
	if out, err := run(otherURL, otherState); err != nil {
		t.Fatalf("the other log on its own: %v\n%s", err, out)
	}
	forkState := filepath.Join(files, "fork.json")
	monitorCopyFile(t, state, forkState)
	wrongVKey := filepath.Join(files, "wrong.vkey")
	_, otherKey, err := note.GenerateKey(rand.Reader, DefaultOrigin) // same origin, another key
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrongVKey, []byte(otherKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A witness policy whose quorum chio up's checkpoints (not cosigned)
	// cannot meet.
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	typed := append([]byte{0x04}, pub...)
	kh := sha256.Sum256(append([]byte("witness.example\n"), typed...))
	policy := filepath.Join(files, "policy")
	if err := os.WriteFile(policy, fmt.Appendf(nil, "witness w witness.example+%08x+%s https://witness.example\nquorum w\n",
		binary.BigEndian.Uint32(kh[:]), base64.StdEncoding.EncodeToString(typed)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, url, state, want string
		extra                  []string
	}{
		{"fork", otherURL, forkState, "FINDING fork:", nil},
		{"rollback", up.httpURL, otherState, "FINDING rollback:", nil},
		{"wrong key", up.httpURL, state, "FINDING bad_signature:", []string{"--vkey", wrongVKey}},
		{"witness quorum not met", up.httpURL, state, "FINDING bad_signature:", []string{"--witness-policy", policy}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := os.ReadFile(c.state)
			_, err := run(c.url, c.state, c.extra...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("want exit 1 with one line naming %q, got %v", c.want, err)
			}
			if after, _ := os.ReadFile(c.state); string(after) != string(before) {
				t.Fatalf("the state moved past a bad checkpoint:\n%s", after)
			}
		})
	}
	for _, args := range [][]string{
		{"monitor", "--url", up.httpURL, "--vkey", vkey},
		{"monitor", "--url", up.httpURL, "--vkey", "not a key", "--state", state},
		{"monitor", "--url", up.httpURL, "--vkey", vkey, "--state", state, "--metrics-listen", "127.0.0.1:0"},
		{"monitor", "--url", up.httpURL, "--vkey", vkey, "--state", state, "--witness-policy", vkey},
	} {
		var ee *exitError
		if _, err := chio(ctx, args...); !errors.As(err, &ee) || ee.code != 2 {
			t.Fatalf("%v: want exit 2, got %v", args[1:], err)
		}
	}
	// A log that cannot be read concludes nothing: exit 3, and no finding.
	var ee *exitError
	if _, err := run("http://127.0.0.1:1", state); !errors.As(err, &ee) || ee.code != 3 || strings.Contains(err.Error(), "FINDING") {
		t.Fatalf("an unreachable log: want exit 3, got %v", err)
	}

	// --watch: the metrics show each verified size; a fork is counted and
	// the watch goes on.
	metricsRE := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	watch := func(url, state string) (string, func() error) {
		out, stop := startCommand(t, metricsRE, "monitor", "--url", url, "--vkey", vkey, "--state", state,
			"--watch", "--interval", "20ms", "--metrics-listen", "127.0.0.1:0")
		return metricsRE.FindStringSubmatch(out)[1], stop
	}
	metrics, stop := watch(up.httpURL, state)
	monitorWaitFor(t, metrics, regexp.MustCompile(`(?m)^chio_monitor_verified_tree_size 5$`))
	monitorDeny(t, up.natsURL, up.dir, up.httpURL, 1, 6)
	monitorWaitFor(t, metrics, regexp.MustCompile(`(?m)^chio_monitor_verified_tree_size 6$`))
	monitorWaitFor(t, metrics, regexp.MustCompile(`(?m)^chio_monitor_checkpoint_age_seconds [0-9.e+-]+$`))
	forkMetrics, stopFork := watch(otherURL, forkState)
	monitorWaitFor(t, forkMetrics, regexp.MustCompile(`(?m)^chio_monitor_findings_total\{kind="fork"\} [1-9][0-9]*$`))
	monitorWaitFor(t, forkMetrics, regexp.MustCompile(`(?m)^chio_monitor_verified_tree_size 5$`))
	for _, s := range []func() error{stop, stopFork} {
		if err := s(); err != nil {
			t.Fatalf("monitor --watch stopped with %v", err)
		}
	}
	if s := readMonitorState(t, state); s.Size != 6 {
		t.Fatalf("after --watch the state has size %d, want 6", s.Size)
	}
	if s := readMonitorState(t, forkState); s.Size != 5 {
		t.Fatalf("a watch of a fork moved the state to size %d", s.Size)
	}
	var st map[string]any
	b, _ := os.ReadFile(state)
	if err := json.Unmarshal(b, &st); err != nil || st["type"] != monitor.StateType || st["checkpoint"] == "" {
		t.Fatalf("state file: %v\n%s", err, b)
	}
}
