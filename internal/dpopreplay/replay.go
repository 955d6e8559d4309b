// Package dpopreplay makes a proof of possession usable once across every
// replica: its one-time id is claimed in a JetStream KV bucket whose
// entries live as long as a proof can be fresh. A claim is a create that
// fails when the key exists, so two replicas racing on one proof see one
// winner. An unreachable bucket refuses (fail closed).
//
// The bucket is kept in memory (replicated like every other bucket on a
// cluster), not on disk: a claim costs a round to the server but no
// fsync of its own, so a proof adds no synced write to a call. What a
// lost bucket forgot is made harmless by a floor kept on disk (the small
// file bucket CHIO_DPOP_EPOCH): when a replica finds the memory bucket
// is not the one the floor record names (its servers restarted and lost
// it), the floor becomes the new bucket's creation time plus the clock
// skew, and every replica refuses a proof issued before the floor as
// stale. A proof claimed in the lost bucket was issued before the loss
// (within the skew), so it can never be claimed again in its successor.
// The first bucket ever made has no floor.
package dpopreplay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// claimTimeout bounds one claim: a stuck bucket refuses rather than
// holding the call.
const claimTimeout = 5 * time.Second

// Store claims one-time ids. It is safe for concurrent use.
type Store struct {
	js       jetstream.JetStream
	replicas int
	window   time.Duration
	skew     time.Duration

	mu    sync.Mutex
	kv    jetstream.KeyValue
	floor int64 // Unix seconds: proofs issued before it are refused
}

// epochRecord is the floor record: the memory bucket it belongs to (its
// creation time, Unix nanoseconds) and the floor.
type epochRecord struct {
	Bucket int64 `json:"bucket"`
	Floor  int64 `json:"floor"`
}

const epochKey = "epoch"

// Window is how long a claimed id must be remembered for proofs of the
// given lifetime and clock skew: a proof is fresh from iat-skew to
// iat+lifetime+skew as any replica's clock reads it.
func Window(lifetime, skew time.Duration) time.Duration { return lifetime + 2*skew }

// Open opens (creating if needed) the bucket for proofs of the given
// lifetime and clock skew: entries are kept for Window(lifetime, skew) at
// least. Every kernel and read service opens it, each with its own proof
// window: an existing bucket that keeps entries longer is left as it is,
// so no opener cuts another's window short.
func Open(ctx context.Context, js jetstream.JetStream, replicas int, lifetime, skew time.Duration) (*Store, error) {
	s := &Store{js: js, replicas: replicas, window: Window(lifetime, skew), skew: skew}
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// open (re)opens the bucket and reads its epoch.
func (s *Store) open(ctx context.Context) error {
	kv, err := s.js.KeyValue(ctx, schemas.ProofsBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		kv = nil
	case err != nil:
		return fmt.Errorf("open %s: %w", schemas.ProofsBucket, err)
	}
	var st jetstream.KeyValueStatus
	if kv != nil {
		if st, err = kv.Status(ctx); err != nil {
			return fmt.Errorf("open %s: %w", schemas.ProofsBucket, err)
		}
	}
	if kv == nil || st.TTL() < s.window {
		if kv, err = s.js.CreateOrUpdateKeyValue(ctx, schemas.ProofsConfig(s.replicas, s.window)); err != nil {
			return fmt.Errorf("open %s: %w", schemas.ProofsBucket, err)
		}
		if st, err = kv.Status(ctx); err != nil {
			return fmt.Errorf("open %s: %w", schemas.ProofsBucket, err)
		}
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return fmt.Errorf("open %s: no stream information", schemas.ProofsBucket)
	}
	floor, err := s.floorFor(ctx, bs.StreamInfo().Created)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.kv, s.floor = kv, floor
	s.mu.Unlock()
	return nil
}

// floorFor is the floor for the memory bucket created at created: the
// recorded one if the record names this bucket, none for the first
// bucket ever, and created+skew for a bucket that replaced a lost one
// (recorded by compare-and-set, so replicas agree).
func (s *Store) floorFor(ctx context.Context, created time.Time) (int64, error) {
	ekv, err := s.js.CreateOrUpdateKeyValue(ctx, schemas.ProofsEpochConfig(s.replicas))
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", schemas.ProofsEpochBucket, err)
	}
	this := created.UnixNano()
	for range 8 {
		e, err := ekv.Get(ctx, epochKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			rec, _ := json.Marshal(epochRecord{Bucket: this})
			if _, err := ekv.Create(ctx, epochKey, rec); err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
				if err != nil {
					return 0, fmt.Errorf("record the replay epoch: %w", err)
				}
				return 0, nil
			}
			continue // another replica recorded it first
		}
		if err != nil {
			return 0, fmt.Errorf("read the replay epoch: %w", err)
		}
		var rec epochRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return 0, fmt.Errorf("read the replay epoch: %w", err)
		}
		if rec.Bucket == this {
			return rec.Floor, nil
		}
		next := epochRecord{Bucket: this, Floor: created.Add(s.skew).Unix() + 1}
		raw, _ := json.Marshal(next)
		if _, err := ekv.Update(ctx, epochKey, raw, e.Revision()); err == nil {
			return next.Floor, nil
		}
		// Another replica moved it first: read it again.
	}
	return 0, fmt.Errorf("record the replay epoch: too much contention on %s", schemas.ProofsEpochBucket)
}

// Claim records key, the one-time id of a proof issued at iat, as used.
// It returns a *dpop.Error: CheckReplayed when the key was claimed
// before, CheckStale for a proof older than the bucket, CheckState when
// the bucket cannot answer. A bucket that has vanished (its servers lost
// it) is made again once, with a new epoch.
func (s *Store) Claim(ctx context.Context, key string, iat time.Time) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		kv, floor := s.kv, s.floor
		s.mu.Unlock()
		if iat.Unix() < floor {
			return &dpop.Error{Check: dpop.CheckStale, Msg: fmt.Sprintf(
				"issued at %d: the replay state was rebuilt after a restart, and proofs issued before %d might have been used in the state it lost; make a new proof from then on",
				iat.Unix(), floor)}
		}
		_, err := kv.Create(ctx, key, []byte{1})
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists):
			return &dpop.Error{Check: dpop.CheckReplayed, Msg: "this proof was used before; make a new proof for every request"}
		case attempt == 0 && gone(err):
			if oerr := s.open(ctx); oerr == nil {
				continue
			}
		}
		return &dpop.Error{Check: dpop.CheckState, Msg: fmt.Sprintf("the replay state cannot be reached (fail closed): %v", err)}
	}
}

// gone reports an error that says the bucket's stream no longer exists.
func gone(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}

// Pending is a claim under way.
type Pending struct {
	done chan struct{}
	err  error
}

// Start begins a claim and returns at once; Wait gives its result.
func (s *Store) Start(ctx context.Context, key string, iat time.Time) *Pending {
	p := &Pending{done: make(chan struct{})}
	go func() {
		p.err = s.Claim(ctx, key, iat)
		close(p.done)
	}()
	return p
}

// Wait returns the claim's result, or ctx's error if ctx ends first (the
// claim itself goes on: it is bounded by claimTimeout).
func (p *Pending) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return &dpop.Error{Check: dpop.CheckState, Msg: fmt.Sprintf("the replay claim did not finish: %v", ctx.Err())}
	}
}
