// Package ledger turns the edges' decision and outcome events into signed
// chio.receipt.v1 records in a Merkle log.
//
// A durable JetStream pull consumer on CHIO_EVENTS feeds batches (bounded in
// size and time). Each batch is folded in stream order, its receipts are
// signed in parallel, appended, indexed and checkpointed in one synced Pebble
// batch, and only then acked (one ack-all per batch). The log position is the stream sequence stored
// in that batch: a redelivery of a sequence already folded is acked and
// skipped, and a duplicate publish is caught by the exact event-id index, so
// crashes anywhere between commit and ack neither lose nor double a receipt.
//
// # Where the CPU goes, and why the batch is built this way
//
// A receipt costs one Ed25519 signature over its JCS body (the largest
// single cost), the JSON decoding of the events that make it, a handful of
// point lookups, and its share of one synced Pebble commit. The pieces are
// arranged so that only what must be sequential is:
//
//   - Decoding and lookups run on every core (parallelWith): parsing an
//     event and reading the committed state of its ids depend on nothing
//     else in the batch. Events are parsed straight from the message's
//     bytes (jetstream.Msg.Data, and an envelope's lines are sub-slices of
//     it): the client allocates each delivered message its own buffer and
//     never reuses it, and nothing keeps a slice of it past the batch, as
//     the decoded values and the pending records written to the batch are
//     copies.
//   - The fold is sequential, in stream order: it is the log's order.
//   - The signer pool (signAll) then signs, encodes, RFC 6962-hashes and
//     summarises every receipt of the batch on every core. Workers claim
//     chunks from a shared counter (a worker parked by the scheduler on a
//     shared machine holds up only its chunk), and each writes only its
//     own slots, so the result is in fold order however they interleave.
//     The one writer appends slot by slot: leaf index order is fold order.
//   - One synced Pebble commit holds the batch's leaves, tiles, indexes,
//     stream position and the checkpoint signed over the new root; the ack
//     follows it. So no checkpoint and no ack ever covers a leaf that is
//     not durable, and a crash anywhere replays the batch from the stream.
//
// Each leaf is written to Pebble once (logstore layout 3): the leaves a
// batch appends to an entry bundle are one segment of it, keyed by the
// bundle and the slot they start at, and a complete bundle is its segments
// read in key order. The layout before kept the right edge's leaves under
// keys of their own and wrote the whole bundle again when it completed,
// doubling the bytes every leaf costs in the WAL, the memtable and
// compactions. Stores of that layout still open: Open turns their right
// edge into a segment in one synced batch, and their complete bundles are
// read as they are.
package ledger

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/transparency-dev/formats/log"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/msgbatch"
	"github.com/chio-ledger/chio/internal/tracing"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// Keys are the ledger's signing keys.
type Keys struct {
	// Kernel signs receipts and checkpoint statements; its public half is
	// every receipt's kernel_key.
	Kernel ed25519.PrivateKey
	// Checkpoint signs C2SP checkpoint notes; its key name is the log origin.
	Checkpoint note.Signer
	// CheckpointVerifier is the public half of Checkpoint.
	CheckpointVerifier note.Verifier
}

// Origin is the log origin: the checkpoint key's name.
func (k Keys) Origin() string { return k.Checkpoint.Name() }

// Ledger is the receipt-signing consumer.
type Ledger struct {
	js    jetstream.JetStream
	store *logstore.Store
	// credsKept: the edge credentials this process stored
	// (keepCredentials), so each costs one write per process.
	credsKept sync.Map
	keys      Keys
	cfg       config
	log       *slog.Logger

	timeouts *timeouts
	pending  *pendingCache
	metrics  *metrics
	publish  chan struct{}  // wakes the receipt publisher
	fresh    chan []pubLeaf // committed batches handed to the publisher
	edge     *edgeCheck     // nil: every message is folded (WithEdgeTrust)
	// streamErr is why the events stream is not folded (streamid.go).
	streamErr atomic.Pointer[error]
	head      headGate                 // the published head (head.go)
	lag       atomic.Pointer[LagError] // the last look at the stream's oldest unfolded event (lag.go)
	logKVmu   sync.Mutex
	logKV     jetstream.KeyValue // schemas.LogBucket, once opened (logBucket)
}

