package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// Follow keeps a standby's store in step with the log: it folds CHIO_EVENTS
// from the store's position onwards through the same fold as Run, until
// ctx ends. Like Rebuild it only reads the stream (an ordered consumer): it
// acks nothing, publishes nothing and schedules no timeouts, which remain
// the active writer's. Because the fold is a function of the stream, the
// standby's log is the active's, leaf for leaf and root for root, and a
// takeover starts from a warm store. Follow returns nil when ctx ends. A
// store out of space pauses it (as it does Run) until the store takes
// writes again.
func (l *Ledger) Follow(ctx context.Context) error {
	for {
		err := l.follow(ctx)
		switch {
		case ctx.Err() != nil:
			return err
		case errors.Is(err, logstore.ErrUnavailable):
			if !l.awaitStore(ctx, err) {
				return nil
			}
		case isStreamReset(err):
			// Not the stream this log folds: a standby follows nothing
			// until the writer's operator has chosen.
			if !l.awaitStream(ctx, err) {
				return nil
			}
		case errors.Is(err, errConsumerLost):
			if !sleep(ctx, time.Second) {
				return nil
			}
		default:
			return err
		}
	}
}

func (l *Ledger) follow(ctx context.Context) error {
	if err := l.init(); err != nil {
		return err
	}
	l.loadHead(ctx)
	var stream jetstream.Stream
	for {
		var err error
		stream, err = l.js.Stream(ctx, schemas.EventsStream)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		// The active writer creates the streams; a standby may start first.
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			l.log.Warn("follow: open stream", "err", err)
		}
		if !sleep(ctx, time.Second) {
			return nil
		}
	}
	if err := l.checkStream(ctx, stream, false); err != nil {
		return err
	}
	// The ordered consumer makes itself again, by the stream's name, if
	// its stream goes: the watch ends this run first when the stream is
	// gone or another.
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watched := make(chan struct{})
	go func() { defer close(watched); l.watchStream(ctx, cancel, false) }()
	defer func() { cancel(nil); <-watched }()
	stopped := func() error {
		if parent.Err() != nil {
			return nil
		}
		return context.Cause(ctx)
	}
	next := l.store.State().StreamSeq + 1
	if err := checkHeld(stream.CachedInfo(), next); err != nil {
		return err
	}
	reported := make(chan struct{})
	go func() { defer close(reported); l.reportPositions(ctx) }()
	defer func() { cancel(nil); <-reported }()
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("follow: consumer at stream sequence %d: %w", next, err)
	}
	msgs := make(chan jetstream.Msg, 2*l.cfg.maxBatch)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(2*l.cfg.maxBatch), jetstream.PullExpiry(schemas.PullExpiry))
	if err != nil {
		return fmt.Errorf("follow: consume: %w", err)
	}
	defer cc.Stop()
	l.log.Info("ledger standing by: following the event stream", "size", l.store.State().Size, "stream_seq", next-1)
	for {
		batch, ok := l.collect(ctx, msgs)
		if !ok || ctx.Err() != nil {
			return stopped() // a batch cut short by ctx is folded by the next holder
		}
		events := make([]event, 0, len(batch))
		pos := l.store.State().StreamSeq
		for _, m := range batch {
			meta, err := m.Metadata()
			if err != nil || meta.Sequence.Stream <= pos {
				continue // the ordered consumer restarted below our position
			}
			events = append(events, withEdge(event{seq: meta.Sequence.Stream, subject: m.Subject(), data: m.Data(), stored: meta.Timestamp}, m.Headers()))
		}
		if len(events) == 0 {
			continue
		}
		// An ordered consumer follows a stream made again under its name
		// from its old position: what was delivered before this look came
		// from the stream the log folds only if the stream is still it.
		if info, err := stream.Info(ctx); err != nil || schemas.StreamIdentity(info) != l.store.State().EventsStream {
			if ctx.Err() != nil {
				return stopped()
			}
			return fmt.Errorf("%w: stream %s is not the one this log follows (%v)", errConsumerLost, schemas.EventsStream, err)
		}
		// An ordered consumer reads on over a purged range as over deleted
		// messages: every jump is checked against the stream's first
		// sequence, as of the look above (taken after the delivery, so a
		// purge that made a jump shows in it).
		prev := pos
		for _, ev := range events {
			if ev.seq > prev+1 {
				if err := checkHeld(stream.CachedInfo(), prev+1); err != nil {
					return err
				}
			}
			prev = ev.seq
		}
		l.screen(events) // a standby folds what the writer folds; the writer quarantines
		started := l.cfg.now()
		_, completed, leaves, err := l.apply(events, nil)
		if err != nil {
			return err
		}
		l.committed(len(events), completed, leaves, started)
	}
}
