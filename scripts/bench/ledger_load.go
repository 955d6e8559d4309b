package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// loadShape is the offered load, identical for our ledger and for Tessera:
// tickets 0..n-1 are handed to workers that make the submit call, gated by
// a window of entries submitted but not yet covered by a signed checkpoint
// and, when rate is set, paced at that many tickets per second.
type loadShape struct {
	window  int     // entries in flight (submitted, not yet checkpointed)
	workers int     // goroutines making submit calls
	rate    float64 // entries/s offered; 0 offers as fast as the window allows
}

func (s loadShape) String() string {
	if s.rate > 0 {
		return fmt.Sprintf("%s offered, window %d, %d submitters", fmtRate(s.rate), s.window, s.workers)
	}
	return fmt.Sprintf("saturating, window %d, %d submitters", s.window, s.workers)
}

// window counts entries in flight; its capacity bounds them.
type window chan struct{}

func (w window) acquire(ctx context.Context) error {
	select {
	case w <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release frees n slots; it never blocks, so the integrators that call it
// (our ledger's commit hook, Tessera's checkpoint watcher) are not slowed.
func (w window) release(n int) {
	for range n {
		select {
		case <-w:
		default:
			return
		}
	}
}

// ticket is one entry to submit; due is its scheduled time at a fixed
// rate (zero at saturation), from which its latency must run so that time
// spent queued behind a slow side is counted (no coordinated omission).
type ticket struct {
	i   int
	due time.Time
}

// drive offers n tickets to submit under shape and returns when every
// submit call has returned (not when the entries are integrated).
func drive(ctx context.Context, n int, shape loadShape, win window, submit func(i int, due time.Time) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tickets := make(chan ticket, 1024)
	go func() {
		defer close(tickets)
		start := time.Now()
		for i := range n {
			var due time.Time
			if shape.rate > 0 {
				due = start.Add(time.Duration(float64(i) / shape.rate * float64(time.Second)))
				if d := time.Until(due); d > 0 {
					t := time.NewTimer(d)
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
						return
					}
				}
			}
			if win.acquire(ctx) != nil {
				return
			}
			select {
			case tickets <- ticket{i, due}:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for range max(shape.workers, 1) {
		wg.Go(func() {
			for t := range tickets {
				if err := submit(t.i, t.due); err != nil {
					cancel(fmt.Errorf("submit %d: %w", t.i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// covered is one published checkpoint (or committed batch) as it was seen:
// the tree size it commits to and when.
type covered struct {
	size uint64
	at   time.Time
}

// coveredAt returns when the first checkpoint in cps (ascending sizes)
// covering index idx was seen.
func coveredAt(cps []covered, idx uint64) (time.Time, bool) {
	k := sort.Search(len(cps), func(k int) bool { return cps[k].size > idx })
	if k == len(cps) {
		return time.Time{}, false
	}
	return cps[k].at, true
}

// runResult is one measured run of one side.
type runResult struct {
	n           int
	first, last time.Time // first submit call; last entry covered by a signed checkpoint
	lat         Latencies // per entry: submit call → covered by a signed checkpoint
	checkpoints int       // signed checkpoints (our batches) covering the run
	note        string    // side-specific counters
}

func (r runResult) rate() float64 {
	if d := r.last.Sub(r.first); d > 0 {
		return float64(r.n) / d.Seconds()
	}
	return 0
}

// median of the values f picks from rs.
func median[T any](rs []T, f func(T) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// submitTime is when an entry's latency starts: its scheduled time at a
// fixed rate, or now at saturation.
func submitTime(due time.Time) time.Time {
	if due.IsZero() {
		return time.Now()
	}
	return due
}
