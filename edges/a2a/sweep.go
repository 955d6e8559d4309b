package a2a

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/kernel"
)

// The core: taking over the tasks of replicas that died.

// Sweep runs until ctx ends, taking over background tasks whose accepting
// replica stopped renewing its claim (it died): each is claimed (one
// replica wins) and executed under the capability stored with it, unless
// that capability is honoured only with its holder's proof of possession
// (the task is then failed: the proof was for the dead replica's request). The
// execution id stays the task's, so the decision event is the same one
// the dead replica may already have published and the ledger keeps one
// receipt; the tool itself may run a second time if the first replica
// died while it ran.
func (e *Edge) Sweep(ctx context.Context, every time.Duration) {
	// The live index makes a sweep cost the live tasks, not every task
	// stored; the full scan stays as the fallback while it catches up or
	// if it fails.
	live, err := e.tasks.FollowLive(ctx)
	if err != nil {
		e.log.Warn("a2a: sweep: no live task index; scanning the stream", "err", err)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var refs []taskstore.TaskRef
		ok := false
		if live != nil {
			refs, ok = live.Claimable(every)
		}
		if !ok {
			if refs, err = e.tasks.Claimable(ctx, every); err != nil {
				e.log.Warn("a2a: sweep", "err", err)
				continue
			}
		}
		for _, ref := range refs {
			if e.executing.has(ref.ID) {
				continue // lapsed on a stalled machine, but running here
			}
			task, err := e.tasks.Load(ctx, ref.ID, ref.Owner)
			if err != nil {
				continue
			}
			var req execRequest
			if json.Unmarshal(task.Request, &req) != nil || req.Mode == modeDeferred {
				continue // deferred tasks wait for their owner's next get
			}
			if req.Mode != modeBackground || req.Capability == "" || e.proofBound(ctx, req.Capability) {
				// Nobody can resume it (no capability to act under, or one
				// honoured only with its holder's proof of possession, which
				// was for the request the dead replica took): end it, so its
				// streams and pollers learn what happened.
				e.abandon(ctx, ref)
				continue
			}
			claimed, won, err := e.claimFree(ctx, ref.ID, ref.Owner)
			if err != nil || !won {
				continue
			}
			e.log.Info("a2a: taking over a background task", "task", ref.ID, "from", task.ClaimedBy)
			// Concurrently: one long task must not hold up the sweep (nor
			// let its own lease lapse while the loop waits). The run is a
			// call of its own, logged as such; like a client's, it is not
			// cut by the sweep stopping but drained.
			rctx, rec := e.begin(context.WithoutCancel(ctx), "takeover", "")
			rec.setMethod("takeover")
			e.spawn(rctx, func() {
				if _, err := e.execute(rctx, caller{token: req.Capability}, claimed); err != nil {
					e.log.Error("a2a: taken-over task failed", "task", ref.ID, "err", err)
				}
			})
			rec.release()
		}
	}
}

// proofBound reports whether tok is honoured only with a proof of
// possession by its subject key, which no replica but the one that took
// the request ever had.
func (e *Edge) proofBound(ctx context.Context, tok string) bool {
	_, d := e.kernel.Identify(ctx, tok, nil)
	return d != nil && d.Guard == kernel.StepDPoP
}

// executing is the set of tasks whose tool runs on this replica.
type executing struct {
	mu  sync.Mutex
	ids map[string]int // a count: a turn's run may overlap the previous one's tail
}

func (x *executing) add(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ids == nil {
		x.ids = make(map[string]int)
	}
	x.ids[id]++
}

func (x *executing) remove(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ids[id]--; x.ids[id] <= 0 {
		delete(x.ids, id)
	}
}

func (x *executing) has(id string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ids[id] > 0
}

// abandon fails a task whose executing replica is gone and that no other
// replica may run; the claim decides which sweeper writes it.
func (e *Edge) abandon(ctx context.Context, ref taskstore.TaskRef) {
	if _, won, err := e.claimFree(ctx, ref.ID, ref.Owner); err != nil || !won {
		return
	}
	msg, _ := encodeStored(&wire.Message{MessageID: uuid.Must(uuid.NewV7()).String(), Role: wire.RoleAgent,
		Parts: []wire.Part{wire.TextPart("the replica running this task stopped; it cannot be resumed")}})
	_, err := e.tasks.Transition(ctx, ref.ID, ref.Owner, func(cur *taskstore.Task) ([]taskstore.Event, error) {
		if cur.State.Terminal() {
			return nil, nil
		}
		return []taskstore.Event{taskstore.FinishEvent(taskstore.StateFailed, msg)}, nil
	})
	if err != nil {
		e.log.Warn("a2a: could not fail an abandoned task", "task", ref.ID, "err", err)
		return
	}
	e.log.Info("a2a: failed a task whose replica stopped", "task", ref.ID)
}

// ExpireTasks runs until ctx ends, purging from the task store the tasks
// that ended more than retention ago (taskstore.Expirer: never a live
// task, never past what a durable reader of the stream has read). readers
// are durable consumers of the stream that must exist for anything to go
// (the projections' task fold); push delivery's own is added when push is
// on. Each replica may run it; a purge is idempotent. A pass runs every
// eighth of the retention, at least every second and at most every ten
// minutes, the first one after that interval (the readers' consumers are
// made as the process starts).
func (e *Edge) ExpireTasks(ctx context.Context, retention time.Duration, readers ...string) {
	if e.cfg.Push != nil {
		readers = append(slices.Clip(readers), pushDurable)
	}
	x, err := e.tasks.NewExpirer(retention, readers...)
	if err != nil {
		e.log.Error("a2a: task retention", "err", err)
		return
	}
	every := min(max(retention/8, time.Second), 10*time.Minute)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		res, err := x.Expire(ctx)
		e.metrics.expired.Add(float64(res.Purged))
		if err == nil {
			e.metrics.kept.Set(float64(res.Kept))
		}
		switch {
		case err != nil && ctx.Err() == nil:
			e.log.Warn("a2a: expire tasks", "err", err, "purged", res.Purged)
		case res.Purged > 0:
			e.log.Info("a2a: expired tasks past their retention", "purged", res.Purged, "kept", res.Kept, "retention", retention)
		}
	}
}
