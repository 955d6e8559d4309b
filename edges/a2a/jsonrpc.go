package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// rpcCall is one decoded call with its context.
type rpcCall struct {
	caller  caller
	version wire.Version // negotiated (or VHelloStdio on the stdio profile)
	stdio   bool
	origin  string // the HTTP origin the request came to, for cards ("" off HTTP)
}

// HandleJSONRPC answers one JSON-RPC request body, and returns the error
// it answered with (the HTTP binding sets its status from it). It returns
// a nil response for a notification (JSON-RPC sends no response to one).
func (e *Edge) handleJSONRPC(ctx context.Context, rc rpcCall, body []byte, callerErr *wire.Error) (resp []byte, werr *wire.Error) {
	rec := callFrom(ctx)
	req, werr := wire.DecodeRequest(body)
	if werr != nil {
		rec.fail(werr)
		return wire.EncodeError(req.ResponseID(), werr), werr
	}
	defer func() {
		// A bug must not take the process down, nor leave the caller
		// without an answer.
		if r := recover(); r != nil {
			e.log.Error("a2a: panic while handling a request", "method", req.Method, "panic", fmt.Sprint(r))
			werr = wire.InternalError("internal error")
			rec.fail(werr)
			resp = wire.EncodeError(req.ResponseID(), werr)
		}
	}()
	result, werr := e.call(ctx, rc, req, callerErr)
	rec.fail(werr)
	if req.IsNotification {
		return nil, werr
	}
	if werr != nil {
		return wire.EncodeError(req.ResponseID(), werr), werr
	}
	return wire.EncodeResult(req.ResponseID(), result), nil
}

func (e *Edge) call(ctx context.Context, rc rpcCall, req *wire.Request, callerErr *wire.Error) (any, *wire.Error) {
	m, ok := wire.LookupMethod(req.Method, rc.version)
	if !ok {
		return nil, wire.MethodNotFound(req.Method)
	}
	callFrom(ctx).setMethod(m.Op.String())
	version := m.Version
	if rc.stdio {
		version = wire.VHelloStdio
	}
	if m.Op == wire.OpSubscribeToTask || (m.Op == wire.OpSendStreamingMessage && !rc.stdio) {
		// Streams are served by the HTTP bindings (stream.go); a stream
		// method reaching here came over stdio.
		return nil, wire.UnsupportedOperation("streaming is served over HTTP (SSE), not on the stdio profile")
	}
	if m.Op.PushConfig() && e.cfg.Push == nil {
		return nil, wire.PushNotSupported() // whatever the params
	}
	params, werr := m.DecodeParams(req.Params)
	if werr != nil {
		return nil, werr
	}
	if callerErr != nil {
		return nil, callerErr
	}
	return e.do(ctx, rc, version, m.Op, params)
}

// do runs one non-streaming operation with decoded params; both bindings
// (JSON-RPC and REST) come here.
func (e *Edge) do(ctx context.Context, rc rpcCall, version wire.Version, op wire.Operation, params any) (any, *wire.Error) {
	callFrom(ctx).setTask(taskIDOf(params))
	switch {
	case op.PushConfig():
		return e.pushConfigOp(ctx, rc, version, op, params)
	case op == wire.OpGetExtendedAgentCard:
		return e.extendedCard(rc, version)
	}
	switch p := params.(type) {
	case *wire.SendParams:
		return e.send(ctx, rc, version, p, op == wire.OpSendStreamingMessage)
	case *wire.GetTaskParams:
		return e.getTask(ctx, rc, version, p)
	case *wire.ListTasksParams:
		return e.listTasks(ctx, rc, version, p)
	case *wire.CancelTaskParams:
		return e.cancelTask(ctx, rc, version, p)
	}
	return nil, wire.MethodNotFound(op.String())
}

