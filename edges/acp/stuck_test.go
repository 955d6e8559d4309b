package acp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/acp/internal/linewriter"
)

// TestStdioStuckEditor: an editor that sends requests and never reads an
// answer (a real pipe nobody reads, its buffer filled by the answers) does
// not hold ServeStdio: it returns within the write timeout, saying so,
// rather than waiting forever on answers nobody takes.
func TestStdioStuckEditor(t *testing.T) {
	const timeout = 300 * time.Millisecond
	f := start(t, WithWriteTimeout(timeout))
	var in bytes.Buffer
	// Unknown-method errors: each answer ~100 bytes, 4000 of them far
	// more than a pipe holds.
	for i := range 4000 {
		fmt.Fprintf(&in, `{"jsonrpc":"2.0","id":%d,"method":"no/such/method"}`+"\n", i)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- f.edge.ServeStdio(context.Background(), wildcard(t), &in, w) }()
	select {
	case err := <-done:
		if !errors.Is(err, linewriter.ErrStuck) {
			t.Fatalf("ServeStdio: %v, want the stuck editor's error", err)
		}
		t.Logf("ServeStdio returned after %s with nobody reading", time.Since(start))
	case <-time.After(timeout + 20*time.Second): // a bound, not a measurement: without the deadline it never returns
		t.Fatal("ServeStdio is blocked on an editor that does not read")
	}
}
