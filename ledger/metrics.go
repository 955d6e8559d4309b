package ledger

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the ledger's Prometheus series. They register on the
// registry handed to WithMetrics; without one they are kept but not
// exported, so the hot path never branches on them.
type metrics struct {
	batches     prometheus.Counter
	events      prometheus.Counter
	receipts    *prometheus.CounterVec
	batch       prometheus.Histogram
	integration prometheus.Histogram
	treeSize    prometheus.Gauge
	streamSeq   prometheus.Gauge
	published   prometheus.Counter
	timeouts    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		batches: prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_ledger_batches_total",
			Help: "Batches committed to the log."}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_ledger_events_total",
			Help: "Stream events folded, malformed and duplicate ones included."}),
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_ledger_receipts_total",
			Help: "Receipts appended to the log, by decision verdict."}, []string{"verdict"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chio_ledger_batch_seconds",
			Help:    "Time to fold, sign, append and commit (synced) one batch.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		integration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "chio_ledger_integration_seconds",
			Help:    "From the stream storing the event that completes a call to the commit that logs its receipt.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		treeSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_tree_size",
			Help: "Leaves in the log (the latest checkpointed size)."}),
		streamSeq: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_stream_sequence",
			Help: "Last CHIO_EVENTS sequence folded into the log."}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_ledger_receipts_published_total",
			Help: "Receipts published to CHIO_RECEIPTS, republications after a restart included."}),
		timeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_ledger_timeout_events_published_total",
			Help: "Timeout events published for allow decisions with no outcome."}),
	}
	if reg != nil {
		reg.MustRegister(m.batches, m.events, m.receipts, m.batch, m.integration, m.treeSize, m.streamSeq, m.published, m.timeouts)
	}
	return m
}

// observe records one committed batch.
func (m *metrics) observe(c Commit, took time.Duration, verdicts []string, streamSeq uint64) {
	m.batches.Inc()
	m.events.Add(float64(c.Events))
	for _, v := range verdicts {
		m.receipts.WithLabelValues(v).Inc()
	}
	m.batch.Observe(took.Seconds())
	for _, s := range c.Stored {
		m.integration.Observe(c.Committed.Sub(s).Seconds())
	}
	m.treeSize.Set(float64(c.TreeSize))
	m.streamSeq.Set(float64(streamSeq))
}
