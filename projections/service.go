package projections

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/schemas"
)

// Errors of the service; test them with errors.Is.
var (
	// ErrKernelKeyChanged means the store was folded trusting another
	// kernel key: its receipts' verified flags do not hold for this one.
	ErrKernelKeyChanged = errors.New("projections: trusted kernel key changed")
	// ErrStreamReset means a stream ends before the position the store
	// was folded to: it was deleted and created anew.
	ErrStreamReset = errors.New("projections: stream reset")
	// ErrNotEmpty means Rebuild was pointed at a store that holds state.
	ErrNotEmpty = errors.New("projections: rebuild target is not empty")
)

// DefaultName is the default instance name, the stem of the durable
// consumer names.
const DefaultName = "chio-projections"

// DefaultBatch is the default number of messages folded per batch.
const DefaultBatch = 1000

type config struct {
	log       *slog.Logger
	name      string
	kernelKey ed25519.PublicKey
	token     string
	auth      *readauth.Authenticator
	replicas  int
	batch     int
	registry  prometheus.Registerer
	// afterCommit, set by tests, runs after each committed batch, before
	// its ack; an error stops Run right there, as a crash would.
	afterCommit func(stream string, pos uint64) error
	tracing     consumerTracing // WithTracerProvider (consumer.go)
	// signedHere, set by WithTrustedLeaves, reports whether a ledger in
	// this process signed the leaf of this RFC 6962 hash.
	signedHere func(leafHash [32]byte) bool
	mem        storeMemory // WithStoreMemory
	edgeTrust  *schemas.EdgeVerifier
}

// Option configures Open and Rebuild.
type Option func(*config)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithName sets the instance name (default DefaultName). The durable
// consumers are <name>-tasks, <name>-events and <name>-receipts; two
// services with one name share the consumers and must not run at once.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithKernelKey sets the trusted kernel key (required): a receipt is
// verified only if it is signed by it.
func WithKernelKey(k ed25519.PublicKey) Option { return func(c *config) { c.kernelKey = k } }

// WithAuthenticator sets who may read what through the projection routes
// (see Register). It wins over WithServiceToken: a caller that wants a
// service token as well passes readauth.WithServiceToken to readauth.New
// itself.
func WithAuthenticator(a *readauth.Authenticator) Option { return func(c *config) { c.auth = a } }

// WithServiceToken is a shorthand for an authenticator that accepts only
// token, as an operator credential (Authorization: Bearer <token>), and no
// capability. WithAuthenticator, when also given, wins. With neither,
// every projection route answers 401: there is no open mode.
func WithServiceToken(token string) Option { return func(c *config) { c.token = token } }

// WithReplicas sets the replica count of the streams and consumers the
// service creates (default 1).
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithBatch bounds a fold batch to n messages (default DefaultBatch).
func WithBatch(n int) Option { return func(c *config) { c.batch = n } }

// WithTrustedLeaves lets the receipt fold skip the signature check of a
// receipt whose RFC 6962 leaf hash, computed here from the bytes received,
// signedHere reports as signed by a ledger in this process (see
// ledger.WithSignedLeaves): those exact bytes were built and signed by
// schemas.SignReceiptLeaf with the kernel key, so checking them again
// costs a verification (about 60 µs of CPU) for nothing. Any other
// receipt, an outsider's included, is verified as without this option;
// the kernel key and leaf index checks apply to every receipt. Only for
// a process that runs its own ledger: a separate projections service has
// no such set and verifies everything.
func WithTrustedLeaves(signedHere func(leafHash [32]byte) bool) Option {
	return func(c *config) { c.signedHere = signedHere }
}

// WithEdgeTrust folds only the task commits a certified edge signed, each
// where it was written to follow (schemas.EdgeVerifier.CheckTaskCommit):
// a NATS credential alone cannot forge a task that the read API serves.
// Others are skipped, logged and counted in
// chio_projection_task_commits_refused_total. Without it every commit is
// folded.
func WithEdgeTrust(v *schemas.EdgeVerifier) Option { return func(c *config) { c.edgeTrust = v } }

// WithStoreMemory sizes the store's Pebble block cache and memtables, in
// bytes (defaults DefaultCacheSize and DefaultMemTableSize): the memory
// the store holds once warm is about cache + 2×memTable, whatever the
// store's size.
func WithStoreMemory(cache, memTable int64) Option {
	return func(c *config) { c.mem = storeMemory{cache: cache, memTable: memTable} }
}