type config struct {
	consumer        string
	maxBatch        int
	maxWait         time.Duration
	incompleteAfter time.Duration
	replicas        int
	now             func() time.Time
	onCommit        func(Commit)
	signedLeaves    func([][32]byte) // WithSignedLeaves (signed.go)
	registry        prometheus.Registerer
	log             *slog.Logger
	// fault, when set by tests, is called at "before-commit" and
	// "after-commit" of each batch; an error stops Run right there, as a
	// crash would.
	fault func(stage string, batch int) error
	// fence, when set, is asked right before every commit whether this
	// instance may still append (it holds the writer lease).
	fence func() error
	// startSeq, when set by tests, starts the consumer there instead of
	// right after the log's position: earlier to force redeliveries of
	// folded events, later to force a gap the ledger must fill itself.
	startSeq uint64
	// tracer traces the fold of traced events; nil: tracing off.
	tracer trace.Tracer
	// edgeTrust, when set, folds only edge-signed messages (edgetrust.go).
	edgeTrust *EdgeTrust
	// acceptStream is the identity of a new events stream the operator
	// accepted (streamid.go).
	acceptStream string
	// headFile keeps the published head beside the keys (head.go).
	headFile string
	// checkpointEvery is the longest an idle log goes without a new
	// checkpoint statement (WithCheckpointInterval).
	checkpointEvery time.Duration
	// lagBound is how far behind the stream receipts may be (lag.go).
	lagBound time.Duration
	// streamEvery is how often a writing ledger looks at the stream (its
	// identity, its lag); tests shorten it.
	streamEvery time.Duration
	// retention, retentionReaders, positions and instance are event
	// retention's (retention.go).
	retention        time.Duration
	retentionReaders []string
	positions        jetstream.KeyValue
	instance         string
}

// Option configures a Ledger.
type Option func(*config)

// WithConsumer names the durable consumer (default schemas.LedgerConsumer).
func WithConsumer(name string) Option { return func(c *config) { c.consumer = name } }

// WithBatch bounds a batch to max events and to maxWait of waiting for more
// once its first event has arrived (defaults 1024 and 2ms).
func WithBatch(max int, maxWait time.Duration) Option {
	return func(c *config) { c.maxBatch, c.maxWait = max, maxWait }
}

// WithIncompleteAfter sets how long an allow decision may wait for its
// outcome before the ledger publishes a timeout event (default 10m).
func WithIncompleteAfter(d time.Duration) Option { return func(c *config) { c.incompleteAfter = d } }

// WithReplicas sets the replica count of the streams the ledger creates.
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// DefaultCheckpointInterval is how long an idle log goes at most without
// a new checkpoint statement.
const DefaultCheckpointInterval = time.Minute

// WithCheckpointInterval makes an idle log sign its head again once its
// latest checkpoint statement is d old (default DefaultCheckpointInterval;
// d <= 0: never), so that chio_ledger_checkpoint_age_seconds measures the
// ledger's health rather than the traffic. The checkpoint note is the same
// (it carries no time); its statement is new, numbered and timed.
func WithCheckpointInterval(d time.Duration) Option { return func(c *config) { c.checkpointEvery = d } }

// resignIdle signs the head again whenever the latest statement is older
// than the interval, until ctx ends: only while this instance may append
// and serves its published head.
func (l *Ledger) resignIdle(ctx context.Context) {
	every := l.cfg.checkpointEvery
	if every <= 0 {
		return
	}
	t := time.NewTicker(max(every/4, 10*time.Millisecond))
	defer t.Stop()
	age := checkpointAge(l.store, l.cfg.now)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if a := age(); l.store.State().Size == 0 || math.IsNaN(a) || time.Duration(a*float64(time.Second)) < every || l.HeadErr() != nil {
			continue
		}
		if l.cfg.fence != nil && l.cfg.fence() != nil {
			continue
		}
		tx := l.store.Begin()
		tx.Resign()
		if err := tx.Commit(l.signCheckpoint); err != nil {
			l.log.Warn("sign the idle log's checkpoint again", "err", err)
		}
	}
}

