package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// RebuildOption configures one Rebuild.
type RebuildOption func(*rebuildConfig)

type rebuildConfig struct {
	progress func(done, total uint64)
}

// WithProgress has Rebuild call progress after each message it reads with
// the messages read so far and the messages the stream held when Rebuild
// started. It is called on Rebuild's goroutine: cancelling Rebuild's
// context from it stops the rebuild before the next message.
func WithProgress(progress func(done, total uint64)) RebuildOption {
	return func(c *rebuildConfig) { c.progress = progress }
}

// Rebuild replays CHIO_EVENTS, from its first message to the last one present
// when Rebuild starts, into an empty store through the same fold the live
// ledger uses. It acks nothing, publishes nothing and schedules no timeouts:
// the stream is only read. Receipt bytes, leaves and roots come out identical
// to the live log's, because every input to them is in the events.
//
// A rebuild stopped part way (its context ended) leaves a store holding a
// prefix of the log: the caller discards it, as it has no complete state.
func (l *Ledger) Rebuild(ctx context.Context, opts ...RebuildOption) (logstore.State, error) {
	var rc rebuildConfig
	for _, o := range opts {
		o(&rc)
	}
	if st := l.store.State(); st.Size != 0 || st.StreamSeq != 0 {
		return st, errors.New("rebuild: the target store is not empty")
	}
	if err := l.init(); err != nil {
		return logstore.State{}, err
	}
	stream, err := l.js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		return logstore.State{}, fmt.Errorf("rebuild: open stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return logstore.State{}, fmt.Errorf("rebuild: stream info: %w", err)
	}
	if first := info.State.FirstSeq; first > 1 {
		return logstore.State{}, fmt.Errorf("rebuild: %w: %s begins at sequence %d (event retention, or an operator, purged what came before): a log cannot be rebuilt from it; restore the log store from a backup instead",
			ErrEventsPurged, schemas.EventsStream, first)
	}
	last, total := info.State.LastSeq, info.State.Msgs
	if rc.progress != nil {
		rc.progress(0, total)
	}
	if total == 0 {
		return l.store.State(), nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return logstore.State{}, fmt.Errorf("rebuild: consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * l.cfg.maxBatch))
	if err != nil {
		return logstore.State{}, fmt.Errorf("rebuild: consume: %w", err)
	}
	defer it.Stop()
	events := make([]event, 0, l.cfg.maxBatch)
	weight := 0 // events in the batch: an envelope counts as its events
	var read uint64
	for done := false; !done; {
		// Next may hand out buffered messages after ctx ended: check it
		// here so an interrupt stops the rebuild at once.
		if err := ctx.Err(); err != nil {
			return logstore.State{}, fmt.Errorf("rebuild: stopped after %d of %d messages: %w", read, total, err)
		}
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return logstore.State{}, fmt.Errorf("rebuild: read stream: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return logstore.State{}, fmt.Errorf("rebuild: %w", err)
		}
		done = meta.Sequence.Stream >= last
		events = append(events, withEdge(event{seq: meta.Sequence.Stream, subject: m.Subject(), data: m.Data(), stored: meta.Timestamp}, m.Headers()))
		weight += schemas.EventCount(m.Subject(), m.Headers().Get(schemas.HeaderEventKinds))
		if weight >= l.cfg.maxBatch || done {
			weight = 0
			l.screen(events) // the same messages refused as when they were folded
			if _, _, _, err := l.apply(events, nil); err != nil {
				return logstore.State{}, err
			}
			events = events[:0]
		}
		read++
		if rc.progress != nil {
			rc.progress(read, max(total, read))
		}
	}
	// A purge from the head while the rebuild read (a writer with event
	// retention) shows as a first sequence above 1 now: the rebuilt log
	// may then miss what went before the consumer reached it.
	if info, err := stream.Info(ctx); err != nil {
		return logstore.State{}, fmt.Errorf("rebuild: stream info: %w", err)
	} else if info.State.FirstSeq > 1 {
		return logstore.State{}, fmt.Errorf("rebuild: %w: %s was purged up to sequence %d while it was read: the rebuilt log is not complete",
			ErrEventsPurged, schemas.EventsStream, info.State.FirstSeq-1)
	}
	return l.store.State(), nil
}
