package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/compress/s2"
)

// Section 9: capacity. One `chio up` takes a fixed closed-loop A2A load
// until it has answered N calls; the harness samples its RSS all along,
// waits until the ledger has signed every receipt and the projections
// have folded every stream, samples RSS while it idles, stops it cleanly
// and counts the bytes each store holds: what one governed call costs on
// disk and what memory the process settles at.

// capacityCallsEnv overrides the number of calls of a full run.
const capacityCallsEnv = "CHIO_BENCH_CAPACITY_CALLS"

// capacityRetentionEnv, a duration, runs chio up with that event and task
// retention (--event-retention, --task-retention): what the streams hold
// once retention applies.
const capacityRetentionEnv = "CHIO_BENCH_CAPACITY_RETENTION"

// capacityStores are the stores a data directory is split into, in the
// order the table lists them.
var capacityStores = []string{"CHIO_EVENTS", "CHIO_TASKS", "CHIO_RECEIPTS", "Pebble log", "projections", "other streams and KV", "other"}

// storeOf names the store a file of chio up's data directory belongs to.
func storeOf(rel string) string {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	switch {
	case len(parts) > 1 && parts[0] == "log":
		return "Pebble log"
	case len(parts) > 1 && parts[0] == "projections":
		return "projections"
	case len(parts) > 5 && parts[0] == "nats" && parts[3] == "streams":
		switch parts[4] {
		case "CHIO_EVENTS", "CHIO_TASKS", "CHIO_RECEIPTS":
			return parts[4]
		}
		return "other streams and KV"
	}
	return "other"
}

// diskUsage is the bytes of a data directory's files per store: apparent
// (the files' sizes) and allocated (blocks on disk). s2 is, for the
// streams' message blocks, their size S2-compressed block by block, as a
// stream with compression s2 stores a block once it is full: an estimate
// of what stream compression would save.
func diskUsage(dir string) (apparent, allocated, s2est map[string]int64, err error) {
	apparent, allocated, s2est = map[string]int64{}, map[string]int64{}, map[string]int64{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		s := storeOf(rel)
		if s == "Pebble log" || s == "projections" {
			// Which of a Pebble store's files hold the bytes: tables
			// (compressed, compacted), the write-ahead log (raw, and
			// recycled files keep their size), the rest.
			kind := "other"
			switch filepath.Ext(path) {
			case ".sst":
				kind = "sst"
			case ".log":
				kind = "WAL"
			}
			apparent[s+" "+kind] += fi.Size()
		}
		apparent[s] += fi.Size()
		allocated[s] += allocatedBytes(fi)
		if strings.HasSuffix(path, ".blk") && strings.Contains(filepath.ToSlash(rel), "/msgs/") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			s2est[s] += int64(len(s2.Encode(nil, b)))
		} else {
			s2est[s] += fi.Size()
		}
		return nil
	})
	return apparent, allocated, s2est, err
}

// allocatedBytes is the disk space a file's blocks take (Linux).
func allocatedBytes(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// rssSample is the process's resident memory at one moment.
type rssSample struct {
	at    time.Duration
	calls int // calls answered so far
	rss   int64
}

// procStatusKB reads one "Name: N kB" field of /proc/<pid>/status in bytes.
func procStatusKB(pid int, field string) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// projectionLag sums chio_projection_lag over the projections from
// /metrics; ok is false until every projection reports one.
func projectionLag(ctx context.Context, base string) (lag float64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := lagLine.FindStringSubmatch(sc.Text()); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			lag += v
			n++
		}
	}
	return lag, n == 3
}

var lagLine = regexp.MustCompile(`^chio_projection_lag\{projection="\w+"\} (\S+)$`)