// Commit describes one committed batch, for metrics and benchmarks.
type Commit struct {
	Events    int       // stream messages folded
	Receipts  int       // receipts appended
	TreeSize  uint64    // log size after the batch
	Committed time.Time // when the synced commit returned
	// Stored holds, per new receipt, when the stream stored the event that
	// completed it: Committed minus Stored is its time to integrate.
	Stored []time.Time
}

// WithOnCommit calls f after every committed batch, on the ledger's goroutine.
func WithOnCommit(f func(Commit)) Option { return func(c *config) { c.onCommit = f } }

// WithMetrics registers the ledger's Prometheus series on reg.
func WithMetrics(reg prometheus.Registerer) Option { return func(c *config) { c.registry = reg } }

// WithFence makes the ledger ask fence right before every commit whether
// it may still append; an error stops Run without committing the batch.
// With active/standby ledgers it is the writer lease's check, so an
// instance that lost the lease never appends after its successor starts.
func WithFence(fence func() error) Option { return func(c *config) { c.fence = fence } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// New builds a ledger over an open store.
func New(js jetstream.JetStream, store *logstore.Store, keys Keys, opts ...Option) (*Ledger, error) {
	cfg := config{consumer: schemas.LedgerConsumer, maxBatch: 1024, maxWait: 2 * time.Millisecond,
		incompleteAfter: 10 * time.Minute, replicas: 1, now: time.Now, log: slog.Default(), checkpointEvery: DefaultCheckpointInterval,
		lagBound: DefaultLagBound, streamEvery: streamRecheck}
	for _, o := range opts {
		o(&cfg)
	}
	if keys.Kernel == nil || keys.Checkpoint == nil || keys.CheckpointVerifier == nil {
		return nil, errors.New("ledger: kernel and checkpoint keys are required")
	}
	if cfg.maxBatch < 1 || cfg.incompleteAfter < time.Second {
		return nil, errors.New("ledger: batch size must be positive and the incomplete timeout at least 1s")
	}
	l := &Ledger{js: js, store: store, keys: keys, cfg: cfg, log: cfg.log.With("component", "ledger"), metrics: newMetrics(cfg.registry, checkpointAge(store, cfg.now), store),
		timeouts: newTimeouts(), pending: newPendingCache(),
		publish: make(chan struct{}, 1), fresh: make(chan []pubLeaf, 16), head: headGate{kick: make(chan struct{}, 1)}}
	if cfg.edgeTrust != nil {
		l.edge = newEdgeCheck(cfg.edgeTrust, cfg.registry)
	}
	if cfg.registry != nil {
		cfg.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "chio_ledger_integration_lag_seconds",
			Help: "How long ago the stream stored the oldest event not yet in the log (0 when caught up), as of the writer's last look; past the lag bound receipts are late and readiness says so."},
			func() float64 {
				if p := l.lag.Load(); p != nil {
					return p.Lag.Seconds()
				}
				return 0
			}))
	}
	return l, nil
}

// CheckpointVerifier returns a logstore verifier for this ledger's
// checkpoints: Open uses it to compare the latest stored checkpoint with
// the tree recomputed from tiles.
func CheckpointVerifier(origin string, v note.Verifier) logstore.CheckpointVerifier {
	return func(raw []byte) (uint64, []byte, error) {
		cp, _, _, err := log.ParseCheckpoint(raw, origin, v)
		if err != nil {
			return 0, nil, err
		}
		return cp.Size, cp.Hash, nil
	}
}

// EnsureStreams creates or updates CHIO_EVENTS, CHIO_RECEIPTS and
// CHIO_QUARANTINE.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, replicas int) error {
	for _, cfg := range []jetstream.StreamConfig{schemas.EventsStreamConfig(replicas), schemas.ReceiptsStreamConfig(replicas), QuarantineStreamConfig(replicas)} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// Run consumes events until ctx ends. It returns nil on a clean stop and an
