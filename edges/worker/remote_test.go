package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// scripted is the hello server with a behaviour chosen per test: fail
// with err, or block until released, reporting each call that starts.
type scripted struct {
	*hello.Server
	err     error
	started chan string
	release chan struct{}
	stopped chan error // the cause of each call stopped before its release
}

func (s *scripted) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.started != nil {
		runCtx, finish, err := s.Start(ctx, inv.ID)
		if err != nil {
			return nil, err
		}
		defer finish()
		s.started <- inv.ID
		select {
		case <-s.release:
		case <-runCtx.Done():
			s.stopped <- context.Cause(runCtx)
			return nil, context.Cause(runCtx)
		}
	}
	return s.Server.Invoke(ctx, inv)
}

func gated() *scripted {
	return &scripted{Server: hello.New(), started: make(chan string, 1), release: make(chan struct{}), stopped: make(chan error, 1)}
}

// TestCutOffMidCall: the worker running a call dies before answering;
// the call's decision is durable, it has no outcome event, and the
// dispatcher reports the outcome unknown: the ledger closes it incomplete.
func TestCutOffMidCall(t *testing.T) {
	ns, _, js := natstest.Start(t)
	gate := gated()
	t.Cleanup(func() { close(gate.release) })
	_, nc := startWorker(t, ns, gate)
	// The cut-off call ends when this runs out.
	e := newEdge(t, ns, js, hello.ServerID, WithCallTimeout(time.Second))

	done := make(chan *dispatch.Result, 1)
	go func() { done <- e.call(t, hello.ServerID, hello.ToolName, 1) }()
	<-gate.started
	nc.Close() // the worker dies with the call running
	res := <-done
	if res == nil || !errors.Is(res.ToolErr, tools.ErrOutcomeUnknown) {
		t.Fatalf("cut-off call: %+v", res)
	}
	if _, ok := natstest.Decisions(t, js)[res.ReceiptID]; !ok {
		t.Fatal("no decision event")
	}
	if o, ok := natstest.Outcomes(t, js)[res.ReceiptID]; ok {
		t.Fatalf("a cut-off call has an outcome event: %+v", o)
	}
}

// TestErrorsToOutcomes: what a worker answers becomes the outcome the
// dispatcher records.
func TestErrorsToOutcomes(t *testing.T) {
	cases := []struct {
		name    string
		server  *scripted
		outcome schemas.Outcome
		is      error
		reason  string
	}{
		{"completed", &scripted{Server: hello.New()}, schemas.OutcomeCompleted, nil, ""},
		{"tool error", &scripted{Server: hello.New(), err: errors.New("backend\nunavailable")}, schemas.OutcomeFailed, ErrRemoteTool, "backend unavailable"},
		{"tool cut off", &scripted{Server: hello.New(), err: tools.ErrOutcomeUnknown}, "", tools.ErrOutcomeUnknown, ""},
		{"tool cancelled", &scripted{Server: hello.New(), err: tools.ErrCanceled}, schemas.OutcomeCancelled, tools.ErrCanceled, "cancelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, _, js := natstest.Start(t)
			startWorker(t, ns, tc.server)
			e := newEdge(t, ns, js, hello.ServerID)
			res := e.call(t, hello.ServerID, hello.ToolName, 1)
			if res == nil {
				return
			}
			if res.Outcome != tc.outcome || tc.is != nil && !errors.Is(res.ToolErr, tc.is) || tc.is == nil && res.ToolErr != nil {
				t.Fatalf("outcome %q, err %v; want %q, %v", res.Outcome, res.ToolErr, tc.outcome, tc.is)
			}
			o, ok := natstest.Outcomes(t, js)[res.ReceiptID]
			if ok != (tc.outcome != "") {
				t.Fatalf("outcome event %v, want %v", ok, tc.outcome != "")
			}
			if !strings.Contains(o.Reason, tc.reason) {
				t.Fatalf("reason %q, want it to say %q", o.Reason, tc.reason)
			}
		})
	}
}

