package ratelimit

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts refusals as chio_rate_limited_total{surface, reason}.
// A nil *Metrics counts nothing.
type Metrics struct {
	refused *prometheus.CounterVec
}

// NewMetrics returns the counters, registered on reg (nil: unregistered,
// for a caller that registers Collector itself).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chio_rate_limited_total",
		Help: "Requests refused with 429 by a rate limit, by surface and by what was limited (address, principal).",
	}, []string{"surface", "reason"})}
	if reg != nil {
		reg.MustRegister(m.refused)
	}
	return m
}

// Refused counts one refusal.
func (m *Metrics) Refused(surface, reason string) {
	if m != nil {
		m.refused.WithLabelValues(surface, reason).Inc()
	}
}

// Collector is the counters, for a registry built after them.
func (m *Metrics) Collector() prometheus.Collector { return m.refused }