// error if the log cannot make progress (storage failure). A store that is
// out of space is not such a failure: the batch it refused stays un-acked,
// Run waits until the store takes writes again (Recover) and resumes from
// the log's position, so the stream's backlog is folded without a restart.
// Run and Follow may be called in turn on one Ledger (a standby that
// becomes the writer, and back), never at once.
func (l *Ledger) Run(ctx context.Context) error {
	// Run starts a writer's tenure (a standby calls it once it holds the
	// lease): the head the last writer published must be read again, and
	// a head read before, as a standby, does not count. So a takeover
	// whose look fails serves nothing until a look answers.
	l.head.forgetRead()
	var resumed time.Time // when the store last took writes again after a pause
	for {
		err := l.run(ctx)
		switch {
		case ctx.Err() != nil:
			return err
		case errors.Is(err, logstore.ErrUnavailable):
			if !l.awaitStore(ctx, err) {
				return nil
			}
			resumed = time.Now()
		case isStreamReset(err):
			if !l.awaitStream(ctx, err) {
				return nil
			}
		case errors.Is(err, errConsumerLost):
			// Deleted, or its stream was: start over, which checks first
			// that the stream is still the one the log folds.
			l.log.Error("ledger consumer lost; starting over", "err", err)
			if !sleep(ctx, time.Second) {
				return nil
			}
		case !resumed.IsZero() && time.Since(resumed) < resumeGrace && jetStreamBusy(err):
			// A shortage of space is often the event store's too, and an
			// embedded server reloads its streams once space is back: wait
			// for it as a starting ledger would, rather than stop.
			l.log.Warn("JetStream does not answer after the log store's pause; retrying", "err", err)
			if !sleep(ctx, time.Second) {
				return nil
			}
		default:
			return err
		}
	}
}

// errConsumerLost: the ledger's durable consumer went away while it ran.
var errConsumerLost = errors.New("ledger: consumer lost")

// resumeGrace is how long after a storage pause Run waits for JetStream
// to answer again.
const resumeGrace = time.Minute

// jetStreamBusy reports whether err is JetStream not answering (a
// timeout, no responders, a 503) rather than refusing.
func jetStreamBusy(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || (errors.As(err, &api) && api.Code == 503)
}

// storePoll is how often a ledger waiting for its store looks again.
const storePoll = 250 * time.Millisecond

// awaitStore waits until the store takes writes again after err, with
// the storage gauge up meanwhile; false means ctx ended first.
func (l *Ledger) awaitStore(ctx context.Context, err error) bool {
	l.metrics.storageUnavailable.Set(1)
	l.metrics.storageFailures.Inc()
	l.log.Error("log store takes no writes: integration paused, nothing acked, until it does", "err", err)
	since := l.cfg.now()
	for {
		if !sleep(ctx, storePoll) {
			return false
		}
		if rerr := l.store.Recover(); rerr == nil {
			l.metrics.storageUnavailable.Set(0)
			l.log.Info("log store takes writes again: integration resumes", "paused_for", l.cfg.now().Sub(since).Round(time.Millisecond))
			return true
		}
	}
}

