// Package eventwriter writes events to CHIO_EVENTS with group commit: one
// Writer per process, shared by every call, so that concurrent calls share
// their durable writes (schemas/envelope.go gives the layout and why).
package eventwriter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/internal/tracing"
	"github.com/chio-ledger/chio/schemas"
)

// Writer is the one writer of CHIO_EVENTS in a process: group commit.
// Whatever events concurrent calls queue while a write is being synced go
// out together in the next write, as one envelope (schemas.PackEvents), so
// one fsync on a single node, or one replicated proposal in a cluster,
// makes them all durable. A lone event goes out as a message of its own,
// exactly as before envelopes, so one client waits no longer than it did.
//
// There is no long-lived goroutine to start or stop: the call that queues
// into an idle writer starts a flusher, which writes until the queue is
// empty and then ends.
type Writer struct {
	js       jetstream.JetStream
	metrics  *metrics
	tracer   trace.Tracer        // nil: tracing off
	maxBytes int                 // an envelope's events, body and kinds header
	gate     *gate               // whether every consumer reads envelopes yet
	signer   *schemas.EdgeSigner // signs each message, if set

	mu      sync.Mutex
	queue   []*queued
	running bool
}

// queued is one event waiting for its write.
type queued struct {
	ctx   context.Context // the caller's: an event whose caller left before its write is dropped
	kind  string          // "decision", "outcome", …: the metrics' label
	id    string          // event id, the message id of a lone write
	event schemas.StreamEvent
	done  chan error // buffered: the flusher never blocks on a caller that left
	taken bool       // in a write (w.mu)
	// span is the event's PRODUCER span and traceparent its context as
	// the message carries it; nil and "" with tracing off.
	span        trace.Span
	traceparent string
}

// Option configures a Writer.
type Option func(*Writer)

// WithMetrics registers the writer's Prometheus series on reg: how long
// a write took until its PubAck, by event, and how many events each
// write carried.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(w *Writer) {
		w.metrics = newMetrics(reg)
		if reg != nil {
			reg.MustRegister(w.gate.open, w.gate.streamReset)
		}
	}
}

// WithTracerProvider traces each event's write as a PRODUCER span
// ("send CHIO_EVENTS", a child of the caller's context) whose context the
// message carries: as the traceparent header of a lone event, or as its
// entry in an envelope's Chio-Traceparents header. A nil or noop
// provider traces nothing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(w *Writer) { w.tracer = tracing.Tracer(tp, "github.com/chio-ledger/chio/edges/eventwriter") }
}

// signingOverhead bounds the two headers a signed message adds: the
// credential (its canonical JSON, base64url) and the signature.
const signingOverhead = 2 << 10

// WithSigner signs every message with the edge's key: its credential and
// signature travel as headers (schemas.HeaderEdgeCredential,
// schemas.HeaderEdgeSignature), and the ledger folds only what a
// certified edge signed.
func WithSigner(s *schemas.EdgeSigner) Option {
	return func(w *Writer) { w.signer = s }
}

// New returns a Writer publishing on js. It starts nothing: a flusher runs
// only while events are queued.
func New(js jetstream.JetStream, opts ...Option) *Writer {
	w := &Writer{js: js, metrics: newMetrics(nil), maxBytes: schemas.MaxEnvelopeBytes - schemas.EnvelopeOverhead,
		gate: newGate(js, DefaultGateRefresh)}
	if mp := int(js.Conn().MaxPayload()); mp > 0 && mp-schemas.EnvelopeOverhead < w.maxBytes {
		w.maxBytes = mp - schemas.EnvelopeOverhead // a server configured below the envelope bound
	}
	for _, o := range opts {
		o(w)
	}
	if w.signer != nil {
		w.maxBytes -= signingOverhead
	}
	return w
}

// Write queues one event (its subject names its kind; id is its event id)
// and waits until the write carrying it was acknowledged (nil) or failed.
// An error means the event may or may not be durable: a caller must treat
// it as not durable, and a later write of the same event id is
// deduplicated by the ledger. An event whose ctx ends before its write
// starts is not written.
func (w *Writer) Write(ctx context.Context, id string, ev schemas.StreamEvent) error {
	kind := strings.TrimPrefix(ev.Subject, "chio.events.")
	q := &queued{ctx: ctx, kind: kind, id: id, event: ev, done: make(chan error, 1)}
	if w.tracer == nil {
		return w.write(ctx, q)
	}
	sctx, span := tracing.StartSend(ctx, w.tracer, schemas.EventsStream,
		semconv.MessagingMessageID(id), attribute.String("chio.event.kind", kind))
	q.span, q.traceparent = span, tracing.Traceparent(sctx)
	err := w.write(ctx, q)
	tracing.End(span, err)
	return err
}

