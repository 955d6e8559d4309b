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

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// execRequest is a task's execution request as stored with it: what runs,
// never who asked (the caller's capability is presented again by whoever
// executes it, and must be the task's owner).
type execRequest struct {
	ServerID  string          `json:"server_id"`
	ToolName  string          `json:"tool_name"`
	Arguments json.RawMessage `json:"arguments"`
	Stream    bool            `json:"stream,omitempty"`
	// Native marks an A2A-native tool (tools.MetaA2ANative): its chunks
	// are A2A events that drive the task.
	Native bool   `json:"native,omitempty"`
	Mode   string `json:"mode"`
	// Capability is kept only for background tasks: a replica that takes
	// over a task whose accepting replica died must decide under the
	// caller's own authority, which it cannot otherwise present. The task
	// stream is as protected as the KV buckets (same NATS account).
	Capability string `json:"capability,omitempty"`
	// RequestID is the call's request id: the messageId of the message
	// that started the turn. A relayed call names it as its parent.
	RequestID string `json:"request_id,omitempty"`
	// Intent is the governed intent the caller sent under
	// metadata.chio.governedIntent, checked by the kernel at execution.
	Intent *schemas.GovernedIntent `json:"governed_intent,omitempty"`
}

// Lifecycle modes recorded in metadata.chio.lifecycle.
const (
	modeBlocking   = "blocking"
	modeBackground = "return_immediately"
	modeDeferred   = "deferred"
	modeStreaming  = "streaming"
)

// chioMeta is metadata.chio of a task: the receipt it bears and how it got it.
func chioMeta(res *dispatch.Result, mode string, pending bool, failure string) map[string]any {
	m := map[string]any{
		"authorityPath": "cross_protocol_orchestrator", "authoritative": true, "compatibilityOnly": false,
		"receiptBearing": res != nil, "receiptPending": pending, "claimEligible": false,
		"receiptId": nil, "lifecycle": map[string]any{"protocol": "a2a", "mode": mode},
	}
	if res != nil {
		d := res.Decision
		m["receiptId"] = res.ReceiptID
		m["capabilityId"] = d.CapabilityID
		m["decision"] = string(d.Verdict().Verdict)
		m["policyHash"] = d.PolicyHash
		m["claimEligible"] = d.Allow && res.Outcome == schemas.OutcomeCompleted
		if !d.Allow {
			m["denyGuard"], m["denyReason"] = d.Guard, d.Reason
		}
		if res.Ran {
			m["outcome"] = string(res.Outcome)
		}
	}
	if failure != "" {
		m["failure"] = failure
	}
	return map[string]any{"chio": m}
}

// mustJSON encodes values built in this package from strings, bools and
// maps of them, which cannot fail to encode.
func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// agentMessage is a status message from the agent.
func agentMessage(t *taskstore.Task, parts []wire.Part) *wire.Message {
	return &wire.Message{MessageID: uuid.Must(uuid.NewV7()).String(), ContextID: t.ContextID, TaskID: t.ID, Role: wire.RoleAgent, Parts: parts}
}

func encodeStored(m *wire.Message) (json.RawMessage, error) { return wire.EncodeMessage(wire.V10, m) }

// createTask stores a new task for a send, in state working; a native
// tool's task stays submitted until the tool's own first event. With claim,
// the same commit claims its execution for this replica (held reports
// whether it did): created, working and claimed are one synced write.
func (e *Edge) createTask(ctx context.Context, owner taskstore.Owner, p *wire.SendParams, req execRequest, meta map[string]any, claim bool) (t *taskstore.Task, held bool, err error) {
	nt, err := e.newTask(owner, p, req, meta, claim)
	if err != nil {
		return nil, false, err
	}
	if t, err = e.tasks.Start(ctx, nt); err != nil {
		return nil, false, fmt.Errorf("create task: %w", err)
	}
	return t, claim && !req.Native, nil
}

