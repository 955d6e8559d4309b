package ledger

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// timeouts holds the deadlines of allow decisions still waiting for their
// outcome. The wall clock only decides when a timeout event is published;
// whether the call ends incomplete is decided by where that event lands in
// the stream relative to the outcome.
type timeouts struct {
	mu   sync.Mutex
	h    deadlineHeap
	wake chan struct{}
}

type deadline struct {
	at        uint64 // unix seconds, also the timeout event's timestamp
	receiptID string
}

type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func newTimeouts() *timeouts { return &timeouts{wake: make(chan struct{}, 1)} }

// deadlineOf is when an allow decision with no outcome times out: after
// incomplete-after, or at the decision's own outcome_deadline when that is
// later (a call waiting for a person). Both come from the event and the
// ledger's configuration, never the wall clock, so every ledger publishes
// the same timeout event.
func deadlineOf(d *schemas.DecisionEvent, after time.Duration) uint64 {
	return max(d.Timestamp+uint64((after+time.Second-1)/time.Second), d.OutcomeDeadline)
}

// timeoutReason is the timeout event's reason for d.
func timeoutReason(d *schemas.DecisionEvent, after time.Duration) string {
	if d.OutcomeDeadline > d.Timestamp+uint64((after+time.Second-1)/time.Second) {
		return fmt.Sprintf("no outcome by the decision's outcome_deadline (%d s after it)", d.OutcomeDeadline-d.Timestamp)
	}
	return fmt.Sprintf("no outcome within %s of the allow decision", after)
}

func (t *timeouts) add(decisions []*schemas.DecisionEvent, after time.Duration) {
	if len(decisions) == 0 {
		return
	}
	t.mu.Lock()
	for _, d := range decisions {
		heap.Push(&t.h, deadline{at: deadlineOf(d, after), receiptID: d.ReceiptID})
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// next pops the earliest deadline that is due at now, or returns how long
// to wait for the next one.
func (t *timeouts) next(now time.Time) (deadline, time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.h) == 0 {
		return deadline{}, time.Hour, false
	}
	if d := time.Unix(int64(t.h[0].at), 0).Sub(now); d > 0 {
		return deadline{}, d, false
	}
	return heap.Pop(&t.h).(deadline), 0, true
}

// loadTimeouts schedules every pending decision found in the store.
func (l *Ledger) loadTimeouts() error {
	var ds []*schemas.DecisionEvent
	err := l.store.ForEachPending(func(_ string, rec []byte) error {
		var p pending
		if err := json.Unmarshal(rec, &p); err != nil {
			return err
		}
		if p.Decision != nil && p.Outcome == nil {
			ds = append(ds, p.Decision)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: load pending decisions: %w", err)
	}
	// From the store alone: a Ledger that ran before (and then followed as
	// a standby) must not keep deadlines of calls that have ended since.
	l.timeouts.mu.Lock()
	l.timeouts.h = l.timeouts.h[:0]
	l.timeouts.mu.Unlock()
	l.timeouts.add(ds, l.cfg.incompleteAfter)
	return nil
}

func (l *Ledger) runTimeouts(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d, wait, due := l.timeouts.next(l.cfg.now())
		if !due {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-l.timeouts.wake:
			case <-timer.C:
			}
			continue
		}
		if err := l.publishTimeout(ctx, d); err != nil {
			if ctx.Err() != nil {
				return
			}
			l.log.Warn("publish timeout event; retrying", "receipt_id", d.receiptID, "err", err)
			// Only the retry time moves; the event's bytes come from the decision.
			d.at = uint64(l.cfg.now().Unix()) + 1
			l.timeouts.mu.Lock()
			heap.Push(&l.timeouts.h, d)
			l.timeouts.mu.Unlock()
		}
	}
}

// publishTimeout publishes the timeout event of a call that is still
// pending. Its bytes depend only on the decision, so a standby ledger or a
// restart publishing it again produces a duplicate the stream drops.
func (l *Ledger) publishTimeout(ctx context.Context, d deadline) error {
	raw, err := l.store.Pending(d.receiptID)
	if errors.Is(err, logstore.ErrNotFound) {
		return nil // no longer pending: the outcome (or an earlier timeout) closed it
	}
	if err != nil {
		return err
	}
	var p pending
	if err := json.Unmarshal(raw, &p); err != nil || p.Decision == nil {
		return nil
	}
	ev := schemas.TimeoutEvent{
		Schema: schemas.TimeoutEventSchema, EventID: schemas.TimeoutEventID(d.receiptID), ReceiptID: d.receiptID,
		Timestamp: deadlineOf(p.Decision, l.cfg.incompleteAfter),
		Reason:    timeoutReason(p.Decision, l.cfg.incompleteAfter),
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := l.js.Publish(pctx, schemas.SubjectTimeout, data, jetstream.WithMsgID(ev.EventID))
	if err != nil {
		return fmt.Errorf("publish timeout event %s: %w", ev.EventID, err)
	}
	l.metrics.timeouts.Inc()
	if ack.Duplicate {
		// The stream already holds an event with this id from within its
		// duplicate window (our own earlier publication, or a stray one
		// that closed nothing). Look again once the window has passed; if
		// the call is still open then, the next publication lands.
		d.at = uint64(l.cfg.now().Add(schemas.DuplicateWindow).Unix()) + 1
		l.timeouts.mu.Lock()
		heap.Push(&l.timeouts.h, d)
		l.timeouts.mu.Unlock()
	}
	return nil
}
