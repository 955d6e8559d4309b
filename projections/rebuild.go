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
	return RebuildWithProgress(ctx, js, dir, nil, opts...)
}

// RebuildWithProgress is Rebuild calling progress, unless nil, after each
// message read with the messages read so far from the three streams and
// the messages they held when it started. The calls are serialized;
// cancelling ctx from one stops the rebuild before the next message. A
// rebuild stopped part way leaves a store holding part of the state: the
// caller discards it.
func RebuildWithProgress(ctx context.Context, js jetstream.JetStream, dir string, progress func(done, total uint64), opts ...Option) (*RebuildResult, error) {
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
	// Every stream's extent first, so the total is known before any fold.
	ranges := make([]streamRange, len(streams()))
	var total uint64
	for i, str := range streams() {
		if ranges[i], err = openRange(ctx, js, s.fold(i).stream()); err != nil {
			return nil, fmt.Errorf("rebuild %s: %w", str.name, err)
		}
		total += ranges[i].msgs
	}
	var mu sync.Mutex
	var read uint64
	step := func() {
		if progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		read++
		progress(read, max(total, read))
	}
	if progress != nil {
		progress(0, total)
	}
	// The folds write disjoint keys, so the streams rebuild concurrently.
	var wg sync.WaitGroup
	errs := make([]error, len(streams()))
	for i, str := range streams() {
		wg.Go(func() {
			if errs[i] = s.rebuildStream(ctx, ranges[i], s.fold(i), step); errs[i] != nil {
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

// streamRange is what a rebuild reads of one stream: up to last, the last
// sequence when it started, msgs messages.
type streamRange struct {
	stream jetstream.Stream // nil: the stream does not exist
	last   uint64
	msgs   uint64
}

// openRange finds the extent of stream name.
func openRange(ctx context.Context, js jetstream.JetStream, name string) (streamRange, error) {
	stream, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return streamRange{}, nil // nothing was ever written: nothing to fold
	}
	if err != nil {
		return streamRange{}, fmt.Errorf("open stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return streamRange{}, fmt.Errorf("stream info: %w", err)
	}
	return streamRange{stream: stream, last: info.State.LastSeq, msgs: info.State.Msgs}, nil
}

// rebuildStream folds one stream up to r.last, calling step after each
// message it reads.
func (s *Service) rebuildStream(ctx context.Context, r streamRange, f fold, step func()) error {
	if r.stream == nil || r.msgs == 0 {
		return nil
	}
	cons, err := r.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
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
		// Next may hand out buffered messages after ctx ended: check it
		// here so an interrupt stops the rebuild at once.
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped: %w", err)
		}
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("read stream: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read stream: %w", err)
		}
		seq := meta.Sequence.Stream
		if seq > r.last {
			// Published after Rebuild started (the last one present then
			// was deleted meanwhile): not part of this rebuild.
			done = true
		} else {
			done = seq == r.last
			batch = append(batch, streamMsg{seq: seq, subject: m.Subject(), header: m.Headers(), data: m.Data(), stored: meta.Timestamp})
		}
		if len(batch) == s.cfg.batch || (done && len(batch) > 0) {
			if err := foldBatch(s.store, f, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
		if seq <= r.last {
			step()
		}
	}
	return nil
}
