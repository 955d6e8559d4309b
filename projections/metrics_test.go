package projections

import (
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// series reads the values of a metric family by its projection label.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue()
			if c := m.GetCounter(); c != nil {
				v = c.GetValue()
			}
			out[m.GetLabel()[0].GetValue()] = v
		}
	}
	return out
}

func TestMetricsCountFoldsAndLag(t *testing.T) {
	h := newHarness(t)
	for i := range 3 {
		h.decision(fmt.Sprintf("r%d", i), chain("cap-root", fmt.Sprintf("cap-%d", i))...)
	}
	for i := range 2 {
		id := fmt.Sprintf("r%d", i)
		h.receipt(id, uint64(i), receiptLeaf(t, kernelPriv, id, "cap-root", 1760000000, 0, false))
	}
	h.commit("task-1", created("ctx-1", 0))

	reg := prometheus.NewRegistry()
	r := h.start("proj", WithMetrics(reg))
	h.caughtUp(r)
	want := map[string]float64{"tasks": 1, "events": 3, "receipts": 2}
	// The counter moves just after the position a caught-up check reads.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := series(t, reg, "chio_projection_events_folded_total")
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("folded: %v, want %v", got, want)
		}
	}
	if got := series(t, reg, "chio_projection_lag"); fmt.Sprint(got) != fmt.Sprint(map[string]float64{"tasks": 0, "events": 0, "receipts": 0}) {
		t.Fatalf("lag when caught up: %v", got)
	}
	if err := r.CheckStorage(); err != nil {
		t.Fatalf("storage check of an open store: %v", err)
	}

	// Stopped, the service folds nothing more: what arrives is lag.
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	h.decision("r9", chain("cap-root")...)
	h.commit("task-2", created("ctx-2", 1))
	h.commit("task-2", created("ctx-2", 2))
	if got := series(t, reg, "chio_projection_lag"); fmt.Sprint(got) != fmt.Sprint(map[string]float64{"tasks": 2, "events": 1, "receipts": 0}) {
		t.Fatalf("lag with the service stopped: %v", got)
	}
}

func TestLagIsAbsentBeforeRun(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, err := Open(t.TempDir(), WithLogger(quiet()), WithKernelKey(kernelPriv.Public().(ed25519.PublicKey)), WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if got := series(t, reg, "chio_projection_lag"); len(got) != 0 {
		t.Fatalf("lag before Run: %v", got)
	}
}
