package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// rpcCall is one decoded JSON-RPC call with its context.
type rpcCall struct {
	caller  caller
	version wire.Version // negotiated (or VHelloStdio on the stdio profile)
	stdio   bool
}

// HandleJSONRPC answers one JSON-RPC request body. It returns nil for a
// notification (JSON-RPC sends no response to one).
func (e *Edge) handleJSONRPC(ctx context.Context, rc rpcCall, body []byte, callerErr *wire.Error) (resp []byte) {
	req, werr := wire.DecodeRequest(body)
	if werr != nil {
		return wire.EncodeError(req.ResponseID(), werr)
	}
	defer func() {
		// A bug must not take the process down, nor leave the caller
		// without an answer.
		if r := recover(); r != nil {
			e.log.Error("a2a: panic while handling a request", "method", req.Method, "panic", fmt.Sprint(r))
			resp = wire.EncodeError(req.ResponseID(), wire.InternalError("internal error"))
		}
	}()
	result, werr := e.call(ctx, rc, req, callerErr)
	if req.IsNotification {
		return nil
	}
	if werr != nil {
		return wire.EncodeError(req.ResponseID(), werr)
	}
	return wire.EncodeResult(req.ResponseID(), result)
}

func (e *Edge) call(ctx context.Context, rc rpcCall, req *wire.Request, callerErr *wire.Error) (any, *wire.Error) {
	m, ok := wire.LookupMethod(req.Method, rc.version)
	if !ok {
		return nil, wire.MethodNotFound(req.Method)
	}
	version := m.Version
	if rc.stdio {
		version = wire.VHelloStdio
	}
	switch {
	case m.Op.PushConfig():
		return nil, wire.PushNotSupported()
	case m.Op == wire.OpGetExtendedAgentCard:
		return nil, wire.UnsupportedOperation("this agent has no extended agent card (capabilities.extendedAgentCard is false)")
	case m.Op == wire.OpSubscribeToTask:
		return nil, wire.UnsupportedOperation("streaming is not implemented yet (capabilities.streaming is false)")
	case m.Op == wire.OpSendStreamingMessage && !rc.stdio:
		return nil, wire.UnsupportedOperation("streaming is not implemented yet (capabilities.streaming is false)")
	}
	params, werr := m.DecodeParams(req.Params)
	if werr != nil {
		return nil, werr
	}
	if callerErr != nil {
		return nil, callerErr
	}
	switch p := params.(type) {
	case *wire.SendParams:
		return e.send(ctx, rc, version, p, m.Op == wire.OpSendStreamingMessage)
	case *wire.GetTaskParams:
		return e.getTask(ctx, rc, version, p)
	case *wire.ListTasksParams:
		return e.listTasks(ctx, rc, version, p)
	case *wire.CancelTaskParams:
		return e.cancelTask(ctx, rc, version, p)
	}
	return nil, wire.MethodNotFound(req.Method)
}

// send runs SendMessage: blocking by default, in the background with
// returnImmediately, deferred to the next task/get on the stdio profile's
// message/stream.
func (e *Edge) send(ctx context.Context, rc rpcCall, v wire.Version, p *wire.SendParams, deferred bool) (any, *wire.Error) {
	if werr := checkParts(&p.Message); werr != nil {
		return nil, werr
	}
	if p.Message.TaskID != "" {
		owner, werr := e.owner(rc.caller, p.Tenant)
		if werr != nil {
			return nil, werr
		}
		t, err := e.tasks.Load(ctx, p.Message.TaskID, owner)
		if err != nil {
			return nil, storeError(p.Message.TaskID, err)
		}
		if t.State.Terminal() {
			return nil, wire.UnsupportedOperation(fmt.Sprintf("task %s is %s; a terminal task takes no more messages", t.ID, t.State))
		}
		return nil, wire.UnsupportedOperation(fmt.Sprintf("task %s is %s; continuing a task with another message is not supported", t.ID, t.State))
	}
	en, args, werr := e.resolveSkill(p)
	if werr != nil {
		return nil, werr
	}
	mode := modeBlocking
	switch {
	case deferred:
		mode = modeDeferred
	case p.Configuration.ReturnImmediately:
		mode = modeBackground
	}
	req := execRequest{ServerID: en.Manifest.ServerID, ToolName: en.Tool.Name, Arguments: args, Stream: deferred, Mode: mode}
	if mode == modeBackground {
		req.Capability = rc.caller.token
	}
	owner := e.sendOwner(rc.caller, p.Tenant)
	t, err := e.createTask(ctx, owner, p, req, chioMeta(nil, mode, true, ""))
	if err != nil {
		if errors.Is(err, taskstore.ErrInvalidArgument) || errors.Is(err, taskstore.ErrTooLarge) {
			return nil, wire.InvalidParams(err.Error())
		}
		return nil, wire.InternalError(err.Error())
	}
	if mode == modeDeferred {
		return e.encodeTask(v, t, p.Configuration.HistoryLength)
	}
	id := t.ID
	t, won, err := e.claimFree(ctx, id, owner)
	if err != nil || !won {
		return nil, wire.InternalError(fmt.Sprintf("claim new task %s: won=%v err=%v", id, won, err))
	}
	if mode == modeBackground {
		go func() {
			if _, err := e.execute(background(ctx), rc.caller, t); err != nil {
				e.log.Error("a2a: background task failed", "task", t.ID, "err", err)
			}
		}()
		return e.encodeTask(v, t, p.Configuration.HistoryLength)
	}
	// The call finishes even if the client goes away: its receipt must.
	done, err := e.execute(background(ctx), rc.caller, t)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	return e.encodeTask(v, done, p.Configuration.HistoryLength)
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
