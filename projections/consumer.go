package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/internal/msgbatch"
	"github.com/chio-ledger/chio/internal/tracing"
	"github.com/chio-ledger/chio/schemas"
)

// consumer runs one stream's durable pull consumer and folds what it
// delivers. Its position of record is the one committed in the store with
// the state; the server-side consumer is only a delivery cursor, reused
// when it agrees with the store and recreated when it does not.
type consumer struct {
	svc     *Service
	f       fold
	durable string
	log     *slog.Logger
}

// fatalError stops Run: the store cannot make progress, or the stream no
// longer holds what the store was folded from.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// run consumes until ctx ends, restarting the consumer with a growing
// pause after NATS errors.
func (c *consumer) run(ctx context.Context, js jetstream.JetStream) error {
	pause := minBackoff
	for {
		started := time.Now()
		err := c.session(ctx, js)
		if ctx.Err() != nil {
			return nil
		}
		var fe *fatalError
		if errors.As(err, &fe) {
			c.log.Error("projection stopped", "err", err)
			return fe.err
		}
		if time.Since(started) > time.Minute {
			pause = minBackoff // it ran fine for a while: start over
		}
		c.log.Warn("consumer interrupted; restarting", "err", err, "in", pause)
		if backoff.Sleep(ctx, pause) != nil {
			return nil
		}
		pause = min(2*pause, maxBackoff)
	}
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// session is one life of the consumer: ensure the stream and the durable,
// then fold batches until ctx ends or delivery fails.
func (c *consumer) session(ctx context.Context, js jetstream.JetStream) error {
	stream, err := c.svc.ensureStream(ctx, js, c.f.stream())
	if err != nil {
		return err
	}
	pos, err := c.svc.store.position(c.f.stream())
	if err != nil {
		return &fatalError{fmt.Errorf("read %s position: %w", c.f.stream(), err)}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s info: %w", c.f.stream(), err)
	}
	if pos > info.State.LastSeq {
		// Sequences never go back on a stream: this one was deleted and
		// created anew, and the store describes messages it no longer has.
		return &fatalError{fmt.Errorf("%w: %s was folded up to sequence %d but the stream ends at %d; rebuild the projection into an empty directory",
			ErrStreamReset, c.f.stream(), pos, info.State.LastSeq)}
	}
	cons, err := c.durableAt(ctx, js, pos)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	batch := c.svc.cfg.batch
	msgs := make(chan jetstream.Msg, 2*batch)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2*batch), jetstream.PullExpiry(schemas.PullExpiry), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			cancel(fmt.Errorf("consumer %s lost: %w", c.durable, err))
			return
		}
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			c.log.Debug("consume", "err", err) // missed during a reconnect; Consume recovers
			return
		}
		c.log.Warn("consume", "err", err)
	}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", c.durable, err)
	}
	defer cc.Stop()
	c.log.Info("consuming", "consumer", c.durable, "position", pos, "stream_last_seq", info.State.LastSeq)
	for {
		ms, ok := msgbatch.Collect(ctx, msgs, batch, collectWait)
		if !ok {
			return context.Cause(ctx)
		}
		if err := c.process(ctx, stream, ms); err != nil {
			return err
		}
	}
}