// run is one life of Run: it returns when ctx ends or a batch fails.
func (l *Ledger) run(ctx context.Context) error {
	if err := EnsureStreams(ctx, l.js, l.cfg.replicas); err != nil {
		return err
	}
	if err := l.init(); err != nil {
		return err
	}
	l.loadHead(ctx)
	stream, err := l.js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		return fmt.Errorf("ledger: open stream: %w", err)
	}
	if err := l.checkStream(ctx, stream, true); err != nil {
		return err
	}
	cons, err := l.consumer(ctx)
	if err != nil {
		return err
	}
	// The consumer is made by the stream's name: if the stream was made
	// again since the check, start over rather than fold the new one.
	info, err := stream.Info(ctx)
	if err != nil || schemas.StreamIdentity(info) != l.store.State().EventsStream {
		return fmt.Errorf("%w: stream %s changed while its consumer was made", errConsumerLost, schemas.EventsStream)
	}
	// A store behind the stream's head (restored from an old backup, or
	// a standby away past the retention) would skip what is gone.
	if l.cfg.startSeq == 0 {
		if err := checkHeld(info, l.store.State().StreamSeq+1); err != nil {
			return err
		}
	}
	if err := l.loadTimeouts(); err != nil {
		return err
	}
	// Batches handed over in an earlier run are read back from the store
	// by the publisher instead.
	for len(l.fresh) > 0 {
		<-l.fresh
	}

	parent := ctx
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	// stopped is Run's result once ctx ends: nil when the caller stopped
	// it, the reason when the consumer was lost (so a supervisor restarts
	// the ledger instead of it idling with no consumer).
	stopped := func() error {
		if parent.Err() != nil {
			return nil
		}
		return context.Cause(ctx)
	}
	msgs := make(chan jetstream.Msg, 2*l.cfg.maxBatch)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2*l.cfg.maxBatch), jetstream.PullExpiry(schemas.PullExpiry), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			cancelCause(fmt.Errorf("%w: %s: %w", errConsumerLost, l.cfg.consumer, err))
			return
		}
		l.log.Warn("consumer", "err", err)
	}))
	if err != nil {
		return fmt.Errorf("ledger: consume: %w", err)
	}
	defer cc.Stop()

	var wg sync.WaitGroup
	wg.Go(func() { l.runPublisher(ctx) })
	wg.Go(func() { l.runTimeouts(ctx) })
	wg.Go(func() { l.watchStream(ctx, cancelCause, true) })
	wg.Go(func() { l.recordHeads(ctx) })
	wg.Go(func() { l.resignIdle(ctx) })
	wg.Go(func() { l.runRetention(ctx, stream) })
	l.kickHead()
	defer func() {
		cancel() // before Wait: the helpers stop when ctx ends
		wg.Wait()
	}()
	l.kickPublisher()

	l.log.Info("ledger running", "origin", l.keys.Origin(), "size", l.store.State().Size, "stream_seq", l.store.State().StreamSeq)
	for batches := 1; ; batches++ {
		batch, ok := l.collect(ctx, msgs)
		if !ok {
			return stopped()
		}
		if err := l.processBatch(ctx, stream, batch, batches); err != nil {
			if ctx.Err() != nil {
				return stopped() // the batch is redelivered on the next start
			}
			return err
		}
		l.kickHead()
		if err := l.injectFault("after-commit", batches); err != nil {
			return err
		}
		// One ack per batch: the consumer acks all, and every sequence up to
		// the highest delivered one is folded (gaps were read directly).
		if last := highest(batch); last != nil {
			if err := last.Ack(); err != nil {
				l.log.Debug("ack", "err", err) // a redelivery is harmless: the sequence is already folded
			}
		}
	}
}

// highest returns the message with the highest stream sequence.
func highest(batch []jetstream.Msg) jetstream.Msg {
	var last jetstream.Msg
	var max uint64
	for _, m := range batch {
		if meta, err := m.Metadata(); err == nil && meta.Sequence.Stream >= max {
			last, max = m, meta.Sequence.Stream
		}
	}
	return last
}

// init writes the size-0 checkpoint of a new log, so /log/checkpoint always
// has something signed to serve.
func (l *Ledger) init() error {
	if l.store.LatestCheckpoint() != nil {
		return nil
	}
	tx := l.store.Begin()
	return tx.Commit(l.signCheckpoint)
}

// consumer (re)creates the durable consumer to start right after the last
// stream sequence committed with the log. The position of record lives in
// the log's own batch, so the consumer is recreated on every start: its
// un-acked deliveries from before a crash are then redelivered at once
// instead of after AckWait, and a consumer that is ahead of the log (the
// store was replaced) cannot skip events.
func (l *Ledger) consumer(ctx context.Context) (jetstream.Consumer, error) {
	next := l.store.State().StreamSeq + 1
	if l.cfg.startSeq != 0 {
		next = l.cfg.startSeq
	}
	err := l.js.DeleteConsumer(ctx, schemas.EventsStream, l.cfg.consumer)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("ledger: reset consumer: %w", err)
	}
	c, err := l.js.CreateConsumer(ctx, schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: l.cfg.consumer, Description: "chio ledger: events → signed receipts",
		AckPolicy: jetstream.AckAllPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 16 * l.cfg.maxBatch, MaxDeliver: -1,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next,
		Replicas: l.cfg.replicas,
		Metadata: schemas.ReaderMetadata(), // edges may write envelopes to it
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: create consumer at stream sequence %d: %w", next, err)
	}
	return c, nil
}

// collect waits for one message, then takes more until the batch is full or
// maxWait has passed with nothing more ready.
// A batch is bounded in events, so envelopes do not multiply what one
// commit holds.
func (l *Ledger) collect(ctx context.Context, msgs <-chan jetstream.Msg) ([]jetstream.Msg, bool) {
	return msgbatch.CollectWeighed(ctx, msgs, l.cfg.maxBatch, l.cfg.maxWait, func(m jetstream.Msg) int {
		return schemas.EventCount(m.Subject(), m.Headers().Get(schemas.HeaderEventKinds))
	})
}

