package witness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"
)

// DefaultInterval is how often a Cosigner submits the log's latest
// checkpoint: one checkpoint per interval is cosigned, not every batch.
const DefaultInterval = 5 * time.Second

// submitTimeout bounds one witness's exchange, retries after a size
// conflict included: a slow witness delays the next round, not the log.
const submitTimeout = 10 * time.Second

// Log is what a Cosigner reads from the log: its latest signed checkpoint
// and consistency proofs between sizes it signed.
type Log interface {
	Head() (size uint64, note []byte)
	ConsistencyProof(from, to uint64) ([][]byte, error)
}

// Store keeps the latest cosigned checkpoint where every replica of the
// log's API reads it, across failovers (KV is the JetStream one).
type Store interface {
	Put(ctx context.Context, signedNote []byte) error
	Get(ctx context.Context) ([]byte, error) // nil, nil when there is none
}

// Cosigner submits the log's checkpoints to a policy's witnesses
// (tlog-witness add-checkpoint) and keeps the latest checkpoint whose
// cosignatures meet the quorum in its Store, the log's own signature
// first and the witnesses' after it. A witness that is down, slow or
// refuses is logged and counted; the log goes on without it, and the
// checkpoint served stays the last one the quorum cosigned.
type Cosigner struct {
	log      Log
	store    Store
	policy   *Policy
	logKey   note.Verifier
	clients  []*Client
	interval time.Duration
	logger   *slog.Logger
	metrics  *cosignerMetrics
	gate     func() bool

	mu    sync.Mutex
	known map[string]uint64 // each witness's size, as it last told us
	done  uint64            // the size last cosigned to the quorum
}

// CosignerOption configures a Cosigner.
type CosignerOption func(*Cosigner)

// WithInterval sets how often the latest checkpoint is submitted.
func WithInterval(d time.Duration) CosignerOption {
	return func(c *Cosigner) {
		if d > 0 {
			c.interval = d
		}
	}
}

// WithGate makes the Cosigner submit only while gate reports true: in a
// set of replicas, only the one that writes the log submits its
// checkpoints, one submission per interval for the log.
func WithGate(gate func() bool) CosignerOption { return func(c *Cosigner) { c.gate = gate } }

// WithCosignerLogger sets the logger.
func WithCosignerLogger(l *slog.Logger) CosignerOption { return func(c *Cosigner) { c.logger = l } }

// WithRegistry registers the Cosigner's metrics on reg.
func WithRegistry(reg prometheus.Registerer) CosignerOption {
	return func(c *Cosigner) { c.metrics = newCosignerMetrics(reg) }
}

// NewCosigner returns a Cosigner of log, signed with logKey's private
// half, for the witnesses of p.
func NewCosigner(log Log, store Store, p *Policy, logKey note.Verifier, opts ...CosignerOption) (*Cosigner, error) {
	if log == nil || store == nil || p == nil || logKey == nil {
		return nil, errors.New("witness: a cosigner needs a log, a store, a policy and the log's key")
	}
	c := &Cosigner{log: log, store: store, policy: p, logKey: logKey, interval: DefaultInterval,
		logger: slog.Default(), known: map[string]uint64{}}
	for _, w := range p.Witnesses() {
		cl, err := NewClient(w)
		if err != nil {
			return nil, err
		}
		c.clients = append(c.clients, cl)
	}
	for _, o := range opts {
		o(c)
	}
	if c.metrics == nil {
		c.metrics = newCosignerMetrics(nil)
	}
	for _, cl := range c.clients {
		cl.log = c.logger
	}
	return c, nil
}

// Run submits the latest checkpoint once per interval until ctx ends.
func (c *Cosigner) Run(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		if _, err := c.Round(ctx); err != nil && ctx.Err() == nil {
			c.logger.Warn("witness: checkpoint not cosigned to the quorum; serving the last one that was", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round submits the log's latest checkpoint to every witness at once and
// stores it with the cosignatures returned, if they meet the quorum. It
// returns the size cosigned (0 when there was nothing new), or an error
// wrapping ErrQuorum when too few witnesses cosigned.
func (c *Cosigner) Round(ctx context.Context) (uint64, error) {
	if c.gate != nil && !c.gate() {
		return 0, nil
	}
	size, signed := c.log.Head()
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if size == 0 || signed == nil || size <= done {
		return 0, nil
	}
	lines := make([][]byte, len(c.clients))
	var wg sync.WaitGroup
	for i, cl := range c.clients {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, submitTimeout)
			defer cancel()
			lines[i] = c.submit(sctx, cl, size, signed)
		})
	}
	wg.Wait()
	cosigned := bytes.Clone(signed)
	for _, l := range lines {
		cosigned = append(cosigned, l...)
	}
	_, names, err := VerifyCheckpoint(cosigned, c.logKey, c.policy)
	c.metrics.cosigners.Set(float64(len(names)))
	if err != nil {
		c.metrics.quorum.Set(0)
		return 0, err
	}
	if err := c.store.Put(ctx, cosigned); err != nil {
		return 0, fmt.Errorf("witness: store the cosigned checkpoint of size %d: %w", size, err)
	}
	c.mu.Lock()
	c.done = size
	c.mu.Unlock()
	c.metrics.quorum.Set(1)
	c.metrics.size.Set(float64(size))
	c.logger.Debug("witness: checkpoint cosigned", "size", size, "witnesses", names)
	return size, nil
}

