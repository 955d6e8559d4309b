package kernel

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
)

// histogramCounts reads a histogram family's sample counts by its one label.
func histogramCounts(t *testing.T, reg *prometheus.Registry, name string) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return out
}

func TestMetricsTimeGuardsAndDecisions(t *testing.T) {
	e := startNATS(t)
	reg := tools.NewRegistry()
	if err := reg.Register(hello.New()); err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	k := newKernel(t, e, testPolicy(t, nil), WithRegistry(reg), WithMetrics(metrics))
	good := header(t, issue(t, issuerKey, body("cap-good", grant("hello-a2a-srv", "hello_task"))))

	cases := []struct {
		name  string
		token string
		args  string
		allow bool
	}{
		{"allowed: every guard runs", good, `{"text":"world"}`, true},
		{"denied by a guard: the guards before it ran", good, `{"path":"../../etc/passwd"}`, false},
		{"denied before the guards: none ran", "%%%not-a-token", `{}`, false},
	}
	for _, c := range cases {
		if d := k.Decide(context.Background(), req(c.token, "hello-a2a-srv", "hello_task", c.args)); d.Allow != c.allow {
			t.Fatalf("%s: allow %v (%s: %s)", c.name, d.Allow, d.Guard, d.Reason)
		}
	}
	if got := histogramCounts(t, metrics, "chio_kernel_decision_duration_seconds"); got["allow"] != 1 || got["deny"] != 2 {
		t.Fatalf("decisions timed: %v", got)
	}
	guards := histogramCounts(t, metrics, "chio_guard_duration_seconds")
	if len(guards) != len(k.pipeline) {
		t.Fatalf("guards timed: %v, pipeline of %d", guards, len(k.pipeline))
	}
	if guards[guardPath] != 2 {
		t.Fatalf("%s ran %d times, want 2 (the allow, and its own deny): %v", guardPath, guards[guardPath], guards)
	}
	if err := k.Ready(); err != nil {
		t.Fatalf("a fresh kernel is not ready: %v", err)
	}
}

// With NATS gone the revocation watch is lost (the auditor finds the
// bucket unreachable): the kernel denies everything, so it is not ready.
func TestNotReadyWithoutRevocationWatch(t *testing.T) {
	e := startNATS(t)
	k := newKernel(t, e, testPolicy(t, nil))
	e.ns.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for k.Ready() == nil {
		if time.Now().After(deadline) {
			t.Fatal("still ready with NATS stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
