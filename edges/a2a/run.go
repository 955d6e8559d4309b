package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/receiptwait"
	"github.com/chio-ledger/chio/schemas"
)

// The core: executing an accepted task (run) and ending it with the call's
// result (finish).

// execute runs a claimed task's request through the dispatcher and ends the
// task with the result. A cancel that landed meanwhile wins: the result is
// discarded (the receipt id is still linked, the call having happened).
func (e *Edge) execute(ctx context.Context, c caller, t *taskstore.Task) (*taskstore.Task, error) {
	return e.run(ctx, c, t, nil)
}

// newSend is a blocking send whose task is not stored yet: the task's
// first commit and the request it carries, decoded.
type newSend struct {
	nt  taskstore.NewTask
	req execRequest
}

// run is execute. With start, the task is a blocking send's that is not
// stored yet (see pendingTask): its call's decision event is the durable
// record of its acceptance (it names the task, this replica and the
// execution), and the task is written once, with its result, concurrently
// with the outcome event; only a call still running after
// storeRunningAfter is stored while it runs, so that it can be listed,
// canceled and leased like any other.
func (e *Edge) run(ctx context.Context, c caller, t *taskstore.Task, start *newSend) (*taskstore.Task, error) {
	var req execRequest
	if start != nil {
		req = start.req // as accepted: not decoded again from the task
	} else if err := json.Unmarshal(t.Request, &req); err != nil {
		return nil, fmt.Errorf("task %s: stored request: %w", t.ID, err)
	}
	// A cancel landing on any replica while the tool runs stops it here,
	// and so does a drain that ran out of time.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(e.aborted, stop)()
	// While it runs, this replica's sweeper leaves the task alone even if
	// its lease lapses: the renewal below wins it back.
	e.executing.add(t.ID)
	defer e.executing.remove(t.ID)
	out, pt, unwatch := e.watchRun(ctx, stop, t, req, start)
	defer unwatch()
	var (
		done    *taskstore.Task
		finErr  error
		call    = e.runCall(ctx, c, t, req, out)
		started = time.Now().Add(-time.Second) // margin for clock steps
	)
	if pt != nil {
		call.Finish = func(fctx context.Context, res *dispatch.Result) error {
			done, finErr = e.finish(fctx, t, req, out, res, nil, started, pt)
			return finErr
		}
	}
	res, err := e.dispatch.Do(ctx, call)
	callFrom(ctx).executed(t.ID, req.RequestID, res, err)
	if pt != nil && err == nil {
		return done, finErr // finished in the call's second round
	}
	if pt != nil && !pt.close() {
		return nil, err // refused before any receipt, and nothing stored
	}
	return e.finish(ctx, t, req, out, res, err, started, pt)
}

// watchRun starts what watches a run: its outputs, and the guard (lease
// renewal, cancel watch) of its task. A blocking send's task not stored
// yet (start) gets its pendingTask instead, and its guard only once it is
// stored while it runs; unwatch stops that early store.
func (e *Edge) watchRun(ctx context.Context, stop context.CancelFunc, t *taskstore.Task, req execRequest, start *newSend) (out *outputs, pt *pendingTask, unwatch func()) {
	every := max(e.cfg.ClaimLease/3, 10*time.Millisecond)
	renewed := new(atomic.Int64)
	renewed.Store(time.Now().UnixNano())
	out = &outputs{edge: e, task: t, native: req.Native, renewed: renewed, renewEvery: every}
	if start == nil {
		e.guard(ctx, stop, t, every, renewed)
		return out, nil, func() {}
	}
	pt = &pendingTask{e: e, nt: start.nt}
	early := time.AfterFunc(storeRunningAfter, func() {
		if stored := pt.storeRunning(ctx); stored != nil {
			out.setTask(stored)
			e.guard(ctx, stop, stored, every, renewed)
		}
	})
	return out, pt, func() { early.Stop() }
}

// runCall is the dispatcher call of a run; the tool's output goes to out
// as it comes.
func (e *Edge) runCall(ctx context.Context, c caller, t *taskstore.Task, req execRequest, out *outputs) dispatch.Call {
	return dispatch.Call{
		ReceiptID: t.ExecutionID, Token: c.token, Proof: c.proof, ServerID: req.ServerID, ToolName: req.ToolName,
		Arguments: req.Arguments, Exposure: &e.cfg.Exposure, Stream: req.Stream || req.Native, TaskID: t.ID,
		RequestID: req.RequestID, GovernedIntent: req.Intent,
		Metadata: map[string]any{"protocol": "a2a", "a2a": map[string]any{"taskId": t.ID, "contextId": t.ContextID}},
		Emit:     func(ch tools.Chunk) error { return out.emit(ctx, ch) },
	}
}

