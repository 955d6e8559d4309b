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
	"path/filepath"
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
	// What the child logs (warnings up) is shown if the test fails.
	logPath := filepath.Join(dir, "child.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd.Stderr = logFile
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8<<10 {
				b = b[len(b)-8<<10:]
			}
			t.Logf("chio up (child) logged, last 8 KiB:\n%s", b)
		}
	})
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

// stalledDialer dials with a small receive buffer and a small maximum
// segment (which keeps the server's send buffer from growing to megabytes,
// as it does over loopback's 64 KiB segments), so a connection that is
// never read stops taking data after about 100 KiB, as a stalled reader
// across a slow network would.
var stalledDialer = net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = errors.Join(syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096),
			syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, 536))
	})
	return errors.Join(err, serr)
}}

// smallBufferDialer dials with a small receive buffer only: against a
// server whose send buffer is bounded (--socket-send-buffer), a
// connection that is never read stops taking data after the two buffers.
var smallBufferDialer = net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	return errors.Join(err, serr)
}}

// rpcCall posts one JSON-RPC request and decodes the answer.
func rpcCall(t *testing.T, base, body string) map[string]any {
	t.Helper()
	c := &http.Client{Timeout: 15 * time.Second}
	resp, err := c.Post(base+"/a2a", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
	}
	return m
}

// 1,000 SSE subscriptions opened and never read: the replica holds its
// --max-streams of them and refuses the rest (429, JSON-RPC -31429), keeps
// answering real calls, and, once the task's events fill what the stalled
// readers will take, cuts each at its write deadline, giving the slots
// back; memory stays bounded throughout.
func TestUpCutsStalledStreamReaders(t *testing.T) {
	const (
		readers    = 1000
		maxStreams = 900
		chunk      = 24 << 10 // a tool's arguments are at most 32 KiB
		followUps  = 6        // 144 KiB: more than the 100 KiB a stalled reader takes
		// sse.go's per-write deadline, and a margin for the fan-out.
		writeDeadline = 30 * time.Second
	)
	raiseFileLimit(t, readers+4096)
	// A bounded send buffer: a stalled reader then pins about 100 KiB of
	// kernel memory, and a few events fill it.
	c := startChild(t, "--demo", "conformance", "--max-streams", strconv.Itoa(maxStreams), "--max-streams-per-caller", strconv.Itoa(2*readers),
		"--socket-send-buffer", "65536")
	addr := strings.TrimPrefix(c.httpURL, "http://")
	m := rpcCall(t, c.httpURL, `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"tck-conversation-stalled","parts":[{"kind":"text","text":"hold"}]}}}`)
	task, _ := m["result"].(map[string]any)
	id, _ := task["id"].(string)
	if st, _ := task["status"].(map[string]any); id == "" || st["state"] != "input-required" {
		t.Fatalf("conversation task: %v", m)
	}
	realCall(t, c.httpURL)
	time.Sleep(500 * time.Millisecond)
	before := c.load(t)

	subscribe := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":%q}}`, id)
	request := fmt.Sprintf("POST /a2a HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nA2A-Version: 1.0\r\nContent-Length: %d\r\n\r\n%s", addr, len(subscribe), subscribe)
	var mu sync.Mutex
	var streams []net.Conn
	refused := 0
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for next.Add(1) <= readers {
				conn, err := smallBufferDialer.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := io.WriteString(conn, request); err != nil {
					t.Error(err)
					conn.Close()
					return
				}
				// The status and headers only: the stream itself is never read.
				_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReaderSize(conn, 16), nil)
				if err != nil {
					t.Error(err)
					conn.Close()
					return
				}
				_ = conn.SetReadDeadline(time.Time{})
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					streams = append(streams, conn)
					mu.Unlock()
					continue
				}
				var body map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&body)
				conn.Close()
				e, _ := body["error"].(map[string]any)
				msg, _ := e["message"].(string)
				if resp.StatusCode != http.StatusTooManyRequests || e["code"] != float64(-31429) || !strings.Contains(msg, "this replica already holds") {
					t.Errorf("a stream past the replica's bound: HTTP %d %v", resp.StatusCode, body)
				}
				mu.Lock()
				refused++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range streams {
			s.Close()
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	if len(streams) != maxStreams || refused != readers-maxStreams {
		t.Fatalf("%d streams open and %d refused, want %d and %d", len(streams), refused, maxStreams, readers-maxStreams)
	}
	var worst time.Duration
	for range 10 {
		worst = max(worst, realCall(t, c.httpURL))
	}
	held := c.load(t)

	// Each follow-up's echo goes to every stream; a few fill what a
	// reader that never reads will take, and each stream's writer blocks.
	big := strings.Repeat("x", chunk)
	start := time.Now()
	for i := range followUps {
		m := rpcCall(t, c.httpURL, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"f%d","taskId":%q,"parts":[{"kind":"text","text":%q}]}}}`, i, id, big))
		if m["result"] == nil {
			t.Fatalf("follow-up %d: %v", i, m)
		}
	}
	followedUp := time.Since(start)
	blocked := c.load(t)
	for range 5 {
		worst = max(worst, realCall(t, c.httpURL))
	}
	// Not one byte is read until the write deadline has passed: reading
	// sooner would unblock the writers.
	time.Sleep(writeDeadline + 3*time.Second)
	if open := cutWithin(streams, 10*time.Second); open > 0 {
		t.Fatalf("%d of %d stalled streams still open %s after their writes blocked", open, len(streams), writeDeadline+3*time.Second)
	}
	time.Sleep(time.Second)
	after := c.load(t)
	t.Logf("chio up before: %s", before)
	t.Logf("holding %d stalled streams (%d refused): %s; RSS %+d KiB, %.1f KiB a stream", len(streams), refused, held, held.rss-before.rss,
		float64(held.rss-before.rss)/float64(len(streams)))
	t.Logf("their writers blocked on %d KiB of follow-ups (sent in %s): %s", followUps*chunk>>10, followedUp.Round(time.Millisecond), blocked)
	t.Logf("after the write deadline cut them: %s; slowest of 15 real calls meanwhile %s", after, worst.Round(time.Millisecond))
	if after.goroutines > before.goroutines+50 {
		t.Errorf("%d goroutines after every stream was cut, %d before", after.goroutines, before.goroutines)
	}
	if growth := blocked.rss - before.rss; growth > maxStreams*512 {
		t.Errorf("%d blocked streams grew RSS by %d KiB (more than 512 KiB each)", maxStreams, growth)
	}
	// The slots are back: a new subscription is served.
	conn, err := smallBufferDialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a subscription after the stalled ones were cut: %v %v", resp, err)
	}
}
