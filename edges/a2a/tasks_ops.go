package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/schemas"
)

// The core: GetTask, ListTasks and CancelTask, and the task as served.

// getTask returns a task; the first get of a deferred task executes it,
// once across replicas (the claim decides who).
//
// On the stdio profile a get proven by a chio.dpop_proof.v1 runs a
// deferred task only when its proof names the task's tool call (stdioRun).
func (e *Edge) getTask(ctx context.Context, rc rpcCall, p *wire.GetTaskParams) (any, *wire.Error) {
	run := true
	if rc.stdio {
		run = e.stdioRun(ctx, rc.caller, p)
	}
	owner, werr := e.owner(ctx, rc.caller, p.Tenant)
	if werr != nil {
		return nil, werr
	}
	t, err := e.tasks.Load(ctx, p.ID, owner)
	if err != nil {
		return nil, storeError(p.ID, err)
	}
	if run && !t.State.Terminal() && isDeferred(t) && !t.Claimed(time.Now()) {
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
	return encodeTask(rc.dialect, t, p.HistoryLength)
}

// encodeTask is a task as GetTask and CancelTask answer it.
func encodeTask(d wire.Dialect, t *taskstore.Task, historyLength *int) (any, *wire.Error) {
	if raw, ok, err := encodeStored10(d, t, historyLength, false); ok || err != nil {
		if err != nil {
			return nil, wire.InternalError(err.Error())
		}
		return raw, nil
	}
	w, err := toWire(t, historyLength, true)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	raw, err := d.EncodeTask(w)
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	return raw, nil
}

func isDeferred(t *taskstore.Task) bool {
	var r execRequest
	return json.Unmarshal(t.Request, &r) == nil && r.Mode == modeDeferred
}

func (e *Edge) cancelTask(ctx context.Context, rc rpcCall, p *wire.CancelTaskParams) (any, *wire.Error) {
	owner, werr := e.owner(ctx, rc.caller, p.Tenant)
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
	return encodeTask(rc.dialect, t, nil)
}

func (e *Edge) listTasks(ctx context.Context, rc rpcCall, p *wire.ListTasksParams) (any, *wire.Error) {
	owner, werr := e.owner(ctx, rc.caller, p.Tenant)
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
	raw, err := rc.dialect.EncodeListTasksResult(res)
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

// encodeStored10 answers with t in 1.0 without the canonical model: the
// task's messages and artifact are stored as 1.0 JSON already (see
// storedDialect), so decoding them into wire types and encoding them back
// only costs CPU and garbage on every answer (a send's answer among them).
// ok is false when that does not apply: another dialect, or artifacts
// that must be merged (chunks, a replacement), which toWire does. The
// answer is the JSON value toWire's gives; only its spelling may differ
// where the stored metadata spells a value otherwise than a re-encoding
// would (a <, > or & escaped, a nested object's member order).
func encodeStored10(d wire.Dialect, t *taskstore.Task, historyLength *int, asSendResult bool) (raw json.RawMessage, ok bool, err error) {
	if d.Version() != wire.V10 || len(t.Artifacts) > 1 || (len(t.Artifacts) == 1 && t.Artifacts[0].Append) {
		return nil, false, nil
	}
	state, known := wire.ParseTaskState(string(t.State))
	if !known {
		return nil, true, fmt.Errorf("task %s: unknown state %q", t.ID, t.State)
	}
	st := &wire.StoredTask{ID: t.ID, ContextID: t.ContextID, State: state, Timestamp: t.StatusTime,
		StatusMessage: t.StatusMessage, History: t.History}
	if historyLength != nil && *historyLength < len(st.History) {
		st.History = st.History[len(st.History)-max(*historyLength, 0):]
	}
	if len(t.Artifacts) == 1 {
		st.Artifacts = []json.RawMessage{t.Artifacts[0].Data}
	}
	if st.Metadata, err = servedMetadata(t.Metadata, t.ReceiptIDs, t.Generation); err != nil {
		return nil, true, fmt.Errorf("task %s: metadata: %w", t.ID, err)
	}
	raw, err = wire.EncodeStoredTask10(st, asSendResult)
	if err != nil {
		return nil, true, fmt.Errorf("task %s: %w", t.ID, err)
	}
	return raw, true, nil
}

// servedMetadata is linkedMetadata with withGeneration, as JSON: the
// linking rule of schemas.LinkTaskReceipts applied in the one decode and
// encode the answer needs anyway, where calling it (it decodes and
// re-encodes both levels) and then adding the generation cost two of
// each, the largest part of a 1.0 answer's encoding.
// TestServedMetadataLinks holds the two to the same JSON value. nil when
// the result is empty, as toWire omits it.
func servedMetadata(raw json.RawMessage, receipts []string, g int64) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if k := firstByte(raw); k != 0 && k != 'n' {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err // not an object: as toWire, refused
		}
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	var c map[string]json.RawMessage
	link := true
	if k := firstByte(m["chio"]); k != 0 && k != 'n' {
		link = json.Unmarshal(m["chio"], &c) == nil // metadata.chio that is no object stays as it is
	}
	if link {
		if c == nil {
			c = map[string]json.RawMessage{}
		}
		if receipts == nil {
			receipts = []string{}
		}
		ids, err := json.Marshal(receipts)
		if err != nil {
			return nil, err
		}
		c["receiptIds"] = ids
		pending := strings.TrimSpace(string(c["receiptPending"])) == "true"
		if k := firstByte(c["receiptId"]); pending && (k == 0 || k == 'n') && len(receipts) > 0 {
			last, err := json.Marshal(receipts[len(receipts)-1])
			if err != nil {
				return nil, err
			}
			c["receiptId"], c["receiptPending"], c["receiptBearing"] = last, json.RawMessage("false"), json.RawMessage("true")
		}
		if m["chio"], err = encodeUnescaped(c); err != nil {
			return nil, err
		}
	}
	if g > 0 {
		m[wire.GenerationKey] = strconv.AppendInt(nil, g, 10)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return encodeUnescaped(m)
}

// encodeUnescaped is json.Marshal without HTML escaping, as the wire
// encoder writes: the stored bytes stay as they are.
func encodeUnescaped(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// firstByte is the first byte of raw after white space, 0 if none.
func firstByte(raw []byte) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
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
