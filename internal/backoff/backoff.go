// Package backoff is the project's one way to pace retries: an
// exponential delay with jitter, and a sleep that ends with its context.
// Every retry loop (JetStream publishes, compare-and-set conflicts, push
// deliveries, lease renewals) waits through it, so that they all back off
// alike and all stop when their context does.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff: attempt n (1-based) waits about
// Base·2^(n-1), never more than Cap, with "equal jitter": half of it
// fixed, half random, so that replicas retrying the same conflict spread
// out without any retry coming back at once.
type Policy struct {
	Base, Cap time.Duration
}

// Delay is the pause before retry attempt n (1-based; n < 1 counts as 1).
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Cap
	// Base·2^shift below Cap, tested without overflowing the shift.
	if shift := max(attempt, 1) - 1; shift < 63 && p.Base > 0 && p.Base <= p.Cap>>shift {
		d = p.Base << shift
	}
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// Wait pauses for Delay(attempt), or until ctx ends, and then returns
// ctx.Err().
func (p Policy) Wait(ctx context.Context, attempt int) error {
	return Sleep(ctx, p.Delay(attempt))
}

// Sleep pauses for d, or until ctx ends, and then returns ctx.Err(). It
// returns nil after a full pause even if ctx ended meanwhile; a caller
// checks ctx before its next attempt anyway.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
