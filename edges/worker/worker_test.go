package worker

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// edge is a dispatcher whose registry holds the servers Discover found.
type edge struct {
	js    jetstream.JetStream
	reg   *tools.Registry
	d     *dispatch.Dispatcher
	token string
}

// startWorker serves servers on a connection of its own (closed when the
// test ends, or earlier to kill the worker).
func startWorker(t testing.TB, ns *natsembed.Server, servers ...tools.Server) (*Worker, *nats.Conn) {
	t.Helper()
	nc, _ := natstest.Connect(t, ns)
	w, err := Serve(nc, servers, WithWorkerLogger(quiet()), WithManifestKey(workerKey()))
	if err != nil {
		t.Fatal(err)
	}
	return w, nc
}

// newEdge discovers the workers running on ns and builds a dispatcher
// over them, with a capability granting every tool of server.
func newEdge(t testing.TB, ns *natsembed.Server, js jetstream.JetStream, server string, opts ...Option) *edge {
	t.Helper()
	nc, _ := natstest.Connect(t, ns)
	remotes, err := Discover(context.Background(), nc, append([]Option{WithLogger(quiet()), trusted()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	for _, r := range remotes {
		if err := reg.Register(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := reg.Tool(server, hello.ToolName); !ok && server == hello.ServerID {
		t.Fatalf("discovery found %d servers, not %s", len(remotes), server)
	}
	return edgeOver(t, js, reg, server)
}

// edgeOver is a dispatcher over reg with a capability granting every tool
// of server.
func edgeOver(t testing.TB, js jetstream.JetStream, reg *tools.Registry, server string) *edge {
	t.Helper()
	ctx := context.Background()
	issuer := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agent := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	policy, err := kernel.NewPolicy(kernel.Policy{TrustedIssuers: []string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(ctx, js, policy, kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	d, err := dispatch.New(ctx, js, k, reg, "edge-worker-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: "cap-worker", Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject:  schemas.EncodePublicKey(agent.Public().(ed25519.PublicKey)),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: server, ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix()),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return &edge{js: js, reg: reg, d: d, token: h}
}

func (e *edge) call(t testing.TB, server, tool string, i int) *dispatch.Result {
	res, err := e.d.Do(context.Background(), dispatch.Call{Token: e.token, ServerID: server, ToolName: tool,
		Arguments: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	if err != nil {
		t.Errorf("call %d: no receipt: %v", i, err)
		return nil
	}
	if !res.Decision.Allow {
		t.Errorf("call %d denied: %s", i, res.Decision.Reason)
	}
	return res
}

// load runs n calls from workers goroutines; after the after-th result,
// it runs mid once (nil: never).
func (e *edge) load(t *testing.T, n, workers, after int, mid func()) []*dispatch.Result {
	t.Helper()
	out := make([]*dispatch.Result, n)
	var next, done atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				out[i] = e.call(t, hello.ServerID, hello.ToolName, i)
				if int(done.Add(1)) == after && mid != nil {
					once.Do(mid)
				}
			}
		})
	}
	wg.Wait()
	return out
}

// TestKillWorkerUnderLoad: two workers of the demo tools share an edge's
// calls; one dies abruptly mid-load and no receipt is lost: every call has
// its durable decision, and every call has an outcome event except those
// cut off on the dead worker, which end incomplete (no outcome, the
// ledger's timeout closes them). Calls fail, fast and with a reason, only
// while no worker is up.
func TestKillWorkerUnderLoad(t *testing.T) {
	ns, _, js := natstest.Start(t)
	a, ncA := startWorker(t, ns, hello.New())
	b, _ := startWorker(t, ns, hello.New())
	// A cut-off call ends when this runs out: bounded, not asserted on.
	e := newEdge(t, ns, js, hello.ServerID, WithCallTimeout(2*time.Second))

	// Both replicas take a share of the load.
	for i, res := range e.load(t, 100, 8, 0, nil) {
		if res != nil && res.Outcome != schemas.OutcomeCompleted {
			t.Fatalf("call %d with both workers up: %s %v", i, res.Outcome, res.ToolErr)
		}
	}
	servedA, servedB := a.Served(), b.Served()
	t.Logf("load spread over two workers: %d and %d of 100 calls", servedA, servedB)
	if servedA == 0 || servedB == 0 || servedA+servedB != 100 {
		t.Fatalf("served %d and %d of 100 calls, want both > 0", servedA, servedB)
	}

	// Kill A abruptly after 50 of 200 more calls: its connection closes
	// without draining, as if the process died.
	results := e.load(t, 200, 8, 50, ncA.Close)
	var completed, cut int
	for i, res := range results {
		switch {
		case res == nil:
		case res.Outcome == schemas.OutcomeCompleted:
			completed++
		case errors.Is(res.ToolErr, tools.ErrOutcomeUnknown):
			cut++
		default:
			t.Errorf("call %d while a worker was up: %q %v", i, res.Outcome, res.ToolErr)
		}
	}
	t.Logf("after the kill: %d completed, %d cut off (incomplete); worker B served %d in all", completed, cut, b.Served())
	if b.Served() <= servedB {
		t.Fatal("the surviving worker served nothing after the kill")
	}

	// Both down: calls fail at once, without running, with the reason.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	down := e.call(t, hello.ServerID, hello.ToolName, 1000)
	if down == nil || down.Outcome != schemas.OutcomeFailed || !errors.Is(down.ToolErr, ErrNoWorker) {
		t.Fatalf("with no worker up: %+v", down)
	}

	// One back: calls succeed again, on it.
	c, _ := startWorker(t, ns, hello.New())
	up := e.call(t, hello.ServerID, hello.ToolName, 1001)
	if up == nil || up.Outcome != schemas.OutcomeCompleted || c.Served() != 1 {
		t.Fatalf("with a worker back: %+v (served %d)", up, c.Served())
	}

	// The record: a decision for every call, an outcome for every call
	// but those cut off.
	decisions, outcomes := natstest.Decisions(t, js), natstest.Outcomes(t, js)
	all := append(results, down, up)
	for i, res := range all {
		if res == nil {
			continue
		}
		if _, ok := decisions[res.ReceiptID]; !ok {
			t.Errorf("call %d (%s): no decision event", i, res.ReceiptID)
		}
		o, ok := outcomes[res.ReceiptID]
		if cutOff := errors.Is(res.ToolErr, tools.ErrOutcomeUnknown); ok == cutOff {
			t.Errorf("call %d (%s): cut off %v, outcome event %v", i, res.ReceiptID, cutOff, ok)
		} else if ok && o.Outcome != res.Outcome {
			t.Errorf("call %d: outcome event %s, result %s", i, o.Outcome, res.Outcome)
		}
	}
	if o := outcomes[down.ReceiptID]; !strings.Contains(o.Reason, "no worker serves") {
		t.Errorf("the failed call's reason is %q", o.Reason)
	}
}
