// Package dpopreplay makes a proof of possession usable once across every
// replica: its one-time id is claimed in a JetStream KV bucket whose
// entries live as long as a proof can be fresh. A claim is a create that
// fails when the key exists, so two replicas racing on one proof see one
// winner. An unreachable bucket refuses (fail closed).
package dpopreplay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// claimTimeout bounds one claim: a stuck bucket refuses rather than
// holding the call.
const claimTimeout = 5 * time.Second

// Store claims one-time ids.
type Store struct {
	kv jetstream.KeyValue
}

// Window is how long a claimed id must be remembered for proofs of the
// given lifetime and clock skew: a proof is fresh from iat-skew to
// iat+lifetime+skew as any replica's clock reads it.
func Window(lifetime, skew time.Duration) time.Duration { return lifetime + 2*skew }

// Open opens (creating if needed) the bucket with entries kept for at
// least window. Every kernel and read service opens it, each with its
// own proof window: an existing bucket that keeps entries longer is left
// as it is, so no opener cuts another's window short.
func Open(ctx context.Context, js jetstream.JetStream, replicas int, window time.Duration) (*Store, error) {
	if kv, err := js.KeyValue(ctx, schemas.ProofsBucket); err == nil {
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", schemas.ProofsBucket, err)
		}
		if st.TTL() >= window {
			return &Store{kv: kv}, nil
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open %s: %w", schemas.ProofsBucket, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, schemas.ProofsConfig(replicas, window))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", schemas.ProofsBucket, err)
	}
	return &Store{kv: kv}, nil
}

// Claim records key as used. It returns a *dpop.Error: CheckReplayed when
// the key was claimed before, CheckState when the bucket cannot answer.
func (s *Store) Claim(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	_, err := s.kv.Create(ctx, key, []byte{1})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return &dpop.Error{Check: dpop.CheckReplayed, Msg: "this proof was used before; make a new proof for every request"}
	default:
		return &dpop.Error{Check: dpop.CheckState, Msg: fmt.Sprintf("the replay state cannot be reached (fail closed): %v", err)}
	}
}

// Pending is a claim under way.
type Pending struct {
	done chan struct{}
	err  error
}

// Start begins a claim and returns at once; Wait gives its result.
func (s *Store) Start(ctx context.Context, key string) *Pending {
	p := &Pending{done: make(chan struct{})}
	go func() {
		p.err = s.Claim(ctx, key)
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
