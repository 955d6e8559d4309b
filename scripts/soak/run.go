package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mccutchen/go-httpbin/v2/httpbin"
)

// upstreamSpec is the API behind chio up's OpenAPI bridge: one read of
// httpbin, which MCP lists and calls.
const upstreamSpec = `openapi: 3.0.3
info:
  title: httpbin
  version: "2"
paths:
  /get:
    get:
      operationId: httpGet
      summary: Echo the request
      parameters:
        - name: q
          in: query
          schema:
            type: string
      responses:
        '200':
          description: the echo
          content:
            application/json:
              schema:
                type: object
`

// sample is one CSV row: the process at the end of a window and the
// calls made during it.
type sample struct {
	at         time.Duration
	rss        int64
	goroutines float64
	fds        int
	disk       int64
	logSize    int
	ok         int // successful calls in the window
	p50, p99   time.Duration
	calls      map[string]int
	errors     map[string]int
}

// readCSV reads back the samples a run wrote, to plot them again.
func readCSV(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(rows) == 0 || !slices.Equal(rows[0], csvHeader) {
		return nil, fmt.Errorf("%s: not a soak CSV (header %v)", path, rows[:min(len(rows), 1)])
	}
	var out []sample
	for i, row := range rows[1:] {
		v := make([]float64, len(row))
		for j, cell := range row {
			if v[j], err = strconv.ParseFloat(cell, 64); err != nil {
				return nil, fmt.Errorf("%s line %d column %s: %w", path, i+2, csvHeader[j], err)
			}
		}
		s := sample{at: time.Duration(v[0] * float64(time.Second)), rss: int64(v[1]), goroutines: v[2], fds: int(v[3]), disk: int64(v[4]),
			logSize: int(v[5]), ok: int(v[6]), p50: time.Duration(v[7] * float64(time.Millisecond)), p99: time.Duration(v[8] * float64(time.Millisecond)),
			calls: map[string]int{}, errors: map[string]int{}}
		for k, su := range surfaces {
			s.calls[su], s.errors[su] = int(v[9+k]), int(v[13+k])
		}
		out = append(out, s)
	}
	return out, nil
}

var csvHeader = []string{"elapsed_s", "rss_bytes", "goroutines", "open_fds", "disk_bytes", "log_size", "calls_ok",
	"p50_ms", "p99_ms", "calls_a2a", "calls_openai", "calls_mcp", "calls_acp", "errors_a2a", "errors_openai", "errors_mcp", "errors_acp"}

func (s sample) record() []string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 3, 64) }
	row := []string{f(s.at.Seconds()), strconv.FormatInt(s.rss, 10), f(s.goroutines), strconv.Itoa(s.fds), strconv.FormatInt(s.disk, 10),
		strconv.Itoa(s.logSize), strconv.Itoa(s.ok), ms(s.p50), ms(s.p99)}
	for _, su := range surfaces {
		row = append(row, strconv.Itoa(s.calls[su]))
	}
	for _, su := range surfaces {
		row = append(row, strconv.Itoa(s.errors[su]))
	}
	return row
}

func run(ctx context.Context, o options) error {
	if o.duration <= 0 || o.every <= 0 || o.rate <= 0 || o.maxInflight < 1 {
		return errors.New("-duration, -every, -rate and -max-inflight must be positive")
	}
	dir := o.dir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	} else {
		d, err := os.MkdirTemp("", "chio-soak-")
		if err != nil {
			return err
		}
		dir = d
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	out := o.out
	if out == "" {
		d, err := os.MkdirTemp("", "chio-soak-out-")
		if err != nil {
			return err
		}
		out = d
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	bin := o.chio
	if bin == "" {
		slog.Info("building chio")
		b, err := buildChio(ctx, dir)
		if err != nil {
			return err
		}
		bin = b
	}

	// The API behind the OpenAPI bridge, in this process.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	api := &http.Server{Handler: httpbin.New(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = api.Serve(ln) }()
	defer api.Close()
	spec := filepath.Join(dir, "httpbin.yaml")
	if err := os.WriteFile(spec, []byte(upstreamSpec), 0o644); err != nil {
		return err
	}

	up, err := startChioUp(ctx, bin, dir, append([]string{"--demo", "conformance",
		"--openapi", spec, "--openapi-server-id", "httpbin", "--openapi-upstream", "http://" + ln.Addr().String()}, strings.Fields(o.upArgs)...)...)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = up.stop(30 * time.Second)
		}
	}()
	pid := up.cmd.Process.Pid
	slog.Info("chio up ready", "url", up.base, "pid", pid, "data", up.dataDir, "log", up.logPath)
	baseline, err := logSize(ctx, up.base)
	if err != nil {
		return err
	}

	rec := newRecorder()
	cl, err := newClients(ctx, up.base, up.devTok, rec)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, up.tail())
	}
	defer cl.close()

	csvf, err := os.Create(filepath.Join(out, "soak.csv"))
	if err != nil {
		return err
	}
	defer csvf.Close()
	cw := csv.NewWriter(csvf)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	scrape := &http.Client{Timeout: 10 * time.Second}
	takeSample := func(at time.Duration) (sample, error) {
		s := sample{at: at}
		var err error
		if s.rss, err = procStatusBytes(pid, "VmRSS"); err != nil {
			return s, fmt.Errorf("RSS: %w", err)
		}
		if s.fds, err = openFiles(pid); err != nil {
			return s, fmt.Errorf("open files: %w", err)
		}
		if s.goroutines, err = metricValue(ctx, scrape, up.base+"/metrics", "go_goroutines"); err != nil {
			return s, err
		}
		if s.disk, err = dirBytes(up.dataDir); err != nil {
			return s, fmt.Errorf("disk: %w", err)
		}
		if s.logSize, err = logSize(ctx, up.base); err != nil {
			return s, err
		}
		w := rec.take()
		s.ok, s.calls, s.errors = len(w.lat), w.calls, w.errors
		s.p50, s.p99 = percentile(w.lat, 0.50), percentile(w.lat, 0.99)
		return s, nil
	}

	// The load: open loop, o.rate arrivals a second, each an operation of
	// the round; an arrival beyond max-inflight is shed (and counted),
	// so a slow chio does not pile up goroutines in the harness.
	ops := mix(o.earlyCancel)
	round := schedule(ops)
	// Arrivals stop at the end; the operations in flight then run to
	// their end (each call bounded by callTimeout), so that every task
	// started is finished or cancelled and every receipt is accounted for.
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var inflight sync.WaitGroup
	sem := make(chan struct{}, o.maxInflight)
	var opErrs sync.Map // op name -> first error, for the log
	go func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
		defer tick.Stop()
		var seq uint64
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			op := ops[round[seq%uint64(len(round))]]
			seq++
			select {
			case sem <- struct{}{}:
			default:
				rec.shedOne()
				continue
			}
			inflight.Add(1)
			go func(n uint64) {
				defer inflight.Done()
				defer func() { <-sem }()
				if err := op.run(cl, ctx, n); err != nil && ctx.Err() == nil {
					if _, loaded := opErrs.LoadOrStore(op.name, err); !loaded {
						slog.Warn("first error", "op", op.name, "err", err)
					}
				}
			}(seq)
		}
	}()

	began := time.Now()
	var samples []sample
	first, err := takeSample(0)
	if err != nil {
		return err
	}
	samples = append(samples, first)
	if err := cw.Write(first.record()); err != nil {
		return err
	}
	cw.Flush()
	every := time.NewTicker(o.every)
	defer every.Stop()
	end := time.NewTimer(o.duration)
	defer end.Stop()
	var problems []string