// send runs SendMessage: blocking by default, in the background with
// returnImmediately, deferred to the next task/get on the stdio profile's
// message/stream.
func (e *Edge) send(ctx context.Context, rc rpcCall, v wire.Version, p *wire.SendParams, deferred bool) (any, *wire.Error) {
	mode := modeBlocking
	switch {
	case deferred:
		mode = modeDeferred
	case p.Configuration.ReturnImmediately:
		mode = modeBackground
	}
	t, start, werr := e.accept(ctx, rc, v, p, mode)
	if werr != nil {
		return nil, werr
	}
	if start != nil {
		// Not stored yet: its first commit goes with the call's decision.
		done, err := e.run(background(ctx), rc.caller, t, start)
		if err != nil {
			return nil, wire.InternalError(err.Error())
		}
		if werr := forbidden(done); werr != nil {
			return nil, werr
		}
		return e.encodeTask(v, done, p.Configuration.HistoryLength)
	}
	if mode == modeDeferred {
		return e.encodeTask(v, t, p.Configuration.HistoryLength)
	}
	if mode == modeBackground {
		// The call is logged when its run ends, with the decision.
		e.spawn(ctx, func() {
			if _, err := e.execute(background(ctx), rc.caller, t); err != nil {
				e.log.Error("a2a: background task failed", "task", t.ID, "err", err)
			}
		})
		return e.encodeTask(v, t, p.Configuration.HistoryLength)
	}
	// The call finishes even if the client goes away: its receipt must.
	done, err := e.execute(background(ctx), rc.caller, t)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	if werr := forbidden(done); werr != nil {
		return nil, werr
	}
	if reply := directReply(done); reply != nil {
		raw, err := wire.EncodeSendResult(v, nil, reply)
		if err != nil {
			return nil, wire.InternalError(err.Error())
		}
		return raw, nil
	}
	return e.encodeTask(v, done, p.Configuration.HistoryLength)
}

// accept validates a send, creates its task and, unless it is deferred,
// takes the task's execution lease. A blocking send of a new task to a
// tool that is not A2A-native is not stored here: accept returns the task
// it will be and start, its first commit, for run to write together with
// the call's decision event.
func (e *Edge) accept(ctx context.Context, rc rpcCall, v wire.Version, p *wire.SendParams, mode string) (t *taskstore.Task, start *newSend, werr *wire.Error) {
	if werr := checkParts(&p.Message); werr != nil {
		return nil, nil, werr
	}
	var prior *taskstore.Task // the task a follow-up message continues
	forced := ""
	if p.Message.TaskID != "" {
		owner, werr := e.owner(rc.caller, p.Tenant)
		if werr != nil {
			return nil, nil, werr
		}
		t, err := e.tasks.Load(ctx, p.Message.TaskID, owner)
		if err != nil {
			return nil, nil, storeError(p.Message.TaskID, err)
		}
		if err := checkGeneration(p, t); err != nil { // ifGenerationMatch; again in continueTask
			return nil, nil, generationError(err)
		}
		switch {
		case t.State.Terminal():
			return nil, nil, wire.UnsupportedOperation(fmt.Sprintf("task %s is %s; a terminal task takes no more messages", t.ID, t.State))
		case !t.State.Interrupted():
			return nil, nil, wire.UnsupportedOperation(fmt.Sprintf("task %s is %s; it takes another message only when it asks for one (input-required, auth-required)", t.ID, t.State))
		case p.Message.ContextID != "" && p.Message.ContextID != t.ContextID:
			return nil, nil, wire.InvalidParams(fmt.Sprintf("message.contextId %q is not the context of task %s", p.Message.ContextID, t.ID),
				wire.FieldViolation{Field: "message.contextId", Description: "does not match the task's context"})
		}
		var prev execRequest
		if err := json.Unmarshal(t.Request, &prev); err != nil {
			return nil, nil, wire.InternalError(fmt.Sprintf("task %s: stored request: %v", t.ID, err))
		}
		prior, forced = t, prev.ToolName // the next turn goes to the same skill
	}
	en, args, werr := e.resolveSkill(p, forced)
	if werr != nil {
		return nil, nil, werr
	}
	// A client that streams, or that will subscribe, gets a streaming
	// tool's chunks as they come; a blocking send its one result.
	hints, _ := tools.ReadHints(en.Tool)
	req := execRequest{ServerID: en.Manifest.ServerID, ToolName: en.Tool.Name, Arguments: args,
		Stream: mode == modeDeferred || (mode != modeBlocking && hints.Streaming), Mode: mode}
	if p.Message.MessageID == "" {
		p.Message.MessageID = uuid.Must(uuid.NewV7()).String()
	}
	req.RequestID = p.Message.MessageID
	callFrom(ctx).setRequest(req.RequestID)
	if req.Intent, werr = governedIntent(p); werr != nil {
		return nil, nil, werr
	}
	if isNative(en) {
		msg, err := wire.EncodeMessage(wire.V10, &p.Message)
		if err != nil {
			return nil, nil, wire.InvalidParams("message: " + err.Error())
		}
		req.Native, req.Arguments = true, mustJSON(map[string]json.RawMessage{"message": msg})
	}
	if mode == modeBackground {
		req.Capability = rc.caller.token
	}
	pc, werr := e.inlinePush(ctx, v, p)
	if werr != nil {
		return nil, nil, werr
	}
	id, d := e.kernel.Identify(rc.caller.token)
	if d != nil {
		// The capability does not verify: no task, and no webhook is ever
		// called on its behalf; the call still gets its deny receipt.
		return nil, nil, e.refuse(ctx, rc.caller, req, d)
	}
	// From here the request is accepted: a client going away must not leave
	// a task created but never claimed.
	ctx = background(ctx)
	owner := taskstore.Owner{Subject: id.Principal, Tenant: p.Tenant}
	meta := chioMeta(nil, mode, true, "")
	if prior == nil && mode == modeBlocking && !req.Native && pc == nil {
		nt, err := e.newTask(owner, p, req, meta, true)
		if err == nil && e.tasks.Admits(nt) {
			callFrom(ctx).setTask(nt.ID)
			return provisional(&nt), &newSend{nt: nt, req: req}, nil
		}
	}
	var held bool
	var err error
	if prior != nil {
		owner = prior.Owner
		t, err = e.continueTask(ctx, prior, p, req, meta)
	} else {
		t, held, err = e.createTask(ctx, owner, p, req, meta, mode != modeDeferred)
	}
	if err != nil {
		switch {
		case errors.Is(err, taskstore.ErrInvalidArgument), errors.Is(err, taskstore.ErrTooLarge):
			return nil, nil, wire.InvalidParams(err.Error())
		case errors.Is(err, errTurnTaken):
			return nil, nil, wire.UnsupportedOperation(err.Error())
		case generationError(err) != nil:
			return nil, nil, generationError(err)
		}
		return nil, nil, wire.InternalError(err.Error())
	}
	callFrom(ctx).setTask(t.ID)
	if pc != nil {
		pc.TaskID, pc.Owner = t.ID, pushOwner(owner)
		if _, err := e.cfg.Push.Store.Put(ctx, *pc); err != nil {
			return nil, nil, pushError(err)
		}
	}
	if mode == modeDeferred || held {
		return t, nil, nil
	}
	claimed, won, err := e.claimFree(ctx, t.ID, owner)
	if err != nil || !won {
		return nil, nil, wire.InternalError(fmt.Sprintf("claim new task %s: won=%v err=%v", t.ID, won, err))
	}
	return claimed, nil, nil
}

