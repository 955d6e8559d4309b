package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/a2a/push"
	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas"
)

// The core: accepting a send (SendMessage, SendStreamingMessage).

// send runs SendMessage: blocking by default, in the background with
// returnImmediately, deferred to the next task/get on the stdio profile's
// message/stream.
func (e *Edge) send(ctx context.Context, rc rpcCall, p *wire.SendParams, deferred bool) (any, *wire.Error) {
	mode := modeBlocking
	switch {
	case deferred:
		mode = modeDeferred
	case p.Configuration.ReturnImmediately:
		mode = modeBackground
	}
	t, start, werr := e.accept(ctx, rc, p, mode)
	if werr != nil {
		return nil, werr
	}
	if start != nil {
		// Not stored yet: its first commit goes with the call's decision.
		done, err := e.run(background(ctx), rc.caller, t, start)
		if err != nil {
			return nil, runError(err)
		}
		if deny, _ := answerMarks(done); deny {
			if werr := refusedAnswer(done); werr != nil {
				return nil, werr
			}
		}
		return encodeSendTask(rc.dialect, done, p.Configuration.HistoryLength)
	}
	if mode == modeDeferred {
		return encodeSendTask(rc.dialect, t, p.Configuration.HistoryLength)
	}
	if mode == modeBackground {
		// The call is logged when its run ends, with the decision.
		e.spawn(ctx, func() {
			if _, err := e.execute(background(ctx), rc.caller, t); err != nil {
				e.log.Error("a2a: background task failed", "task", t.ID, "err", err)
			}
		})
		return encodeSendTask(rc.dialect, t, p.Configuration.HistoryLength)
	}
	// The call finishes even if the client goes away: its receipt must.
	done, err := e.execute(background(ctx), rc.caller, t)
	if err != nil {
		return nil, runError(err)
	}
	deny, reply := answerMarks(done)
	if deny {
		if werr := refusedAnswer(done); werr != nil {
			return nil, werr
		}
	}
	if !reply {
		return encodeSendTask(rc.dialect, done, p.Configuration.HistoryLength)
	}
	if reply := directReply(done); reply != nil {
		raw, err := rc.dialect.EncodeSendResult(nil, reply)
		if err != nil {
			return nil, wire.InternalError(err.Error())
		}
		return raw, nil
	}
	return encodeSendTask(rc.dialect, done, p.Configuration.HistoryLength)
}

// accept validates a send, creates its task and, unless it is deferred,
// takes the task's execution lease. A blocking send of a new task to a
// tool that is not A2A-native is not stored here: accept returns the task
// it will be and start, its first commit, for run to write together with
// the call's decision event.
func (e *Edge) accept(ctx context.Context, rc rpcCall, p *wire.SendParams, mode string) (t *taskstore.Task, start *newSend, werr *wire.Error) {
	if werr := checkParts(&p.Message); werr != nil {
		return nil, nil, werr
	}
	if p.Message.TaskID == "" {
		// A condition on a task's generation needs the task it is about.
		if g, werr := ifGenerationMatch(p); werr != nil || g != nil {
			if werr == nil {
				werr = wire.InvalidParams("ifGenerationMatch applies to a message that continues a task: set message.taskId",
					wire.FieldViolation{Field: "configuration.ifGenerationMatch", Description: "needs message.taskId"})
			}
			return nil, nil, werr
		}
	}
	// Identity first: a caller the kernel refuses learns nothing about tasks
	// or webhook hosts (no task load, no DNS lookup), gets no task and no
	// webhook call, and its call still gets its deny receipt.
	//
	// A proof of possession is spent (its one-time id claimed) before any
	// of that too, except on the one path whose next effect is the call
	// itself: a blocking send of a new task, without a webhook, goes
	// straight to the dispatcher (Admit), which claims the id beside the
	// decision's write. Every other send stores its task first (Identify).
	admit := p.Message.TaskID == "" && mode == modeBlocking && len(p.Configuration.PushConfig) == 0
	check := e.kernel.Identify
	if admit {
		check = e.kernel.Admit
	}
	id, d := check(ctx, rc.caller.token, rc.caller.proof)
	if d != nil {
		return nil, nil, e.refuse(ctx, rc.caller, e.refusedRequest(ctx, rc, p, mode), d)
	}
	owner := taskstore.Owner{Subject: id.Principal, Tenant: p.Tenant}
	prior, forced, werr := e.priorTurn(ctx, owner, p)
	if werr != nil {
		return nil, nil, werr
	}
	req, werr := e.sendRequest(ctx, rc, p, forced, mode)
	if werr != nil {
		return nil, nil, werr
	}
	if prior == nil {
		if werr := admitError(e.tasks.AdmitOwner(ctx, owner)); werr != nil {
			return nil, nil, werr
		}
	}
	pc, werr := e.inlinePush(ctx, rc.dialect.Version(), p)
	if werr != nil {
		return nil, nil, werr
	}
	// From here the request is accepted: a client going away must not leave
	// a task created but never claimed.
	ctx = background(ctx)
	meta := chioMeta(nil, mode, true, "")
	if prior == nil && mode == modeBlocking && !req.Native && pc == nil {
		nt, err := e.newTask(owner, p, req, meta, true)
		if err == nil && e.tasks.Admits(nt) {
			callFrom(ctx).setTask(nt.ID)
			return provisional(&nt), &newSend{nt: nt, req: req}, nil
		}
	}
	if admit {
		// Admitted for a call that turns out to need its task stored
		// first (an A2A-native tool, a task too large for one commit):
		// the proof is spent before the store.
		if _, d := e.kernel.Identify(ctx, rc.caller.token, rc.caller.proof); d != nil {
			return nil, nil, e.refuse(ctx, rc.caller, req, d)
		}
	}
	t, werr = e.storeAccepted(ctx, owner, prior, p, req, meta, mode, pc)
	return t, nil, werr
}

