package eventwriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/schemas"
)

// DefaultGateRefresh is how often the writer looks again at who consumes
// the events stream (WithGateRefresh). A consumer of an older release
// that appears between two looks may miss the envelopes written in
// between; a look is one JetStream API request, so this is cheap.
const DefaultGateRefresh = 5 * time.Second

// gateLookWithin bounds one look at the stream's consumers.
const gateLookWithin = 2 * time.Second

// gateRetry is how soon the writer looks again after a look that found no
// durable consumer at all or failed, doubling after each such look up to
// the refresh interval. Both are what an edge meets while it starts
// beside its ledger (chio up, a benchmark, a rolling restart): the
// ledger's consumer appears a moment later, and a whole refresh interval
// of one event per synced write would build a backlog the ledger then
// works off for seconds; the doubling keeps an edge whose ledger is down
// from asking several times a second. A look that found an older
// release's consumer waits the full interval: that is a state, not a race.
const gateRetry = 250 * time.Millisecond

// gate decides whether the writer may pack events into envelopes: only
// while every durable consumer of the events stream declares that it
// reads them (schemas.ReadsEnvelopeLayout). Until a look has answered,
// after a look that failed, and while no durable consumer exists at all
// (nobody has said so yet), it is shut: every event is then written as a
// message of its own, which every release reads. So edges can be
// upgraded before or after the ledgers and projections, in any order.
//
// There is no goroutine to start or stop: a write that finds the last
// look older than the refresh interval starts the next look in the
// background and goes on with what the last one found.
type gate struct {
	js    jetstream.JetStream
	every time.Duration
	open  prometheus.Gauge
	// streamReset is 1 while reset is set.
	streamReset prometheus.Gauge

	mu      sync.Mutex
	allowed bool
	looked  time.Time // when the last look answered (zero: never)
	// retry, when set, is how soon to look again: the last look found no
	// durable consumer or failed (gateRetry, doubling up to every).
	retry    time.Duration
	looking  bool
	blockers []string // durable consumers that declare nothing, as last seen
	// reset, when set, is why the events stream is not the one the
	// ledger's log folds (schemas.CheckEventsStream): every write fails
	// with it until a look finds the stream accepted again.
	reset error
}

func newGate(js jetstream.JetStream, every time.Duration) *gate {
	return &gate{js: js, every: every, open: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chio_edge_event_envelopes_enabled",
		Help: "1 while every durable consumer of CHIO_EVENTS declares it reads event envelopes, so concurrent calls share writes; 0 while events are written one per message.",
	}), streamReset: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chio_edge_events_stream_reset",
		Help: "1 while CHIO_EVENTS is not the stream the ledger's log folds (deleted and created again): every call is refused until an operator accepts the new stream or rebuilds the log.",
	})}
}

// allows reports whether envelopes may be written now, and starts the
// next look when the last one is stale.
func (g *gate) allows() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	every := g.every
	if g.retry > 0 {
		every = min(every, g.retry)
	}
	if !g.looking && time.Since(g.looked) >= every {
		g.looking = true
		go g.look()
	}
	return g.allowed
}

// look lists the events stream's consumers and opens or shuts the gate.
func (g *gate) look() {
	ctx, cancel := context.WithTimeout(context.Background(), gateLookWithin)
	defer cancel()
	allowed, blockers, info, err := envelopeReaders(ctx, g.js)
	g.mu.Lock()
	was, wasBlockers := g.allowed, g.blockers
	g.allowed, g.blockers, g.looked, g.looking = allowed, blockers, time.Now(), false
	g.retryAfter(err != nil || !allowed && len(blockers) == 0)
	g.mu.Unlock()
	g.checkStream(ctx, info)
	if allowed {
		g.open.Set(1)
	} else {
		g.open.Set(0)
	}
	switch {
	case err != nil:
		if was {
			slog.Warn("event envelopes off: cannot list the consumers of the events stream", "stream", schemas.EventsStream, "err", err)
		}
	case allowed && !was:
		slog.Info("event envelopes on: every durable consumer of the events stream reads them", "stream", schemas.EventsStream)
	case !allowed && (was || !slices.Equal(blockers, wasBlockers)) && len(blockers) > 0:
		slog.Warn("event envelopes off: consumers of the events stream that do not declare they read them (an older release) get one event per message",
			"stream", schemas.EventsStream, "consumers", blockers)
	}
}

