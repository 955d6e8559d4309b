package projections

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// RebuildResult is what Rebuild folded.
type RebuildResult struct {
	Positions Positions `json:"positions"`
	// Digest is the rebuilt store's Digest.
	Digest string `json:"digest"`
}

// Rebuild folds the three streams from their first message up to the last
// sequence each had when Rebuild started into an empty store in dir,
// through the same folds as the live service, and returns the positions
// and the digest. It only reads the streams (ordered consumers; no durable
// is touched). The result is byte for byte the state of a live projection
// with the same kernel key that has folded the same sequences: nothing in
// it depends on batch boundaries or the clock. A store that holds anything
// is refused (ErrNotEmpty).
func Rebuild(ctx context.Context, js jetstream.JetStream, dir string, opts ...Option) (*RebuildResult, error) {
	s, err := Open(dir, opts...)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	empty, err := s.store.empty()
	if err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	if !empty {
		return nil, fmt.Errorf("rebuild %s: %w", dir, ErrNotEmpty)
	}
	// The folds write disjoint keys, so the streams rebuild concurrently.
	var wg sync.WaitGroup
	errs := make([]error, len(streams()))
	for i, str := range streams() {
		wg.Go(func() {
			if errs[i] = s.rebuildStream(ctx, js, s.fold(i)); errs[i] != nil {
				errs[i] = fmt.Errorf("rebuild %s: %w", str.name, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res := &RebuildResult{}
	for _, str := range streams() {
		p, err := s.store.position(str.name)
		if err != nil {
			return nil, err
		}
		s.pos[str.name] = p
	}
	res.Positions = s.Positions()
	if res.Digest, err = s.Digest(); err != nil {
		return nil, err
	}
	return res, nil
}

// rebuildStream folds one stream up to its last sequence at the start.
func (s *Service) rebuildStream(ctx context.Context, js jetstream.JetStream, f fold) error {
	stream, err := js.Stream(ctx, f.stream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // nothing was ever written: nothing to fold
	}
	if err != nil {
		return fmt.Errorf("open stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2 * s.cfg.batch))
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	defer it.Stop()
	batch := make([]streamMsg, 0, s.cfg.batch)
	for done := false; !done; {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read stream: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read stream: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq > last {
			// Published after Rebuild started (the last one present then
			// was deleted meanwhile): not part of this rebuild.
			done = true
		} else {
			done = seq == last
			batch = append(batch, streamMsg{seq: seq, subject: m.Subject(), header: m.Headers(), data: m.Data()})
		}
		if len(batch) == s.cfg.batch || (done && len(batch) > 0) {
			if err := foldBatch(s.store, f, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}
