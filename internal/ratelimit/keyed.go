// Package ratelimit bounds how fast one client, named by a key (its
// address, or the principal it authenticated as), may ask a service for
// work: a token bucket per key, in a map whose size is itself bounded, so
// a flood of new keys costs memory in proportion to the bound and not to
// the flood.
package ratelimit

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys is how many keys a Keyed limiter tracks at once when
// Config.MaxKeys is 0: about 200 bytes each, some 20 MB at the bound.
const DefaultMaxKeys = 100_000

// Config is a per-key limit: Rate requests a second, in bursts of up to
// Burst (at least 1). Rate <= 0 means no limit.
type Config struct {
	Rate  float64
	Burst int
	// MaxKeys bounds the keys tracked at once (0: DefaultMaxKeys).
	MaxKeys int
}

// Keyed is a token bucket per key. A bucket left alone long enough to
// refill is forgotten, which loses nothing: a new bucket starts full. When
// more keys than MaxKeys are active at once, arbitrary ones are forgotten
// (each then starts over with a full burst), so memory stays bounded
// whatever the number of keys a client can take on. A nil *Keyed allows
// everything.
type Keyed struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	// refill is how long an untouched bucket takes to be full again:
	// after that it is indistinguishable from a new one.
	refill time.Duration

	mu      sync.Mutex
	buckets map[string]*bucket
	sweepAt time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// New returns the limiter cfg describes, nil (no limit) when cfg.Rate <= 0.
func New(cfg Config) *Keyed {
	if cfg.Rate <= 0 {
		return nil
	}
	burst := max(cfg.Burst, 1)
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	refill := time.Duration(math.Ceil(float64(burst) / cfg.Rate * float64(time.Second)))
	return &Keyed{limit: rate.Limit(cfg.Rate), burst: burst, maxKeys: maxKeys, refill: max(refill, time.Second),
		buckets: map[string]*bucket{}}
}

// Allow takes one token from key's bucket at now. When the bucket is
// empty it takes nothing and returns false with how long until a token is
// there.
func (k *Keyed) Allow(key string, now time.Time) (bool, time.Duration) {
	if k == nil {
		return true, 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.buckets[key]
	if b == nil {
		k.makeRoom(now)
		b = &bucket{lim: rate.NewLimiter(k.limit, k.burst)}
		k.buckets[key] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if !r.OK() {
		return false, k.refill
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Len is how many keys are tracked now.
func (k *Keyed) Len() int {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.buckets)
}

// makeRoom forgets the buckets that have refilled, at most once per refill
// period (so the sweep's cost is spread over the calls it serves), and, if
// the map is still full, arbitrary ones: a tenth of the bound at once, so
// that a flood of new keys pays for a pass over the map once per tenth of
// the bound, not once per key.
func (k *Keyed) makeRoom(now time.Time) {
	if !now.Before(k.sweepAt) {
		for key, b := range k.buckets {
			if now.Sub(b.seen) >= k.refill {
				delete(k.buckets, key)
			}
		}
		k.sweepAt = now.Add(k.refill)
	}
	if len(k.buckets) < k.maxKeys {
		return
	}
	keep := k.maxKeys - max(k.maxKeys/10, 1)
	for key := range k.buckets { // Go's map order is unspecified: no key is favoured
		if len(k.buckets) <= keep {
			break
		}
		delete(k.buckets, key)
	}
}
