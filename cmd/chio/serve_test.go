package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/health"
)

// stopCase is one way a serve loop is asked to stop, and the reason its
// readiness probe must then give.
type stopCase struct {
	name   string
	stop   func(t *testing.T) (context.Context, func())
	reason string
}

// SIGTERM (a real one, caught as main catches it) and a plain cancel (chio
// up's parts, tests): readiness goes false at once with the reason, and
// every answer closes its connection; requests are still served for the
// drain delay; then the listener closes, while the request in flight and
// the drains finish, and only then does serve return.
func TestServeStopsInOrder(t *testing.T) {
	cases := []stopCase{
		{"SIGTERM", func(t *testing.T) (context.Context, func()) {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
			t.Cleanup(stop)
			return ctx, func() {
				if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
		}, "stopping: SIGTERM received"},
		{"cancel", func(*testing.T) (context.Context, func()) {
			ctx, cancel := context.WithCancel(context.Background())
			return ctx, cancel
		}, "stopping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { serveStops(t, c) })
	}
}

func serveStops(t *testing.T, c stopCase) {
	ctx, stop := c.stop(t)
	const delay = 3 * time.Second
	ctx = withDrainDelay(ctx, delay)
	release := make(chan struct{})
	inFlight := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+health.ReadyPath, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(health.Response{Status: health.StatusOK})
	})
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") })
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		close(inFlight)
		<-release
		_, _ = io.WriteString(w, "slow done")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	drained := make(chan time.Time, 1)
	served := make(chan error, 1)
	go func() {
		served <- serveHandler(ctx, mux, ln, 20*time.Second, func(context.Context) error {
			drained <- time.Now()
			return nil
		})
	}()
	get := func(path string) (*http.Response, string, error) {
		resp, err := http.Get(base + path)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, string(b), err
	}
	if resp, _, err := get(health.ReadyPath); err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("ready before stopping: %v %v", resp, err)
	}
	slow := make(chan string, 1)
	go func() {
		_, body, err := get("/slow")
		if err != nil {
			body = err.Error()
		}
		slow <- body
	}()
	<-inFlight

	stopAt := time.Now()
	stop()
	// Readiness goes false at once (the probe is retried only until the
	// stop has been seen, which is not a timing assertion).
	var body health.Response
	for {
		resp, raw, err := get(health.ReadyPath)
		if err != nil {
			t.Fatalf("readyz while stopping: %v", err)
		}
		if resp.StatusCode == http.StatusOK {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("readyz while stopping: %d %v %s", resp.StatusCode, resp.Header, raw)
		}
		if err := json.Unmarshal([]byte(raw), &body); err != nil {
			t.Fatal(err)
		}
		break
	}
	if body.Status != health.StatusUnavailable || body.Checks[drainCheck] != c.reason || len(body.Checks) != 1 {
		t.Fatalf("readyz body %+v, want %s: %q", body, drainCheck, c.reason)
	}
	// Still serving, each answer closing its connection.
	resp, hello, err := get("/hello")
	if err != nil || resp.StatusCode != http.StatusOK || hello != "hello" || !resp.Close {
		t.Fatalf("a request while unready: %v %q %v", resp, hello, err)
	}
	select {
	case at := <-drained:
		t.Fatalf("the drains started %s after the stop, inside the %s delay", at.Sub(stopAt), delay)
	case err := <-served:
		t.Fatalf("serve returned (%v) inside the drain delay", err)
	default:
	}
	drainAt := <-drained
	if drainAt.Sub(stopAt) < delay {
		t.Fatalf("the drains started %s after the stop, before the %s delay", drainAt.Sub(stopAt), delay)
	}
	// The listener is closed: a new connection is refused (a proxy retries
	// that elsewhere; it never reached this process) ...
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if errors.Is(err, syscall.ECONNRESET) {
			// Handshaken in the kernel's queue just as the listener
			// closed: reset, never served. Look again.
			if time.Now().After(deadline) {
				t.Fatal("connections still reset, not refused, long after the drain delay")
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial after the delay: %v, want connection refused", err)
			}
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after the drain delay")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ... while the request in flight is still served, and serve waits.
	select {
	case err := <-served:
		t.Fatalf("serve returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if got := <-slow; got != "slow done" {
		t.Fatalf("the request in flight got %q", got)
	}
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
}