func newConfig(opts []Option) (config, error) {
	c := config{log: slog.Default(), name: DefaultName, replicas: 1, batch: DefaultBatch,
		mem: storeMemory{cache: DefaultCacheSize, memTable: DefaultMemTableSize}}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.log == nil:
		return c, errors.New("projections: nil logger")
	case !validDurable(c.name):
		return c, fmt.Errorf("projections: instance name %q must be 1–200 characters of [A-Za-z0-9_-]", c.name)
	case len(c.kernelKey) != ed25519.PublicKeySize:
		return c, errors.New("projections: a trusted Ed25519 kernel key is required (WithKernelKey)")
	case c.replicas < 1 || c.replicas > 5:
		return c, fmt.Errorf("projections: replicas %d not in 1..5", c.replicas)
	case c.batch < 1 || c.batch > 100_000:
		return c, fmt.Errorf("projections: batch %d not in 1..100000", c.batch)
	case c.mem.cache < 0 || c.mem.memTable < 1<<20 || c.mem.memTable > 1<<30:
		return c, fmt.Errorf("projections: store memory: cache %d must not be negative, memtable %d must be 1 MiB..1 GiB", c.mem.cache, c.mem.memTable)
	}
	c.log = c.log.With("component", "projections")
	if c.auth == nil {
		// Without a token this authenticator refuses every credential, and
		// the routes refuse anonymous readers: every request is 401.
		c.auth = readauth.New(readauth.WithServiceToken(c.token))
	}
	return c, nil
}

// validDurable reports whether name can stem a durable consumer name
// (JetStream refuses '.', '*', '>', white space and path separators).
func validDurable(name string) bool {
	if name == "" || len(name) > 200 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Durable is the name of the durable consumer a projections service named
// name (DefaultName unless configured) reads stream with, or "" for a
// stream it does not fold: what a producer that trims the stream (task
// retention) waits for.
func Durable(name, stream string) string {
	for _, s := range streams() {
		if s.name == stream {
			return name + "-" + s.suffix
		}
	}
	return ""
}

// streamSpec is a stream the service folds and the durable suffix of its
// consumer.
type streamSpec struct{ name, suffix string }

// streams lists the folded streams, in a fixed order.
func streams() [3]streamSpec {
	return [3]streamSpec{
		{schemas.TasksStream, "tasks"},
		{schemas.EventsStream, "events"},
		{schemas.ReceiptsStream, "receipts"},
	}
}

// Service is the projections service: the store, its consumers and its
// HTTP API. Open it, Register its routes, Run it, and Close it after Run
// has returned.
type Service struct {
	cfg     config
	store   *store
	log     *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	pos     map[string]uint64 // committed positions, mirrored from the store
	changed chan struct{}     // closed and replaced on every commit
	js      jetstream.JetStream
	running chan struct{} // closed once Run has a JetStream
	statusC statusCache   // GET /v1/status, reused for a moment
	paused  error         // why a fold waits for space (awaitSpace); nil while none does
}

// Open opens (or creates) the store in dir.
func Open(dir string, opts ...Option) (*Service, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	st, err := openStore(dir, schemas.EncodePublicKey(cfg.kernelKey), cfg.mem, cfg.log)
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, store: st, log: cfg.log, pos: map[string]uint64{},
		changed: make(chan struct{}), running: make(chan struct{})}
	s.metrics = newMetrics(cfg.registry, s)
	for _, str := range streams() {
		if s.pos[str.name], err = st.position(str.name); err != nil {
			_ = st.close()
			return nil, err
		}
	}
	return s, nil
}

// Close closes the store. Call it after Run has returned and the HTTP
// server serving Register's routes has shut down.
func (s *Service) Close() error { return s.store.close() }

