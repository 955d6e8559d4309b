package ledger

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/schemas"
)

// gauge reads one unlabelled gauge from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestCheckpointAgeIsComputedAtScrape(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	t0 := time.Unix(1760000000, 0)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func(c *config) { c.now = func() time.Time { return time.Unix(0, now.Load()) } }
	reg := prometheus.NewRegistry()
	run := h.start(store, WithMetrics(reg), clock)

	if age := gauge(t, reg, "chio_ledger_checkpoint_age_seconds"); age != 0 {
		t.Fatalf("age of an empty log: %v, want 0", age)
	}
	h.publishCalls([]call{newCall(schemas.VerdictDeny, "")}, uint64(t0.Unix()))
	waitSize(t, store, 1)
	cases := []struct {
		advance time.Duration
		want    float64
	}{{0, 0}, {90 * time.Second, 90}, {time.Hour, 3690}}
	for _, c := range cases {
		now.Add(int64(c.advance))
		if age := gauge(t, reg, "chio_ledger_checkpoint_age_seconds"); age != c.want {
			t.Fatalf("after %s more: age %v, want %v", c.advance, age, c.want)
		}
	}
	// A new checkpoint starts the age over; so does reading it back after
	// a restart, from the stored statement.
	h.publishCalls([]call{newCall(schemas.VerdictDeny, "")}, uint64(t0.Unix()))
	waitSize(t, store, 2)
	if age := gauge(t, reg, "chio_ledger_checkpoint_age_seconds"); age != 0 {
		t.Fatalf("after a new checkpoint: age %v, want 0", age)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	now.Add(int64(time.Minute))
	reg2 := prometheus.NewRegistry()
	h.start(store, WithMetrics(reg2), clock)
	if age := gauge(t, reg2, "chio_ledger_checkpoint_age_seconds"); age != 60 {
		t.Fatalf("after a restart: age %v, want 60", age)
	}
}