// refuse answers a send whose capability the kernel refused (d, from
// Identify) with Unauthenticated, after recording the call's deny receipt:
// every call that reached the kernel has one (DESIGN §5).
func (e *Edge) refuse(ctx context.Context, c caller, req execRequest, d *kernel.Decision) *wire.Error {
	res, err := e.dispatch.Refuse(background(ctx), dispatch.Call{Token: c.token, ServerID: req.ServerID, ToolName: req.ToolName,
		Arguments: req.Arguments, Exposure: &e.cfg.Exposure, RequestID: req.RequestID, GovernedIntent: req.Intent,
		Metadata: map[string]any{"protocol": "a2a"}}, d)
	if err != nil {
		return wire.InternalError(fmt.Sprintf("record the refusal: %v", err))
	}
	callFrom(ctx).executed("", req.RequestID, res, nil)
	return wire.Unauthenticated(fmt.Sprintf("capability refused at %s: %s", d.Guard, d.Reason), "receiptId", res.ReceiptID)
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

// directReply is the message an A2A-native tool answered with instead of
// a task, or nil.
func directReply(t *taskstore.Task) *wire.Message {
	meta, err := linkedMetadata(t.Metadata, t.ReceiptIDs)
	if err != nil {
		return nil
	}
	return replyMessage(t.State, meta, t.StatusMessage)
}

func (e *Edge) encodeTask(v wire.Version, t *taskstore.Task, historyLength *int) (any, *wire.Error) {
	w, err := toWire(t, historyLength, true)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	raw, err := wire.EncodeSendResult(v, w, nil)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	return raw, nil
}

// getTask returns a task; the first get of a deferred task executes it,
// once across replicas (the claim decides who).
func (e *Edge) getTask(ctx context.Context, rc rpcCall, v wire.Version, p *wire.GetTaskParams) (any, *wire.Error) {
	owner, werr := e.owner(rc.caller, p.Tenant)
	if werr != nil {
		return nil, werr
	}
	t, err := e.tasks.Load(ctx, p.ID, owner)
	if err != nil {
		return nil, storeError(p.ID, err)
	}
	if !t.State.Terminal() && isDeferred(t) && !t.Claimed(time.Now()) {
		claimed, won, err := e.claimFree(ctx, t.ID, owner)
		switch {
		case err != nil:
			return nil, storeError(p.ID, err)
		case won:
			if t, err = e.execute(background(ctx), rc.caller, claimed); err != nil {
				return nil, wire.InternalError(err.Error())
			}
		default:
			t = claimed
		}
	}
	return encodeTask(v, t, p.HistoryLength)
}

// encodeTask is a task as GetTask and CancelTask answer it.
func encodeTask(v wire.Version, t *taskstore.Task, historyLength *int) (any, *wire.Error) {
	w, err := toWire(t, historyLength, true)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	raw, err := wire.EncodeTask(v, w)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	return raw, nil
}

func isDeferred(t *taskstore.Task) bool {
	var r execRequest
	return json.Unmarshal(t.Request, &r) == nil && r.Mode == modeDeferred
}

func (e *Edge) cancelTask(ctx context.Context, rc rpcCall, v wire.Version, p *wire.CancelTaskParams) (any, *wire.Error) {
	owner, werr := e.owner(rc.caller, p.Tenant)
	if werr != nil {
		return nil, werr
	}
	t, err := e.tasks.Cancel(ctx, p.ID, owner)
	switch {
	case errors.Is(err, taskstore.ErrNotCancelable) && t != nil:
		st, _ := wire.ParseTaskState(string(t.State))
		return nil, wire.TaskNotCancelable(p.ID, st)
	case err != nil:
		return nil, storeError(p.ID, err)
	}
	return encodeTask(v, t, nil)
}

func (e *Edge) listTasks(ctx context.Context, rc rpcCall, v wire.Version, p *wire.ListTasksParams) (any, *wire.Error) {
	owner, werr := e.owner(rc.caller, p.Tenant)
	if werr != nil {
		return nil, werr
	}
	f := taskstore.ListFilter{ContextID: p.ContextID, PageSize: p.PageSize, PageToken: p.PageToken}
	if p.Status != nil {
		f.State = taskstore.State(*p.Status)
	}
	if p.StatusTimestampAfter != nil {
		f.StatusAfter = *p.StatusTimestampAfter
	}
	ts, next, total, err := e.tasks.List(ctx, owner, f)
	if err != nil {
		if errors.Is(err, taskstore.ErrInvalidArgument) || errors.Is(err, taskstore.ErrInvalidPageToken) {
			return nil, wire.InvalidParams(err.Error())
		}
		return nil, storeError("", err)
	}
	res := &wire.ListTasksResult{Tasks: []wire.Task{}, NextPageToken: next, PageSize: p.PageSize, TotalSize: total}
	for _, t := range ts {
		w, err := toWire(t, p.HistoryLength, p.IncludeArtifacts)
		if err != nil {
			return nil, wire.InternalError(err.Error())
		}
		res.Tasks = append(res.Tasks, *w)
	}
	raw, err := wire.EncodeListTasksResult(v, res)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	return raw, nil
}

// claimFree takes the execution lease only if nobody holds it, this
// replica included: two requests on one replica must not both execute a
// deferred task (the store's Claim lets a holder renew its own lease).
func (e *Edge) claimFree(ctx context.Context, id string, owner taskstore.Owner) (*taskstore.Task, bool, error) {
	won := false
	t, err := e.tasks.Transition(ctx, id, owner, func(t *taskstore.Task) ([]taskstore.Event, error) {
		now := time.Now()
		won = false
		if t.State.Terminal() || t.Claimed(now) {
			return nil, nil
		}
		won = true
		return []taskstore.Event{taskstore.ClaimEvent(e.cfg.EdgeID, now.Add(e.cfg.ClaimLease).UTC())}, nil
	})
	if err != nil {
		return t, false, fmt.Errorf("claim task %s: %w", id, err)
	}
	return t, won, nil
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
