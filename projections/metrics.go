package projections

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/diskspace"
)

// WithMetrics registers the service's Prometheus series on reg: events
// folded per projection, and each projection's lag behind its stream.
func WithMetrics(reg prometheus.Registerer) Option { return func(c *config) { c.registry = reg } }

// metrics are the service's Prometheus series. Without a registry they
// are kept but not exported, so the fold never branches on them.
type metrics struct {
	folded *prometheus.CounterVec
	// receipts counts parsed receipts by how their signature was settled.
	receipts *prometheus.CounterVec
	// storagePaused is 1 while folding waits for the store's reserve.
	storagePaused prometheus.Gauge
	// tasksRefused counts task commits no certified edge signed.
	tasksRefused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Service) *metrics {
	m := &metrics{
		folded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_projection_events_folded_total",
			Help: "Stream messages folded into the projection store, by projection (tasks, events, receipts)."}, []string{"projection"}),
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_projection_receipts_checked_total",
			Help: "Receipt messages that parsed, by check: verified (signature checked here), signed_here (exact bytes a ledger in this process signed: not checked again), unverified (kept, flagged). Redeliveries count again."}, []string{"check"}),
		tasksRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_projection_task_commits_refused_total",
			Help: "Task commits not folded because no certified edge signed them where they stand (WithEdgeTrust)."}),
		storagePaused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_projection_storage_unavailable",
			Help: "1 while the projection store's filesystem is short of its reserve: folding is paused and nothing is acked."}),
	}
	if reg != nil {
		reg.MustRegister(m.storagePaused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chio_projection_store_free_bytes",
			Help: "Free bytes on the projection store's filesystem (NaN if they cannot be measured); below the reserve folding pauses."},
			func() float64 {
				free, err := diskspace.Free(s.store.guard.Dir)
				if err != nil {
					return math.NaN()
				}
				return float64(free)
			}))
		reg.MustRegister(m.folded, m.receipts, m.tasksRefused, &lagCollector{svc: s, desc: prometheus.NewDesc("chio_projection_lag",
			"Messages of the projection's stream not folded yet: the stream's last sequence minus the folded position, read at scrape time.",
			[]string{"projection"}, nil)})
	}
	return m
}

// projectionOf is the projection label of a stream: its consumer suffix.
func projectionOf(stream string) string {
	for _, s := range streams() {
		if s.name == stream {
			return s.suffix
		}
	}
	return stream
}

// lagTimeout bounds the stream lookups of one scrape.
const lagTimeout = time.Second

// lagCollector reports each projection's lag when scraped: the folded
// position is in memory, the stream's end is asked of JetStream.
type lagCollector struct {
	svc  *Service
	desc *prometheus.Desc
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.svc.running:
	default:
		return // not consuming yet: no stream to measure against
	}
	c.svc.mu.Lock()
	js := c.svc.js
	c.svc.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), lagTimeout)
	defer cancel()
	for _, str := range streams() {
		last, err := lastSeq(ctx, js, str.name)
		if err != nil {
			// A scrape must not fail because NATS is away: the series is
			// absent for this scrape, and /readyz names the cause.
			c.svc.log.Debug("projection lag", "stream", str.name, "err", err)
			continue
		}
		pos := c.svc.position(str.name)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(last-min(pos, last)), str.suffix)
	}
}

// CheckStorage reads from the projection store and measures its free
// space: nil while it answers and has its reserve free, so that folding
// goes on. It is the storage readiness check of the service.
func (s *Service) CheckStorage() error {
	if _, err := s.store.get(metaKey(metaKernelKey)); err != nil {
		return fmt.Errorf("read projection store: %w", err)
	}
	return s.store.writable()
}
