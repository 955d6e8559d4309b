package eventwriter

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the writer's series. Without a registry they are kept
// but not exported, so the call path never branches on them.
type metrics struct {
	publish *prometheus.HistogramVec
	// events counts the events per write: above 1, calls shared a write.
	events prometheus.Histogram
	// failed counts events whose write failed for good, by reason.
	failed *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		publish: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "chio_edge_publish_duration_seconds",
			Help:    "Time to publish an event to CHIO_EVENTS and receive its PubAck, by event (decision, outcome) and result (ok, error).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"event", "result"}),
		events: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chio_edge_publish_events_per_write",
			Help:    "Events carried by one write to CHIO_EVENTS (group commit: concurrent calls share a write).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_edge_event_writes_failed_total",
			Help: "Events whose write to CHIO_EVENTS failed for good (the call failed closed), by event and reason: storage (JetStream refused it for want of storage), no_answer (no PubAck within the write's bound), refused (refused for another reason), other."},
			[]string{"event", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.publish, m.events, m.failed)
	}
	return m
}

func (m *metrics) observePublish(event string, started time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.publish.WithLabelValues(event, result).Observe(time.Since(started).Seconds())
}

func (m *metrics) observeWrite(events int) { m.events.Observe(float64(events)) }
