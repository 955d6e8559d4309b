package kernel

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/edges/guards"
)

// WithMetrics registers the kernel's Prometheus series on reg: the time of
// each guard of the pipeline and of whole decisions.
func WithMetrics(reg prometheus.Registerer) Option { return func(c *config) { c.metrics = reg } }

// metrics are the kernel's series. Without a registry they are kept but
// not exported, so Decide never branches on them.
type metrics struct {
	registered bool
	guard      *prometheus.HistogramVec
	decision   *prometheus.HistogramVec
}

// latencyBuckets span a cached-token allow (microseconds) to a budget
// charge over a slow NATS round trip (seconds).
func latencyBuckets() []float64 { return prometheus.ExponentialBuckets(0.000005, 4, 12) }

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		registered: reg != nil,
		guard: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chio_guard_duration_seconds",
			Help: "Time one guard of the pipeline took to decide, by guard.", Buckets: latencyBuckets()}, []string{"guard"}),
		decision: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chio_kernel_decision_duration_seconds",
			Help:    "Time of a whole kernel decision (tool resolution, token checks, revocation, budgets, guards), by decision.",
			Buckets: latencyBuckets()}, []string{"decision"}),
	}
	if reg != nil {
		reg.MustRegister(m.guard, m.decision)
	}
	return m
}

// timed wraps each guard to observe its latency. Unregistered, the
// pipeline is left as is: nobody would read the numbers.
func (m *metrics) timed(pipeline []guards.Guard) []guards.Guard {
	if !m.registered {
		return pipeline
	}
	out := make([]guards.Guard, len(pipeline))
	for i, g := range pipeline {
		out[i] = g
		if g != nil { // a nil guard stays nil: guards.Run denies with it
			out[i] = &timedGuard{Guard: g, obs: m.guard.WithLabelValues(g.Name())}
		}
	}
	return out
}

// timedGuard is a guard whose Check is timed.
type timedGuard struct {
	guards.Guard
	obs prometheus.Observer
}

func (g *timedGuard) Check(ctx context.Context, c *guards.Call) (guards.Result, error) {
	start := time.Now()
	defer func() { g.obs.Observe(time.Since(start).Seconds()) }() // deferred: a panicking guard is timed too
	return g.Guard.Check(ctx, c)
}

// Decide validates the call in order — tool resolution, parse and schema,
// trusted issuer, signature, time window, delegation chain, revocation of
// the token and every ancestor, grant match, budgets, guards — and denies
// at the first failure, naming the step.
func (k *Kernel) Decide(ctx context.Context, req *Request) *Decision {
	start := time.Now()
	ctx, span := k.startDecide(ctx, req)
	d := k.decide(ctx, req)
	endDecide(span, d)
	verdict := "deny"
	if d.Allow {
		verdict = "allow"
	}
	k.metrics.decision.WithLabelValues(verdict).Observe(time.Since(start).Seconds())
	return d
}

// Ready reports whether the kernel can decide: its revocation watch is
// live. While it is not, every call is denied (fail closed), so an edge
// replica in that state should take no traffic.
func (k *Kernel) Ready() error {
	if !k.revs.Live() {
		return errors.New("revocation watch is not live (NATS unreachable or the watch is being rebuilt): every call is denied")
	}
	return nil
}
