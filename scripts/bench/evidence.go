package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/chio-ledger/chio/ledger/evidence"
	"github.com/chio-ledger/chio/schemas"
)

// evidenceProfileEnv names a directory for a CPU profile of each export
// and verify (the child's), for runs that look into what bounds them.
const evidenceProfileEnv = "CHIO_BENCH_EVIDENCE_CPUPROFILE"

// evidenceStep is what one package size measured.
type evidenceStep struct {
	size      uint64
	build     time.Duration
	export    *evidenceResult
	verify    *evidenceResult
	ledgerCPU time.Duration // this process (the ledger's API and store) during the export
	disk      int64         // the whole package
	files     map[string]int64
}

// runEvidence grows one real log through the sizes and, at each, exports
// an evidence package of every receipt from the ledger's HTTP API and
// verifies it offline, each in a child process of its own so that its
// peak memory is its own.
func runEvidence(ctx context.Context, env *Env) (*Section, error) {
	sizes := pick(env, []uint64{500, 2_000}, []uint64{10_000, 100_000})
	batch := pick(env, 500, 8192)
	cores := runtime.GOMAXPROCS(0)
	profileDir := os.Getenv(evidenceProfileEnv)

	l, err := openProofsLog(filepath.Join(env.Dir, "log"), batch)
	if err != nil {
		return nil, err
	}
	defer l.close()
	srv, err := serveProofs(l, 2)
	if err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.close(sctx)
	}()
	kernelKey := schemas.EncodePublicKey(l.kernel.Public().(ed25519.PublicKey))

	var steps []*evidenceStep
	for _, size := range sizes {
		env.Logf("evidence: growing the log %d → %d receipts", l.size(), size)
		t0 := time.Now()
		if err := l.grow(ctx, size); err != nil {
			return nil, err
		}
		st := &evidenceStep{size: size, build: time.Since(t0)}
		if _, err := proofsSettle(ctx, pick(env, 2*time.Second, time.Minute)); err != nil {
			return nil, err
		}
		dir := filepath.Join(env.Dir, fmt.Sprintf("package-%d", size))
		profile := func(what string) string {
			if profileDir == "" {
				return ""
			}
			return filepath.Join(profileDir, fmt.Sprintf("evidence-%s-%d.pprof", what, size))
		}

		cpu0 := proofsCPU()
		st.export, err = runEvidenceChild(ctx, evidenceJob{Mode: "export", Base: srv.base, Token: srv.token, Dir: dir, Profile: profile("export")})
		st.ledgerCPU = proofsCPU() - cpu0
		if err != nil {
			return nil, err
		}
		if st.export.Receipts != size || st.export.TreeSize != size {
			return nil, fmt.Errorf("evidence: the export of a log of %d receipts holds %d at tree size %d", size, st.export.Receipts, st.export.TreeSize)
		}
		if st.disk, err = proofsDiskUsage(dir); err != nil {
			return nil, err
		}
		st.files = map[string]int64{}
		for _, name := range []string{evidence.ReceiptsFile, evidence.ProofsFile} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				return nil, fmt.Errorf("evidence: %w", err)
			}
			st.files[name] = fi.Size()
		}
		env.Logf("evidence: exported %d receipts in %s (%s), %s on disk, peak RSS %s",
			size, st.export.Wall.Round(time.Millisecond), fmtRate(st.export.rate()), proofsFmtBytes(st.disk), evidenceFmtMiB(st.export.PeakRSS))

		st.verify, err = runEvidenceChild(ctx, evidenceJob{Mode: "verify", Dir: dir, VKey: l.vkey, KernelKey: kernelKey, Profile: profile("verify")})
		if err != nil {
			return nil, err
		}
		if st.verify.Receipts != size || st.verify.TreeSize != size {
			return nil, fmt.Errorf("evidence: verify of a package of %d receipts counted %d at tree size %d", size, st.verify.Receipts, st.verify.TreeSize)
		}
		env.Logf("evidence: verified %d receipts in %s (%s), peak RSS %s",
			size, st.verify.Wall.Round(time.Millisecond), fmtRate(st.verify.rate()), evidenceFmtMiB(st.verify.PeakRSS))
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("evidence: %w", err)
		}
		steps = append(steps, st)
	}

	edVerify, err := evidenceEd25519Verify(l)
	if err != nil {
		return nil, err
	}
	leafLen := 0
	if e, err := l.store.Entry(0); err == nil {
		leafLen = len(e)
	}
	settings := []string{
		fmt.Sprintf("The log is built as in section 4 (ledger/logstore with real signed chio.receipt.v1 leaves of about %d bytes, one in four a denial, 64 capabilities; each batch of %d with its checkpoint signed as the ledger signs it) and served by ledger/api (api.NewServer) on a loopback listener in this process, under the service token. It grows through the sizes; each size is exported and verified once, then the package is deleted.", leafLen, batch),
		"Export: evidence.Export of every receipt (no filter, page size 0 → 200, as `chio evidence export` with its defaults), run in a child process (this binary re-executed) with a net/http client as the CLI builds it: it reads /v1/log/keys, /log/checkpoint, then /v1/receipts/query page by page and one GET /v1/receipts/{id}/inclusion-proof?tree_size=N per receipt, in sequence. The ledger alone serves no capability lineage (no projections), so capability-lineage.ndjson is empty, as query.json says.",
		"Verify: evidence.Verify of the package against the pinned log and kernel keys (manifest hashes, checkpoint signature, every receipt's signature and parameter hash with its inclusion proof, log order, query.json), in a child process of its own. The export's counts and the verify's must both equal the log size, or the run fails.",
		fmt.Sprintf("Memory is the child's alone (the ledger, its Pebble store and the HTTP server stay in this process): peak RSS is VmHWM from /proc/self/status at the end; peak Go heap is the largest HeapInuse (runtime/metrics heap objects + unused spans: live objects and garbage not yet collected) sampled every 5 ms, and in brackets the largest live heap (/gc/heap/live:bytes, what the last GC marked) sampled with it; default GOGC, no GOMEMLIMIT; allocated is the child's cumulative heap allocation. RSS at start is the child's VmRSS before the work: the runtime and this binary, which links every peer of the harness. Time and CPU are measured inside the child around the call; they share the %d cores with the ledger.", cores),
	}
	if profileDir != "" {
		settings = append(settings, fmt.Sprintf("CPU profiles of each export and verify written to %s.", profileDir))
	}
	sec := &Section{Settings: settings, Tables: []Table{
		{
			Caption: "Export: every receipt of the log from the ledger's HTTP API into a package",
			Header:  []string{"receipts", "wall time", "receipts/s", "peak RSS (at start)", "peak Go heap (live)", "allocated per receipt", "exporter CPU per receipt", "ledger CPU per receipt", "package on disk", "bytes per receipt"},
		},
		{
			Caption: "Verify: the package offline against the pinned keys",
			Header:  []string{"receipts", "wall time", "receipts/s", "peak RSS (at start)", "peak Go heap (live)", "allocated per receipt", "CPU per receipt"},
		},
	}}
	for _, st := range steps {
		e, v, n := st.export, st.verify, time.Duration(st.size)
		sec.Tables[0].Rows = append(sec.Tables[0].Rows, []string{
			proofsFmtSize(st.size), e.Wall.Round(time.Millisecond).String(), fmtRate(e.rate()),
			fmt.Sprintf("%s (%s)", evidenceFmtMiB(e.PeakRSS), evidenceFmtMiB(e.StartRSS)), fmt.Sprintf("%s (%s)", evidenceFmtMiB(e.PeakHeap), evidenceFmtMiB(e.PeakLive)),
			evidenceFmtPerReceipt(e.Allocated, st.size), fmtDur(e.CPU / n), fmtDur(st.ledgerCPU / n),
			proofsFmtBytes(st.disk), fmt.Sprintf("%.0f", float64(st.disk)/float64(st.size)),
		})
		sec.Tables[1].Rows = append(sec.Tables[1].Rows, []string{
			proofsFmtSize(st.size), v.Wall.Round(time.Millisecond).String(), fmtRate(v.rate()),
			fmt.Sprintf("%s (%s)", evidenceFmtMiB(v.PeakRSS), evidenceFmtMiB(v.StartRSS)), fmt.Sprintf("%s (%s)", evidenceFmtMiB(v.PeakHeap), evidenceFmtMiB(v.PeakLive)),
			evidenceFmtPerReceipt(v.Allocated, st.size), fmtDur(v.CPU / n),
		})
	}
	sec.Findings = evidenceFindings(steps, leafLen, edVerify)
	return sec, nil
}