// storeRunningAfter is how long a blocking send's call runs before its
// task is stored while it runs (see run).
const storeRunningAfter = 50 * time.Millisecond

// pendingTask is a blocking send's task while its call runs: stored at
// most twice (while running, if the call outlasts storeRunningAfter; and
// with its result), and most often once, with everything.
type pendingTask struct {
	e  *Edge
	nt taskstore.NewTask

	mu       sync.Mutex
	stored   *taskstore.Task // after storeRunning
	finished bool            // the result is being written: store nothing early
}

// storeRunning writes the task's first commit (created, working, claimed)
// unless its result is being written already; it returns the stored task,
// or nil.
func (p *pendingTask) storeRunning(ctx context.Context) *taskstore.Task {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished || ctx.Err() != nil {
		return nil
	}
	t, err := p.e.tasks.Start(background(ctx), p.nt)
	if err != nil {
		p.e.log.Warn("a2a: could not store a running task; it is stored with its result", "task", p.nt.ID, "err", err)
		return nil
	}
	p.stored = t
	return t
}

// close stops any early store and reports whether the task was stored.
func (p *pendingTask) close() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = true
	return p.stored != nil
}

// commit writes the events fn decides: onto the task as stored while it
// ran, or with the task's first commit as one write.
func (p *pendingTask) commit(ctx context.Context, from *taskstore.Task, fn func(cur *taskstore.Task) ([]taskstore.Event, error)) (*taskstore.Task, error) {
	p.mu.Lock()
	p.finished = true
	stored := p.stored
	p.mu.Unlock()
	if stored != nil {
		if from == nil || from.Seq < stored.Seq {
			from = stored
		}
		return p.e.tasks.TransitionFrom(ctx, from, fn)
	}
	evs, err := fn(&taskstore.Task{ID: p.nt.ID, TaskHead: schemas.TaskHead{Owner: p.nt.Owner, ContextID: p.nt.ContextID,
		State: taskstore.StateWorking, ClaimedBy: p.e.cfg.EdgeID}})
	if err != nil {
		return nil, err
	}
	nt := p.nt
	nt.Then = append(slices.Clip(nt.Then), evs...)
	t, err := p.e.tasks.Start(ctx, nt)
	if errors.Is(err, taskstore.ErrConflict) {
		// The id is taken: only this run writes it, so the early store
		// landed although its answer was lost. Commit onto it instead.
		if cur, lerr := p.e.tasks.Load(ctx, p.nt.ID, p.nt.Owner); lerr == nil {
			return p.e.tasks.TransitionFrom(ctx, cur, fn)
		}
	}
	return t, err
}

// guard watches a running task: it renews the execution lease while the
// tool runs, so no sweeper takes a live task over (a lease that cannot be
// renewed stops the run), and stops the run when the task is canceled on
// any replica. A short call never needs the cancel watch, which costs a
// consumer, so it starts only once the call has run for cancelWatchAfter;
// it replays the task from its first event, so a cancel that landed
// before is seen at once.
func (e *Edge) guard(ctx context.Context, stop context.CancelFunc, t *taskstore.Task, every time.Duration, renewed *atomic.Int64) {
	// A streaming tool's own commits renew the lease in-band
	// (out.commit), so the ticker only renews for a tool that is quiet,
	// and a renewal that lost the race to those commits is tried again
	// while the lease has time.
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			since := time.Since(time.Unix(0, renewed.Load()))
			if since < every {
				continue // the run's own writes renewed it
			}
			_, won, err := e.tasks.Claim(ctx, t.ID, t.Owner, e.cfg.EdgeID, e.cfg.ClaimLease)
			switch {
			case err == nil && won:
				renewed.Store(time.Now().UnixNano())
				continue
			case ctx.Err() != nil:
				return
			}
			// A renewal that lost a race (to the run's own commits, which
			// renew it too) is not a lost lease: the lease is lost only when
			// the task as stored names another holder. Ours having lapsed
			// on a stalled machine is no loss either while nobody took it:
			// the next renewal is a compare-and-set and wins it back, or
			// fails because someone did, and then the run stops.
			if cur, lerr := e.tasks.Load(ctx, t.ID, t.Owner); lerr == nil {
				if cur.State.Terminal() {
					return // finished or canceled: nothing left to hold
				}
				if errors.Is(err, taskstore.ErrConflict) && cur.ClaimedBy == e.cfg.EdgeID {
					continue
				}
			}
			e.log.Warn("a2a: lost the execution lease; stopping the run", "task", t.ID, "err", err)
			stop()
			return
		}
	}()
	time.AfterFunc(cancelWatchAfter, func() {
		if ctx.Err() != nil {
			return
		}
		// The same feed as the task's streams on this replica: one consumer.
		if events, err := e.hub.watch(ctx, t.ID, t.Owner); err == nil {
			go func() {
				for ev := range events {
					if ev.Type == taskstore.EventCanceled {
						stop()
						return
					}
				}
			}()
		}
	})
}