sampling:
	for {
		select {
		case <-ctx.Done():
			problems = append(problems, "interrupted after "+time.Since(began).Round(time.Second).String())
			break sampling
		case <-end.C:
			break sampling
		case <-every.C:
		}
		if err := up.alive(); err != nil {
			return &failure{[]string{err.Error()}}
		}
		s, err := takeSample(time.Since(began))
		if err != nil {
			return err
		}
		samples = append(samples, s)
		if err := cw.Write(s.record()); err != nil {
			return err
		}
		cw.Flush()
		slog.Info("sample", "t", s.at.Round(time.Second), "rss_mib", s.rss>>20, "goroutines", s.goroutines, "fds", s.fds,
			"disk_mib", s.disk>>20, "log", s.logSize, "ok", s.ok, "p50", s.p50.Round(time.Microsecond), "p99", s.p99.Round(time.Microsecond), "errors", s.errors)
	}
	stopLoad()
	loadTime := time.Since(began)
	inflight.Wait()
	// Calls that ended after the last sample count in the totals, not in
	// a window: a partial window would skew the last p99.
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	res := &result{opts: o, samples: samples, loadTime: loadTime, goVersion: runtime.Version(), cpus: runtime.NumCPU()}
	res.calls, res.errors, res.firstErrors, res.governed, res.receiptIDs, res.shed = rec.totals()
	res.p50, res.p99 = map[string]time.Duration{}, map[string]time.Duration{}
	for _, s := range surfaces {
		res.p50[s], res.p99[s] = rec.latency(s)
	}
	res.problems = append(res.problems, problems...)

	// Every governed call has its receipt in the log; every receipt id a
	// call was answered with is there.
	if err := up.alive(); err != nil {
		res.problems = append(res.problems, err.Error())
	} else {
		res.loadRSS, _ = procStatusBytes(pid, "VmRSS")
		res.loadPeakRSS, _ = procStatusBytes(pid, "VmHWM")
		vctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		res.check = verifyReceipts(vctx, up, baseline, res, rec.taskIDs(), cl.taskState)
		cancel()
		cl.close()
		res.problems = append(res.problems, res.check.problems...)
		res.idleRSS, _ = procStatusBytes(pid, "VmRSS")
		res.peakRSS, _ = procStatusBytes(pid, "VmHWM")
		if o.readBurst.readers > 0 {
			bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			b := runReadBurst(bctx, up, pid, o.readBurst)
			cancel()
			res.burst = &b
			slog.Info("read burst", "summary", b.text())
			if b.err != nil {
				res.problems = append(res.problems, b.err.Error())
			}
		}
		stopStart := time.Now()
		stopped = true
		if err := up.stop(2 * time.Minute); err != nil {
			res.problems = append(res.problems, fmt.Sprintf("chio up did not stop cleanly: %v", err))
		}
		res.stopTime = time.Since(stopStart)
	}
	res.evaluate()
	if err := res.write(out); err != nil {
		return err
	}
	fmt.Println(res.text())
	fmt.Printf("soak: wrote soak.csv, soak.md, soak.svg and soak.png in %s\n", out)
	if len(res.problems) > 0 {
		return &failure{res.problems}
	}
	return nil
}
