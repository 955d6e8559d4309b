package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

// Environment knobs of the proofs section, for runs the flags do not
// cover: a size cap (to stop short of 10⁷ on a small disk or a short time
// budget) and a directory for a CPU profile of each load step.
const (
	proofsMaxEnv     = "CHIO_BENCH_PROOFS_MAX"
	proofsProfileEnv = "CHIO_BENCH_PROOFS_CPUPROFILE"
)

// proofsTargetSize and proofsTargetP99 are the target: proof p99 under
// 2 ms at 10⁷ leaves.
const (
	proofsTargetSize = 10_000_000
	proofsTargetP99  = 2 * time.Millisecond
)

// runProofs grows one real log through the sizes and, at each, measures
// inclusion proofs served by the ledger's own HTTP API.
func runProofs(ctx context.Context, env *Env) (*Section, error) {
	sizes := pick(env, []uint64{1_000, 10_000}, []uint64{10_000, 100_000, 1_000_000, proofsTargetSize})
	var settings []string
	if v := os.Getenv(proofsMaxEnv); v != "" {
		limit, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("proofs: %s=%q: %w", proofsMaxEnv, v, err)
		}
		var kept []uint64
		for _, s := range sizes {
			if s <= limit {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			return nil, fmt.Errorf("proofs: %s=%d leaves no size to measure", proofsMaxEnv, limit)
		}
		sizes = kept
		settings = append(settings, fmt.Sprintf("Sizes capped by %s=%d: this run stops at %s leaves.", proofsMaxEnv, limit, proofsFmtSize(sizes[len(sizes)-1])))
	}
	profileDir := os.Getenv(proofsProfileEnv)
	cores := runtime.GOMAXPROCS(0)
	workers := 2 * cores
	requests := pick(env, 300, 3000)
	span := pick(env, 300*time.Millisecond, 2*time.Second)
	batch := pick(env, 500, 8192)

	dir := filepath.Join(env.Dir, "log")
	l, err := openProofsLog(dir, batch)
	if err != nil {
		return nil, err
	}
	defer l.close()
	srv, err := serveProofs(l, workers)
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.close(sctx)
	}()

	var steps []*proofsStep
	perLeaf := 3000.0 // bytes on disk per leaf until measured; a generous first guess
	for _, size := range sizes {
		from := l.size()
		need := perLeaf * float64(size-from) * 1.25
		free, err := proofsFreeSpace(env.Dir)
		if err != nil {
			return nil, fmt.Errorf("proofs: %w", err)
		}
		if need > float64(free) {
			return nil, fmt.Errorf("proofs: growing the log to %d leaves needs about %.1f GB, the disk has %.1f GB free (set %s to stop earlier)", size, need/1e9, float64(free)/1e9, proofsMaxEnv)
		}
		env.Logf("proofs: growing the log %d → %d leaves", from, size)
		t0 := time.Now()
		if err := l.grow(ctx, size); err != nil {
			return nil, err
		}
		st := &proofsStep{size: size, build: time.Since(t0), built: size - from}
		if st.disk, err = proofsDiskUsage(dir); err != nil {
			return nil, err
		}
		perLeaf = float64(st.disk) / float64(size)
		if st.settle, err = proofsSettle(ctx, pick(env, 2*time.Second, 3*time.Minute)); err != nil {
			return nil, err
		}
		env.Logf("proofs: built %d leaves in %s (%s), %s on disk, settled in %s", st.built, st.build.Round(time.Millisecond), fmtRate(float64(st.built)/st.build.Seconds()), proofsFmtBytes(st.disk), st.settle.Round(100*time.Millisecond))
		profile := ""
		if profileDir != "" {
			profile = filepath.Join(profileDir, fmt.Sprintf("proofs-%d.pprof", size))
		}
		if err := srv.measure(ctx, st, requests, workers, span, profile); err != nil {
			return nil, err
		}
		env.Logf("proofs: %s leaves: p50 %s p99 %s (c=1), %s at c=%d p99 %s", proofsFmtSize(size), fmtDur(st.c1.Pct(0.5)), fmtDur(st.c1.Pct(0.99)),
			fmtRate(float64(len(st.load))/st.loadTook.Seconds()), workers, fmtDur(st.load.Pct(0.99)))
		steps = append(steps, st)
	}

	leafLen := 0
	if len(l.ids) > 0 {
		if e, err := l.store.Entry(0); err == nil {
			leafLen = len(e)
		}
	}
	settings = append(settings,
		fmt.Sprintf("The log is built with ledger/logstore directly (logstore.Open with its own Pebble options; Begin/Append/Commit in batches of %d), each batch's checkpoint signed as the ledger signs it (C2SP note with a note signer, plus a chio.checkpoint_statement.v1). Building through JetStream would take hours at 10⁷ leaves and would measure ingest (section 2), not proof serving.", batch),
		fmt.Sprintf("Leaves are real signed chio.receipt.v1 records (schemas.SignReceiptLeaf, UUIDv7 ids, about %d bytes each, one in four a denial), signed on %d goroutines one batch ahead of the writer.", leafLen, cores),
		fmt.Sprintf("Proofs: GET /v1/receipts/{id}/inclusion-proof from ledger/api (api.NewServer, Echo) on a loopback listener in this process, with a keep-alive net/http client also in this process (they share the %d cores), every request under the service token (Authorization: Bearer; receipts and proofs are private). Ids are drawn uniformly over the whole log.", cores),
		fmt.Sprintf("c=1: %d sequential requests; load: %d goroutines for %s after a 100 ms warm-up; measuring starts once the process is idle after a step (under 10%% of a core for 500 ms, at most %s), so Pebble's compactions of the step are not timed as proof latency; percentiles by nearest rank; CPU per proof is the process's CPU time (server and client) during the load step over its requests.", requests, workers, span, pick(env, 2*time.Second, 3*time.Minute)),
		"Every size: a sample of served proofs (one in every requests/32) is checked with ledger/verify (receipt signature, checkpoint signature by the log key, leaf hash, audit path to the checkpoint root) and must be for the leaf asked in the tree of the size served; any failure or non-200 fails the run.",
	)
	if profileDir != "" {
		settings = append(settings, fmt.Sprintf("CPU profiles of each load step written to %s.", profileDir))
	}
	sec := &Section{Settings: settings, Tables: []Table{{
		Caption: "Inclusion proofs over HTTP as the log grows",
		Header: []string{"log size", "build step", "build rate", "on disk", fmt.Sprintf("proofs/s (c=%d)", workers),
			"p50 (c=1)", "p99 (c=1)", "p99 under load", "CPU per proof", "proof length (hashes)"},
	}}}
	for _, st := range steps {
		sec.Tables[0].Rows = append(sec.Tables[0].Rows, []string{
			proofsFmtSize(st.size), st.build.Round(time.Millisecond).String(), fmtRate(float64(st.built) / st.build.Seconds()), proofsFmtBytes(st.disk),
			fmtRate(float64(len(st.load)) / st.loadTook.Seconds()), fmtDur(st.c1.Pct(0.5)), fmtDur(st.c1.Pct(0.99)), fmtDur(st.load.Pct(0.99)),
			fmtDur(st.cpuPerProof()), proofsFmtRange(st.pathMin, st.pathMax),
		})
	}
	sec.Findings = proofsFindings(steps, cores, workers, requests, span, env.Short)
	return sec, nil
}