// priorTurn is the task a follow-up message (one naming a taskId)
// continues, and the skill its next turn goes to, the same as before; nil
// and "" for a message that starts a task.
func (e *Edge) priorTurn(ctx context.Context, owner taskstore.Owner, p *wire.SendParams) (*taskstore.Task, string, *wire.Error) {
	if p.Message.TaskID == "" {
		return nil, "", nil
	}
	t, err := e.tasks.Load(ctx, p.Message.TaskID, owner)
	if err != nil {
		return nil, "", storeError(p.Message.TaskID, err)
	}
	if err := checkGeneration(p, t); err != nil { // ifGenerationMatch; again in continueTask
		return nil, "", generationError(err)
	}
	switch {
	case t.State.Terminal():
		return nil, "", wire.UnsupportedOperation(fmt.Sprintf("task %s is %s; a terminal task takes no more messages", t.ID, t.State))
	case !t.State.Interrupted():
		return nil, "", wire.UnsupportedOperation(fmt.Sprintf("task %s is %s; it takes another message only when it asks for one (input-required, auth-required)", t.ID, t.State))
	case p.Message.ContextID != "" && p.Message.ContextID != t.ContextID:
		return nil, "", wire.InvalidParams(fmt.Sprintf("message.contextId %q is not the context of task %s", p.Message.ContextID, t.ID),
			wire.FieldViolation{Field: "message.contextId", Description: "does not match the task's context"})
	}
	var prev execRequest
	if err := json.Unmarshal(t.Request, &prev); err != nil {
		return nil, "", wire.InternalError(fmt.Sprintf("task %s: stored request: %v", t.ID, err))
	}
	return t, prev.ToolName, nil // the next turn goes to the same skill
}

// sendRequest resolves the skill a send goes to (forced, for a follow-up)
// and builds the execution request stored with its task.
func (e *Edge) sendRequest(ctx context.Context, rc rpcCall, p *wire.SendParams, forced, mode string) (execRequest, *wire.Error) {
	en, args, werr := e.resolveSkill(p, forced)
	if werr != nil {
		return execRequest{}, werr
	}
	// A client that streams, or that will subscribe, gets a streaming
	// tool's chunks as they come; a blocking send its one result.
	sk := e.skillOf(en)
	hints := sk.hints
	req := execRequest{ServerID: en.Manifest.ServerID, ToolName: en.Tool.Name, Arguments: args,
		Stream: mode == modeDeferred || (mode != modeBlocking && hints.Streaming), Mode: mode}
	if p.Message.MessageID == "" {
		p.Message.MessageID = uuid.Must(uuid.NewV7()).String()
	}
	req.RequestID = p.Message.MessageID
	callFrom(ctx).setRequest(req.RequestID)
	if req.Intent, werr = governedIntent(p); werr != nil {
		return execRequest{}, werr
	}
	if sk.native {
		msg, err := encodeStored(&p.Message)
		if err != nil {
			return execRequest{}, wire.InvalidParams("message: " + err.Error())
		}
		req.Native, req.Arguments = true, mustJSON(map[string]json.RawMessage{"message": msg})
	}
	if mode == modeBackground {
		req.Capability = rc.caller.token
	}
	return req, nil
}

