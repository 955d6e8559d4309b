package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// Rebuild replays CHIO_EVENTS, from its first message to the last one present
// when Rebuild starts, into an empty store through the same fold the live
// ledger uses. It acks nothing, publishes nothing and schedules no timeouts:
// the stream is only read. Receipt bytes, leaves and roots come out identical
// to the live log's, because every input to them is in the events.
func (l *Ledger) Rebuild(ctx context.Context) (logstore.State, error) {
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
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
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
	for done := false; !done; {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return logstore.State{}, fmt.Errorf("rebuild: read stream: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return logstore.State{}, fmt.Errorf("rebuild: %w", err)
		}
		done = meta.Sequence.Stream >= last
		events = append(events, event{seq: meta.Sequence.Stream, subject: m.Subject(), data: m.Data()})
		weight += schemas.EventCount(m.Subject(), m.Headers().Get(schemas.HeaderEventKinds))
		if weight >= l.cfg.maxBatch || done {
			weight = 0
			if _, _, _, err := l.apply(events, nil); err != nil {
				return logstore.State{}, err
			}
			events = events[:0]
		}
	}
	return l.store.State(), nil
}
