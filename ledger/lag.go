package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The bound on a receipt. An edge answers a call once its events are
// durable on the stream; the ledger signs its receipt when it folds them.
// So a call answered with a receipt id has its receipt once the ledger has
// folded the stream up to it: within the lag bound for a call whose
// outcome came (or a deny), within the incomplete timeout plus the lag
// bound for an allowed call whose outcome never came (its receipt is
// signed incomplete). While the oldest event not yet folded is older than
// the bound, receipts are late, and the ledger says so: LagErr (readiness)
// and chio_ledger_integration_lag_seconds.

// DefaultLagBound is how far behind the stream the ledger may fall before
// it reports receipts late.
const DefaultLagBound = time.Minute

// WithLagBound sets the lag bound (default DefaultLagBound; d <= 0: never
// reported).
func WithLagBound(d time.Duration) Option { return func(c *config) { c.lagBound = d } }

// LagError is LagErr's error.
type LagError struct {
	Lag, Bound time.Duration
	StreamSeq  uint64    // the oldest event not folded
	at         time.Time // when it was measured
}

func (e *LagError) Error() string {
	return fmt.Sprintf("receipts are late: the oldest event not yet in the log (stream sequence %d) was stored %s ago, past the bound of %s",
		e.StreamSeq, e.Lag.Round(time.Second), e.Bound)
}

// LagErr is a *LagError while the ledger is behind the stream by more
// than the bound, as of its last look (every few seconds, while it folds);
// nil otherwise, and when it has not looked for four of its intervals.
func (l *Ledger) LagErr() error {
	p := l.lag.Load()
	if p == nil || l.cfg.lagBound <= 0 || p.Lag <= l.cfg.lagBound {
		return nil
	}
	if l.cfg.now().Sub(p.at) > 4*l.cfg.streamEvery {
		return nil // no look for a while (this instance stopped writing): no figure to go by
	}
	e := *p
	e.Bound = l.cfg.lagBound
	return &e
}

// measureLag looks at the oldest event the log has not folded.
func (l *Ledger) measureLag(ctx context.Context, s jetstream.Stream) {
	folded := l.store.State().StreamSeq
	info := s.CachedInfo()
	if info == nil || info.State.LastSeq <= folded {
		l.lag.Store(&LagError{at: l.cfg.now()})
		return
	}
	next := max(folded+1, info.State.FirstSeq)
	m, err := s.GetMsg(ctx, next)
	if err != nil {
		return // keep the last measure: a deleted message, a busy server
	}
	now := l.cfg.now()
	l.lag.Store(&LagError{Lag: max(0, now.Sub(m.Time)), StreamSeq: next, at: now})
}
