// Package msgbatch gathers what a consumer delivers into batches, so that
// one synced commit covers a burst of messages.
package msgbatch

import (
	"context"
	"time"
)

// Collect waits for one item, then takes whatever else arrives until the
// batch holds max items or wait passes with nothing more ready. ok is
// false only when ctx ended before the first item; a batch cut short by
// ctx is returned with ok true.
func Collect[T any](ctx context.Context, ch <-chan T, max int, wait time.Duration) (batch []T, ok bool) {
	return CollectWeighed(ctx, ch, max, wait, func(T) int { return 1 })
}

// CollectWeighed is Collect with items of different weights (a message
// carrying several events, each item at least 1): the batch closes once
// their weights reach limit, so it holds at most limit plus one item's.
func CollectWeighed[T any](ctx context.Context, ch <-chan T, limit int, wait time.Duration, weight func(T) int) (batch []T, ok bool) {
	total := 0
	add := func(m T) {
		batch = append(batch, m)
		total += max(weight(m), 1)
	}
	select {
	case m := <-ch:
		add(m)
	case <-ctx.Done():
		return nil, false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for total < limit {
		select {
		case m := <-ch:
			add(m)
			continue
		default:
		}
		select {
		case m := <-ch:
			add(m)
		case <-timer.C:
			return batch, true
		case <-ctx.Done():
			return batch, true
		}
	}
	return batch, true
}