// cancelWatchAfter is how long a call runs before its task is watched for
// a cancel from another replica (see guard).
const cancelWatchAfter = 50 * time.Millisecond

// finish ends the task with the call's result (err: the call was refused
// before any receipt). t is the task the run started from; pt, if set,
// holds a blocking send's task not stored before its result.
func (e *Edge) finish(ctx context.Context, t *taskstore.Task, req execRequest, out *outputs, res *dispatch.Result, err error, started time.Time, pt *pendingTask) (*taskstore.Task, error) {
	r, err := turnResultOf(t, req, out, res, err)
	if err != nil {
		return nil, err
	}
	r.meta = e.resultMetadata(ctx, req, out, r, started)
	return e.commitResult(ctx, t, out, pt, r)
}

// turnResult is what a call leaves on its task when its turn ends.
type turnResult struct {
	res       *dispatch.Result // nil when the call was refused before any receipt
	state     taskstore.State
	statusRaw json.RawMessage
	artifacts []json.RawMessage
	receipts  []string
	failure   string
	meta      json.RawMessage // metadata.chio, set by resultMetadata
}

// turnResultOf turns the call's outcome (res, or err: refused before any
// receipt) into the task's end: its state, status message and artifacts.
func turnResultOf(t *taskstore.Task, req execRequest, out *outputs, res *dispatch.Result, err error) (*turnResult, error) {
	var (
		state     = taskstore.StateFailed
		parts     []wire.Part
		status    *wire.Message
		artifacts []json.RawMessage
		receipts  []string
		failure   string
	)
	switch {
	case err != nil:
		failure = err.Error()
		parts = []wire.Part{wire.TextPart("the call was refused: " + err.Error())}
		res = nil
	case !res.Decision.Allow:
		parts = []wire.Part{wire.TextPart(fmt.Sprintf("denied by %s: %s", res.Decision.Guard, res.Decision.Reason))}
	case res.ToolErr != nil:
		parts = []wire.Part{wire.TextPart("tool failed: " + res.ToolErr.Error())}
	case out.err != nil:
		parts = []wire.Part{wire.TextPart("the tool's output is not valid A2A: " + out.err.Error())}
	case req.Native:
		state, status = out.final()
	case out.streamed && req.Mode != modeDeferred:
		// The chunks are the artifact, committed already; repeating them
		// in the status message would double the task (and could make
		// the final commit too large to write).
		state = taskstore.StateCompleted
	default:
		state = taskstore.StateCompleted
		parts, err = resultParts(res)
		if err != nil {
			state, parts = taskstore.StateFailed, []wire.Part{wire.TextPart(err.Error())}
		} else if !out.streamed {
			art, err := storedDialect.EncodeArtifact(&wire.Artifact{ArtifactID: out.artifactID(), Name: "result", Parts: parts})
			if err != nil {
				return nil, fmt.Errorf("task %s: encode artifact: %w", t.ID, err)
			}
			artifacts = append(artifacts, art)
		}
	}
	if res != nil {
		receipts = []string{res.ReceiptID}
	}
	if status == nil && len(parts) > 0 {
		status = agentMessage(t, parts)
	}
	var statusRaw json.RawMessage
	if status != nil {
		if statusRaw, err = encodeStored(status); err != nil {
			return nil, err
		}
	}
	return &turnResult{res: res, state: state, statusRaw: statusRaw, artifacts: artifacts, receipts: receipts, failure: failure}, nil
}