// newTask is the first commit of a new task for a send: created, and
// unless the tool is A2A-native, working and (with claim) claimed by this
// replica under a fresh execution id, the receipt id of its call.
func (e *Edge) newTask(owner taskstore.Owner, p *wire.SendParams, req execRequest, meta map[string]any, claim bool) (taskstore.NewTask, error) {
	msg := p.Message
	if msg.MessageID == "" {
		msg.MessageID = uuid.Must(uuid.NewV7()).String()
	}
	first, err := encodeStored(&msg)
	if err != nil {
		return taskstore.NewTask{}, fmt.Errorf("store message: %w", err)
	}
	nt := taskstore.NewTask{ID: uuid.Must(uuid.NewV7()).String(), Owner: owner, ContextID: msg.ContextID,
		Message: first, Request: mustJSON(req), Metadata: mustJSON(meta)}
	if nt.ContextID == "" {
		nt.ContextID = uuid.Must(uuid.NewV7()).String()
	}
	if req.Native {
		return nt, nil
	}
	nt.Then = []taskstore.Event{taskstore.StatusEvent(taskstore.StateWorking, nil)}
	if claim {
		c := taskstore.ClaimEvent(e.cfg.EdgeID, time.Now().Add(e.cfg.ClaimLease).UTC())
		c.ExecutionID = uuid.Must(uuid.NewV7()).String()
		nt.Then = append(nt.Then, c)
	}
	return nt, nil
}

// provisional is the task nt will store, as run needs it before the
// write: ids, owner and context.
func provisional(nt *taskstore.NewTask) *taskstore.Task {
	t := &taskstore.Task{ID: nt.ID, TaskHead: schemas.TaskHead{Owner: nt.Owner, ContextID: nt.ContextID}}
	for _, ev := range nt.Then {
		if ev.Type == taskstore.EventClaimed {
			t.ExecutionID = ev.ExecutionID
		}
	}
	return t
}

// errTurnTaken: another message started the task's next turn first.
var errTurnTaken = errors.New("the task's next turn has begun")

