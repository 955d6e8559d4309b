package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// shaped is the hello server answering size bytes (in one output, or in
// chunks of 64 KiB), with a description that can change after Serve.
type shaped struct {
	*hello.Server
	size    int
	changed atomic.Bool
	ran     atomic.Int64
}

func (s *shaped) Manifest() *schemas.ToolManifest {
	m := s.Server.Manifest()
	if s.changed.Load() {
		m.Tools[0].Description += " (redefined upstream)"
	}
	return m
}

func (s *shaped) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	s.ran.Add(1)
	if s.size == 0 {
		return s.Server.Invoke(ctx, inv)
	}
	return json.Marshal(strings.Repeat("x", s.size))
}

func (s *shaped) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	s.ran.Add(1)
	piece, _ := json.Marshal(strings.Repeat("x", 64<<10))
	for sent := 0; sent < s.size; sent += 64 << 10 {
		if err := emit(tools.Chunk{Data: piece}); err != nil {
			return err
		}
	}
	return emit(tools.Chunk{Data: piece, Last: true})
}

// TestAnswerLimitsAndRedefinedTools: an answer over the NATS max_payload
// (one output, or gathered chunks) is answered at once with an error the
// edge reads as a bad answer, not left to time out; a call to a tool
// redefined upstream since Serve is refused without running.
func TestAnswerLimitsAndRedefinedTools(t *testing.T) {
	cases := []struct {
		name    string
		size    int
		stream  bool
		changed bool
		is      error
		ran     int64
	}{
		{"fits", 0, false, false, nil, 1},
		{"output over max_payload", 2 << 20, false, false, ErrBadAnswer, 1},
		{"chunks over max_payload", 2 << 20, true, false, ErrBadAnswer, 1},
		{"tool redefined upstream", 0, false, true, ErrRefused, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, _, _ := natstest.Start(t)
			srv := &shaped{Server: hello.New(), size: tc.size}
			startWorker(t, ns, srv)
			nc, _ := natstest.Connect(t, ns)
			// Answered at once: a missing answer would end in
			// ErrOutcomeUnknown at this timeout instead.
			remotes, err := Discover(context.Background(), nc, WithLogger(quiet()), trusted(),
				WithCallTimeout(time.Minute), WithMaxAnswerBytes(16<<20))
			if err != nil || len(remotes) != 1 {
				t.Fatalf("discover: %v, %d", err, len(remotes))
			}
			srv.changed.Store(tc.changed)
			inv := tools.Invocation{ID: "l1", ToolName: hello.ToolName, Arguments: json.RawMessage(`{"text":"x","n":1}`)}
			if tc.stream {
				err = remotes[0].InvokeStream(context.Background(), inv, func(tools.Chunk) error { return nil })
			} else {
				_, err = remotes[0].Invoke(context.Background(), inv)
			}
			if tc.is == nil && err != nil || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err %v, want %v", err, tc.is)
			}
			if got := srv.ran.Load(); got != tc.ran {
				t.Fatalf("the tool ran %d times, want %d", got, tc.ran)
			}
		})
	}
}

// TestStopBounded: Stop waits for a running call at most the drain
// timeout, then cancels it; once stopping, no call runs.
func TestStopBounded(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	gate := gated()
	t.Cleanup(func() { close(gate.release) })
	wnc, _ := natstest.Connect(t, ns)
	w, err := Serve(wnc, []tools.Server{gate}, WithWorkerLogger(quiet()), WithManifestKey(workerKey()),
		WithDrainTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := natstest.Connect(t, ns)
	remotes, err := Discover(context.Background(), nc, WithLogger(quiet()), trusted())
	if err != nil || len(remotes) != 1 {
		t.Fatalf("discover: %v, %d", err, len(remotes))
	}
	done := make(chan error, 1)
	go func() {
		_, err := remotes[0].Invoke(context.Background(), tools.Invocation{ID: "s1", ToolName: hello.ToolName, Arguments: json.RawMessage(`{}`)})
		done <- err
	}()
	<-gate.started
	// The gate is never released before Stop: Stop returns only because
	// the drain is bounded.
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	<-gate.stopped
	if err := <-done; err == nil || errors.Is(err, ErrNoWorker) {
		t.Fatalf("the call cut off by Stop: %v", err)
	}
	if w.admit() {
		t.Fatal("a stopped worker admits calls")
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestFollowTakesChangedManifest: a tool redefined upstream after Serve
// is refused unrun until the edge's Follow takes the new manifest, then
// runs under it.
func TestFollowTakesChangedManifest(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	srv := &shaped{Server: hello.New()}
	startWorker(t, ns, srv)
	nc, _ := natstest.Connect(t, ns)
	reg := tools.NewRegistry()
	opts := []Option{WithLogger(quiet()), trusted()}
	added, _, err := Register(context.Background(), nc, reg, opts...)
	if err != nil || len(added) != 1 {
		t.Fatalf("register: %v, %d", err, len(added))
	}
	before := added[0].ManifestSHA256()
	srv.changed.Store(true)
	inv := tools.Invocation{ID: "f1", ToolName: hello.ToolName, Arguments: json.RawMessage(`{"text":"x","n":1}`)}
	if _, err := added[0].Invoke(context.Background(), inv); !errors.Is(err, ErrRefused) {
		t.Fatalf("a call under the old manifest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Follow(ctx, nc, reg, 20*time.Millisecond, opts...)
	var e *tools.Entry
	for range 500 { // bounded polling
		if e, _ = reg.Tool(hello.ServerID, hello.ToolName); e.Signed.ManifestHash != before {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e.Signed.ManifestHash == before || !strings.Contains(e.Tool.Description, "redefined upstream") {
		t.Fatalf("the registry still holds manifest %s (%q)", e.Signed.ManifestHash, e.Tool.Description)
	}
	inv.ID = "f2"
	if _, err := e.Server.Invoke(context.Background(), inv); err != nil {
		t.Fatalf("a call under the new manifest: %v", err)
	}
	if srv.ran.Load() != 1 {
		t.Fatalf("the tool ran %d times, want 1", srv.ran.Load())
	}
}