// event is one stream message to fold.
type event struct {
	seq     uint64
	subject string
	data    []byte
	stored  time.Time // when the stream stored it
	// edgeCred and edgeSig are the message's edge credential and
	// signature headers; signer is the credential screen verified, and
	// checkEdge says a decision must name it.
	edgeCred, edgeSig string
	signer            *schemas.EdgeCredential
	checkEdge         bool
	refused           bool // screen refused it: it folds to nothing
	// traceparent is the event's trace context, traceparents an
	// envelope's list of them (tracing.HeaderTraceparents); read only
	// when the ledger traces.
	traceparent, traceparents string
}

// processBatch folds a batch in stream order and commits it. Messages at or
// below the committed sequence are redeliveries and are skipped; a gap (a
// delivery lost in transit) is filled by reading the stream directly, so the
// fold always sees the stream's own order.
func (l *Ledger) processBatch(ctx context.Context, stream jetstream.Stream, batch []jetstream.Msg, n int) error {
	events := make([]event, 0, len(batch))
	next := l.store.State().StreamSeq + 1
	var info *jetstream.StreamInfo // looked up at the batch's first missing message
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			l.log.Warn("message without JetStream metadata", "err", err)
			continue
		}
		seq := meta.Sequence.Stream
		if seq < next {
			continue
		}
		for ; next < seq; next++ {
			raw, err := stream.GetMsg(ctx, next)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				// Deleted from within the stream, or purged from its head:
				// only the first may be skipped.
				if info == nil {
					if info, err = stream.Info(ctx); err != nil {
						return fmt.Errorf("ledger: fill gap at stream sequence %d: stream info: %w", next, err)
					}
				}
				if err := checkHeld(info, next); err != nil {
					return err
				}
				l.log.Warn("stream sequence missing (deleted); skipped", "stream_seq", next)
				continue
			}
			if err != nil {
				return fmt.Errorf("ledger: fill gap at stream sequence %d: %w", next, err)
			}
			events = append(events, l.traced(withEdge(event{seq: next, subject: raw.Subject, data: raw.Data, stored: raw.Time}, raw.Header), raw.Header))
		}
		events = append(events, l.traced(withEdge(event{seq: seq, subject: m.Subject(), data: m.Data(), stored: meta.Timestamp}, m.Headers()), m.Headers()))
		next = seq + 1
	}
	if len(events) == 0 {
		return nil
	}
	// Refused messages stay in the batch, folding to nothing (as a
	// malformed one does), so the log's position moves past them.
	if err := l.quarantine(ctx, l.screen(events)); err != nil {
		return err
	}
	started := l.cfg.now()
	pend, completed, leaves, err := l.apply(events, func() error {
		if l.cfg.fence != nil {
			if err := l.cfg.fence(); err != nil {
				return fmt.Errorf("ledger: fenced before commit: %w", err)
			}
		}
		return l.injectFault("before-commit", n)
	})
	if err != nil {
		return err
	}
	c := l.committed(len(events), completed, leaves, started)
	l.reportSigned(leaves)
	if l.cfg.onCommit != nil {
		l.cfg.onCommit(c)
	}
	l.timeouts.add(pend, l.cfg.incompleteAfter)
	l.handOver(leaves)
	return nil
}

// committed describes a batch just committed and records it in the metrics.
func (l *Ledger) committed(events int, completed []time.Time, leaves []pubLeaf, started time.Time) Commit {
	st := l.store.State()
	c := Commit{Events: events, Receipts: len(completed), TreeSize: st.Size, Committed: l.cfg.now(), Stored: completed}
	verdicts := make([]string, len(leaves))
	for i, p := range leaves {
		verdicts[i] = p.verdict
	}
	l.metrics.observe(c, c.Committed.Sub(started), verdicts, st.StreamSeq)
	return c
}