// resultMetadata is the task's metadata as its turn ends: metadata.chio
// with the receipt the call bears and, with AwaitReceipt, the signed
// receipt itself.
func (e *Edge) resultMetadata(ctx context.Context, req execRequest, out *outputs, r *turnResult, started time.Time) json.RawMessage {
	res := r.res
	m := chioMeta(res, req.Mode, false, r.failure)
	if out.reply != nil && r.state == taskstore.StateCompleted {
		m["chio"].(map[string]any)["reply"] = "message"
	}
	if res != nil && e.cfg.AwaitReceipt > 0 && e.cfg.JetStream != nil {
		c := m["chio"].(map[string]any)
		if sr, err := receiptwait.Await(ctx, e.cfg.JetStream, req.ServerID, res.ReceiptID, started, e.cfg.AwaitReceipt); err != nil {
			c["receiptAwaitError"] = err.Error()
		} else {
			c["receipt"], c["leafIndex"] = sr.Receipt, sr.LeafIndex
		}
	}
	return mustJSON(m)
}

// commitResult writes the end of the turn onto the task (through pt when
// it is a blocking send's task not stored before its result); a result
// too large to record fails the task instead.
func (e *Edge) commitResult(ctx context.Context, t *taskstore.Task, out *outputs, pt *pendingTask, r *turnResult) (*taskstore.Task, error) {
	// From the task as this run last wrote it: no re-read unless another
	// writer (a cancel, a renewal) got in between.
	from := out.current()
	commit := func(fn func(cur *taskstore.Task) ([]taskstore.Event, error)) (*taskstore.Task, error) {
		if pt != nil {
			return pt.commit(background(ctx), from, fn)
		}
		return e.tasks.TransitionFrom(background(ctx), from, fn)
	}
	done, err := commit(func(cur *taskstore.Task) ([]taskstore.Event, error) {
		return r.events(cur, e.cfg.EdgeID), nil
	})
	if errors.Is(err, taskstore.ErrTooLarge) {
		// The result does not fit: the task must still end, or its
		// streams would wait forever.
		e.log.Warn("a2a: result too large to record; failing the task", "task", t.ID, "err", err)
		msg, _ := encodeStored(agentMessage(t, []wire.Part{wire.TextPart("the result was too large to record")}))
		done, err = commit(func(cur *taskstore.Task) ([]taskstore.Event, error) {
			evs := []taskstore.Event{}
			for _, rid := range r.receipts {
				evs = append(evs, taskstore.ReceiptEvent(rid))
			}
			if cur.State.Terminal() {
				return evs, nil
			}
			return append(evs, taskstore.FinishEvent(taskstore.StateFailed, msg)), nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("finish task %s: %w", t.ID, err)
	}
	return done, nil
}

// events are the turn's end as committed onto cur, the task as stored.
func (r *turnResult) events(cur *taskstore.Task, edgeID string) []taskstore.Event {
	var evs []taskstore.Event
	for _, rid := range r.receipts {
		evs = append(evs, taskstore.ReceiptEvent(rid))
	}
	if cur.State.Terminal() {
		return evs // canceled meanwhile: keep the receipt, discard the result
	}
	for _, a := range r.artifacts {
		evs = append(evs, taskstore.ArtifactEvent(a))
	}
	evs = append(evs, taskstore.MetadataEvent(r.meta))
	if r.state.Interrupted() {
		// The turn is over but the task waits for the client: the
		// lease goes back so the next turn can claim it.
		return append(evs, taskstore.StatusEvent(r.state, r.statusRaw), taskstore.ReleaseEvent(edgeID))
	}
	return append(evs, taskstore.FinishEvent(r.state, r.statusRaw))
}

// resultParts converts a tool result per Chio's result-conversion table; a
// streamed result becomes one part list of its chunks in order.
func resultParts(res *dispatch.Result) ([]wire.Part, error) {
	if len(res.Chunks) > 0 {
		var parts []wire.Part
		for _, c := range res.Chunks {
			p, err := wire.ResultToParts(c.Data)
			if err != nil {
				return nil, fmt.Errorf("convert stream chunk: %w", err)
			}
			parts = append(parts, p...)
		}
		return parts, nil
	}
	out := res.Output
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	p, err := wire.ResultToParts(out)
	if err != nil {
		return nil, fmt.Errorf("convert result: %w", err)
	}
	return p, nil
}