// durableAt returns the durable consumer, delivering from stream sequence
// pos+1. An existing one is kept only when its ack floor is exactly pos
// and nothing is waiting for an ack: otherwise (the store was lost or
// restored, or a previous run died with deliveries in flight) it is
// recreated, so un-acked messages come again at once rather than after
// the ack wait, and a consumer ahead of the store cannot skip anything.
func (c *consumer) durableAt(ctx context.Context, js jetstream.JetStream, pos uint64) (jetstream.Consumer, error) {
	name := c.f.stream()
	cons, err := js.Consumer(ctx, name, c.durable)
	switch {
	case err == nil:
		ci := cons.CachedInfo()
		if ci.AckFloor.Stream == pos && ci.NumAckPending == 0 && ci.Config.AckPolicy == jetstream.AckAllPolicy &&
			ci.Config.FilterSubject == "" && len(ci.Config.FilterSubjects) == 0 &&
			schemas.ReadsEnvelopeLayout(ci.Config.Metadata) {
			c.log.Debug("reusing durable consumer", "consumer", c.durable, "ack_floor", pos)
			return cons, nil
		}
		c.log.Info("recreating durable consumer at the stored position", "consumer", c.durable, "position", pos,
			"ack_floor", ci.AckFloor.Stream, "ack_pending", ci.NumAckPending)
		if err := js.DeleteConsumer(ctx, name, c.durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("delete consumer %s: %w", c.durable, err)
		}
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, fmt.Errorf("look up consumer %s: %w", c.durable, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable: c.durable, Description: "chio projections: " + name + " folded into the projection store",
		AckPolicy: jetstream.AckAllPolicy, AckWait: 30 * time.Second,
		MaxAckPending: 4 * c.svc.cfg.batch, MaxDeliver: -1, Replicas: c.svc.cfg.replicas,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata:      schemas.ReaderMetadata(), // edges may write envelopes to it
	}
	if pos > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, pos+1
	}
	cons, err = js.CreateConsumer(ctx, name, cfg)
	if err != nil {
		return nil, fmt.Errorf("create consumer %s at stream sequence %d: %w", c.durable, pos+1, err)
	}
	// Retention (of ended tasks, of events the ledger has folded) purges
	// only what this consumer has read; a projection store newer than
	// the purge (rebuilt, or lost) starts without what went, and says so.
	if s, err := js.Stream(ctx, name); err == nil {
		if first := s.CachedInfo().State.FirstSeq; first > pos+1 {
			c.log.Warn("the stream no longer holds messages this projection has not folded (purged by retention): they are not in it",
				"from", pos+1, "to", first-1)
		}
	}
	return cons, nil
}

// gotSequence is the stream sequence of a message read at or after next.
// On a stream that allows direct gets (the task stream) the client reads
// it from the first Nats-Sequence header of the reply, and the server
// appends its own after the message's stored headers, so a publisher can
// forge the first: the server's, the last, is taken. Otherwise it comes
// from the reply's JSON, which only the server writes. It is never below
// next: a reply that says so is refused rather than read again forever.
func gotSequence(raw *jetstream.RawStreamMsg, next uint64, direct bool) (uint64, error) {
	at := raw.Sequence
	if direct {
		v := schemas.ServerHeader(raw.Header, jetstream.SequenceHeader)
		var err error
		if at, err = strconv.ParseUint(v, 10, 64); err != nil {
			return 0, fmt.Errorf("the server's sequence header %q: %w", v, err)
		}
	}
	if at < next {
		return 0, fmt.Errorf("asked for the first message from %d, answered with %d", next, at)
	}
	return at, nil
}

// subjectsOf is the subject filter of one of the folded streams.
func subjectsOf(stream string) string {
	switch stream {
	case schemas.TasksStream:
		return schemas.TasksSubjects
	case schemas.EventsStream:
		return schemas.EventsSubjects
	default:
		return schemas.ReceiptsSubjects
	}
}

// collectWait is how long a batch waits for more messages once it has
// one: long enough to batch a burst, short enough not to delay a read.
const collectWait = 2 * time.Millisecond