// write queues q and waits for its write (Write). While some consumer of
// the stream does not read envelopes (gate.go), q is written alone, at
// once, on the caller's goroutine, as every write was before envelopes.
func (w *Writer) write(ctx context.Context, q *queued) error {
	allowed := w.gate.allows()
	// A reset stream takes no new call (its decision), but the outcome of
	// one already decided, whose tool has run, is still written: the
	// operator who accepts the stream then gets its whole receipt, not an
	// incomplete one.
	if err := w.gate.resetErr(); err != nil && q.event.Subject != schemas.SubjectOutcome {
		return fmt.Errorf("%w: publish %s: %w", ErrUnavailable, q.id, err)
	}
	if !allowed {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("publish %s: %w", q.id, err)
		}
		q.taken = true
		return w.publish([]*queued{q})
	}
	w.mu.Lock()
	w.queue = append(w.queue, q)
	if !w.running {
		w.running = true
		go w.flush()
	}
	w.mu.Unlock()
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
	}
	// Taken into a write already: it may land, so wait for the write's
	// answer (bounded by publishWithin) rather than report it not durable.
	// Not taken: take skips it (its ctx has ended), so it never lands.
	w.mu.Lock()
	taken := q.taken
	w.mu.Unlock()
	if taken {
		return <-q.done
	}
	return fmt.Errorf("publish %s: %w", q.id, ctx.Err())
}

// flush writes what is queued, one write at a time, until nothing is.
func (w *Writer) flush() {
	for {
		batch := w.take()
		if batch == nil {
			return
		}
		err := w.publish(batch)
		var refused *jetstream.APIError
		if len(batch) > 1 && !errors.Is(err, ErrUnavailable) && (errors.As(err, &refused) || errors.Is(err, nats.ErrMaxPayload)) {
			// Refused, so nothing of it was stored: each event alone gets
			// its own answer, and one bad event fails no other.
			for _, q := range batch {
				q.done <- w.publish([]*queued{q})
			}
			continue
		}
		for _, q := range batch {
			q.done <- err
		}
	}
}

// take removes the next write's events from the queue: as many as fit in
// one envelope, skipping those whose caller has already gone (nobody waits
// for them, and a decision nobody acts on should not be written). It
// returns nil, and marks the writer idle, when the queue is empty.
func (w *Writer) take() []*queued {
	w.mu.Lock()
	defer w.mu.Unlock()
	var batch []*queued
	size := 0
	n := 0
	for ; n < len(w.queue) && len(batch) < schemas.MaxEnvelopeEvents; n++ {
		q := w.queue[n]
		if err := q.ctx.Err(); err != nil {
			q.done <- fmt.Errorf("publish %s: %w", q.id, err)
			continue
		}
		s := schemas.EnvelopeSize([]schemas.StreamEvent{q.event})
		if q.traceparent != "" {
			s += len(q.traceparent) + 1 // its entry in the traceparents header
		}
		if len(batch) > 0 && size+s > w.maxBytes {
			break
		}
		q.taken = true
		batch = append(batch, q)
		size += s
	}
	w.queue = w.queue[n:]
	if len(w.queue) == 0 {
		w.queue = nil // let the backing array go
	}
	if len(batch) == 0 {
		w.running = false
		return nil
	}
	return batch
}