// proofsSettle waits until the process has been idle (under 10% of a core
// for 500 ms): after a build step Pebble flushes and compacts in the
// background, which would otherwise be timed as proof latency. It returns
// how long it waited; at most limit.
func proofsSettle(ctx context.Context, limit time.Duration) (time.Duration, error) {
	const window = 500 * time.Millisecond
	start := time.Now()
	for time.Since(start) < limit {
		c0 := proofsCPU()
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("proofs: wait for the store to settle: %w", ctx.Err())
		case <-time.After(window):
		}
		if proofsCPU()-c0 < window/10 {
			break
		}
	}
	return time.Since(start), nil
}

func (st *proofsStep) cpuPerProof() time.Duration {
	return time.Duration(float64(st.loadCPU) / float64(max(len(st.load), 1)))
}

func (st *proofsStep) loadRate() float64 { return float64(len(st.load)) / st.loadTook.Seconds() }

// proofsFindings judges the target and the growth from the figures, and
// estimates the full run from the measured build rate and disk use.
func proofsFindings(steps []*proofsStep, cores, workers, requests int, span time.Duration, short bool) []string {
	first, last := steps[0], steps[len(steps)-1]
	var out []string
	verdict := func(d time.Duration) string {
		if d < proofsTargetP99 {
			return "met"
		}
		return "missed"
	}
	p99, p99load := last.c1.Pct(0.99), last.load.Pct(0.99)
	if last.size >= proofsTargetSize {
		out = append(out, fmt.Sprintf("Target proof p99 < %s at 10⁷ leaves: %s (p99 %s at c=1; %s under load at c=%d).",
			fmtDur(proofsTargetP99), verdict(p99), fmtDur(p99), fmtDur(p99load), workers))
	} else {
		out = append(out, fmt.Sprintf("Target proof p99 < %s at 10⁷ leaves: not measured, this run stops at %s leaves; there it is %s (p99 %s at c=1; %s under load at c=%d).",
			fmtDur(proofsTargetP99), proofsFmtSize(last.size), verdict(p99), fmtDur(p99), fmtDur(p99load), workers))
	}
	if len(steps) > 1 {
		logRatio := math.Log2(float64(last.size)) / math.Log2(float64(first.size))
		grow := func(a, b time.Duration) string {
			r := float64(b) / float64(a)
			if r <= logRatio {
				return fmt.Sprintf("%.2f×, within", r)
			}
			return fmt.Sprintf("%.2f×, faster than", r)
		}
		out = append(out, fmt.Sprintf("Growth from %s to %s leaves: p99 at c=1 %s→%s (%s log n growth, log2 n grew %.2f×); under load %s→%s (%s); proof length %s→%s hashes.",
			proofsFmtSize(first.size), proofsFmtSize(last.size), fmtDur(first.c1.Pct(0.99)), fmtDur(p99), grow(first.c1.Pct(0.99), p99), logRatio,
			fmtDur(first.load.Pct(0.99)), fmtDur(p99load), grow(first.load.Pct(0.99), p99load),
			proofsFmtRange(first.pathMin, first.pathMax), proofsFmtRange(last.pathMin, last.pathMax)))
	}
	ceiling := float64(cores) / last.cpuPerProof().Seconds()
	bound := "throughput is bound by CPU, which the in-process client shares"
	if last.loadRate() < 0.8*ceiling {
		bound = "the cores were not kept busy: requests wait on something other than CPU (reads from disk, or other processes on the machine)"
	}
	out = append(out, fmt.Sprintf("At %s leaves one proof costs %s of CPU (server and client together), a ceiling of %s proofs on %d cores; the load step reached %s (%.0f%% of it): %s.",
		proofsFmtSize(last.size), fmtDur(last.cpuPerProof()), fmtRate(ceiling), cores, fmtRate(last.loadRate()), 100*last.loadRate()/ceiling, bound))

	// The full run's cost, from the largest step: its build rate includes
	// compactions at that size, which is what the 10⁷ step will pay.
	rate := float64(last.built) / last.build.Seconds()
	perLeaf := float64(last.disk) / float64(last.size)
	measure := time.Duration(3000)*last.c1.Pct(0.5) + 2*time.Second + 100*time.Millisecond
	build := time.Duration(float64(proofsTargetSize) / rate * float64(time.Second))
	out = append(out, fmt.Sprintf("Build: %s leaves in the last step, %.0f bytes on disk per leaf. A full run (to 10⁷ leaves) needs about %s of building and %.1f GB of disk, plus about %s of measuring per size%s.",
		fmtRate(rate), perLeaf, build.Round(time.Minute), perLeaf*proofsTargetSize/1e9, measure.Round(100*time.Millisecond), proofsShortNote(short)))
	return out
}

func proofsShortNote(short bool) string {
	if short {
		return " (extrapolated from a short run's small log: compaction at 10⁷ makes the real build slower)"
	}
	return ""
}

// proofsFmtSize writes powers of ten as 10ⁿ.
func proofsFmtSize(n uint64) string {
	sup := []rune("⁰¹²³⁴⁵⁶⁷⁸⁹")
	for e, p := 0, uint64(1); e < 20; e, p = e+1, p*10 {
		if p == n {
			if e < 10 {
				return "10" + string(sup[e])
			}
			return "10" + string(sup[e/10]) + string(sup[e%10])
		}
	}
	return strconv.FormatUint(n, 10)
}

func proofsFmtBytes(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	default:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	}
}

func proofsFmtRange(lo, hi int) string {
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}
