package worker

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natstest"
)

// BenchmarkInvoke is the cost per call of remote dispatch against an
// in-process call of the same tool: one request/reply through an embedded
// NATS server (in-process connections), a worker's decode, run and answer.
// Governance (decision and outcome on JetStream) is the same either way
// and left out.
func BenchmarkInvoke(b *testing.B) {
	ns, _, _ := natstest.Start(b)
	wnc, _ := natstest.Connect(b, ns)
	w, err := Serve(wnc, []tools.Server{hello.New()}, WithWorkerLogger(quiet()), WithManifestKey(workerKey()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Stop() })
	nc, _ := natstest.Connect(b, ns)
	remotes, err := Discover(context.Background(), nc, WithLogger(quiet()), trusted())
	if err != nil || len(remotes) != 1 {
		b.Fatalf("discover: %v, %d servers", err, len(remotes))
	}
	args := json.RawMessage(`{"text":"benchmark","n":1}`)
	for _, bc := range []struct {
		name string
		srv  tools.Server
	}{{"in-process", hello.New()}, {"worker", remotes[0]}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if _, err := bc.srv.Invoke(ctx, tools.Invocation{ID: strconv.Itoa(i), ToolName: hello.ToolName, Arguments: args}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				id := strconv.FormatInt(int64(randID()), 36) + "-"
				i := 0
				for pb.Next() {
					i++
					if _, err := bc.srv.Invoke(ctx, tools.Invocation{ID: id + strconv.Itoa(i), ToolName: hello.ToolName, Arguments: args}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkGovernedCall is a whole governed call (kernel, durable decision,
// the tool, durable outcome) with the tool in-process against on a worker:
// what remote dispatch adds to what every call already pays.
func BenchmarkGovernedCall(b *testing.B) {
	for _, remote := range []bool{false, true} {
		name := "in-process"
		if remote {
			name = "worker"
		}
		b.Run(name, func(b *testing.B) {
			ns, _, js := natstest.Start(b)
			var e *edge
			if remote {
				startWorker(b, ns, hello.New())
				e = newEdge(b, ns, js, hello.ServerID)
			} else {
				reg := tools.NewRegistry()
				if err := reg.Register(hello.New()); err != nil {
					b.Fatal(err)
				}
				e = edgeOver(b, js, reg, hello.ServerID)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if res := e.call(b, hello.ServerID, hello.ToolName, 1); res == nil || res.Outcome != "completed" {
						b.Fatalf("call: %+v", res)
					}
				}
			})
		})
	}
}