// Run folds the three streams until ctx ends, then returns nil. NATS
// errors are retried with backoff; it returns an error only when the
// projection cannot go on: the store fails, or a stream was reset under
// it.
func (s *Service) Run(ctx context.Context, js jetstream.JetStream) error {
	if js == nil {
		return errors.New("projections: nil JetStream")
	}
	s.mu.Lock()
	if s.js != nil {
		s.mu.Unlock()
		return errors.New("projections: Run called twice")
	}
	s.js = js
	close(s.running)
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(streams()))
	for i, str := range streams() {
		c := &consumer{svc: s, f: s.fold(i), durable: s.cfg.name + "-" + str.suffix}
		c.log = s.log.With("stream", str.name) // every line of this consumer names its stream, once
		go func() { errc <- c.run(ctx, js) }()
	}
	var first error
	for range streams() {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel() // one projection failing stops the others: Run reports it
		}
	}
	return first
}

// fold returns the fold of streams[i].
func (s *Service) fold(i int) fold {
	switch streams()[i].name {
	case schemas.TasksStream:
		return taskFold{log: s.log, trust: s.cfg.edgeTrust, refused: s.metrics.tasksRefused}
	case schemas.EventsStream:
		return lineageFold{log: s.log}
	}
	return receiptFold{log: s.log, kernelKey: schemas.EncodePublicKey(s.cfg.kernelKey), signedHere: s.cfg.signedHere, checked: s.metrics.receipts}
}

func (s *Service) position(stream string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pos[stream]
}

// advance records a committed position and wakes the waiters.
func (s *Service) advance(stream string, pos uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pos[stream] = pos
	close(s.changed)
	s.changed = make(chan struct{})
}

// Positions are the last stream sequences folded, per stream.
type Positions struct {
	Tasks    uint64 `json:"tasks"`
	Events   uint64 `json:"events"`
	Receipts uint64 `json:"receipts"`
}

// Positions returns the committed positions.
func (s *Service) Positions() Positions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Positions{Tasks: s.pos[schemas.TasksStream], Events: s.pos[schemas.EventsStream], Receipts: s.pos[schemas.ReceiptsStream]}
}

// Digest is the SHA-256 (hex) over the store's keys and values in key
// order, positions included: a live projection and a Rebuild that folded
// the same stream sequences have the same digest.
func (s *Service) Digest() (string, error) { return s.store.digest() }

// Lag is how far one consumer is behind its stream.
type Lag struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	// Position is the last sequence folded, LastSeq the stream's last.
	Position uint64 `json:"position"`
	LastSeq  uint64 `json:"lastSeq"`
	// Behind is LastSeq - Position (0 when caught up).
	Behind uint64 `json:"behind"`
}

// Lag reports each consumer's distance from its stream's end. It needs
// Run to have started (it asks the streams for their ends) and blocks
// until then or until ctx ends.
func (s *Service) Lag(ctx context.Context) ([]Lag, error) {
	js, err := s.waitRunning(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Lag, 0, len(streams()))
	for _, str := range streams() {
		last, err := lastSeq(ctx, js, str.name)
		if err != nil {
			return nil, err
		}
		l := Lag{Stream: str.name, Consumer: s.cfg.name + "-" + str.suffix, Position: s.position(str.name), LastSeq: last}
		if last > l.Position {
			l.Behind = last - l.Position
		}
		out = append(out, l)
	}
	return out, nil
}

// WaitCaughtUp waits until every stream is folded up to the last sequence
// it had when WaitCaughtUp was called (a stream that does not exist yet
// counts as empty), or until ctx ends. Run must be running (or about to
// be).
func (s *Service) WaitCaughtUp(ctx context.Context) error {
	js, err := s.waitRunning(ctx)
	if err != nil {
		return err
	}
	targets := map[string]uint64{}
	for _, str := range streams() {
		if targets[str.name], err = lastSeq(ctx, js, str.name); err != nil {
			return err
		}
	}
	for {
		s.mu.Lock()
		behind := false
		for name, t := range targets {
			behind = behind || s.pos[name] < t
		}
		changed := s.changed
		s.mu.Unlock()
		if !behind {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("projections: wait until caught up: %w", ctx.Err())
		}
	}
}

func (s *Service) waitRunning(ctx context.Context) (jetstream.JetStream, error) {
	select {
	case <-s.running:
	case <-ctx.Done():
		return nil, fmt.Errorf("projections: waiting for Run: %w", ctx.Err())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.js, nil
}

// lastSeq is a stream's last sequence, 0 for a stream that does not exist.
func lastSeq(ctx context.Context, js jetstream.JetStream, name string) (uint64, error) {
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("projections: stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("projections: stream %s info: %w", name, err)
	}
	return info.State.LastSeq, nil
}
