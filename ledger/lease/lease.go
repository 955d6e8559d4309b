// Package lease elects the one ledger instance that may append, through a
// JetStream key-value entry, and fences it.
//
// The log has one writer. Standbys wait; the holder renews its entry every
// TTL/4 with a compare-and-set on the entry's revision. The invariants:
//
//   - A holder considers itself the writer (Term.Valid) only for TTL/2
//     after the start of its last successful renewal, measured on its own
//     monotonic clock. It checks this right before every append, so a holder
//     cut off from NATS stops appending within TTL/2 of its last renewal.
//   - A standby takes over only after it has watched one revision of the
//     entry stay unchanged for a whole TTL on its own monotonic clock, and
//     only by a compare-and-set on that revision, so at most one contender
//     wins and the old holder has been fenced for at least TTL/2 by then
//     (the revision was written before the standby first saw it).
//   - A holder that stops cleanly deletes the entry (compare-and-set again),
//     so a standby takes over at once instead of after a TTL: a waiting
//     contender watches the entry and looks again the moment it changes,
//     not only at its next poll.
//
// The revision that a holder's term began with is its epoch: strictly
// increasing across terms, usable as a fencing token in logs and headers.
// Clocks of different hosts are never compared; only their rates are
// assumed to agree within a factor of two.
package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket is the key-value bucket holding ledger leases.
const DefaultBucket = "chio-ledger-lease"

// DefaultKey names the lease of the (one) log.
const DefaultKey = "writer"

// ErrLost is the cause of a term's context when the lease was lost: taken
// by another holder, deleted, or not renewed in time.
var ErrLost = errors.New("ledger lease lost")

// Bucket creates or opens the lease bucket with the given replicas (3 on a
// cluster, so the lease survives the loss of a NATS node).
func Bucket(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: name, Description: "chio ledger writer lease", History: 1,
		Replicas: replicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("lease bucket %s: %w", name, err)
	}
	return kv, nil
}

// Lease contends for one key on behalf of one holder.
type Lease struct {
	kv     jetstream.KeyValue
	holder string
	cfg    config
}

type config struct {
	key  string
	ttl  time.Duration
	poll time.Duration // 0: min(ttl/4, maxPoll)
	log  *slog.Logger
}

// maxPoll bounds how long a waiting contender goes without reading the
// entry: a released lease is taken within it even if the watch on the
// entry missed the release (one direct get per poll, cheap).
const maxPoll = 500 * time.Millisecond

// Option configures a Lease.
type Option func(*config)

// WithKey sets the key contended for (default DefaultKey).
func WithKey(k string) Option { return func(c *config) { c.key = k } }

// WithTTL sets the lease's time to live (default 5s): a dead or cut-off
// holder is replaced after about TTL, and stops appending after TTL/2.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithPollInterval sets how often a waiting contender reads the entry
// besides watching it (default TTL/4, at most 500ms). It changes how soon a
// change is seen, never the TTL a takeover waits for.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// New returns a lease on kv for holder, which names this instance and must
// be unique among the contenders.
func New(kv jetstream.KeyValue, holder string, opts ...Option) (*Lease, error) {
	cfg := config{key: DefaultKey, ttl: 5 * time.Second, log: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if holder == "" {
		return nil, errors.New("lease: empty holder id")
	}
	if cfg.ttl < 40*time.Millisecond {
		return nil, fmt.Errorf("lease: ttl %s is below 40ms", cfg.ttl)
	}
	if cfg.poll < 0 {
		return nil, fmt.Errorf("lease: poll interval %s is negative", cfg.poll)
	}
	if cfg.poll == 0 {
		cfg.poll = min(cfg.ttl/4, maxPoll)
	}
	return &Lease{kv: kv, holder: holder, cfg: cfg}, nil
}

// record is the entry's value; only the revision matters to the protocol,
// the rest tells an operator who holds it.
type record struct {
	Holder string `json:"holder"`
	TTLMS  int64  `json:"ttl_ms"`
	Since  string `json:"since"`
}

func (l *Lease) value(since time.Time) []byte {
	b, _ := json.Marshal(record{Holder: l.holder, TTLMS: l.cfg.ttl.Milliseconds(), Since: since.UTC().Format(time.RFC3339Nano)})
	return b
}

// Holder reports who holds the lease now, "" if nobody (read once, no
// contention).
func (l *Lease) Holder(ctx context.Context) (string, uint64, error) {
	e, err := l.kv.Get(ctx, l.cfg.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("read lease %s: %w", l.cfg.key, err)
	}
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return "", e.Revision(), fmt.Errorf("read lease %s: %w", l.cfg.key, err)
	}
	return r.Holder, e.Revision(), nil
}