// refusedRequest is what a send refused for its capability asked for, as
// its deny receipt names it: the skill it resolves to without its task (a
// follow-up's task is not read for a caller the kernel refused), else
// the A2A operation itself, a2a/SendMessage, with empty arguments.
func (e *Edge) refusedRequest(ctx context.Context, rc rpcCall, p *wire.SendParams, mode string) execRequest {
	if req, werr := e.sendRequest(ctx, rc, p, "", mode); werr == nil && len(req.Arguments) <= schemas.MaxParametersBytes {
		req.Capability = "" // never stored: nothing is
		return req
	}
	if p.Message.MessageID == "" {
		p.Message.MessageID = uuid.Must(uuid.NewV7()).String()
	}
	return execRequest{ServerID: "a2a", ToolName: wire.OpSendMessage.String(), Arguments: json.RawMessage("{}"), RequestID: p.Message.MessageID}
}

// storeAccepted stores an accepted send's task, the next turn of prior or
// a new task, with the config the send carried (pc), and claims its
// execution unless it is deferred or its first commit claimed it already.
//
// The config is stored first, under the task's id: a config refused (over
// its owner's quota, say) then leaves no task behind for a sweeper to run
// after the send was answered with the refusal, and the task's first
// commit is notified like every later one.
func (e *Edge) storeAccepted(ctx context.Context, owner taskstore.Owner, prior *taskstore.Task, p *wire.SendParams, req execRequest, meta map[string]any, mode string, pc *push.Config) (*taskstore.Task, *wire.Error) {
	var t *taskstore.Task
	var held bool
	var err error
	if prior != nil {
		owner = prior.Owner
		undo, werr := e.putInlinePush(ctx, pc, prior.ID, owner)
		if werr != nil {
			return nil, werr
		}
		if t, err = e.continueTask(ctx, prior, p, req, meta); err != nil {
			undo()
		}
	} else {
		t, held, err = e.createTask(ctx, owner, p, req, meta, mode != modeDeferred, pc)
	}
	if werr := (*wire.Error)(nil); errors.As(err, &werr) {
		return nil, werr
	}
	if err != nil {
		return nil, acceptError(err)
	}
	callFrom(ctx).setTask(t.ID)
	if mode == modeDeferred || held {
		return t, nil
	}
	claimed, won, err := e.claimFree(ctx, t.ID, owner)
	if err != nil || !won {
		return nil, wire.InternalError(fmt.Sprintf("claim new task %s: won=%v err=%v", t.ID, won, err))
	}
	return claimed, nil
}

// admitError is the answer to a send refused a new task: its principal
// holds its quota of live tasks (ResourceExhausted: it may retry once one
// ends), or the task store is full or its state unreadable (Unavailable).
func admitError(err error) *wire.Error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, taskstore.ErrQuotaExceeded):
		return wire.ResourceExhausted(err.Error())
	case errors.Is(err, taskstore.ErrStoreFull):
		return wire.Unavailable(err.Error(), time.Minute)
	}
	return wire.Unavailable("task store: "+err.Error(), 5*time.Second)
}

// eventStoreRetry is the Retry-After of a call refused because its
// decision could not be made durable: the event store's own recovery (a
// full disk freed, a leader elected) takes seconds.
const eventStoreRetry = 5 * time.Second

// runError is the answer to a send whose run failed: Unavailable (503
// with Retry-After, gRPC UNAVAILABLE) when the event store could not take
// its decision, so no tool ran and the caller may retry; internal
// otherwise.
func runError(err error) *wire.Error {
	if errors.Is(err, dispatch.ErrEventStoreUnavailable) {
		return wire.Unavailable(err.Error(), eventStoreRetry)
	}
	return wire.InternalError(err.Error())
}