// continueTask starts the next turn of a task waiting for input: the
// message joins the history and becomes the new request, with a new
// execution (and so a new receipt) when it is claimed.
func (e *Edge) continueTask(ctx context.Context, prior *taskstore.Task, p *wire.SendParams, req execRequest, meta map[string]any) (*taskstore.Task, error) {
	msg := p.Message
	msg.TaskID, msg.ContextID = prior.ID, prior.ContextID
	raw, err := encodeStored(&msg)
	if err != nil {
		return nil, fmt.Errorf("store message: %w", err)
	}
	return e.tasks.Transition(ctx, prior.ID, prior.Owner, func(cur *taskstore.Task) ([]taskstore.Event, error) {
		// ifGenerationMatch holds on the state this write lands on.
		if err := checkGeneration(p, cur); err != nil {
			return nil, err
		}
		if !cur.State.Interrupted() {
			return nil, fmt.Errorf("%w: task %s is %s, no longer waiting for input", errTurnTaken, cur.ID, cur.State)
		}
		// Working at once, for every tool: a second follow-up then finds
		// the task busy (never two runs of one turn), and the lease of the
		// turn can be renewed (Claim renews only submitted or working).
		return []taskstore.Event{taskstore.MessageEvent(raw), taskstore.RequestEvent(mustJSON(req)),
			taskstore.MetadataEvent(mustJSON(meta)), taskstore.StatusEvent(taskstore.StateWorking, nil)}, nil
	})
}

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
	every := max(e.cfg.ClaimLease/3, 10*time.Millisecond)
	var renewed atomic.Int64
	renewed.Store(time.Now().UnixNano())
	out := &outputs{edge: e, task: t, native: req.Native, renewed: &renewed, renewEvery: every}
	var pt *pendingTask
	if start == nil {
		e.guard(ctx, stop, t, every, &renewed)
	} else {
		pt = &pendingTask{e: e, nt: start.nt}
		defer time.AfterFunc(storeRunningAfter, func() {
			if stored := pt.storeRunning(ctx); stored != nil {
				out.setTask(stored)
				e.guard(ctx, stop, stored, every, &renewed)
			}
		}).Stop()
	}
	var (
		done   *taskstore.Task
		finErr error
		call   = dispatch.Call{
			ReceiptID: t.ExecutionID, Token: c.token, ServerID: req.ServerID, ToolName: req.ToolName,
			Arguments: req.Arguments, Exposure: &e.cfg.Exposure, Stream: req.Stream || req.Native, TaskID: t.ID,
			RequestID: req.RequestID, GovernedIntent: req.Intent,
			Metadata: map[string]any{"protocol": "a2a", "a2a": map[string]any{"taskId": t.ID, "contextId": t.ContextID}},
			Emit:     func(ch tools.Chunk) error { return out.emit(ctx, ch) },
		}
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
			art, err := wire.EncodeArtifact(wire.V10, &wire.Artifact{ArtifactID: out.artifactID(), Name: "result", Parts: parts})
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
	m := chioMeta(res, req.Mode, false, failure)
	if out.reply != nil && state == taskstore.StateCompleted {
		m["chio"].(map[string]any)["reply"] = "message"
	}
	if res != nil && e.cfg.AwaitReceipt > 0 && e.cfg.JetStream != nil {
		c := m["chio"].(map[string]any)
		if sr, err := e.awaitReceipt(ctx, e.cfg.JetStream, req.ServerID, res.ReceiptID, started); err != nil {
			c["receiptAwaitError"] = err.Error()
		} else {
			c["receipt"], c["leafIndex"] = sr.Receipt, sr.LeafIndex
		}
	}
	meta := mustJSON(m)
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
		var evs []taskstore.Event
		for _, r := range receipts {
			evs = append(evs, taskstore.ReceiptEvent(r))
		}
		if cur.State.Terminal() {
			return evs, nil // canceled meanwhile: keep the receipt, discard the result
		}
		for _, a := range artifacts {
			evs = append(evs, taskstore.ArtifactEvent(a))
		}
		evs = append(evs, taskstore.MetadataEvent(meta))
		if state.Interrupted() {
			// The turn is over but the task waits for the client: the
			// lease goes back so the next turn can claim it.
			return append(evs, taskstore.StatusEvent(state, statusRaw), taskstore.ReleaseEvent(e.cfg.EdgeID)), nil
		}
		return append(evs, taskstore.FinishEvent(state, statusRaw)), nil
	})
	if errors.Is(err, taskstore.ErrTooLarge) {
		// The result does not fit: the task must still end, or its
		// streams would wait forever.
		e.log.Warn("a2a: result too large to record; failing the task", "task", t.ID, "err", err)
		msg, _ := encodeStored(agentMessage(t, []wire.Part{wire.TextPart("the result was too large to record")}))
		done, err = commit(func(cur *taskstore.Task) ([]taskstore.Event, error) {
			evs := []taskstore.Event{}
			for _, r := range receipts {
				evs = append(evs, taskstore.ReceiptEvent(r))
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

// outputs turns a running tool's chunks into task events as they come, so
// that every subscriber, on any replica, sees them live.
type outputs struct {
	edge *Edge
	task *taskstore.Task
	mu   sync.Mutex
	cur  *taskstore.Task // the task as this run last wrote it (mu)
	// renewed is when the run's lease was last renewed (unix ns), shared
	// with the renewal ticker; a commit older than renewEvery renews it.
	renewed    *atomic.Int64
	renewEvery time.Duration
	native     bool
	chunks     int
	streamed   bool // artifact chunks were committed
	// A native tool's direct reply, or its terminal or interrupted status.
	reply       *wire.Message
	finalState  taskstore.State
	finalStatus *wire.Message
	err         error // the first invalid native event
}

func (o *outputs) artifactID() string { return o.task.ID + "-result" }

func (o *outputs) emit(ctx context.Context, ch tools.Chunk) error {
	o.chunks++
	if !o.native {
		parts, err := wire.ResultToParts(ch.Data)
		if err != nil {
			return fmt.Errorf("convert stream chunk: %w", err)
		}
		art, err := wire.EncodeArtifact(wire.V10, &wire.Artifact{ArtifactID: o.artifactID(), Name: "result", Parts: parts})
		if err != nil {
			return fmt.Errorf("encode stream chunk: %w", err)
		}
		o.streamed = true
		return o.commit(ctx, taskstore.ArtifactChunkEvent(art, o.chunks > 1, ch.Last))
	}
	if err := o.native1(ctx, ch); err != nil {
		o.err = err
		return err
	}
	return nil
}

// native1 applies one event of an A2A-native tool.
func (o *outputs) native1(ctx context.Context, ch tools.Chunk) error {
	if o.reply != nil || o.finalState != "" {
		return errors.New("an event after the tool's final message or status")
	}
	ev, werr := wire.DecodeStreamEvent(ch.Data)
	switch {
	case werr != nil:
		return werr
	case ev.Task != nil:
		return errors.New("a tool may not send a task; the edge owns it")
	case ev.Message != nil:
		if o.chunks != 1 {
			return errors.New("a direct message must be the tool's only event")
		}
		m := *ev.Message
		m.Role, m.ContextID, m.TaskID = wire.RoleAgent, o.task.ContextID, ""
		o.reply = &m
		return nil
	case ev.Status != nil:
		st := taskstore.State(ev.Status.Status.State)
		msg := ev.Status.Status.Message
		if msg != nil {
			m := *msg
			m.Role, m.ContextID, m.TaskID = wire.RoleAgent, o.task.ContextID, o.task.ID
			msg = &m
		}
		if st.Terminal() || st.Interrupted() {
			if st == taskstore.StateCanceled {
				return errors.New("a tool may not cancel its task; the client does")
			}
			o.finalState, o.finalStatus = st, msg
			return nil
		}
		var raw json.RawMessage
		if msg != nil {
			var err error
			if raw, err = encodeStored(msg); err != nil {
				return err
			}
		}
		return o.commit(ctx, taskstore.StatusEvent(st, raw))
	default:
		a := ev.Artifact
		art, err := wire.EncodeArtifact(wire.V10, &a.Artifact)
		if err != nil {
			return err
		}
		o.streamed = true
		return o.commit(ctx, taskstore.ArtifactChunkEvent(art, a.Append, a.LastChunk))
	}
}

// final is a native tool's last word: its direct reply (the task completes
// with it), its terminal or interrupted status, or completed.
func (o *outputs) final() (taskstore.State, *wire.Message) {
	switch {
	case o.reply != nil:
		m := *o.reply
		m.TaskID = o.task.ID
		return taskstore.StateCompleted, &m
	case o.finalState != "":
		return o.finalState, o.finalStatus
	}
	return taskstore.StateCompleted, nil
}

// current is the task as this run last stored it.
func (o *outputs) current() *taskstore.Task {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur != nil {
		return o.cur
	}
	return o.task
}

// setTask records t as stored, unless a later commit is known already.
func (o *outputs) setTask(t *taskstore.Task) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur == nil || o.cur.Seq < t.Seq {
		o.cur = t
	}
}

func (o *outputs) commit(ctx context.Context, ev taskstore.Event) error {
	// From the task as last written: no re-read per chunk unless another
	// writer (a lease renewal, a cancel) got in between.
	now := time.Now()
	renew := o.renewed != nil && now.Sub(time.Unix(0, o.renewed.Load())) >= o.renewEvery
	next, err := o.edge.tasks.TransitionFrom(ctx, o.current(), func(cur *taskstore.Task) ([]taskstore.Event, error) {
		if cur.State.Terminal() {
			return nil, taskstore.ErrAlreadyTerminal
		}
		if renew && cur.ClaimedBy == o.edge.cfg.EdgeID {
			// The lease rides along: the run never races itself for it.
			return []taskstore.Event{ev, taskstore.ClaimEvent(o.edge.cfg.EdgeID, now.Add(o.edge.cfg.ClaimLease).UTC())}, nil
		}
		return []taskstore.Event{ev}, nil
	})
	if err != nil {
		return fmt.Errorf("record tool output: %w", err)
	}
	if renew && next.ClaimedBy == o.edge.cfg.EdgeID {
		o.renewed.Store(now.UnixNano())
	}
	o.setTask(next)
	return nil
}

// Sweep runs until ctx ends, taking over background tasks whose accepting
// replica stopped renewing its claim (it died): each is claimed (one
// replica wins) and executed under the capability stored with it. The
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
			if req.Mode != modeBackground || req.Capability == "" {
				// Nobody can resume it (no capability to act under): end it,
				// so its streams and pollers learn what happened.
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

// resultParts converts a tool result per the bridges spec's table; a
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

// toWire turns a stored task into the wire model.
func toWire(t *taskstore.Task, historyLength *int, includeArtifacts bool) (*wire.Task, error) {
	state, ok := wire.ParseTaskState(string(t.State))
	if !ok {
		return nil, fmt.Errorf("task %s: unknown state %q", t.ID, t.State)
	}
	w := &wire.Task{ID: t.ID, ContextID: t.ContextID, Status: wire.TaskStatus{State: state, Timestamp: t.StatusTime}}
	if len(t.StatusMessage) > 0 {
		m, werr := wire.DecodeMessage(t.StatusMessage)
		if werr != nil {
			return nil, fmt.Errorf("task %s: status message: %w", t.ID, werr)
		}
		w.Status.Message = m
	}
	hist := t.History
	if historyLength != nil && *historyLength < len(hist) {
		hist = hist[len(hist)-max(*historyLength, 0):]
	}
	for _, raw := range hist {
		m, werr := wire.DecodeMessage(raw)
		if werr != nil {
			return nil, fmt.Errorf("task %s: history: %w", t.ID, werr)
		}
		w.History = append(w.History, *m)
	}
	if includeArtifacts {
		arts, err := mergeArtifacts(t)
		if err != nil {
			return nil, err
		}
		w.Artifacts = arts
	}
	meta, err := linkedMetadata(t.Metadata, t.ReceiptIDs)
	if err != nil {
		return nil, fmt.Errorf("task %s: metadata: %w", t.ID, err)
	}
	w.Metadata = withGeneration(meta, t.Generation)
	return w, nil
}

// linkedMetadata is a task's metadata as served: as stored, with the
// receipts linked to the task under metadata.chio by the one rule the
// projections serve too (schemas.LinkTaskReceipts).
func linkedMetadata(raw json.RawMessage, receipts []string) (map[string]any, error) {
	linked, err := schemas.LinkTaskReceipts(raw, receipts)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(linked, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// replyMessage is the message an A2A-native tool answered with instead of
// a task (metadata.chio.reply), given the task's final state, metadata and
// status message; nil when there is none.
func replyMessage(state taskstore.State, meta map[string]any, status json.RawMessage) *wire.Message {
	c, _ := meta["chio"].(map[string]any)
	if state != taskstore.StateCompleted || c["reply"] != "message" {
		return nil
	}
	m, werr := wire.DecodeMessage(status)
	if werr != nil {
		return nil
	}
	m.TaskID = ""
	m.Metadata = map[string]any{"chio": c}
	return m
}

// mergeArtifacts is a task's artifacts as served, merged by the one rule
// the projections serve too (schemas.MergeTaskArtifacts).
func mergeArtifacts(t *taskstore.Task) ([]wire.Artifact, error) {
	merged, err := schemas.MergeTaskArtifacts(t.Artifacts)
	if err != nil {
		return nil, fmt.Errorf("task %s: artifacts: %w", t.ID, err)
	}
	out := make([]wire.Artifact, 0, len(merged))
	for _, raw := range merged {
		w, werr := wire.DecodeArtifact(raw)
		if werr != nil {
			return nil, fmt.Errorf("task %s: artifact: %w", t.ID, werr)
		}
		out = append(out, *w)
	}
	return out, nil
}

// storeError maps a task store error to the A2A error.
func storeError(id string, err error) *wire.Error {
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		return wire.TaskNotFound(id)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return wire.InternalError("task store did not answer in time")
	}
	return wire.InternalError("task store: " + err.Error())
}