// Acquire blocks until this holder owns the lease or ctx ends, and returns
// the term it holds. ctx bounds the wait only: the term lasts until it is
// released or lost, and its holder must Release it.
func (l *Lease) Acquire(ctx context.Context) (*Term, error) {
	poll := l.cfg.poll
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	changed := l.watch(wctx)
	var (
		seenRev uint64
		seenAt  time.Time
	)
	for {
		start := time.Now()
		e, err := l.kv.Get(ctx, l.cfg.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Free (never held, or released): Create succeeds only if the
			// key is absent or deleted, so one contender wins.
			if rev, err := l.kv.Create(ctx, l.cfg.key, l.value(start)); err == nil {
				return l.begin(ctx, rev, start), nil
			}
		case err != nil:
			l.cfg.log.Debug("lease: read", "err", err)
		case e.Revision() != seenRev:
			// Timed from when the read returned: the revision may have
			// been written after the request left, never after the answer.
			seenRev, seenAt = e.Revision(), time.Now()
		case time.Since(seenAt) >= l.cfg.ttl:
			// Unchanged for a whole TTL: its holder has been fenced for at
			// least TTL/2. Take it over by compare-and-set on that revision.
			if rev, err := l.kv.Update(ctx, l.cfg.key, l.value(start), seenRev); err == nil {
				l.cfg.log.Info("lease: took over an expired lease", "key", l.cfg.key, "from_revision", seenRev, "epoch", rev)
				return l.begin(ctx, rev, start), nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		case <-changed:
		}
	}
}

// watch signals (without blocking, coalesced) each change of the entry
// until ctx ends. The polls stay the rule: a watch that cannot be opened,
// or lags, only loses the shortcut, and one that stops is not reopened,
// so the signal channel is nil then and never fires.
func (l *Lease) watch(ctx context.Context) <-chan struct{} {
	w, err := l.kv.Watch(ctx, l.cfg.key, jetstream.UpdatesOnly())
	if err != nil {
		l.cfg.log.Debug("lease: watch", "key", l.cfg.key, "err", err)
		return nil
	}
	changed := make(chan struct{}, 1)
	go func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // the end of the initial values (none: updates only)
				}
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	return changed
}

// Term is one tenure of the lease.
type Term struct {
	l     *Lease
	epoch uint64
	ctx   context.Context
	stop  context.CancelCauseFunc
	done  chan struct{}

	mu      sync.Mutex
	rev     uint64    // the entry's revision as last written by this term
	renewed time.Time // start of the last successful write
	lost    error
}

func (l *Lease) begin(ctx context.Context, rev uint64, at time.Time) *Term {
	// The term outlives the wait: it ends by Release or by losing the
	// lease, never because Acquire's context did.
	tctx, stop := context.WithCancelCause(context.WithoutCancel(ctx))
	t := &Term{l: l, epoch: rev, ctx: tctx, stop: stop, done: make(chan struct{}), rev: rev, renewed: at}
	go t.renew()
	return t
}

// Epoch is the revision the term began with: a fencing token that grows
// with every term.
func (t *Term) Epoch() uint64 { return t.epoch }

// Context ends when the term does; its cause is ErrLost (wrapped) when the
// lease was lost.
func (t *Term) Context() context.Context { return t.ctx }

// Valid reports whether the holder may still append: nil only while the
// last renewal started less than TTL/2 ago and the lease was not lost.
func (t *Term) Valid() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost != nil {
		return t.lost
	}
	if age := time.Since(t.renewed); age >= t.l.cfg.ttl/2 {
		return fmt.Errorf("%w: not renewed for %s (epoch %d)", ErrLost, age.Round(time.Millisecond), t.epoch)
	}
	return nil
}

func (t *Term) lose(err error) {
	t.mu.Lock()
	if t.lost == nil {
		t.lost = err
	}
	t.mu.Unlock()
	t.stop(err)
}

func (t *Term) renew() {
	defer close(t.done)
	every := t.l.cfg.ttl / 4
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		if err := t.Valid(); err != nil {
			t.l.cfg.log.Warn("lease: fenced (renewals failed for TTL/2); stopping", "epoch", t.epoch, "err", err)
			t.lose(err)
			return
		}
		t.mu.Lock()
		rev := t.rev
		t.mu.Unlock()
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.ctx, every)
		next, err := t.l.kv.Update(ctx, t.l.cfg.key, t.l.value(start), rev)
		cancel()
		if err == nil {
			t.mu.Lock()
			t.rev, t.renewed = next, start
			t.mu.Unlock()
			continue
		}
		if t.ctx.Err() != nil {
			return
		}
		// A failed compare-and-set is a loss only if the entry moved on;
		// an unreachable NATS is retried until the TTL/2 fence.
		gctx, gcancel := context.WithTimeout(t.ctx, every)
		e, gerr := t.l.kv.Get(gctx, t.l.cfg.key)
		gcancel()
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			t.lose(fmt.Errorf("%w: the lease entry was deleted (epoch %d)", ErrLost, t.epoch))
			return
		case gerr == nil && e.Revision() != rev:
			t.lose(fmt.Errorf("%w: taken at revision %d (epoch %d)", ErrLost, e.Revision(), t.epoch))
			return
		}
		t.l.cfg.log.Warn("lease: renewal failed; retrying", "epoch", t.epoch, "err", err)
	}
}

// Release ends the term: renewals stop and, if the lease is still ours, the
// entry is deleted so a standby takes over without waiting a TTL. Call it
// only after the holder has stopped appending.
func (t *Term) Release(ctx context.Context) error {
	t.stop(context.Canceled)
	<-t.done
	t.mu.Lock()
	rev, lost := t.rev, t.lost
	if t.lost == nil {
		t.lost = fmt.Errorf("%w: released (epoch %d)", ErrLost, t.epoch)
	}
	t.mu.Unlock()
	if lost != nil {
		return nil
	}
	err := t.l.kv.Delete(ctx, t.l.cfg.key, jetstream.LastRevision(rev))
	if err != nil {
		// A renewal cut short by the stop may still have landed: if the
		// entry is still ours, delete it at its own revision.
		e, gerr := t.l.kv.Get(ctx, t.l.cfg.key)
		var r record
		if gerr == nil && json.Unmarshal(e.Value(), &r) == nil && r.Holder == t.l.holder {
			err = t.l.kv.Delete(ctx, t.l.cfg.key, jetstream.LastRevision(e.Revision()))
		} else if errors.Is(gerr, jetstream.ErrKeyNotFound) || gerr == nil {
			err = nil // already gone, or another holder's now
		}
	}
	if err != nil {
		return fmt.Errorf("release lease (epoch %d): %w", t.epoch, err)
	}
	return nil
}