// submit sends the checkpoint of size to one witness from the size it is
// known to have, resending once from the size a 409 names. It returns the
// witness's cosignature lines, or nil when it did not cosign.
func (c *Cosigner) submit(ctx context.Context, cl *Client, size uint64, signed []byte) []byte {
	name := cl.Witness().Name
	c.mu.Lock()
	old := c.known[name]
	c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		var proof [][]byte
		if old > 0 && old < size {
			p, err := c.log.ConsistencyProof(old, size)
			if err != nil {
				c.failed(name, "error", fmt.Errorf("consistency proof %d→%d: %w", old, size, err))
				return nil
			}
			proof = p
		}
		lines, err := cl.AddCheckpoint(ctx, old, proof, signed)
		var conflict *SizeConflict
		switch {
		case err == nil:
			c.mu.Lock()
			c.known[name] = size
			c.mu.Unlock()
			c.metrics.submissions.WithLabelValues(name, "cosigned").Inc()
			c.metrics.witnessSize.WithLabelValues(name).Set(float64(size))
			return lines
		case errors.As(err, &conflict) && attempt == 0 && conflict.WitnessSize <= size:
			// The witness holds another size (a restart, a failover, a
			// first contact): resend from it.
			c.metrics.submissions.WithLabelValues(name, "conflict").Inc()
			old = conflict.WitnessSize
			c.mu.Lock()
			c.known[name] = old
			c.mu.Unlock()
			continue
		case errors.As(err, &conflict) && conflict.WitnessSize <= size:
			// The resend, from the very size the witness named, was
			// refused the same way: the witness does not keep to its own
			// answer. Not a fork, and not retried in this round.
			c.failed(name, "repeated_conflict", fmt.Errorf("witness %s answered 409 again naming size %d, after the checkpoint was resent from that size: it refuses its own old size (a misbehaving witness): %w", name, conflict.WitnessSize, err))
			return nil
		case errors.As(err, &conflict):
			// A witness ahead of this log has cosigned a tree this log
			// has not signed: another ledger, or a fork. Never retried.
			c.failed(name, "ahead", fmt.Errorf("witness %s has cosigned size %d, past this log's %d: %w", name, conflict.WitnessSize, size, err))
			return nil
		default:
			c.failed(name, "refused", err)
			return nil
		}
	}
}

func (c *Cosigner) failed(name, result string, err error) {
	c.metrics.submissions.WithLabelValues(name, result).Inc()
	c.logger.Warn("witness: checkpoint not cosigned", "witness", name, "result", result, "err", err)
}

type cosignerMetrics struct {
	submissions *prometheus.CounterVec
	witnessSize *prometheus.GaugeVec
	quorum      prometheus.Gauge
	cosigners   prometheus.Gauge
	size        prometheus.Gauge
}

func newCosignerMetrics(reg prometheus.Registerer) *cosignerMetrics {
	m := &cosignerMetrics{
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_ledger_witness_submissions_total",
			Help: "Checkpoint submissions to witnesses, by witness and result (cosigned, conflict, repeated_conflict, refused, ahead, error)."}, []string{"witness", "result"}),
		witnessSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "chio_ledger_witness_size",
			Help: "The tree size each witness last cosigned for this log."}, []string{"witness"}),
		quorum: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_witness_quorum_met",
			Help: "1 when the latest submitted checkpoint met the witness quorum, 0 when it did not."}),
		cosigners: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_witness_cosigners",
			Help: "Witnesses that cosigned the latest submitted checkpoint."}),
		size: prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_witnessed_size",
			Help: "Size of the latest checkpoint cosigned to the quorum (the one served)."}),
	}
	if reg != nil {
		reg.MustRegister(m.submissions, m.witnessSize, m.quorum, m.cosigners, m.size)
	}
	return m
}
