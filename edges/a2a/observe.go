package a2a

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
)

// edgeName is this edge's value of the edge label and log attribute.
const edgeName = "a2a"

// Decisions a call is counted and logged under: the kernel's verdict when
// the call reached it, else allow for a request served and deny or error
// for one refused (authentication, or anything else).
const (
	decisionAllow = "allow"
	decisionDeny  = "deny"
	decisionError = "error"
)

// HeaderRequestID is a caller's own request id: echoed back on the
// response and logged with the call as http_request_id. It is never
// signed into a receipt (the receipt's request_id is the messageId).
const HeaderRequestID = "X-Request-Id"

// maxHTTPRequestID bounds a caller's request id; a longer one, or one
// with control characters, is ignored rather than logged.
const maxHTTPRequestID = 200

// edgeMetrics are the edge's Prometheus series. Without a registry they
// are kept but not exported, so calls never branch on them.
type edgeMetrics struct {
	calls *prometheus.CounterVec
	// Task retention (ExpireTasks): tasks purged, and the ended or old
	// tasks the last pass had to keep (a reader behind, or still live).
	expired prometheus.Counter
	kept    prometheus.Gauge
}

func newEdgeMetrics(reg prometheus.Registerer) *edgeMetrics {
	m := &edgeMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_edge_calls_total",
			Help: "Calls an edge answered, by edge, method (the A2A 1.0 operation name, for every binding and dialect) and decision (allow, deny, error)."},
			[]string{"edge", "method", "decision"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_a2a_tasks_expired_total",
			Help: "A2A tasks this replica purged from CHIO_TASKS once ended longer than the task retention."}),
		kept: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_a2a_tasks_retention_kept",
			Help: "Tasks past the retention the last expiry pass kept: still live, or not yet read by every durable reader of CHIO_TASKS."}),
	}
	if reg != nil {
		reg.MustRegister(m.calls, m.expired, m.kept)
	}
	return m
}

// callRecord is one call as the edge logs and counts it: once, when the
// request and any run it started in the background have ended, so the
// line carries the kernel's decision and the receipt id. Its methods are
// safe on a nil record (work that belongs to no call).
type callRecord struct {
	edge          *Edge
	binding       string // jsonrpc, rest, stdio, or takeover (a sweep resuming a task)
	httpRequestID string
	started       time.Time

	mu        sync.Mutex
	holds     int // the request, plus each background run of it
	method    string
	requestID string
	receiptID string
	taskID    string
	decision  string // the kernel's verdict, or error when no receipt will exist
	outcome   string
	detail    string // why a call was denied or failed
	werr      *wire.Error
}

type callKey struct{}

// begin starts the record of a call; release it when the request ends.
// Until the record is finished the call counts as in flight for Drain.
func (e *Edge) begin(ctx context.Context, binding, httpRequestID string) (context.Context, *callRecord) {
	e.inflight.begin()
	r := &callRecord{edge: e, binding: binding, httpRequestID: httpRequestID, started: time.Now(), holds: 1}
	return context.WithValue(ctx, callKey{}, r), r
}

// callFrom is the record of the call ctx belongs to, or nil.
func callFrom(ctx context.Context) *callRecord {
	r, _ := ctx.Value(callKey{}).(*callRecord)
	return r
}

func (r *callRecord) setMethod(name string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.method = name
}

func (r *callRecord) setTask(id string) {
	if r == nil || id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.taskID = id
}

func (r *callRecord) setRequest(id string) {
	if r == nil || id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requestID = id
}

// fail records the protocol error the call was answered with; the first
// one stands.
func (r *callRecord) fail(werr *wire.Error) {
	if r == nil || werr == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.werr == nil {
		r.werr = werr
	}
}

// executed records what the dispatcher did with the call's task.
func (r *callRecord) executed(taskID, requestID string, res *dispatch.Result, err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.taskID, r.requestID = taskID, requestID
	if err != nil {
		// No receipt will exist: the decision was never made durable.
		r.decision, r.detail = decisionError, err.Error()
		return
	}
	r.receiptID = res.ReceiptID
	r.decision = string(res.Decision.Verdict().Verdict)
	switch {
	case !res.Decision.Allow:
		r.detail = res.Decision.Guard + ": " + res.Decision.Reason
	case res.ToolErr != nil:
		r.detail = res.ToolErr.Error()
	}
	if res.Ran {
		r.outcome = string(res.Outcome)
	}
}

// hold keeps the record open for a background run of the call.
func (r *callRecord) hold() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds++
}

