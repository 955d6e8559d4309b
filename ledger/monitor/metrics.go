package monitor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the monitor's Prometheus series. They register on the
// registry in Config; without one they are kept but not exported.
type metrics struct {
	size     prometheus.Gauge
	findings *prometheus.CounterVec
	checks   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, age func() float64) *metrics {
	m := &metrics{
		size: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_monitor_verified_tree_size",
			Help: "Tree size of the last checkpoint the monitor verified (from its state file after a restart)."}),
		findings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_monitor_findings_total",
			Help: "Checks that found the log misbehaving, by kind: fork, rollback, bad_signature, tile_mismatch."}, []string{"kind"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_monitor_checks_total",
			Help: "Checks run, by result: ok, finding, or error (the log could not be read; nothing was concluded)."}, []string{"result"}),
	}
	// Every series exists from the start, so a rate or an alert on them
	// needs no first occurrence.
	for _, k := range Kinds() {
		m.findings.WithLabelValues(string(k))
	}
	for _, r := range []string{"ok", "finding", "error"} {
		m.checks.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.size, m.findings, m.checks)
		// A checkpoint note has no time of its own: the age counts from
		// when this monitor first saw the checkpoint it last verified, and
		// is computed at scrape time so it grows while the log stands still.
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chio_monitor_checkpoint_age_seconds",
			Help: "Seconds since the monitor first saw the last checkpoint it verified (the note has no timestamp); 0 before any."},
			age))
	}
	return m
}
