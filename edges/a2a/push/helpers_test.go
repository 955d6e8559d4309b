package push

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natstest"
)

// fakeDNS answers A and AAAA queries from a table, through a
// net.Resolver whose Dial returns one end of an in-memory pipe: no
// network, no internet. Unknown names are NXDOMAIN.
type fakeDNS struct {
	mu    sync.Mutex
	hosts map[string][]netip.Addr
}

func newFakeDNS() *fakeDNS { return &fakeDNS{hosts: make(map[string][]netip.Addr)} }

// set makes name resolve to addrs (replacing what it resolved to).
func (f *fakeDNS) set(name string, addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hosts[strings.ToLower(name)] = nil
	for _, a := range addrs {
		f.hosts[strings.ToLower(name)] = append(f.hosts[strings.ToLower(name)], netip.MustParseAddr(a))
	}
}

func (f *fakeDNS) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go f.serve(server)
		return client, nil
	}}
}

// serve answers queries framed as over TCP (a 2-byte length first): the
// Go resolver frames them so on a connection that is not a PacketConn.
func (f *fakeDNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		resp := f.answer(q)
		if resp == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

func (f *fakeDNS) answer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	// Question: labels, then type and class.
	var labels []string
	i := 12
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	i++ // the root label
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i:])
	question := q[12 : i+4]
	name := strings.ToLower(strings.Join(labels, "."))

	f.mu.Lock()
	addrs, known := f.hosts[name]
	f.mu.Unlock()
	var answers [][]byte
	for _, a := range addrs {
		switch {
		case qtype == 1 && a.Is4():
			b := a.As4()
			answers = append(answers, b[:])
		case qtype == 28 && a.Is6():
			b := a.As16()
			answers = append(answers, b[:])
		}
	}
	flags := uint16(0x8580) // response, authoritative, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	}
	resp := append([]byte{}, q[0], q[1])
	resp = binary.BigEndian.AppendUint16(resp, flags)
	resp = binary.BigEndian.AppendUint16(resp, 1)
	resp = binary.BigEndian.AppendUint16(resp, uint16(len(answers)))
	resp = binary.BigEndian.AppendUint16(resp, 0)
	resp = binary.BigEndian.AppendUint16(resp, 0)
	resp = append(resp, question...)
	for _, rd := range answers {
		resp = append(resp, 0xc0, 12) // the name: a pointer to the question's
		resp = binary.BigEndian.AppendUint16(resp, qtype)
		resp = binary.BigEndian.AppendUint16(resp, 1) // IN
		resp = binary.BigEndian.AppendUint32(resp, 60)
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(rd)))
		resp = append(resp, rd...)
	}
	return resp
}

// hit is one request a receiver got.
type hit struct {
	header http.Header
	body   string
}

// receiver is a webhook: it records every request and answers with the
// status its respond function picks (200 when nil); respond gets the
// 1-based request count and may set response headers. conns counts the
// TCP connections it accepted, so a test can check that nothing connected.
type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	hits  []hit
	conns atomic.Int64
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter) int) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.hits = append(rc.hits, hit{header: r.Header.Clone(), body: string(body)})
		n := len(rc.hits)
		rc.mu.Unlock()
		status := http.StatusOK
		if respond != nil {
			status = respond(n, w)
		}
		w.WriteHeader(status)
	}))
	rc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rc.conns.Add(1)
		}
	}
	rc.Start()
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) got() []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hit(nil), rc.hits...)
}

// bodies counts the requests by body.
func (rc *receiver) bodies() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := make(map[string]int)
	for _, h := range rc.hits {
		m[h.body]++
	}
	return m
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.hits)
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, what, 30*time.Second, cond)
}

func waitForWithin(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outboxEmpty reports whether the outbox stream holds no message (every
// notification acknowledged or terminated).
func outboxEmpty(t *testing.T, js jetstream.JetStream) bool {
	t.Helper()
	s, err := js.Stream(t.Context(), OutboxStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs == 0
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// slogTo logs (at debug level) to b, guarded by mu.
func slogTo(mu *sync.Mutex, b *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{mu, b}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// env is a NATS server with a store, for one test.
type env struct {
	js    jetstream.JetStream
	store *Store
	start func() jetstream.JetStream // another connection to the same server
}

func newEnv(t *testing.T, opts ...StoreOption) *env {
	t.Helper()
	ns, _, js := natstest.Start(t)
	s, err := OpenStore(t.Context(), js, append([]StoreOption{WithStoreLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{js: js, store: s, start: func() jetstream.JetStream {
		_, js := natstest.Connect(t, ns)
		return js
	}}
}

// fast are outbox options for tests: short backoff and timeout.
func fast(t *testing.T, more ...OutboxOption) []OutboxOption {
	return append([]OutboxOption{
		WithBackoff(5*time.Millisecond, 20*time.Millisecond),
		WithTimeout(5 * time.Second),
		WithOutboxLogger(testLogger(t)),
	}, more...)
}

// run starts o.Run until the test ends and checks that it returned nil.
func run(t *testing.T, o *Outbox) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return")
		}
	})
}