// evidenceFindings judges the growth of memory with the package size,
// what a package costs on disk per receipt, and what bounds each rate.
func evidenceFindings(steps []*evidenceStep, leafLen int, edVerify time.Duration) []string {
	first, last := steps[0], steps[len(steps)-1]
	var out []string
	growth := float64(last.size) / float64(first.size)
	// Memory that grew with N would rise by (growth-1)× its first value;
	// call it flat when the rise is under a tenth of that.
	flat := func(a, b uint64) string {
		r := float64(b) / float64(a)
		if float64(b)-float64(a) < 0.1*float64(a)*(growth-1) {
			return fmt.Sprintf("%.2f×: flat", r)
		}
		return fmt.Sprintf("%.2f×: it grows", r)
	}
	mem := func(what string, a, b *evidenceResult) string {
		return fmt.Sprintf("%s peak RSS %s → %s (%s), peak Go heap %s → %s (%s), live heap %s → %s (%s)", what,
			evidenceFmtMiB(a.PeakRSS), evidenceFmtMiB(b.PeakRSS), flat(a.PeakRSS, b.PeakRSS),
			evidenceFmtMiB(a.PeakHeap), evidenceFmtMiB(b.PeakHeap), flat(a.PeakHeap, b.PeakHeap),
			evidenceFmtMiB(a.PeakLive), evidenceFmtMiB(b.PeakLive), flat(a.PeakLive, b.PeakLive))
	}
	out = append(out, fmt.Sprintf("Memory as the package grows %.0f× (%s → %s receipts): %s; %s. The export holds one query page (200 receipts) and the proof being fetched, the verify one line of each file, so neither grows with N; what they allocate per receipt is garbage of that receipt. A figure is called flat when it rose by less than a tenth of what memory proportional to N would add; the peaks move a little from run to run with GC timing (objects allocated while a GC marks count as live).",
		growth, proofsFmtSize(first.size), proofsFmtSize(last.size), mem("export", first.export, last.export), mem("verify", first.verify, last.verify)))

	n := float64(last.size)
	rb, pb := float64(last.files[evidence.ReceiptsFile])/n, float64(last.files[evidence.ProofsFile])/n
	out = append(out, fmt.Sprintf("On disk at %s receipts: %.0f bytes per receipt, of which %.0f the receipt line (the %d-byte leaf and its newline) and %.0f its inclusion proof line (an audit path of about log2 N hashes in hex, so this part grows with log N); the checkpoint, query.json and manifest.json are a few kB per package.",
		proofsFmtSize(last.size), float64(last.disk)/n, rb, leafLen, pb))

	ew := last.export.Wall.Seconds() / n
	ecpu, lcpu := last.export.CPU.Seconds()/n, last.ledgerCPU.Seconds()/n
	bound := "the round trips wait on something other than CPU (the loopback, the disk, or other processes on the machine)"
	if (ecpu+lcpu)/ew >= 0.8 {
		bound = "each receipt's request waits for the ledger's CPU, then the exporter's, one receipt at a time, so the export's wall time is their CPU in sequence and it keeps about one core busy; the second core would only be used by fetching proofs concurrently, which evidence.Export does not do"
	}
	out = append(out, fmt.Sprintf("Export at %s: %s of wall time per receipt; the exporter spends %s of CPU on it and the ledger %s (its share of a query page and one proof request, served by the same API as section 4), together %.0f%% of one core: %s.",
		proofsFmtSize(last.size), fmtDur(time.Duration(ew*1e9)), fmtDur(time.Duration(ecpu*1e9)), fmtDur(time.Duration(lcpu*1e9)), 100*(ecpu+lcpu)/ew, bound))

	vcpu := last.verify.CPU / time.Duration(last.size)
	out = append(out, fmt.Sprintf("Verify at %s: %s of CPU per receipt, on one core (evidence.Verify checks line after line); %.1f× one receipt check by itself (schemas.Receipt.Verify: validation, JCS of the body, Ed25519, parameter hash; %s here, measured by this section). The rest is ledger/verify's parse of the receipt and proof, the package's own form checks (JCS again), the leaf hash and audit path, and the checkpoint note's signature, which evidence.Verify hands to ledger/verify with every line, so it is verified once per receipt.",
		proofsFmtSize(last.size), fmtDur(vcpu), float64(vcpu)/float64(edVerify), fmtDur(edVerify)))
	return out
}

// evidenceEd25519Verify times one Ed25519 verification of a receipt of the
// log (its body's signature) on this machine: the unit verify pays.
func evidenceEd25519Verify(l *proofsLog) (time.Duration, error) {
	leaf, err := l.store.Entry(0)
	if err != nil {
		return 0, fmt.Errorf("evidence: leaf 0: %w", err)
	}
	r, err := schemas.ParseReceipt(leaf)
	if err != nil {
		return 0, fmt.Errorf("evidence: leaf 0: %w", err)
	}
	t0 := time.Now()
	n := 0
	for time.Since(t0) < 200*time.Millisecond {
		if err := r.Verify(); err != nil {
			return 0, fmt.Errorf("evidence: leaf 0: %w", err)
		}
		n++
	}
	return time.Since(t0) / time.Duration(n), nil
}

func evidenceFmtMiB(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func evidenceFmtPerReceipt(b, n uint64) string {
	v := float64(b) / float64(n)
	if v >= 1e4 {
		return fmt.Sprintf("%.1f kB", v/1e3)
	}
	return fmt.Sprintf("%.0f B", v)
}
