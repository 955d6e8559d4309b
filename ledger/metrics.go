package ledger

import (
	"encoding/json"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
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
	// storageUnavailable is 1 while the log store takes no writes and
	// integration is paused; storageFailures counts such pauses.
	storageUnavailable prometheus.Gauge
	storageFailures    prometheus.Counter
	// streamReset is 1 while the events stream is not the one the log
	// folds (streamid.go).
	streamReset prometheus.Gauge
	// purged and firstSeq follow event retention (retention.go).
	purged   prometheus.Counter
	firstSeq prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, checkpointAge func() float64, store *logstore.Store) *metrics {
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
		storageUnavailable: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_storage_unavailable",
			Help: "1 while the log store takes no writes (its filesystem is short of the reserve, or a failed write awaits a reopen): integration is paused and nothing is acked."}),
		storageFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_ledger_storage_pauses_total",
			Help: "Times integration paused because the log store took no writes."}),
		streamReset: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_events_stream_reset",
			Help: "1 while CHIO_EVENTS is not the stream the log was built from (deleted and created again, or another server's): integration is stopped until an operator accepts the new stream or rebuilds the log."}),
	}
	newRetentionMetrics(m)
	if reg != nil {
		reg.MustRegister(m.purged, m.firstSeq)
		reg.MustRegister(m.batches, m.events, m.receipts, m.batch, m.integration, m.treeSize, m.streamSeq, m.published, m.timeouts,
			m.storageUnavailable, m.storageFailures, m.streamReset)
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chio_ledger_store_corrupt",
			Help: "1 once Pebble found the log store corrupt on disk (a checksum mismatch): reads of that range fail, readiness is 503; the cure is a rebuild from the events stream."},
			func() float64 {
				if store.Corrupt() != nil {
					return 1
				}
				return 0
			}))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chio_ledger_store_free_bytes",
			Help: "Free bytes on the log store's filesystem (NaN if they cannot be measured); below the reserve it takes no writes."},
			func() float64 {
				free, err := store.Free()
				if err != nil {
					return math.NaN()
				}
				return float64(free)
			}))
		// Computed at scrape time, so it keeps growing while no checkpoint
		// is signed (nothing new to log, or a stuck ledger) and is right
		// from the first scrape after a restart.
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chio_ledger_checkpoint_age_seconds",
			Help: "Seconds since the latest checkpoint statement was signed (its issued_at); 0 while the log is empty, NaN if it cannot be read."},
			checkpointAge))
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

// checkpointAge returns the age of the store's latest checkpoint statement
// as of now(): the checkpoint note itself carries no time, its statement
// (same batch, same size) does.
func checkpointAge(store *logstore.Store, now func() time.Time) func() float64 {
	return func() (age float64) {
		defer func() {
			if recover() != nil {
				age = math.NaN() // a store closed under a late scrape
			}
		}()
		seq := store.State().CheckpointSeq
		if seq == 0 {
			return 0 // only the size-0 checkpoint, which has no statement
		}
		raw, err := store.Statement(seq)
		if err != nil {
			return math.NaN()
		}
		var stmt schemas.CheckpointStatement
		if err := json.Unmarshal(raw, &stmt); err != nil {
			return math.NaN()
		}
		return max(0, now().Sub(time.Unix(int64(stmt.Body.IssuedAt), 0)).Seconds())
	}
}