// release ends the request or a background run; the last one logs the
// call and counts it.
func (r *callRecord) release() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.holds--
	last := r.holds == 0
	r.mu.Unlock()
	if last {
		r.finish()
		r.edge.inflight.end()
	}
}

func (r *callRecord) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	method, decision, level := r.method, r.decision, slog.LevelInfo
	kernelDecided := decision != ""
	if method == "" {
		method = "unknown" // refused before its method was known: no unbounded label values
	}
	if decision == "" {
		decision = decisionAllow
		if r.werr != nil {
			decision = decisionError
			if r.werr.Code == wire.CodeUnauthenticated || r.werr.Code == wire.CodePermissionDenied {
				decision = decisionDeny
			}
		}
	}
	switch {
	case decision == decisionError && r.werr != nil && r.werr.Code == wire.CodeInternal:
		level = slog.LevelError
	case decision != decisionAllow:
		level = slog.LevelWarn
	}
	r.edge.metrics.calls.WithLabelValues(edgeName, method, decision).Inc()
	if !r.edge.log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("edge", edgeName), slog.String("method", method), slog.String("decision", decision),
		slog.String("binding", r.binding))
	if kernelDecided {
		// The kernel's own verdict, as the hello-a2a example greps for it
		// ("kernel.*(allow|deny)"); absent for calls refused before it.
		attrs = append(attrs, slog.String("kernel", decision))
	}
	for _, a := range []struct{ key, value string }{
		{"request_id", r.requestID}, {"receipt_id", r.receiptID}, {"task_id", r.taskID},
		{"http_request_id", r.httpRequestID}, {"outcome", r.outcome}, {"reason", r.detail},
	} {
		if a.value != "" {
			attrs = append(attrs, slog.String(a.key, a.value))
		}
	}
	if r.werr != nil {
		attrs = append(attrs, slog.Int("error_code", r.werr.Code), slog.String("error", r.werr.Message))
	}
	attrs = append(attrs, slog.Duration("duration", time.Since(r.started)))
	r.edge.log.LogAttrs(context.Background(), level, "a2a call", attrs...)
}

// taskIDOf is the task a request's params name, if any.
func taskIDOf(params any) string {
	switch p := params.(type) {
	case *wire.GetTaskParams:
		return p.ID
	case *wire.CancelTaskParams:
		return p.ID
	case *wire.SendParams:
		return p.Message.TaskID
	}
	return ""
}

// inflight counts the calls in flight on this replica (their records not
// finished yet), for Drain.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (f *inflight) begin() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// wait returns nil once nothing runs, or ctx's error.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return nil
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// spawn runs f in the background as part of the call ctx belongs to: the
// call stays in flight (for Drain) and unlogged until f has returned too.
func (e *Edge) spawn(ctx context.Context, f func()) {
	rec := callFrom(ctx)
	if rec == nil { // work of no call: tracked all the same
		e.inflight.begin()
		go func() {
			defer e.inflight.end()
			f()
		}()
		return
	}
	rec.hold() // before go: a Drain starting now must see it
	go func() {
		defer rec.release()
		f()
	}()
}

// abortGrace is how long Drain waits, once its deadline has passed, for
// the calls it cancelled to publish their outcome events: a few synced
// writes each, which a loaded machine can take seconds over, and worth
// waiting for (an outcome missing is a receipt cut off).
const abortGrace = 5 * time.Second

// Drain stops the replica taking part in new work and waits until the
// calls running on it have finished and published their events, so the
// process can then close its NATS connection without losing an outcome.
// Task subscriptions end at once (their clients subscribe again at
// another replica); tool runs go on. If ctx ends first, the runs still
// going are cancelled (their outcome is recorded as cancelled) and Drain
// waits up to abortGrace for that, then returns an error naming how many
// it had to cut. Call it after the HTTP server stopped accepting requests
// (or concurrently with its shutdown, which waits for the subscriptions).
func (e *Edge) Drain(ctx context.Context) error {
	e.drainOnce.Do(func() { close(e.draining) })
	if e.inflight.wait(ctx) == nil {
		return nil
	}
	cut := e.inflight.count()
	e.abort()
	gctx, cancel := context.WithTimeout(context.Background(), abortGrace)
	defer cancel()
	if err := e.inflight.wait(gctx); err != nil {
		return fmt.Errorf("a2a: drain: %d of %d calls still running after cancelling them: %w", e.inflight.count(), cut, err)
	}
	return fmt.Errorf("a2a: drain: cancelled %d calls still running at the deadline: %w", cut, ctx.Err())
}