// process folds a delivered batch in stream order and acks it. Messages at
// or below the stored position are redeliveries and are skipped; a gap (a
// message not delivered in this session's order) is filled by reading the
// stream directly, so the fold always sees the stream's own order.
func (c *consumer) process(ctx context.Context, stream jetstream.Stream, batch []jetstream.Msg) error {
	pos := c.svc.position(c.f.stream())
	next := pos + 1
	folded := make([]streamMsg, 0, len(batch))
	var last jetstream.Msg
	var lastSeq uint64
	for _, m := range batch {
		meta, err := m.Metadata()
		if err != nil {
			c.log.Warn("message without JetStream metadata", "err", err)
			continue
		}
		seq := meta.Sequence.Stream
		if seq >= lastSeq {
			last, lastSeq = m, seq
		}
		if seq < next {
			continue
		}
		// A gap is read as the stream holds it: the first message at or
		// after next, then the next one after that, so a stretch the stream
		// no longer holds (purged by task retention, deleted) costs one
		// request, not one per sequence. Rebuild will not see it either.
		for next < seq {
			raw, err := stream.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subjectsOf(c.f.stream())))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return fmt.Errorf("fill gap at %s sequence %d: %w", c.f.stream(), next, err)
			}
			at, err := gotSequence(raw, next, stream.CachedInfo().Config.AllowDirect)
			if err != nil {
				return fmt.Errorf("fill gap at %s sequence %d: %w", c.f.stream(), next, err)
			}
			if at >= seq {
				break
			}
			folded = append(folded, rawStreamMsg(at, raw))
			next = at + 1
		}
		folded = append(folded, streamMsg{seq: seq, subject: m.Subject(), header: m.Headers(), data: m.Data(), stored: meta.Timestamp})
		next = seq + 1
	}
	if len(folded) > 0 {
		// A store short of space folds nothing and acks nothing: the
		// batch waits here, and is folded once space is back.
		if !c.svc.awaitSpace(ctx) {
			return ctx.Err()
		}
		spans := c.startProcess(folded)
		if err := foldCommit(c.svc.store, c.f, folded); err != nil {
			endProcess(spans, err)
			return &fatalError{err}
		}
		endProcess(spans, nil)
		c.svc.advance(c.f.stream(), folded[len(folded)-1].seq)
		c.svc.metrics.folded.WithLabelValues(projectionOf(c.f.stream())).Add(float64(len(folded)))
		if hook := c.svc.cfg.afterCommit; hook != nil {
			if err := hook(c.f.stream(), folded[len(folded)-1].seq); err != nil {
				return &fatalError{err}
			}
		}
	}
	// One ack for the batch: the policy is ack-all, and everything up to
	// the highest sequence delivered is now folded (or was already).
	if last != nil {
		if err := last.Ack(); err != nil {
			c.log.Debug("ack", "err", err) // a redelivery is harmless: it is skipped
		}
	}
	return nil
}

// foldCommit is foldBatch, with a panic turned into an error: Pebble
// treats a failed WAL write as fatal (its logger's Fatalf), and the space
// guard makes that the rare case of a filesystem filled between the check
// and the write. The store then takes no more writes until the process
// restarts; the stream keeps everything not acked.
func foldCommit(s *store, f fold, msgs []streamMsg) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("projection store failed a write, restart to reopen it: %v", r)
		}
	}()
	return foldBatch(s, f, msgs)
}

// spacePoll is how often a fold waiting for space looks again.
const spacePoll = 250 * time.Millisecond