// envelopeReaders reports whether every durable consumer of the events
// stream, and at least one, declares that it reads envelopes; blockers
// names those that do not.
func envelopeReaders(ctx context.Context, js jetstream.JetStream) (bool, []string, *jetstream.StreamInfo, error) {
	stream, err := js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		return false, nil, nil, fmt.Errorf("look up stream %s: %w", schemas.EventsStream, err)
	}
	lister := stream.ListConsumers(ctx)
	durable := 0
	var blockers []string
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue // ephemeral: holds no position across restarts
		}
		durable++
		if !schemas.ReadsEnvelopeLayout(ci.Config.Metadata) {
			blockers = append(blockers, ci.Name)
		}
	}
	if err := lister.Err(); err != nil {
		return false, nil, stream.CachedInfo(), fmt.Errorf("list the consumers of %s: %w", schemas.EventsStream, err)
	}
	slices.Sort(blockers)
	return durable > 0 && len(blockers) == 0, blockers, stream.CachedInfo(), nil
}

// checkStream sets or clears reset from the stream's identity against the
// ledger's record. A look that cannot tell (no stream info, the record
// unreadable) keeps what the last one found.
func (g *gate) checkStream(ctx context.Context, info *jetstream.StreamInfo) {
	if info == nil {
		return
	}
	err := schemas.CheckEventsStream(ctx, g.js, info)
	if err != nil && !errors.Is(err, schemas.ErrStreamReset) {
		slog.Warn("cannot check that the events stream is the one the log folds", "stream", schemas.EventsStream, "err", err)
		return
	}
	g.mu.Lock()
	was := g.reset
	g.reset = err
	g.mu.Unlock()
	switch {
	case err != nil && was == nil:
		g.streamReset.Set(1)
		slog.Error("refusing calls: the events stream is not the one the ledger's log folds", "err", err)
	case err == nil && was != nil:
		g.streamReset.Set(0)
		slog.Info("the events stream is the log's again: calls are taken", "stream", schemas.EventsStream)
	}
}

// retryAfter sets how soon the next look is due after one that found
// nobody (or failed), soon, or after one that found the consumers, the
// refresh interval. g.mu is held.
func (g *gate) retryAfter(soon bool) {
	switch {
	case !soon:
		g.retry = 0
	case g.retry == 0:
		g.retry = gateRetry
	default:
		g.retry = min(2*g.retry, g.every)
	}
}

// resetErr is the reset a write fails with, or nil.
func (g *gate) resetErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reset
}

// WithGateRefresh sets how often the writer looks again at the events
// stream's consumers to decide whether it may write envelopes
// (DefaultGateRefresh when d <= 0).
func WithGateRefresh(d time.Duration) Option {
	return func(w *Writer) {
		if d > 0 {
			w.gate.every = d
		}
	}
}

// Envelopes reports whether the writer currently writes envelopes (every
// durable consumer of the events stream declared it reads them, as of the
// last look).
func (w *Writer) Envelopes() bool {
	w.gate.mu.Lock()
	defer w.gate.mu.Unlock()
	return w.gate.allowed
}

// Look looks at the events stream's consumers now, and waits for the
// answer: an edge does it once before it serves, so its first calls
// already share writes when they may. Later looks happen by themselves.
func (w *Writer) Look(ctx context.Context) error {
	allowed, blockers, info, err := envelopeReaders(ctx, w.gate.js)
	w.gate.mu.Lock()
	w.gate.allowed, w.gate.blockers, w.gate.looked = allowed, blockers, time.Now()
	w.gate.retryAfter(err != nil || !allowed && len(blockers) == 0)
	w.gate.mu.Unlock()
	w.gate.checkStream(ctx, info)
	if allowed {
		w.gate.open.Set(1)
	} else {
		w.gate.open.Set(0)
	}
	return err
}