// acceptError is the answer to a send whose task could not be stored.
func acceptError(err error) *wire.Error {
	switch {
	case errors.Is(err, taskstore.ErrInvalidArgument), errors.Is(err, taskstore.ErrTooLarge):
		return wire.InvalidParams(err.Error())
	case errors.Is(err, taskstore.ErrStoreFull):
		return wire.Unavailable(err.Error(), time.Minute)
	case errors.Is(err, errTurnTaken):
		return wire.UnsupportedOperation(err.Error())
	case generationError(err) != nil:
		return generationError(err)
	}
	return wire.InternalError(err.Error())
}

// refuse answers a send whose capability the kernel refused (d, from
// Identify) with Unauthenticated, after recording the call's deny receipt:
// every call that reached the kernel has one.
func (e *Edge) refuse(ctx context.Context, c caller, req execRequest, d *kernel.Decision) *wire.Error {
	res, err := e.dispatch.Refuse(background(ctx), dispatch.Call{Token: c.token, Proof: c.proof, ServerID: req.ServerID, ToolName: req.ToolName,
		Arguments: req.Arguments, Exposure: &e.cfg.Exposure, RequestID: req.RequestID, GovernedIntent: req.Intent,
		Metadata: map[string]any{"protocol": "a2a"}}, d)
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		// Arguments the strict reader refuses never reach the kernel, so
		// there is no refusal to record: the request itself is invalid.
		return wire.InvalidParams(err.Error())
	case err != nil:
		return wire.InternalError(fmt.Sprintf("record the refusal: %v", err))
	}
	callFrom(ctx).executed("", req.RequestID, res, nil)
	return refusedCapability(d, res.ReceiptID)
}

// answerMarks reads the two members of metadata.chio that can change a
// blocking send's answer, so that the common answer (a task the call
// completed) costs one small decode rather than the linked metadata's
// full decode for each check: deny (the call was denied: refusedAnswer
// may apply) and reply (an A2A-native tool answered with a message:
// directReply may apply). Metadata it cannot read says both, and the
// full checks decide.
func answerMarks(t *taskstore.Task) (deny, reply bool) {
	var m struct {
		Chio struct {
			Decision any `json:"decision"`
			Reply    any `json:"reply"`
		} `json:"chio"`
	}
	if err := json.Unmarshal(t.Metadata, &m); err != nil {
		return true, true
	}
	return m.Chio.Decision == "deny", m.Chio.Reply == "message"
}

// refusedAnswer is the error a blocking send answers with when its call
// was denied for its credentials (proofRefused) or its authority
// (forbidden), nil otherwise.
func refusedAnswer(t *taskstore.Task) *wire.Error {
	if werr := proofRefused(t); werr != nil {
		return werr
	}
	return forbidden(t)
}

// forbidden is the PermissionDenied answer to a blocking send the kernel
// denied because the capability grants no such call: the task failed, and
// its deny receipt is named.
func forbidden(t *taskstore.Task) *wire.Error {
	meta, err := linkedMetadata(t.Metadata, t.ReceiptIDs)
	if err != nil {
		return nil
	}
	c, _ := meta["chio"].(map[string]any)
	if c["decision"] != "deny" || c["denyGuard"] != kernel.StepGrant {
		return nil
	}
	rid, _ := c["receiptId"].(string)
	reason, _ := c["denyReason"].(string)
	return wire.PermissionDenied("capability refused at grant: "+reason, "receiptId", rid, "taskId", t.ID)
}

// proofRefused is the Unauthenticated answer to a blocking send whose
// call the kernel or the dispatcher denied for its proof of possession (a
// tool proof that names another call; a proof found replayed as its
// one-time id was claimed beside the decision's write): the task failed,
// and its deny receipt is named, as for a token refused before any task.
func proofRefused(t *taskstore.Task) *wire.Error {
	meta, err := linkedMetadata(t.Metadata, t.ReceiptIDs)
	if err != nil {
		return nil
	}
	c, _ := meta["chio"].(map[string]any)
	if c["decision"] != "deny" || c["denyGuard"] != kernel.StepDPoP {
		return nil
	}
	rid, _ := c["receiptId"].(string)
	reason, _ := c["denyReason"].(string)
	return refusedCapability(&kernel.Decision{Guard: kernel.StepDPoP, Reason: reason}, rid, "taskId", t.ID)
}

// directReply is the message an A2A-native tool answered with instead of
// a task, or nil.
func directReply(t *taskstore.Task) *wire.Message {
	meta, err := linkedMetadata(t.Metadata, t.ReceiptIDs)
	if err != nil {
		return nil
	}
	return replyMessage(t.State, meta, t.StatusMessage)
}