// TestRefusedUnrun: a replica serving another manifest, or a request for a
// tool it does not have, refuses the call without running it.
func TestRefusedUnrun(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	w, _ := startWorker(t, ns, hello.New())
	nc, _ := natstest.Connect(t, ns)
	ctx := context.Background()
	remotes, err := Discover(ctx, nc, WithLogger(quiet()), trusted())
	if err != nil || len(remotes) != 1 {
		t.Fatalf("discover: %v, %d servers", err, len(remotes))
	}
	other := remotes[0].Manifest()
	other.Version = "9.9.9"
	stale, err := NewRemote(nc, other, trusted())
	if err != nil {
		t.Fatal(err)
	}
	_, err = stale.Invoke(ctx, tools.Invocation{ID: "r1", ServerID: hello.ServerID, ToolName: hello.ToolName, Arguments: json.RawMessage(`{}`)})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "serves manifest") {
		t.Fatalf("another manifest: %v", err)
	}
	if _, err := remotes[0].Invoke(ctx, tools.Invocation{ID: "r2", ToolName: "nope"}); !errors.Is(err, tools.ErrUnknownTool) {
		t.Fatalf("unknown tool: %v", err)
	}
	if w.Served() != 0 {
		t.Fatalf("the worker ran %d refused calls", w.Served())
	}
}

// TestStreamAndCancel: a streamed call's chunks come back in order, and
// Cancel reaches the replica running the call.
func TestStreamAndCancel(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	gate := gated()
	startWorker(t, ns, gate)
	nc, _ := natstest.Connect(t, ns)
	ctx := context.Background()
	remotes, err := Discover(ctx, nc, WithLogger(quiet()), trusted())
	if err != nil || len(remotes) != 1 {
		t.Fatalf("discover: %v, %d servers", err, len(remotes))
	}
	r := remotes[0]

	var chunks []tools.Chunk
	err = r.InvokeStream(ctx, tools.Invocation{ID: "s1", ToolName: hello.ToolName, Arguments: json.RawMessage(`{"text":"you"}`)},
		func(c tools.Chunk) error { chunks = append(chunks, c); return nil })
	if err != nil || len(chunks) != 2 || !chunks[1].Last || !strings.Contains(string(chunks[0].Data), "hello from a2a, you") {
		t.Fatalf("stream: %v, %+v", err, chunks)
	}

	done := make(chan error, 1)
	go func() {
		_, err := r.Invoke(ctx, tools.Invocation{ID: "c1", ToolName: hello.ToolName, Arguments: json.RawMessage(`{}`)})
		done <- err
	}()
	<-gate.started
	if err := r.Cancel(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	// Cancelled after it was sent: whether the tool acted is not known here.
	if err := <-done; !errors.Is(err, tools.ErrOutcomeUnknown) || !errors.Is(err, tools.ErrCanceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	// The worker's tool stopped too.
	if cause := <-gate.stopped; !errors.Is(cause, tools.ErrCanceled) {
		t.Fatalf("the tool stopped with %v", cause)
	}
	if err := r.Cancel(ctx, "c1"); !errors.Is(err, tools.ErrNotRunning) {
		t.Fatalf("cancel of a finished call: %v", err)
	}
}

// TestRegisterLateWorker: a tool server whose worker starts after the edge
// is registered by the next discovery; one already registered is skipped.
func TestRegisterLateWorker(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	nc, _ := natstest.Connect(t, ns)
	ctx := context.Background()
	reg := tools.NewRegistry()
	added, _, err := Register(ctx, nc, reg, WithLogger(quiet()), trusted())
	if err != nil || len(added) != 0 {
		t.Fatalf("no worker: %v, %d", err, len(added))
	}
	startWorker(t, ns, hello.New())
	startWorker(t, ns, hello.New())
	added, _, err = Register(ctx, nc, reg, WithLogger(quiet()), trusted())
	if err != nil || len(added) != 1 {
		t.Fatalf("two replicas of one server: %v, %d registered", err, len(added))
	}
	if _, ok := reg.Tool(hello.ServerID, hello.ToolName); !ok {
		t.Fatal("not registered")
	}
	added, skipped, err := Register(ctx, nc, reg, WithLogger(quiet()), trusted())
	if err != nil || len(added) != 0 || len(skipped) != 1 {
		t.Fatalf("again: %v, added %d, skipped %v", err, len(added), skipped)
	}
}

// TestManifestHashAgrees: the hash a call names is the one the registry
// gives the manifest, which receipts name.
func TestManifestHashAgrees(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	startWorker(t, ns, hello.New())
	nc, _ := natstest.Connect(t, ns)
	reg := tools.NewRegistry()
	added, _, err := Register(context.Background(), nc, reg, WithLogger(quiet()), trusted())
	if err != nil || len(added) != 1 {
		t.Fatalf("register: %v, %d", err, len(added))
	}
	e, _ := reg.Tool(hello.ServerID, hello.ToolName)
	if e.Signed == nil || e.Signed.ManifestHash != added[0].ManifestSHA256() || e.Origin != tools.OriginWorker {
		t.Fatalf("registry %+v, origin %s; the calls name %s", e.Signed, e.Origin, added[0].ManifestSHA256())
	}
}
