package a2aadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/tools"
)

// Invoke runs one call and returns its result: {"task":…} or {"message":…}
// (with the partner's "receiptId" when its metadata.chio carries one) for a
// send, get_task and cancel_task; {"pushConfig":…}, {"pushConfigs":[…]} or
// {"deleted":{…}} for the push family; {"events":[…]} (each a
// StreamResponse) for stream:true and subscribe_task.
func (a *Adapter) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	ctx = withCaller(ctx, inv)
	sk, ar, err := a.prepare(ctx, inv)
	if err != nil {
		return nil, err
	}
	runCtx, finish, err := a.Start(ctx, inv.ID)
	if err != nil {
		return nil, fmt.Errorf("a2a %s/%s: %w", a.serverID, sk.tool, err)
	}
	defer finish()
	if !ar.streams() {
		return a.unary(runCtx, inv, sk, ar)
	}
	events := []json.RawMessage{}
	size := 0
	err = a.stream(runCtx, inv, sk, ar, func(ev json.RawMessage, _ bool) error {
		// The events become one result: it is held to a result's bound,
		// not only each event to an event's.
		if size += len(ev) + 1; size > MaxAnswerBytes {
			return fmt.Errorf("a2a %s/%s: %w: the events are over %d bytes; stream them (InvokeStream) instead", a.serverID, sk.tool, ErrAnswerTooLarge, MaxAnswerBytes)
		}
		events = append(events, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return marshalResult(map[string]any{"events": events})
}

// InvokeStream emits each upstream event of stream:true and subscribe_task
// as one chunk, the A2A StreamResponse object ({"task"|"message"|
// "statusUpdate"|"artifactUpdate": …}), marking Last on a lone message or a
// terminal state. Any other call emits Invoke's result as its one chunk.
func (a *Adapter) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	ctx = withCaller(ctx, inv)
	sk, ar, err := a.prepare(ctx, inv)
	if err != nil {
		return err
	}
	runCtx, finish, err := a.Start(ctx, inv.ID)
	if err != nil {
		return fmt.Errorf("a2a %s/%s: %w", a.serverID, sk.tool, err)
	}
	defer finish()
	if ar.streams() {
		return a.stream(runCtx, inv, sk, ar, func(ev json.RawMessage, last bool) error {
			return emit(tools.Chunk{Data: ev, Last: last})
		})
	}
	out, err := a.unary(runCtx, inv, sk, ar)
	if err != nil {
		return err
	}
	return emit(tools.Chunk{Data: out, Last: true})
}

// prepare resolves the tool and refuses, before any upstream call, what
// must not reach the partner: an unknown tool, a denied authorization, bad
// arguments, follow-ups for tasks not recorded for this tool, and new
// tasks past the caller's quota or the registry's cap.
func (a *Adapter) prepare(ctx context.Context, inv tools.Invocation) (*skill, *args, error) {
	sk := a.byTool[inv.ToolName]
	if sk == nil || (inv.ServerID != "" && inv.ServerID != a.serverID) {
		return nil, nil, fmt.Errorf("a2a %s: %w: %s/%s", a.serverID, ErrUnknownTool, inv.ServerID, inv.ToolName)
	}
	fail := func(err error) (*skill, *args, error) {
		return nil, nil, fmt.Errorf("a2a %s/%s: %w", a.serverID, sk.tool, err)
	}
	if a.denied != nil {
		return fail(a.denied)
	}
	if sk.denied != nil {
		return fail(sk.denied)
	}
	ar, err := parseArgs(inv.Arguments, a.feat)
	if err != nil {
		return fail(err)
	}
	if ar.startsTask() && a.tasks != nil {
		// Before the partner is asked: a task it started could not be
		// recorded, and so never followed up.
		if err := a.tasks.admit(ctx, a.bindingOf(ctx, sk).Caller); err != nil {
			return fail(err)
		}
	}
	if ids := ar.followUpTasks(); len(ids) > 0 {
		if a.tasks == nil {
			return fail(fmt.Errorf("%w: no task registry is configured", ErrFollowUpRefused))
		}
		for _, id := range ids {
			if err := a.tasks.check(ctx, a.bindingOf(ctx, sk), id); err != nil {
				return fail(err)
			}
		}
	}
	return sk, ar, nil
}

// bindingOf is the TaskBinding of sk's tasks started by the call in ctx.
func (a *Adapter) bindingOf(ctx context.Context, sk *skill) TaskBinding {
	b := a.binding
	b.Tool = sk.tool
	b.Caller, _ = ctx.Value(callerKey{}).(string)
	return b
}

// callerKey carries the subject of the capability a call runs under.
type callerKey struct{}

// withCaller puts inv's caller (the subject of its capability) in ctx: a
// task belongs to the caller that started it, and another caller's
// follow-up is refused like a foreign task's.
func withCaller(ctx context.Context, inv tools.Invocation) context.Context {
	subject := ""
	if inv.Governance != nil {
		subject = inv.Governance.Subject
	}
	return context.WithValue(ctx, callerKey{}, subject)
}

// observe records a task the partner reported, when there is a registry.
func (a *Adapter) observe(ctx context.Context, sk *skill, id a2a.TaskID, state a2a.TaskState, source string) error {
	if a.tasks == nil || id == "" {
		return nil
	}
	rec := TaskRecord{TaskID: string(id), TaskBinding: a.bindingOf(ctx, sk), Partner: a.partner, Source: source}
	if state != a2a.TaskStateUnspecified {
		rec.State = string(state)
	}
	return a.tasks.observe(ctx, rec)
}

// fail wraps a failed upstream operation. A call stopped by Cancel reports
// the cancellation cause (tools.ErrCanceled); other errors are redacted.
func (a *Adapter) fail(ctx context.Context, sk *skill, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("a2a %s/%s: %s: %w", a.serverID, sk.tool, op, context.Cause(ctx))
	}
	return fmt.Errorf("a2a %s/%s: %s: %w", a.serverID, sk.tool, op, redactErr(err))
}

// receiptOf is the partner's receipt id in metadata.chio.receiptId, when
// the partner is a Chio edge.
func receiptOf(meta map[string]any) string {
	c, _ := meta[chioKey].(map[string]any)
	id, _ := c["receiptId"].(string)
	return id
}

// marshalResult encodes a result, without HTML escaping (which makes six
// bytes of each "<", ">" and "&" of a partner's text), within
// MaxAnswerBytes and a little room for the wrapping.
func marshalResult(v map[string]any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	if b.Len() > MaxAnswerBytes+resultSlack {
		return nil, fmt.Errorf("encode result: %w: the result is over %d bytes", ErrAnswerTooLarge, MaxAnswerBytes+resultSlack)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// resultSlack is the room a result has past MaxAnswerBytes for what the
// adapter wraps an answer in ({"task":…,"receiptId":…}).
const resultSlack = 4 << 10