// encodeSendTask is a task as SendMessage answers it.
func encodeSendTask(d wire.Dialect, t *taskstore.Task, historyLength *int) (any, *wire.Error) {
	if raw, ok, err := encodeStored10(d, t, historyLength, true); ok || err != nil {
		if err != nil {
			return nil, wire.InternalError(err.Error())
		}
		return raw, nil
	}
	w, err := toWire(t, historyLength, true)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	raw, err := d.EncodeSendResult(w, nil)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	return raw, nil
}

// governedIntent reads metadata.chio.governedIntent from the request or
// its message (A2A has no other place for it). A malformed one is bad
// input (-32602, nothing runs); one that is well formed but does not fit
// the call is the kernel's to deny, with a receipt.
func governedIntent(p *wire.SendParams) (*schemas.GovernedIntent, *wire.Error) {
	var found *schemas.GovernedIntent
	var foundAt string
	for _, src := range []struct {
		path string
		meta map[string]any
	}{{"metadata", p.Metadata}, {"message.metadata", p.Message.Metadata}} {
		c, ok := src.meta["chio"].(map[string]any)
		if !ok {
			continue
		}
		v, ok := c["governedIntent"]
		if !ok {
			continue
		}
		field := src.path + ".chio.governedIntent"
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, wire.InvalidParams(field+": "+err.Error(), wire.FieldViolation{Field: field, Description: err.Error()})
		}
		g, err := schemas.DecodeGovernedIntent(raw)
		if err != nil {
			return nil, wire.InvalidParams(field+": "+err.Error(), wire.FieldViolation{Field: field, Description: err.Error()})
		}
		if found != nil {
			a, _ := schemas.Canonical(found)
			b, _ := schemas.Canonical(g)
			if string(a) != string(b) {
				return nil, wire.InvalidParams(field+" differs from "+foundAt,
					wire.FieldViolation{Field: field, Description: "two different governed intents in one request"})
			}
			continue
		}
		found, foundAt = g, field
	}
	return found, nil
}

// createTask stores a new task for a send, in state working; a native
// tool's task stays submitted until the tool's own first event. With claim,
// the same commit claims its execution for this replica (held reports
// whether it did): created, working and claimed are one synced write. The
// send's push config (pc, if any) is stored before, under the task's id;
// its refusal is a *wire.Error.
func (e *Edge) createTask(ctx context.Context, owner taskstore.Owner, p *wire.SendParams, req execRequest, meta map[string]any, claim bool, pc *push.Config) (t *taskstore.Task, held bool, err error) {
	nt, err := e.newTask(owner, p, req, meta, claim)
	if err != nil {
		return nil, false, err
	}
	undo, werr := e.putInlinePush(ctx, pc, nt.ID, owner)
	if werr != nil {
		return nil, false, werr
	}
	if t, err = e.tasks.Start(ctx, nt); err != nil {
		undo()
		return nil, false, fmt.Errorf("create task: %w", err)
	}
	return t, claim && !req.Native, nil
}

// putInlinePush stores the config a send carried (pc, if any) for task
// id; undo takes it back, for a send whose task was not written: it
// deletes a config the send created, and puts back one it replaced (a
// follow-up's config may name one of the task's by its id).
func (e *Edge) putInlinePush(ctx context.Context, pc *push.Config, id string, owner taskstore.Owner) (undo func(), werr *wire.Error) {
	if pc == nil {
		return func() {}, nil
	}
	pc.TaskID, pc.Owner = id, pushOwner(owner)
	store := e.cfg.Push.Store
	var before *push.Config
	if pc.ID != "" {
		switch prev, err := store.Get(ctx, pc.Owner, id, pc.ID); {
		case err == nil:
			before = &prev
		case !errors.Is(err, push.ErrNotFound):
			return nil, pushError(err)
		}
	}
	stored, err := store.Put(ctx, *pc)
	if err != nil {
		return nil, pushError(err)
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		var err error
		if before != nil {
			_, err = store.Put(ctx, *before)
		} else if err = store.Delete(ctx, stored.Owner, id, stored.ID); errors.Is(err, push.ErrNotFound) {
			err = nil
		}
		if err != nil {
			e.log.Warn("a2a: could not take back the push config of a send whose task was not written", "task", id, "config", stored.ID, "err", err)
		}
	}, nil
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
