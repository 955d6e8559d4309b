package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// trendSpan is how far back from the end the trends are fitted: long
// enough that a slow leak shows over warm-up effects, which the first
// minutes hold.
const trendSpan = 40 * time.Minute

// p99Tolerance is the target for the last window's p99 against the first's.
const p99Tolerance = 0.20

// result is a finished soak: what it measured and what it concludes.
type result struct {
	opts      options
	samples   []sample
	loadTime  time.Duration
	goVersion string
	cpus      int

	calls, errors map[string]int
	p50, p99      map[string]time.Duration // per surface, over the run
	firstErrors   []string
	governed      map[string]int
	receiptIDs    []string
	shed          int
	check         receiptCheck
	loadRSS       int64        // when the load has ended
	loadPeakRSS   int64        // VmHWM then
	idleRSS       int64        // after the receipt check
	peakRSS       int64        // VmHWM then
	burst         *burstResult // -read-burst, if asked
	stopTime      time.Duration
	problems      []string

	totalCalls, totalErrors int
	p99First, p99Last       time.Duration
	trends                  []trend
	trendFrom               time.Duration
}

// trend is one series' least-squares line over the trend span.
type trend struct {
	name, unit      string
	start, end      float64 // the first sample (t=0) and the last
	from            float64 // the first sample of the span
	perHour         float64 // slope
	growth          float64 // slope × span, relative to the span's first sample
	fitted, scatter float64 // the span's mean and the residuals' standard deviation
}

// series are the sampled quantities trends are fitted to.
func series() []struct {
	name, unit string
	get        func(s sample) float64
} {
	return []struct {
		name, unit string
		get        func(s sample) float64
	}{
		{"RSS", "MiB", func(s sample) float64 { return float64(s.rss) / (1 << 20) }},
		{"goroutines", "", func(s sample) float64 { return s.goroutines }},
		{"open files", "", func(s sample) float64 { return float64(s.fds) }},
		{"disk", "MiB", func(s sample) float64 { return float64(s.disk) / (1 << 20) }},
		{"disk per receipt", "bytes", func(s sample) float64 {
			if s.logSize == 0 {
				return 0
			}
			return float64(s.disk) / float64(s.logSize)
		}},
		{"p50", "ms", func(s sample) float64 { return float64(s.p50.Microseconds()) / 1000 }},
		{"p99", "ms", func(s sample) float64 { return float64(s.p99.Microseconds()) / 1000 }},
	}
}

// fit is the least-squares line through (x, y): slope and intercept, and
// the residuals' standard deviation.
func fit(x, y []float64) (slope, intercept, scatter float64) {
	n := float64(len(x))
	if len(x) < 2 {
		if len(y) == 1 {
			return 0, y[0], 0
		}
		return 0, 0, 0
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
	}
	if sxx == 0 {
		return 0, my, 0
	}
	slope = sxy / sxx
	intercept = my - slope*mx
	var ss float64
	for i := range x {
		r := y[i] - (intercept + slope*x[i])
		ss += r * r
	}
	return slope, intercept, math.Sqrt(ss / n)
}

// loaded are the samples that end a window with calls in it (the first,
// taken before the load, has none).
func (r *result) loaded() []sample {
	var out []sample
	for _, s := range r.samples {
		if s.at > 0 && s.ok > 0 {
			out = append(out, s)
		}
	}
	return out
}

// evaluate totals the calls, compares the first and last windows' p99,
// fits the trends and turns the error rate into a problem when over the
// threshold.
func (r *result) evaluate() {
	for _, s := range surfaces {
		r.totalCalls += r.calls[s]
		r.totalErrors += r.errors[s]
	}
	if r.totalCalls == 0 {
		r.problems = append(r.problems, "no calls were made")
	} else if rate := float64(r.totalErrors) / float64(r.totalCalls); rate > r.opts.maxErrorRate {
		r.problems = append(r.problems, fmt.Sprintf("%d of %d calls failed (%.3f%%, over the %.3f%% allowed)", r.totalErrors, r.totalCalls, 100*rate, 100*r.opts.maxErrorRate))
	}
	if l := r.loaded(); len(l) > 0 {
		r.p99First, r.p99Last = l[0].p99, l[len(l)-1].p99
	}
	span := min(trendSpan, r.loadTime*2/3)
	r.trendFrom = r.loadTime - span
	for _, se := range series() {
		var x, y []float64
		for _, s := range r.samples {
			if s.at >= r.trendFrom && (s.ok > 0 || !strings.HasPrefix(se.name, "p")) {
				x = append(x, s.at.Hours())
				y = append(y, se.get(s))
			}
		}
		if len(x) == 0 {
			continue
		}
		slope, icpt, scatter := fit(x, y)
		t := trend{name: se.name, unit: se.unit, start: se.get(r.samples[0]), end: se.get(r.samples[len(r.samples)-1]), from: y[0], perHour: slope, scatter: scatter}
		if se.name == "p50" || se.name == "p99" {
			l := r.loaded()
			t.start, t.end = se.get(l[0]), se.get(l[len(l)-1])
		}
		base := icpt + slope*x[0]
		if base != 0 {
			t.growth = slope * span.Hours() / base
		}
		var m float64
		for _, v := range y {
			m += v
		}
		t.fitted = m / float64(len(y))
		r.trends = append(r.trends, t)
	}
}