// apply folds events (contiguous, in stream order) into one committed batch.
// It returns the allow decisions now waiting for an outcome and, for each
// new receipt, when the event that completed it was stored in the stream.
func (l *Ledger) apply(msgs []event, beforeCommit func() error) (_ []*schemas.DecisionEvent, _ []time.Time, _ []pubLeaf, err error) {
	lastSeq := msgs[len(msgs)-1].seq
	events := expand(l.log, msgs)
	bt := l.startBatch(events) // nil unless some event is traced
	defer func() { bt.end(err) }()
	tx := l.store.Begin()
	defer tx.Discard()
	f := &folder{tx: tx, produced: map[string]bool{}, principals: map[string][]string{}, marked: map[string]bool{}, next: tx.Size(), log: l.log, changes: map[string]*pending{},
		edgeVerified: l.edge != nil}
	dec := make([]decoded, len(events))
	err = parallelWith(len(events), func() (func(int) error, func()) {
		look := l.store.NewLookup()
		return func(i int) error {
			dec[i] = decode(l.log, &events[i])
			if dec[i].eventID == "" {
				return nil // skipped
			}
			return dec[i].lookup(look, l.pending)
		}, look.Close
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("ledger: look up event state: %w", err)
	}
	var bodies []*schemas.ReceiptBody
	var completed []time.Time
	var by []int // per body, the event that completed it
	for i, e := range events {
		b, err := f.fold(&dec[i])
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ledger: fold stream sequence %d: %w", e.seq, err)
		}
		if b != nil {
			bodies = append(bodies, b)
			completed = append(completed, e.stored)
			by = append(by, i)
		}
	}
	tx.SetStreamSeq(lastSeq)
	kept, err := l.keepCredentials(tx, msgs)
	if err != nil {
		return nil, nil, nil, err
	}
	sums := make([]logstore.Summary, len(bodies))
	for i, b := range bodies {
		sums[i] = logstore.Summary{ReceiptID: b.ID, Timestamp: b.Timestamp, CapabilityID: b.CapabilityID,
			ToolServer: b.ToolServer, ToolName: b.ToolName, Verdict: string(b.Decision.Verdict), Principals: f.principals[b.ID]}
	}
	leaves, err := signAll(l.keys.Kernel, bodies, sums, bt.signHook(by))
	if err != nil {
		return nil, nil, nil, err
	}
	// Appending stays on this goroutine, in fold order: leaf index order
	// is the fold's order whatever order the signers finished in.
	pub := make([]pubLeaf, len(bodies))
	for i, b := range bodies {
		idx, err := tx.AppendLeaf(&leaves[i])
		if err != nil {
			return nil, nil, nil, fmt.Errorf("ledger: %w", err)
		}
		pub[i] = pubLeaf{index: idx, id: b.ID, toolServer: b.ToolServer, verdict: string(b.Decision.Verdict), leaf: leaves[i].Data, hash: leaves[i].Hash,
			traceparent: bt.appended(by[i], b.ID, idx)}
	}
	if beforeCommit != nil {
		if err := beforeCommit(); err != nil {
			return nil, nil, nil, err
		}
	}
	if err := tx.Commit(l.signCheckpoint); err != nil {
		return nil, nil, nil, fmt.Errorf("ledger: %w", err)
	}
	for _, id := range kept {
		l.credsKept.Store(id, true)
	}
	l.pending.apply(f.changes)
	// Schedule timeouts only for calls still open after this batch.
	var open []*schemas.DecisionEvent
	for _, d := range f.newPending {
		if p := f.changes[d.ReceiptID]; p != nil && p.Decision == d {
			open = append(open, d)
		}
	}
	return open, completed, pub, nil
}

// expand turns stream messages into the events they carry: an envelope
// becomes its events, in order, each with the envelope's stream position.
// A malformed envelope is a fact in the stream, skipped identically on
// every replay.
func expand(log *slog.Logger, msgs []event) []event {
	n := 0
	for _, m := range msgs {
		if m.subject == schemas.SubjectEnvelope {
			n++
		}
	}
	if n == 0 {
		return msgs
	}
	out := make([]event, 0, len(msgs)+8*n)
	for _, m := range msgs {
		if m.subject != schemas.SubjectEnvelope || m.refused {
			out = append(out, m)
			continue
		}
		evs, err := schemas.UnpackEvents(m.subject, m.data)
		if err != nil {
			log.Warn("skipping malformed envelope", "stream_seq", m.seq, "err", err)
			continue
		}
		var tps []string
		if m.traceparents != "" {
			tps = tracing.SplitTraceparents(m.traceparents, len(evs))
		}
		for i, e := range evs {
			ev := event{seq: m.seq, subject: e.Subject, data: e.Data, stored: m.stored, signer: m.signer, checkEdge: m.checkEdge}
			if tps != nil {
				ev.traceparent = tps[i]
			}
			out = append(out, ev)
		}
	}
	return out
}