// publish writes one batch: a lone event as itself, several as an
// envelope. It tries again while JetStream does not answer (a cluster
// electing a leader answers nothing for seconds): the message id makes a
// retry idempotent within the stream's duplicate window.
func (w *Writer) publish(batch []*queued) error {
	msg := &nats.Msg{Header: nats.Header{}}
	var id string
	if len(batch) == 1 {
		msg.Subject, msg.Data, id = batch[0].event.Subject, batch[0].event.Data, batch[0].id
		if tp := batch[0].traceparent; tp != "" {
			msg.Header.Set(tracing.HeaderTraceparent, tp)
		}
	} else {
		events := make([]schemas.StreamEvent, len(batch))
		for i, q := range batch {
			events[i] = q.event
		}
		body, err := schemas.PackEvents(events)
		if err != nil {
			return fmt.Errorf("publish %d events: %w", len(batch), err)
		}
		msg.Subject, msg.Data, id = schemas.SubjectEnvelope, body, schemas.EnvelopeMsgID(body)
		msg.Header.Set(schemas.HeaderEventKinds, schemas.EnvelopeKinds(events))
		if w.tracer != nil {
			tps := make([]string, len(batch))
			for i, q := range batch {
				tps[i] = q.traceparent
				if q.span != nil {
					q.span.SetAttributes(semconv.MessagingBatchMessageCount(len(batch)))
				}
			}
			if v := tracing.JoinTraceparents(tps); v != "" {
				msg.Header.Set(tracing.HeaderTraceparents, v)
			}
		}
	}
	if w.signer != nil {
		cred, sig := w.signer.Sign(msg.Subject, msg.Data)
		msg.Header.Set(schemas.HeaderEdgeCredential, cred)
		msg.Header.Set(schemas.HeaderEdgeSignature, sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishWithin)
	defer cancel()
	w.metrics.observeWrite(len(batch))
	for n := 1; ; n++ {
		attempt := time.Now()
		actx, acancel := context.WithTimeout(ctx, publishAttempt)
		_, err := w.js.PublishMsg(actx, msg, jetstream.WithMsgID(id))
		acancel()
		for _, q := range batch {
			w.metrics.observePublish(q.kind, attempt, err)
		}
		if err == nil {
			return nil
		}
		if !retryablePublish(err) || ctx.Err() != nil || publishRetry.Wait(ctx, n) != nil {
			return w.failed(batch, id, err)
		}
	}
}

// ErrUnavailable marks a write that failed because the event store could
// not take it: JetStream refused it for want of storage, or did not answer
// within publishWithin. The event is not durable, and no other event is
// being written either; callers answer "unavailable, retry later".
var ErrUnavailable = errors.New("event store unavailable")

// failed returns the error of a write that failed for good and counts it
// by reason for each of its events.
func (w *Writer) failed(batch []*queued, id string, err error) error {
	reason := failReason(err)
	for _, q := range batch {
		w.metrics.failed.WithLabelValues(q.kind, reason).Inc()
	}
	switch reason {
	case reasonStorage:
		return fmt.Errorf("%w: the stream refused the write for want of storage: publish %s: %w", ErrUnavailable, id, err)
	case reasonNoAnswer:
		return fmt.Errorf("%w: no answer within %s: publish %s: %w", ErrUnavailable, publishWithin, id, err)
	}
	return fmt.Errorf("publish %s: %w", id, err)
}

// Reasons a write failed, the label of chio_edge_event_writes_failed_total.
const (
	reasonStorage  = "storage"   // JetStream refused it: its store, or the account's storage limit, is full
	reasonNoAnswer = "no_answer" // no PubAck within publishWithin (no responders, timeouts)
	reasonRefused  = "refused"   // refused for another reason (too large, …)
	reasonOther    = "other"
)

// storageCodes are JetStream's answers to a write it has no room for.
var storageCodes = map[jetstream.ErrorCode]bool{
	10002: true, // account resource limits exceeded (what the embedded server's store watchdog sets)
	10023: true, // insufficient resources
	10047: true, // storage resources exceeded
	10077: true, // the stream's store failed the write
}

func failReason(err error) string {
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api) && storageCodes[api.ErrorCode]:
		return reasonStorage
	case errors.As(err, &api), errors.Is(err, nats.ErrMaxPayload):
		return reasonRefused
	case retryablePublish(err):
		return reasonNoAnswer
	}
	return reasonOther
}

// Bounds of publishing one write: each attempt, and all of them.
const (
	publishAttempt = 2 * time.Second
	publishWithin  = 10 * time.Second
)

// publishRetry paces the retries of a publish that JetStream did not
// acknowledge (a leader election, a timeout): 25 ms, then up to 500 ms.
var publishRetry = backoff.Policy{Base: 25 * time.Millisecond, Cap: 500 * time.Millisecond}

// retryablePublish reports whether a publish failed because JetStream did
// not answer (no leader yet, a node gone), not because it refused the write.
func retryablePublish(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}
