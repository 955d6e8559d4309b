package a2aadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"maps"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/tools"
)

// buildSend is the SendMessageRequest of a send: a text part from message,
// a data part from data, the selector in the request metadata and, for a
// Chio partner, the governed intent in the message metadata.
func (a *Adapter) buildSend(inv tools.Invocation, sk *skill, ar *args) (*a2a.SendMessageRequest, error) {
	var parts []*a2a.Part
	if ar.Message != nil {
		parts = append(parts, a2a.NewTextPart(*ar.Message))
	}
	if ar.hasData {
		parts = append(parts, a2a.NewDataPart(ar.data))
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, parts...)
	if ar.ContextID != nil {
		msg.ContextID = *ar.ContextID
	}
	if ar.TaskID != nil {
		msg.TaskID = a2a.TaskID(*ar.TaskID)
	}
	for _, id := range ar.ReferenceTaskIDs {
		msg.ReferenceTasks = append(msg.ReferenceTasks, a2a.TaskID(id))
	}
	msg.Metadata = maps.Clone(ar.MessageMetadata)
	if a.partnerServerID != "" {
		intent, err := NextIntent(inv.Governance, a.partnerServerID, sk.id, "A2A adapter call for "+a.serverID+"/"+sk.tool)
		if err != nil {
			return nil, fmt.Errorf("governed intent for %s/%s: %w", a.partnerServerID, sk.id, err)
		}
		m, err := jsonObject(intent)
		if err != nil {
			return nil, fmt.Errorf("governed intent for %s/%s: %w", a.partnerServerID, sk.id, err)
		}
		msg.SetMeta(chioKey, map[string]any{"governedIntent": m})
	}
	req := &a2a.SendMessageRequest{Tenant: a.iface.Tenant, Message: msg, Metadata: maps.Clone(ar.Metadata)}
	// A2A has no skill selector: this adapter-local convention says which
	// skill the tool means (a Chio edge reads it, other agents may not).
	req.SetMeta(chioKey, map[string]any{"targetSkillId": sk.id, "targetSkillName": sk.name})
	if ar.HistoryLength != nil || ar.ReturnImmediately != nil {
		req.Config = &a2a.SendMessageConfig{HistoryLength: ar.HistoryLength,
			ReturnImmediately: ar.ReturnImmediately != nil && *ar.ReturnImmediately}
	}
	return req, nil
}

// send is a blocking SendMessage.
func (a *Adapter) send(ctx context.Context, inv tools.Invocation, sk *skill, ar *args) (json.RawMessage, error) {
	const op = "SendMessage"
	req, err := a.buildSend(inv, sk, ar)
	if err != nil {
		return nil, fmt.Errorf("a2a %s/%s: %w", a.serverID, sk.tool, err)
	}
	res, err := a.client.SendMessage(ctx, req)
	if err != nil {
		return nil, a.fail(ctx, sk, op, err)
	}
	switch v := res.(type) {
	case *a2a.Task:
		return a.taskResult(ctx, sk, op, v, "", SourceSendMessage)
	case *a2a.Message:
		if err := checkMessage(v); err != nil {
			return nil, a.fail(ctx, sk, op, err)
		}
		if err := a.observe(ctx, sk, v.TaskID, "", SourceSendMessage); err != nil {
			return nil, a.fail(ctx, sk, op, err)
		}
		out := map[string]any{"message": v}
		if id := receiptOf(v.Metadata); id != "" {
			out["receiptId"] = id
		}
		return marshalResult(out)
	default:
		return nil, a.fail(ctx, sk, op, malformed("answer is %T, not a task or message", res))
	}
}

// taskResult validates and records a task the partner answered with (want,
// when set, is the task asked for) and returns {"task":…,"receiptId"?}.
func (a *Adapter) taskResult(ctx context.Context, sk *skill, op string, t *a2a.Task, want a2a.TaskID, source string) (json.RawMessage, error) {
	if err := checkTask(t); err != nil {
		return nil, a.fail(ctx, sk, op, err)
	}
	if want != "" && t.ID != want {
		return nil, a.fail(ctx, sk, op, malformed("asked for task %s, got task %s", want, t.ID))
	}
	if err := a.observe(ctx, sk, t.ID, t.Status.State, source); err != nil {
		return nil, a.fail(ctx, sk, op, err)
	}
	out := map[string]any{"task": t}
	if id := receiptOf(t.Metadata); id != "" {
		out["receiptId"] = id
	}
	return marshalResult(out)
}

// stream runs SendStreamingMessage (stream:true) or SubscribeToTask and
// hands out each validated event as its StreamResponse JSON, with whether
// it ends the stream.
func (a *Adapter) stream(ctx context.Context, inv tools.Invocation, sk *skill, ar *args, out func(json.RawMessage, bool) error) error {
	var (
		op, source string
		want       a2a.TaskID
		events     iter.Seq2[a2a.Event, error]
	)
	if ar.mode == ModeSubscribeTask {
		op, source, want = "SubscribeToTask", SourceSubscribeTask, a2a.TaskID(ar.SubscribeTask.ID)
		events = a.client.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{Tenant: a.iface.Tenant, ID: want})
	} else {
		req, err := a.buildSend(inv, sk, ar)
		if err != nil {
			return fmt.Errorf("a2a %s/%s: %w", a.serverID, sk.tool, err)
		}
		op, source = "SendStreamingMessage", SourceSendStreamingMessage
		events = a.client.SendStreamingMessage(ctx, req)
	}
	n, ended := 0, false
	for ev, err := range events {
		if err != nil {
			return a.fail(ctx, sk, op, err)
		}
		id, state, err := checkEvent(ev, &want)
		if err != nil {
			return a.fail(ctx, sk, op, err)
		}
		if err := a.observe(ctx, sk, id, state, source); err != nil {
			return a.fail(ctx, sk, op, err)
		}
		raw, err := json.Marshal(a2a.StreamResponse{Event: ev})
		if err != nil {
			return a.fail(ctx, sk, op, err)
		}
		ended = lastEvent(ev)
		if err := out(raw, ended); err != nil {
			return err
		}
		n++
	}
	if !ended && ctx.Err() != nil {
		return a.fail(ctx, sk, op, ctx.Err())
	}
	if n == 0 {
		return a.fail(ctx, sk, op, malformed("the stream ended without an event"))
	}
	return nil
}

// jsonObject is v as a generic JSON object, numbers kept exact.
func jsonObject(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}