// waitProjections waits until the projections have folded every stream.
func waitProjections(ctx context.Context, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if lag, ok := projectionLag(ctx, base); ok && lag == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("projections not caught up after %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// meanReceiptBytes is the mean size of the first receipts of the log as
// the ledger serves them (the leaves' bytes), read with the operator
// token chio up wrote.
func meanReceiptBytes(ctx context.Context, base, dataDir string) (float64, error) {
	tok, err := os.ReadFile(filepath.Join(dataDir, "operator.token"))
	if err != nil {
		return 0, fmt.Errorf("operator token: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/receipts/query?limit=200", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("query receipts: %w", err)
	}
	defer resp.Body.Close()
	var q struct {
		Receipts []json.RawMessage `json:"receipts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || len(q.Receipts) == 0 {
		return 0, fmt.Errorf("query receipts: %d receipts (%v)", len(q.Receipts), err)
	}
	total := 0
	for _, r := range q.Receipts {
		total += len(r)
	}
	return float64(total) / float64(len(q.Receipts)), nil
}

func capacityCalls(env *Env) (int, error) {
	if env.Short {
		return 300, nil
	}
	if v := os.Getenv(capacityCallsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			return 0, fmt.Errorf("%s=%q: want a number of calls ≥ 1000", capacityCallsEnv, v)
		}
		return n, nil
	}
	return 100_000, nil
}

func fmtMiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func runCapacity(ctx context.Context, env *Env) (*Section, error) {
	bin, err := env.Chio(ctx)
	if err != nil {
		return nil, err
	}
	calls, err := capacityCalls(env)
	if err != nil {
		return nil, err
	}
	const conc = 16
	chunk := pick(env, 300*time.Millisecond, 5*time.Second)
	idle := pick(env, 500*time.Millisecond, 30*time.Second)
	every := pick(env, 100*time.Millisecond, time.Second)
	name := "chio-up-capacity"
	data := filepath.Join(env.Dir, name)
	var retention []string
	shipped := "as shipped"
	if v := os.Getenv(capacityRetentionEnv); v != "" {
		if _, err := time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("%s: %w", capacityRetentionEnv, err)
		}
		retention = []string{"--event-retention", v, "--task-retention", v}
		shipped = "with `--event-retention " + v + " --task-retention " + v + "` (" + capacityRetentionEnv + ")"
	}
	up, err := startChioUpAs(ctx, env, bin, name, nil, retention...)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	pid := up.cmd.Process.Pid
	if err := waitHTTP(ctx, up.base+"/log/checkpoint", 60*time.Second); err != nil {
		return nil, err
	}
	logged, err := logSize(ctx, up.base)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	var (
		mu      sync.Mutex
		done    int
		failed  int
		samples = []rssSample{{0, 0, procStatusKB(pid, "VmRSS")}}
	)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
				mu.Lock()
				samples = append(samples, rssSample{time.Since(began), done, procStatusKB(pid, "VmRSS")})
				mu.Unlock()
			}
		}
	}()
	cpu0 := cpuTime(pid)
	for done < calls {
		res, err := closedLoop(ctx, up.target, conc, 0, chunk)
		if err != nil {
			stopSampling()
			return nil, err
		}
		// A call that failed (a timeout on a machine shared with other
		// work) is counted, not fatal: its receipt may still be signed,
		// and the stores are measured against the log's size.
		if res.OK == 0 && res.Errors > 0 {
			stopSampling()
			return nil, fmt.Errorf("capacity load: every call failed: %w", res.Err())
		}
		failed += res.Errors
		mu.Lock()
		done += res.OK
		mu.Unlock()
		if err := up.alive(); err != nil {
			stopSampling()
			return nil, err
		}
		env.Logf("capacity: %d/%d calls, RSS %s", done, calls, fmtMiB(procStatusKB(pid, "VmRSS")))
	}
	loadTime := time.Since(began)
	// Failed calls may or may not have reached the log: at least the
	// answered ones must.
	if _, err := waitLogSize(ctx, up.base, logged+done, pick(env, 30*time.Second, 10*time.Minute)); err != nil {
		stopSampling()
		return nil, fmt.Errorf("capacity: receipts of the load: %w\n%s", err, up.tail())
	}
	if err := waitProjections(ctx, up.base, pick(env, 30*time.Second, 10*time.Minute)); err != nil {
		stopSampling()
		return nil, fmt.Errorf("capacity: %w\n%s", err, up.tail())
	}
	drained := time.Since(began)
	cpu := cpuTime(pid) - cpu0
	receipts, err := logSize(ctx, up.base)
	if err != nil {
		stopSampling()
		return nil, err
	}
	receiptBytes, err := meanReceiptBytes(ctx, up.base, data)
	if err != nil {
		stopSampling()
		return nil, err
	}
	select {
	case <-ctx.Done():
		stopSampling()
		return nil, ctx.Err()
	case <-time.After(idle):
	}
	stopSampling()
	<-sampled
	idleRSS, peakRSS := procStatusKB(pid, "VmRSS"), procStatusKB(pid, "VmHWM")
	runningApp, _, _, err := diskUsage(data)
	if err != nil {
		return nil, err
	}
	up.stop()
	app, alloc, s2est, err := diskUsage(data)
	if err != nil {
		return nil, err
	}

	sec := &Section{
		Settings: []string{
			fmt.Sprintf("Machine: %d logical CPUs, shared with the load generator (and whatever else runs): rates and CPU are noisy, bytes and RSS much less so.", runtime.NumCPU()),
			"`chio up --listen 127.0.0.1:0 --nats-listen none` " + shipped + ", fresh data directory; request: A2A 1.0 JSON-RPC `SendMessage` to `hello_task` as in section 3, the dev capability as bearer token, every guard on.",
			fmt.Sprintf("Load: closed loop, %d clients, in chunks of %s until %d calls were answered; then the harness waits until the ledger has signed every receipt and the projections' lag (chio_projection_lag on /metrics) is 0 on all three streams, idles %s, and stops chio up with SIGTERM (a clean stop).", conc, chunk, calls, idle),
			fmt.Sprintf("RSS: VmRSS of the chio up process from /proc every %s; peak is VmHWM. Bytes on disk: the sizes of the data directory's files after the clean stop (apparent size; allocated blocks in brackets), split by path: nats/jetstream/$G/streams/<stream> (its message blocks, index and consumer state), log/ (the ledger's Pebble store: leaves, tiles, checkpoints, indexes), projections/ (the projections' Pebble store).", every),
			"Receipt size: the mean length of the first 200 receipts as GET /v1/receipts/query serves them (the log leaves' bytes).",
		},
	}
	perReceipt := func(b int64) string { return fmt.Sprintf("%.0f", float64(b)/float64(max(receipts, 1))) }
	t := Table{
		Caption: fmt.Sprintf("Bytes on disk per receipt after %d calls (%d receipts in the log, mean receipt %.0f bytes)", done, receipts, receiptBytes),
		Header:  []string{"store", "bytes per receipt", "× receipt", "total (allocated)", "bytes per receipt, message blocks S2-compressed"},
	}
	var total, totalAlloc, totalS2 int64
	for _, s := range capacityStores {
		total += app[s]
		totalAlloc += alloc[s]
		totalS2 += s2est[s]
		t.Rows = append(t.Rows, []string{s, perReceipt(app[s]), fmt.Sprintf("%.2f×", float64(app[s])/float64(max(receipts, 1))/receiptBytes),
			fmtMiB(app[s]) + " (" + fmtMiB(alloc[s]) + ")", perReceipt(s2est[s])})
	}
	var runningTotal int64
	for _, v := range runningApp {
		runningTotal += v
	}
	t.Rows = append(t.Rows, []string{"all", perReceipt(total), fmt.Sprintf("%.2f×", float64(total)/float64(max(receipts, 1))/receiptBytes),
		fmtMiB(total) + " (" + fmtMiB(totalAlloc) + ")", perReceipt(totalS2)})
	m := Table{
		Caption: "RSS of chio up over the run",
		Header:  []string{"time", "calls answered", "RSS"},
	}
	// About a dozen rows whatever the run's length: the first sample, the
	// last, and evenly spaced ones between.
	step := max(len(samples)/12, 1)
	for i, s := range samples {
		if i%step == 0 || i == len(samples)-1 {
			m.Rows = append(m.Rows, []string{fmtDur(s.at.Round(time.Millisecond)), strconv.Itoa(s.calls), fmtMiB(s.rss)})
		}
	}
	m.Rows = append(m.Rows, []string{"idle, " + fmtDur(idle) + " after the drain", strconv.Itoa(done), fmtMiB(idleRSS)},
		[]string{"peak (VmHWM)", strconv.Itoa(done), fmtMiB(peakRSS)})
	sec.Tables = []Table{t, m}
	sec.Findings = append(sec.Findings,
		fmt.Sprintf("Load: %d calls answered (%d failed) in %s (%s), every receipt signed and folded %s after the start; chio up used %s of CPU per receipt (ledger and projections included).",
			done, failed, loadTime.Round(time.Second), fmtRate(float64(done)/loadTime.Seconds()), drained.Round(time.Second), fmtCPU(cpu, receipts)),
		fmt.Sprintf("Disk: %s bytes per receipt in all, %.1f× the receipt's own %.0f bytes; while running (before the clean stop) the data directory held %s.",
			perReceipt(total), float64(total)/float64(max(receipts, 1))/receiptBytes, receiptBytes, fmtMiB(runningTotal)),
		fmt.Sprintf("Memory: RSS %s at start, %s peak, %s idle after the drain.", fmtMiB(samples[0].rss), fmtMiB(peakRSS), fmtMiB(idleRSS)))
	for _, s := range []string{"Pebble log", "projections"} {
		sec.Findings = append(sec.Findings, fmt.Sprintf("%s per receipt: tables %s, write-ahead log %s, other files %s.", s,
			perReceipt(app[s+" sst"]), perReceipt(app[s+" WAL"]), perReceipt(app[s+" other"])))
	}
	return sec, nil
}
