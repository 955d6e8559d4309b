package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// childArgsEnv carries the arguments of the chio command TestChioChild
// runs (a JSON array): set only by startChild.
const childArgsEnv = "CHIO_TEST_CHILD_ARGS"

// TestChioChild is the server process of the tests that measure chio in
// a process of its own (its memory apart from its clients'): started by
// startChild, it runs one chio command until SIGTERM. Run directly, it
// has nothing to do.
func TestChioChild(t *testing.T) {
	args := os.Getenv(childArgsEnv)
	if args == "" {
		t.Skip("the server process of startChild; nothing to run on its own")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var argv []string
	if err := json.Unmarshal([]byte(args), &argv); err != nil {
		t.Fatalf("%s: %v", childArgsEnv, err)
	}
	root := newRoot()
	root.SetArgs(argv)
	root.SetOut(os.Stdout)
	root.SetErr(os.Stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
}

// child is a chio command running in its own process.
type child struct {
	cmd     *exec.Cmd
	httpURL string
	dir     string
}

// startChild runs `chio up` with args in a process of its own (this test
// binary, running TestChioChild) and waits until it listens.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	dir := t.TempDir()
	args = append([]string{"--log-level", "warn", "up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "none", "--grpc-listen", "none"}, args...)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChioChild$", "-test.count=1")
	argv, _ := json.Marshal(args)
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(argv))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, dir: dir}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Error("chio up (child) did not stop within 30s of SIGTERM")
		}
	})
	ready := make(chan string, 1)
	re := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() { // read to the end, so the child never blocks on its output
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !sent {
				ready <- m[1]
				sent = true
			}
		}
		if !sent {
			close(ready)
		}
	}()
	select {
	case u, ok := <-ready:
		if !ok {
			t.Fatal("chio up (child) exited before it listened")
		}
		c.httpURL = u
	case <-time.After(30 * time.Second):
		t.Fatal("chio up (child) did not listen within 30s")
	}
	// The announcement follows the listen line: wait until it serves.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(c.httpURL + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chio up (child) does not answer /healthz")
		}
	}
	return c
}

// rssKiB is the child's resident set size (VmRSS), in KiB.
func (c *child) rssKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", c.cmd.Process.Pid)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// metric is a gauge of the child's /metrics (go_goroutines,
// go_memstats_heap_inuse_bytes).
func (c *child) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(c.httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// load is what the child holds now: RSS (KiB), heap in use (KiB),
// goroutines.
type load struct{ rss, heap, goroutines int }

func (c *child) load(t *testing.T) load {
	t.Helper()
	return load{c.rssKiB(t), int(c.metric(t, "go_memstats_heap_inuse_bytes")) >> 10, int(c.metric(t, "go_goroutines"))}
}

func (l load) String() string {
	return fmt.Sprintf("RSS %d KiB, heap in use %d KiB, %d goroutines", l.rss, l.heap, l.goroutines)
}

// raiseFileLimit lets this process (and the child it starts) hold n
// descriptors, raising the hard limit too if it must (which needs
// CAP_SYS_RESOURCE).
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	lim.Cur = n
	lim.Max = max(lim.Max, n)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raise RLIMIT_NOFILE to %d: %v (this test holds %d descriptors)", n, err, n)
	}
}

// realCall sends one A2A message/send and reports how long it took.
func realCall(t *testing.T, base string) time.Duration {
	t.Helper()
	start := time.Now()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(base+"/a2a", "application/json", strings.NewReader(helloSendBody))
	if err != nil {
		t.Errorf("a real call while the server is under load: %v", err)
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"result"`) {
		t.Errorf("a real call while the server is under load: HTTP %d %s", resp.StatusCode, b)
	}
	return time.Since(start)
}

// dialAll opens n connections to addr, 64 at a time, and runs greet on
// each (it writes what the connection sends before falling silent).
func dialAll(t *testing.T, addr string, n int, greet func(i int, c net.Conn) error) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			d := net.Dialer{Timeout: 10 * time.Second}
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				c, err := d.Dial("tcp", addr)
				if err == nil {
					err = greet(i, c)
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("connection %d: %w", i, err):
					default:
					}
					return
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	return conns
}

// cutWithin reads each connection until the server closes it, and
// reports how many it did not close within d.
func cutWithin(conns []net.Conn, d time.Duration) (open int) {
	deadline := time.Now().Add(d)
	var n atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for _, c := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = c.SetReadDeadline(deadline)
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

// 10,000 connections that never finish a request — silent ones, ones that
// trickle half a header (slowloris), ones idle after a request — cost
// chio up a bounded amount of memory, do not hold back real calls, and are
// all closed by the header and idle timeouts.
func TestUpHoldsTenThousandIdleConnections(t *testing.T) {
	const n = 10_000
	const timeout = 4 * time.Second
	raiseFileLimit(t, n+4096)
	c := startChild(t, "--read-header-timeout", timeout.String(), "--idle-timeout", timeout.String())
	addr := strings.TrimPrefix(c.httpURL, "http://")
	realCall(t, c.httpURL) // the first call's one-time costs (the tool's client, the stream writers) are not the connections'
	time.Sleep(500 * time.Millisecond)
	before := c.load(t)

	opened := time.Now()
	conns := dialAll(t, addr, n, func(i int, conn net.Conn) error {
		switch i % 3 {
		case 0: // silent
			return nil
		case 1: // slowloris: a request line and half a header, then nothing
			_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
			return err
		default: // a whole request, its answer read, then idle on keep-alive
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return err
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return err
		}
	})
	dialTook := time.Since(opened)
	held := c.load(t)
	var worst time.Duration
	for range 20 {
		worst = max(worst, realCall(t, c.httpURL))
	}
	open := cutWithin(conns, 2*timeout+5*time.Second)
	time.Sleep(time.Second)
	after := c.load(t)
	t.Logf("chio up before: %s", before)
	t.Logf("holding %d connections (opened in %s): %s; RSS %+d KiB, %.1f KiB a connection", n, dialTook.Round(time.Millisecond), held,
		held.rss-before.rss, float64(held.rss-before.rss)/n)
	t.Logf("after the timeouts cut them: %s; slowest of 20 real calls meanwhile %s", after, worst.Round(time.Millisecond))
	if open > 0 {
		t.Fatalf("%d of %d connections still open %s after the header and idle timeouts (%s)", open, n, 2*timeout+5*time.Second, timeout)
	}
	// A connection costs a goroutine, its buffers and a socket: tens of
	// KiB. Bounded means proportional to the connections held, with no
	// growth from what they send.
	if growth := held.rss - before.rss; growth > n*64 {
		t.Errorf("holding %d idle connections grew RSS by %d KiB (more than 64 KiB each)", n, growth)
	}
	if after.goroutines > before.goroutines+50 {
		t.Errorf("%d goroutines after every connection was cut, %d before", after.goroutines, before.goroutines)
	}
}