// signAll is the signer pool: it signs receipts, encodes their leaves and
// prepares them for the log (leaf hash, summary) on every core. Slot i of
// the result is body i's whichever signer took it, so the caller appends in
// fold order.
// hook, if set, is called as body i's signing starts and returns what to
// call when it ends (its span).
func signAll(key ed25519.PrivateKey, bodies []*schemas.ReceiptBody, sums []logstore.Summary, hook func(i int) func(error)) ([]logstore.Leaf, error) {
	leaves := make([]logstore.Leaf, len(bodies))
	err := parallel(len(bodies), func(i int) (err error) {
		if hook != nil {
			defer func(done func(error)) { done(err) }(hook(i))
		}
		leaf, err := schemas.SignReceiptLeaf(key, *bodies[i]) // fills parameter_hash
		if err != nil {
			return err
		}
		leaves[i], err = logstore.PrepareLeaf(leaf, sums[i])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: sign receipts: %w", err)
	}
	return leaves, nil
}

// parallel runs f(0..n-1) on GOMAXPROCS goroutines (inline when n is small)
// and joins the errors.
func parallel(n int, f func(i int) error) error {
	return parallelWith(n, func() (func(int) error, func()) { return f, nil })
}

// parallelChunk is how many items a worker claims at a time: large enough
// that the shared counter is not contended, small enough that a worker the
// scheduler parks (the cores are shared with NATS and Pebble) leaves little
// behind for the others to wait on.
const parallelChunk = 8

// parallelWith is parallel with per-goroutine state: each goroutine calls
// start once for its f and its cleanup. Workers claim chunks from a shared
// counter rather than fixed stripes, so the batch ends when the work does,
// not when the most-delayed worker finishes its share.
func parallelWith(n int, start func() (f func(i int) error, done func())) error {
	errs := make([]error, n)
	workers := min(runtime.GOMAXPROCS(0), (n+15)/16)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			f, done := start()
			if done != nil {
				defer done()
			}
			for {
				lo := int(next.Add(parallelChunk)) - parallelChunk
				if lo >= n {
					return
				}
				for i := lo; i < min(lo+parallelChunk, n); i++ {
					errs[i] = f(i)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// signCheckpoint signs the C2SP checkpoint note and, for a non-empty tree,
// the chio.checkpoint_statement.v1 of a new tree head.
func (l *Ledger) signCheckpoint(from, to uint64, root []byte, seq uint64) ([]byte, []byte, error) {
	cp := log.Checkpoint{Origin: l.keys.Origin(), Size: to, Hash: root}
	signed, err := note.Sign(&note.Note{Text: string(cp.Marshal())}, l.keys.Checkpoint)
	if err != nil {
		return nil, nil, fmt.Errorf("sign checkpoint note: %w", err)
	}
	if to == 0 {
		return signed, nil, nil
	}
	start := from + 1
	if from == to {
		start = to // signed again while idle: it re-attests the head, whose last leaf it names
	}
	stmt, err := schemas.SignCheckpointStatement(l.keys.Kernel, schemas.CheckpointBody{
		CheckpointSeq: seq, BatchStartSeq: start, BatchEndSeq: to, TreeSize: to,
		MerkleRoot: schemas.EncodeHash(root), IssuedAt: uint64(l.cfg.now().Unix()),
	})
	if err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(stmt)
	if err != nil {
		return nil, nil, fmt.Errorf("encode checkpoint statement: %w", err)
	}
	return signed, raw, nil
}

func (l *Ledger) injectFault(stage string, batch int) error {
	if l.cfg.fault == nil {
		return nil
	}
	return l.cfg.fault(stage, batch)
}

func (l *Ledger) kickPublisher() {
	select {
	case l.publish <- struct{}{}:
	default:
	}
}