func (r *result) p99Verdict() string {
	if r.p99First == 0 {
		return "no windows with calls"
	}
	ratio := float64(r.p99Last)/float64(r.p99First) - 1
	verdict := "within"
	if ratio > p99Tolerance || ratio < -p99Tolerance {
		verdict = "outside"
	}
	return fmt.Sprintf("%s → %s (%+.0f%%): %s the ±%.0f%% target", ms(r.p99First), ms(r.p99Last), 100*ratio, verdict, 100*p99Tolerance)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func num(v float64, unit string) string {
	s := fmt.Sprintf("%.1f", v)
	if v == float64(int64(v)) && (v >= 100 || v <= -100 || unit == "") {
		s = fmt.Sprintf("%.0f", v)
	}
	if unit != "" {
		s += " " + unit
	}
	return s
}

// markdown is the summary: settings, the series' start and end and
// trends, latency, calls and errors, the receipt check, the stop.
func (r *result) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# %s", r.opts.title)
	w("")
	w("- Load: %s (requested %s), %.0f operations/s started open loop (at most %d in flight), every surface of one `chio up` (conformance demo agent as the default A2A skill, httpbin behind `--openapi`), sampled every %s.",
		r.loadTime.Round(time.Second), r.opts.duration, r.opts.rate, r.opts.maxInflight, r.opts.every)
	w("- Machine: %d logical CPUs, %s; shared with other work, so latencies are noisy (the harness's own clients run on the same cores).", r.cpus, r.goVersion)
	cancel := "long-running streaming send cancelled once working"
	if r.opts.earlyCancel {
		cancel = "long-running send (returnImmediately) cancelled at once"
	}
	w("- Mix per round of 19 operations: A2A blocking send ×3, streaming send ×3, %s ×1, send (returnImmediately) + resubscribe (task held 4 s) ×1; OpenAI tool call ×4 (tool listing every 10th); MCP `tools/call` ×4 (fresh session every 20th); ACP `_chio/tool/invoke` ×4.", cancel)
	w("")
	w("## Series")
	w("")
	w("Start is the sample before the load; end the last one. The trend is a least-squares line over the last %s (from %s): its slope per hour and what it adds over that span relative to the line's value at its start; the scatter is the residuals' standard deviation.",
		(r.loadTime - r.trendFrom).Round(time.Second), r.trendFrom.Round(time.Second))
	w("")
	w("| series | start | end | slope per hour | growth over the span | scatter |")
	w("|---|---|---|---|---|---|")
	for _, t := range r.trends {
		start := num(t.start, t.unit)
		if t.name == "p50" || t.name == "p99" {
			start += " (first window)"
		}
		w("| %s | %s | %s | %s | %+.1f%% | %s |", t.name, start, num(t.end, t.unit), num(t.perHour, t.unit), 100*t.growth, num(t.scatter, t.unit))
	}
	w("")
	w("- p99, first window vs last: %s.", r.p99Verdict())
	if r.peakRSS > 0 {
		mib := func(b int64) string { return num(float64(b)/(1<<20), "MiB") }
		w("- RSS when the load ended %s (peak so far, VmHWM, %s); after the receipt check (every receipt read back through the query API) %s (peak %s).",
			mib(r.loadRSS), mib(r.loadPeakRSS), mib(r.idleRSS), mib(r.peakRSS))
	}
	if r.burst != nil {
		w("- %s", r.burst.text())
	}
	w("")
	w("## Calls")
	w("")
	w("| surface | calls | errors | governed (receipt due) | p50 | p99 |")
	w("|---|---|---|---|---|---|")
	for _, s := range surfaces {
		w("| %s | %d | %d | %d | %s | %s |", s, r.calls[s], r.errors[s], r.governed[s], ms(r.p50[s]), ms(r.p99[s]))
	}
	w("| all | %d | %d | %d | | |", r.totalCalls, r.totalErrors, r.check.governed)
	w("")
	w("Latency is of successful calls over the whole run: a streaming send to its last event, a long-running stream to its working event (then cancelled), a subscription to its first event.")
	w("")
	rate := 0.0
	if r.totalCalls > 0 {
		rate = float64(r.totalErrors) / float64(r.totalCalls)
	}
	w("- Error rate %.4f%% (allowed %.3f%%); %d arrivals shed at the in-flight limit.", 100*rate, 100*r.opts.maxErrorRate, r.shed)
	for _, e := range r.firstErrors {
		w("- First error: %s", e)
	}
	w("")
	w("## Receipts")
	w("")
	c := r.check
	if c.logSize > 0 {
		w("- The log grew from %d to %d receipts (+%d) for %d governed calls (waited %s after the load for the ledger to catch up).", c.baseline, c.logSize, c.logSize-c.baseline, c.governed, c.waited.Round(time.Millisecond))
		w("- Every one of the %d A2A tasks the load created is named by a receipt's metadata.a2a.taskId, unless listed below.", c.tasks)
		w("- Read back with the operator token through `GET /v1/receipts/query`: %d receipts listed; %d receipt ids the calls were answered with, %d missing.", c.queried, c.answered, len(c.missing))
		w("- By tool server: %s; by verdict: %s.", counts(c.byServer), counts(c.byVerdict))
	}
	if r.stopTime > 0 {
		w("- `chio up` stopped on SIGTERM in %s.", r.stopTime.Round(time.Millisecond))
	}
	w("")
	if len(r.problems) == 0 {
		w("**Result: pass** (no call errors over the threshold, every receipt accounted for, clean stop).")
	} else {
		w("**Result: FAIL**")
		w("")
		for _, p := range r.problems {
			w("- %s", p)
		}
	}
	return b.String()
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (r *result) text() string { return r.markdown() }

// write puts soak.md and the plot in dir (soak.csv is written as it runs).
func (r *result) write(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "soak.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return writePlots(dir, r.opts.title, r.samples)
}

// writePlots writes soak.svg and soak.png.
func writePlots(dir, title string, samples []sample) error {
	if err := os.WriteFile(filepath.Join(dir, "soak.svg"), []byte(plot(title, samples)), 0o644); err != nil {
		return err
	}
	b, err := plotPNG(title, samples)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "soak.png"), b, 0o644)
}