// awaitSpace returns at once while the store has its reserve free;
// otherwise it marks the service paused for storage and waits until the
// reserve is free again (true) or ctx ends (false).
func (s *Service) awaitSpace(ctx context.Context) bool {
	err := s.store.writable()
	if err == nil {
		return true
	}
	s.mu.Lock()
	first := s.paused == nil
	s.paused = err
	s.mu.Unlock()
	if first {
		s.metrics.storagePaused.Set(1)
		s.log.Error("projection store takes no writes: folding paused, nothing acked, until it does", "err", err)
	}
	since := time.Now()
	for err != nil {
		if backoff.Sleep(ctx, spacePoll) != nil {
			return false
		}
		err = s.store.writable()
		s.mu.Lock()
		if err != nil {
			s.paused = err
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	resumed := s.paused != nil
	s.paused = nil
	s.mu.Unlock()
	if resumed {
		s.metrics.storagePaused.Set(0)
		s.log.Info("projection store takes writes again: folding resumes", "paused_for", time.Since(since).Round(time.Millisecond))
	}
	return true
}

// consumerTracing is the projections' tracing configuration.
type consumerTracing struct {
	tracer trace.Tracer // nil: tracing off
}

// WithTracerProvider traces the fold of every message that carries a
// trace context (the ledger's republished receipts, the edges' task
// commits, the events): a CONSUMER span "process <stream>" per message,
// a child of the producer's span from the message's headers, lasting
// until its batch is committed. Messages without one get no span. A nil
// or noop provider traces nothing and reads no header.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracing.tracer = tracing.Tracer(tp, "github.com/chio-ledger/chio/projections") }
}

// startProcess starts the span of each traced message of a batch (an
// event envelope's events each have their own context); nil when none
// is traced or tracing is off.
func (c *consumer) startProcess(msgs []streamMsg) []trace.Span {
	t := c.svc.cfg.tracing.tracer
	if t == nil {
		return nil
	}
	var spans []trace.Span
	start := func(tp string, m *streamMsg) {
		parent := tracing.ExtractTraceparent(context.Background(), tp)
		if !trace.SpanContextFromContext(parent).IsValid() {
			return
		}
		_, span := tracing.StartProcess(context.Background(), parent, t, c.f.stream(),
			semconv.MessagingConsumerGroupName(c.durable), semconv.MessagingBatchMessageCount(len(msgs)),
			attribute.String("chio.subject", m.subject), attribute.Int64("chio.stream_seq", int64(m.seq)))
		spans = append(spans, span)
	}
	for i := range msgs {
		m := &msgs[i]
		if len(m.header) == 0 {
			continue
		}
		if tp := m.header.Get(tracing.HeaderTraceparent); tp != "" {
			start(tp, m)
			continue
		}
		if tps := m.header.Get(tracing.HeaderTraceparents); tps != "" {
			for _, tp := range tracing.SplitTraceparents(tps, strings.Count(tps, ",")+1) {
				start(tp, m)
			}
		}
	}
	return spans
}

// endProcess ends a batch's spans once it is committed (or failed).
func endProcess(spans []trace.Span, err error) {
	for _, s := range spans {
		tracing.End(s, err)
	}
}

// ensureStream returns the stream, creating it only when it does not
// exist yet: the events and receipts streams with the shared configuration
// (the ledger owns them), the task stream with the configuration the A2A
// edge gives it, so that whichever starts first brings up the same stream
// and the edge never finds one it disagrees with.
func (s *Service) ensureStream(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, error) {
	switch name {
	case schemas.EventsStream, schemas.ReceiptsStream:
		cfg := schemas.EventsStreamConfig(s.cfg.replicas)
		if name == schemas.ReceiptsStream {
			cfg = schemas.ReceiptsStreamConfig(s.cfg.replicas)
		}
		return schemas.OpenStream(ctx, js, cfg)
	}
	st, err := js.Stream(ctx, name)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("open stream %s: %w", name, err)
	}
	st, err = js.CreateStream(ctx, tasksStreamConfig(s.cfg.replicas, js.Conn().MaxPayload()))
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = js.Stream(ctx, name) // the edge created it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", name, err)
	}
	return st, nil
}

// tasksStreamConfig is the A2A edge's task stream configuration
// (edges/a2a/taskstore.StreamConfig with its defaults: the one
// schemas.TasksStreamConfig): one subject per task, kept until purged,
// refusing writes rather than dropping history.
func tasksStreamConfig(replicas int, maxPayload int64) jetstream.StreamConfig {
	maxMsg := int64(1 << 20) // taskstore.DefaultMaxMessageBytes
	if maxPayload > 0 && maxPayload < maxMsg {
		maxMsg = maxPayload
	}
	return schemas.TasksStreamConfig(replicas, int32(maxMsg), 2*time.Minute) // taskstore.DefaultDuplicateWindow
}
