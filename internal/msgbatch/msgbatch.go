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
	select {
	case m := <-ch:
		batch = append(batch, m)
	case <-ctx.Done():
		return nil, false
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(batch) < max {
		select {
		case m := <-ch:
			batch = append(batch, m)
			continue
		default:
		}
		select {
		case m := <-ch:
			batch = append(batch, m)
		case <-timer.C:
			return batch, true
		case <-ctx.Done():
			return batch, true
		}
	}
	return batch, true
}
