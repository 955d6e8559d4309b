package main

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// TestLedgerSides runs each side once on the same receipts and checks that
// every entry was integrated under a signed checkpoint of size N (the runs
// verify the checkpoints themselves) and that every entry has a latency.
// BENCH_LEDGER_N sets N (default 500) to try sizes by hand.
func TestLedgerSides(t *testing.T) {
	n := 500
	if v, err := strconv.Atoi(os.Getenv("BENCH_LEDGER_N")); err == nil {
		n = v
	}
	quietTessera()
	b := newLedgerBench(&Env{Short: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	evs, err := buildEvents(n, testEdge(t))
	if err != nil {
		t.Fatal(err)
	}
	shape := loadShape{window: min(n, 16384), workers: 64}
	var entries [][]byte
	for s := range 3 {
		r, leaves, err := b.runSide(ctx, t.TempDir(), s, evs, entries, n, shape, s == 0)
		if err != nil {
			t.Fatalf("%s: %v", sideName(s), err)
		}
		if s == 0 {
			if len(leaves) != n {
				t.Fatalf("ours kept %d leaves, want %d", len(leaves), n)
			}
			entries = leaves
		}
		if len(r.lat) != n || r.rate() <= 0 {
			t.Fatalf("%s: %d latencies for %d entries, rate %v", sideName(s), len(r.lat), n, r.rate())
		}
		if r.lat.Pct(0) < 0 {
			t.Fatalf("%s: negative time to integrate", sideName(s))
		}
		t.Logf("%s: %s, p50 %s p99 %s, %s", sideName(s), fmtRate(r.rate()), fmtDur(r.lat.Pct(0.5)), fmtDur(r.lat.Pct(0.99)), r.note)
	}
}

// TestLedgerOursOnly runs only our side (for profiling with -cpuprofile,
// or tracing with -trace). BENCH_LEDGER_SIGNED=1: with edge-signed writes;
// BENCH_LEDGER_RATE=N: offered at N receipts/s instead of saturating.
func TestLedgerOursOnly(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("BENCH_LEDGER_OURS"))
	if err != nil {
		t.Skip("set BENCH_LEDGER_OURS to the number of receipts")
	}
	b := newLedgerBench(&Env{Short: true})
	edge := testEdge(t)
	evs, err := buildEvents(n, edge)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("BENCH_LEDGER_SIGNED") == "1" { // every write edge-signed and checked
		b.ours.signer = edge
	}
	shape := loadShape{window: min(n, 16384), workers: 64}
	if v := os.Getenv("BENCH_LEDGER_RATE"); v != "" {
		if shape.rate, err = strconv.ParseFloat(v, 64); err != nil {
			t.Fatalf("BENCH_LEDGER_RATE: %v", err)
		}
	}
	r, _, err := b.runSide(context.Background(), t.TempDir(), 0, evs, nil, n, shape, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ours: %s, p50 %s p99 %s, %s", fmtRate(r.rate()), fmtDur(r.lat.Pct(0.5)), fmtDur(r.lat.Pct(0.99)), r.note)
}

// TestLedgerBacklogOnly runs our ledger over a pre-published backlog (for
// profiling the ledger alone with -cpuprofile).
func TestLedgerBacklogOnly(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("BENCH_LEDGER_BACKLOG"))
	if err != nil {
		t.Skip("set BENCH_LEDGER_BACKLOG to the number of receipts")
	}
	evs, err := buildEvents(n, testEdge(t))
	if err != nil {
		t.Fatal(err)
	}
	r, err := runOursBacklog(context.Background(), t.TempDir(), evs, n, newLedgerBench(&Env{Short: true}).ours)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ours from a backlog: %s, %s", fmtRate(r.rate()), r.note)
}

// testEdge is the ledger section's certified edge, for a test.
func testEdge(t *testing.T) *schemas.EdgeSigner {
	t.Helper()
	s, err := benchEdge()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
