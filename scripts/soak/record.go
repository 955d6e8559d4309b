package main

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// The surfaces, in the order the CSV and the summary list them.
var surfaces = []string{"a2a", "openai", "mcp", "acp"}

// recorder collects every client call's outcome: per window (reset at
// each sample) and over the whole run.
type recorder struct {
	mu       sync.Mutex
	window   windowStats
	total    map[string]*surfaceTotals
	receipts []string // receipt ids calls were answered with
	tasks    []string // A2A task ids of governed calls, each due a receipt
	governed map[string]int
	shed     int
}

// windowStats is one sampling window's calls.
type windowStats struct {
	lat    []time.Duration
	calls  map[string]int
	errors map[string]int
}

type surfaceTotals struct {
	calls, errors int
	lat           []time.Duration
	firstErrors   []string // the first few, for the report
}

func newRecorder() *recorder {
	r := &recorder{total: map[string]*surfaceTotals{}, governed: map[string]int{}}
	for _, s := range surfaces {
		r.total[s] = &surfaceTotals{}
	}
	r.window = newWindow()
	return r
}

func newWindow() windowStats {
	return windowStats{calls: map[string]int{}, errors: map[string]int{}}
}

// call records one client call: its latency when it succeeded, its error
// otherwise. op names it in error messages.
func (r *recorder) call(surface, op string, d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.total[surface]
	t.calls++
	r.window.calls[surface]++
	if err != nil {
		t.errors++
		r.window.errors[surface]++
		if len(t.firstErrors) < 5 {
			t.firstErrors = append(t.firstErrors, op+": "+err.Error())
		}
		return
	}
	r.window.lat = append(r.window.lat, d)
	t.lat = append(t.lat, d)
}

// governedCall counts a call the kernel decided (so one receipt is due),
// whether or not it then failed on the client side.
func (r *recorder) governedCall(surface string) {
	r.mu.Lock()
	r.governed[surface]++
	r.mu.Unlock()
}

// receipt keeps an id a call was answered with, to be found in the log.
func (r *recorder) receipt(id string) {
	if id == "" {
		return
	}
	r.mu.Lock()
	r.receipts = append(r.receipts, id)
	r.mu.Unlock()
}

// task keeps the id of an A2A task a governed call created.
func (r *recorder) task(id string) {
	if id == "" {
		return
	}
	r.mu.Lock()
	r.tasks = append(r.tasks, id)
	r.mu.Unlock()
}

func (r *recorder) taskIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.tasks)
}

func (r *recorder) shedOne() {
	r.mu.Lock()
	r.shed++
	r.mu.Unlock()
}

// take ends the current window and returns it.
func (r *recorder) take() windowStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.window
	r.window = newWindow()
	return w
}

// latency is the p50 and p99 of a surface's successful calls over the run.
func (r *recorder) latency(surface string) (p50, p99 time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.total[surface].lat
	return percentile(l, 0.50), percentile(l, 0.99)
}

// totals is a copy of the run's counts.
func (r *recorder) totals() (calls, errs map[string]int, firstErrs []string, governed map[string]int, receipts []string, shed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls, errs = map[string]int{}, map[string]int{}
	for _, s := range surfaces {
		calls[s], errs[s] = r.total[s].calls, r.total[s].errors
		for _, e := range r.total[s].firstErrors {
			firstErrs = append(firstErrs, s+" "+e)
		}
	}
	return calls, errs, firstErrs, maps.Clone(r.governed), slices.Clone(r.receipts), r.shed
}

// percentile is the q-quantile (0..1) of ds by nearest rank; 0 when empty.
// ds is sorted in place.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
