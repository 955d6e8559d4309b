package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildChio compiles ./cmd/chio of the module this command is run in, as
// it ships (no race detector, trimmed paths).
func buildChio(ctx context.Context, dir string) (string, error) {
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if _, err := os.Stat(filepath.Join(root, "cmd", "chio")); err != nil {
		return "", fmt.Errorf("run from the chio repository (no cmd/chio under %s): %w", root, err)
	}
	out := filepath.Join(dir, "chio")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/chio")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/chio: %w\n%s", err, b)
	}
	return out, nil
}

// chioUp is the `chio up` child process.
type chioUp struct {
	cmd     *exec.Cmd
	dataDir string
	base    string // http://127.0.0.1:PORT
	devTok  string // the dev capability chio up wrote
	logPath string
	exited  chan struct{}
	waitErr error // read after exited is closed
}

var (
	readyBase  = regexp.MustCompile(`chio up: JSON-RPC\s+(http://\S+)/a2a`)
	readyToken = regexp.MustCompile(`chio up: dev capability in (\S+)`)
)

// startChioUp starts chio up with its own data directory and loopback
// ports and waits until it is ready.
func startChioUp(ctx context.Context, bin, dir string, extra ...string) (*chioUp, error) {
	u := &chioUp{dataDir: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "chio-up.log"), exited: make(chan struct{})}
	logf, err := os.Create(u.logPath)
	if err != nil {
		return nil, fmt.Errorf("chio up log: %w", err)
	}
	args := append([]string{"--log-level", "warn", "up", "--data-dir", u.dataDir, "--listen", "127.0.0.1:0",
		"--nats-listen", "none", "--grpc-listen", "none"}, extra...)
	u.cmd = exec.Command(bin, args...)
	// The child dies with the harness, whatever kills it.
	u.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ready := &readyWriter{}
	u.cmd.Stdout = io.MultiWriter(logf, ready)
	u.cmd.Stderr = logf
	if err := u.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start chio up: %w", err)
	}
	go func() {
		u.waitErr = u.cmd.Wait()
		logf.Close()
		close(u.exited)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := ready.String()
		mb, mt := readyBase.FindStringSubmatch(out), readyToken.FindStringSubmatch(out)
		if mb != nil && mt != nil {
			u.base = mb[1]
			tok, err := os.ReadFile(mt[1])
			if err != nil {
				u.stop(5 * time.Second)
				return nil, fmt.Errorf("dev capability: %w", err)
			}
			u.devTok = strings.TrimSpace(string(tok))
			break
		}
		select {
		case <-u.exited:
			return nil, fmt.Errorf("chio up exited before it was ready: %v\n%s", u.waitErr, u.tail())
		case <-ctx.Done():
			u.stop(5 * time.Second)
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			u.stop(5 * time.Second)
			return nil, fmt.Errorf("chio up not ready after 2m:\n%s", u.tail())
		}
	}
	if err := waitHTTP(ctx, u.base+"/readyz", time.Minute); err != nil {
		u.stop(5 * time.Second)
		return nil, fmt.Errorf("chio up: %w\n%s", err, u.tail())
	}
	return u, nil
}

// alive is nil while chio up runs.
func (u *chioUp) alive() error {
	select {
	case <-u.exited:
		return fmt.Errorf("chio up exited: %v\n%s", u.waitErr, u.tail())
	default:
		return nil
	}
}

// stop sends SIGTERM and waits up to grace for a clean exit, then kills.
// It reports whether chio up stopped cleanly (exit status 0 in time).
func (u *chioUp) stop(grace time.Duration) error {
	select {
	case <-u.exited:
		return u.waitErr
	default:
	}
	if err := u.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signal chio up: %w", err)
	}
	select {
	case <-u.exited:
		return u.waitErr
	case <-time.After(grace):
		_ = u.cmd.Process.Kill()
		<-u.exited
		return fmt.Errorf("chio up did not stop within %s of SIGTERM", grace)
	}
}

// tail is the end of chio up's log, for error messages.
func (u *chioUp) tail() string {
	b, _ := os.ReadFile(u.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// readyWriter keeps the first bytes chio up prints, where its addresses are.
type readyWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() < 64<<10 {
		w.buf.Write(p)
	}
	return len(p), nil
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitHTTP polls url until it answers 200.
func waitHTTP(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", url, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// procStatusBytes reads one "Name: N kB" field of /proc/PID/status.
func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// openFiles counts the process's file descriptors.
func openFiles(pid int) (int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents), err
}

// dirBytes is the apparent size of the files under dir. Files that vanish
// during the walk (compactions, rotated blocks) are skipped.
func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		n += fi.Size()
		return nil
	})
	return n, err
}

// metricValue reads one unlabelled series from a Prometheus text exposition.
func metricValue(ctx context.Context, hc *http.Client, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape %s: HTTP %d", url, resp.StatusCode)
	}
	return parseMetric(resp.Body, name)
}

func parseMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s series", name)
}
