package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/stagedir"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// interrupter is a command's stderr that cancels the command when the
// first line matching re arrives: an interrupt after some progress, made
// from inside the progress callback.
type interrupter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	re     *regexp.Regexp
	cancel context.CancelFunc
}

func (w *interrupter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil && w.re.Match(p) {
		w.cancel()
	}
	return w.buf.Write(p)
}

func (w *interrupter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// chioStderr runs chio as chio does, with stderr on w, and returns stdout.
func chioStderr(ctx context.Context, w io.Writer, args ...string) (string, error) {
	var out syncBuffer
	root := newRoot()
	root.SetArgs(append([]string{"--log-level", "warn"}, args...))
	root.SetOut(&out)
	root.SetErr(w)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// TestProgressInterruptAndRerun runs each long command against one chio
// up: its plain progress lines and summary on stderr (not a terminal);
// an interrupt after some progress, which leaves no result; a rerun into
// the same target, which succeeds with the result of an uninterrupted
// run; and a run over the finished result, refused (or, for a rebuild,
// replaced with --force unless a process holds the store open).
func TestProgressInterruptAndRerun(t *testing.T) {
	up := startUp(t)
	const calls = 30
	ids := evidenceCalls(t, up, calls)
	for _, id := range ids {
		awaitLogReceipt(t, up.httpURL, up.token, id)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/query?limit=1"); st == 200 && strings.Contains(string(body), fmt.Sprintf(`"totalCount":%d`, calls)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receipt index never counted %d receipts", calls)
		}
	}
	_, checkpoint := httpGet(t, up.httpURL+"/log/checkpoint")
	cpLines := strings.Split(string(checkpoint), "\n")
	keysDir := filepath.Join(up.dir, "keys")
	kernelPub, err := os.ReadFile(filepath.Join(keysDir, kernelPubFile))
	if err != nil {
		t.Fatal(err)
	}
	natsURL, work := up.natsURL, t.TempDir()

	// The projections of an uninterrupted rebuild, to compare with.
	var fresh interrupter
	wantProjections, err := chioStderr(context.Background(), &fresh, "projections", "rebuild", "--nats", natsURL, "--nats-nkey", up.nkey(natsauth.Reader),
		"--data-dir", filepath.Join(work, "fresh"), "--kernel-key", filepath.Join(keysDir, kernelPubFile))
	if err != nil || !strings.Contains(wantProjections, "\ndigest ") {
		t.Fatalf("projections rebuild: %v\n%s", err, wantProjections)
	}

	cases := []struct {
		name, label, unit string
		args              []string
		target            string
		// check checks what a finished run printed on stdout.
		check func(t *testing.T, out string)
		// again is what a run over a finished result does: the error it
		// fails with, or "" when it succeeds (with --force).
		again       []string
		againRefuse string
	}{{
		name: "ledger rebuild", label: "ledger rebuild", unit: "messages",
		args:   []string{"ledger", "rebuild", "--nats", natsURL, "--nats-nkey", up.nkey(natsauth.Reader), "--edge-issuer", filepath.Join(keysDir, issuerPubFile), "--data-dir", filepath.Join(work, "ledger"), "--keys", keysDir},
		target: filepath.Join(work, "ledger", "log"),
		check: func(t *testing.T, out string) {
			// The root as the checkpoint prints it (line 3), then in hex.
			want := fmt.Sprintf("size %s\nroot %s\nroot-hex ", cpLines[1], cpLines[2])
			if !strings.HasPrefix(out, want) {
				t.Fatalf("rebuild printed %q, want the checkpoint's size and root %q", out, want)
			}
		},
		againRefuse: "holds a finished rebuild", again: []string{"--force"},
	}, {
		name: "projections rebuild", label: "projections rebuild", unit: "messages",
		args: []string{"projections", "rebuild", "--nats", natsURL, "--nats-nkey", up.nkey(natsauth.Reader), "--data-dir", filepath.Join(work, "projections"),
			"--kernel-key", filepath.Join(keysDir, kernelPubFile)},
		target: filepath.Join(work, "projections", "projections"),
		check: func(t *testing.T, out string) {
			if out != wantProjections {
				t.Fatalf("rebuild printed\n%s\nwant, as an uninterrupted one\n%s", out, wantProjections)
			}
		},
		againRefuse: "holds a finished rebuild", again: []string{"--force"},
	}, {
		name: "evidence export", label: "evidence export", unit: "receipts",
		args:   []string{"evidence", "export", "--url", up.httpURL, "--token", "@" + filepath.Join(up.dir, operatorTokenFile), "--out", filepath.Join(work, "pkg")},
		target: filepath.Join(work, "pkg"),
		check: func(t *testing.T, out string) {
			if !strings.Contains(out, fmt.Sprintf("%d tool receipts", calls)) {
				t.Fatalf("export printed %q", out)
			}
			got, err := chio(context.Background(), "evidence", "verify", "--input", filepath.Join(work, "pkg"),
				"--vkey", filepath.Join(keysDir, checkpointVKeyFile), "--kernel-key", strings.TrimSpace(string(kernelPub)))
			if err != nil || !strings.HasPrefix(got, fmt.Sprintf("evidence package verified: %d tool receipts", calls)) {
				t.Fatalf("verify the rerun's package: %v\n%s", err, got)
			}
		},
		againRefuse: "already exists",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			progressLine := regexp.MustCompile(`(?m)^` + c.label + `: \d+/\d+ ` + c.unit + ` \(\d+%\), [0-9.]+/s`)
			summary := regexp.MustCompile(`(?m)^` + c.label + `: done, \d+ ` + c.unit + ` in \S+ \([0-9.]+/s\)\n\z`)
			absent := func(what, path string) {
				t.Helper()
				if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s: %s exists (%v)", what, path, err)
				}
			}

			// Interrupted at its first progress line.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cut := &interrupter{re: progressLine, cancel: cancel}
			if out, err := chioStderr(ctx, cut, c.args...); !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted: %v, want context.Canceled\nstdout %s\nstderr %s", err, out, cut.String())
			}
			if !regexp.MustCompile(`(?m)^` + c.label + `: stopped, \d+/\d+ ` + c.unit).MatchString(cut.String()) {
				t.Fatalf("an interrupted run's stderr has no summary of how far it went:\n%s", cut.String())
			}
			absent("after an interrupt", c.target)

			beside := func(kind string) []string { // what runs left beside the target
				found, _ := filepath.Glob(filepath.Join(filepath.Dir(c.target), "."+filepath.Base(c.target)+kind+"*"))
				return found
			}
			if left := beside(".staged-"); len(left) != 0 {
				t.Fatalf("after an interrupt: %v left", left)
			}
			// What a killed run leaves beside the target.
			killed, err := stagedir.New(c.target, stagedir.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(killed.Path, "LEFTOVER"), []byte("half"), 0o644); err != nil {
				t.Fatal(err)
			}
			var stderr interrupter
			out, err := chioStderr(context.Background(), &stderr, c.args...)
			if err != nil {
				t.Fatalf("rerun: %v\n%s", err, stderr.String())
			}
			t.Logf("interrupted run's stderr:\n%s\nrerun's stderr:\n%s\nstdout:\n%s", cut.String(), stderr.String(), out)
			c.check(t, out)
			absent("after a finished run", killed.Path)
			if !progressLine.MatchString(stderr.String()) || !summary.MatchString(stderr.String()) {
				t.Fatalf("stderr has no progress line or no final summary:\n%s", stderr.String())
			}
			if strings.ContainsAny(stderr.String(), "\r\x1b") {
				t.Fatalf("control characters on a stderr that is not a terminal: %q", stderr.String())
			}

			// Over the finished result.
			if _, err := chioStderr(context.Background(), io.Discard, c.args...); err == nil || !strings.Contains(err.Error(), c.againRefuse) {
				t.Fatalf("a run over a finished result: %v, want it refused (%q)", err, c.againRefuse)
			}
			if c.again != nil {
				// A store a running process has open (its Pebble lock) is
				// not replaced, even with --force.
				lock, err := vfs.Default.Lock(filepath.Join(c.target, "LOCK"))
				if err != nil {
					t.Fatal(err)
				}
				_, err = chioStderr(context.Background(), io.Discard, append(c.args, c.again...)...)
				if lock.Close(); err == nil || !strings.Contains(err.Error(), "in use") {
					t.Fatalf("with %v over a store in use: %v, want it refused", c.again, err)
				}
				out, err := chioStderr(context.Background(), io.Discard, append(c.args, c.again...)...)
				if err != nil {
					t.Fatalf("with %v: %v", c.again, err)
				}
				c.check(t, out)
				if left := append(beside(".staged-"), beside(".replaced-")...); len(left) != 0 {
					t.Fatalf("after a replacing run: %v left", left)
				}
			}
		})
	}
}
