package api

import (
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/internal/readauth"
)

// DefaultHeavyReads is how many heavy reads (receipt queries, entry
// bundles) one principal has running at once by default; more wait their
// turn. A query page holds at most its 200 receipts (each copied alone
// from the store, up to 64 KiB) and their JSON while it is written, so
// this bounds what one principal's readers hold at once, however many
// connections they open.
const DefaultHeavyReads = 4

// heavyWait bounds how long a heavy read waits for its turn before it is
// answered 429.
const heavyWait = 30 * time.Second

// WithHeavyReads sets how many heavy reads one principal runs at once (n
// < 1: DefaultHeavyReads).
func WithHeavyReads(n int) Option {
	return func(h *Handler) {
		if n < 1 {
			n = DefaultHeavyReads
		}
		h.heavy.max = n
	}
}

// heavyReads queues each principal's heavy reads behind its own slots.
type heavyReads struct {
	max   int
	mu    sync.Mutex
	slots map[string]*heavySlots
}

type heavySlots struct {
	ch    chan struct{}
	users int // requests holding or waiting for a slot: the entry goes at 0
}

// middleware runs next in one of the reader's slots, waiting for one up
// to heavyWait (or until the caller leaves).
func (q *heavyReads) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := readauth.From(c)
		if r == nil {
			return next(c)
		}
		key := r.LimitKey()
		q.mu.Lock()
		if q.slots == nil {
			q.slots = map[string]*heavySlots{}
		}
		s := q.slots[key]
		if s == nil {
			s = &heavySlots{ch: make(chan struct{}, max(q.max, 1))}
			q.slots[key] = s
		}
		s.users++
		q.mu.Unlock()
		defer func() {
			q.mu.Lock()
			if s.users--; s.users == 0 {
				delete(q.slots, key)
			}
			q.mu.Unlock()
		}()
		t := time.NewTimer(heavyWait)
		defer t.Stop()
		select {
		case s.ch <- struct{}{}:
		case <-t.C:
			c.Response().Header().Set("Retry-After", "1")
			return fail(http.StatusTooManyRequests, "too_many_concurrent_reads",
				"this principal already has %d heavy reads running and more waiting; retry", cap(s.ch))
		case <-c.Request().Context().Done():
			return c.Request().Context().Err()
		}
		defer func() { <-s.ch }()
		return next(c)
	}
}
