package kernel

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/guards"
	"github.com/chio-ledger/chio/schemas"
)

// velocityGuard limits each root subject (the principal a capability was
// first granted to) to max calls per fixed window. The
// counters are KV keys (subject, window start) charged by compare-and-set,
// so the limit holds across replicas; old windows expire with the bucket's
// TTL. It runs last: it is the only guard that writes shared state.
type velocityGuard struct {
	kv     jetstream.KeyValue
	max    uint64
	window time.Duration
	now    func() time.Time
}

func (g *velocityGuard) Name() string { return guardVelocity }

func (g *velocityGuard) Check(ctx context.Context, c *guards.Call) (guards.Result, error) {
	secs := uint64(g.window / time.Second)
	start := uint64(g.now().Unix()) / secs * secs
	// Keyed on the root subject: a holder picks the subjects of the tokens
	// it delegates, so a per-leaf counter could be multiplied at will.
	key := schemas.KVKey(c.RootSubject) + "." + strconv.FormatUint(start, 10)
	errLimit := errors.New("velocity_limit_exceeded")
	err := casUpdate(ctx, g.kv, key, func(u *usage) error {
		if u.Invocations >= g.max {
			return errLimit
		}
		u.Invocations++
		return nil
	})
	switch {
	case err == nil:
		return guards.Result{Allow: true}, nil
	case errors.Is(err, errLimit):
		return guards.Result{Details: fmt.Sprintf("velocity_limit_exceeded: more than %d calls in %s", g.max, g.window)}, nil
	}
	return guards.Result{}, fmt.Errorf("velocity counter: %w", err)
}
