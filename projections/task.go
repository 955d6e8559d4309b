package projections

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// taskHead is the stored state of one task apart from its history and
// artifacts, which have keys of their own: appending a message or an
// artifact chunk to a long task is one write, not a rewrite of the task.
// Every field comes from the stream (event times, sequences), never from
// the clock of the process folding it.
type taskHead struct {
	ContextID     string            `json:"c"`
	Owner         schemas.TaskOwner `json:"o"`
	State         schemas.TaskState `json:"s"`
	StatusMessage json.RawMessage   `json:"sm,omitempty"`
	// StatusTime is the time of the event that set the status, RFC 3339
	// with nanoseconds in UTC ("" when the event had none).
	StatusTime string          `json:"st,omitempty"`
	Metadata   json.RawMessage `json:"md,omitempty"`
	ReceiptIDs []string        `json:"r,omitempty"`
	// CreatedSeq is the stream sequence of the commit that created the
	// task: its place in the list order.
	CreatedSeq uint64 `json:"cs"`
	// History and Artifacts count the history messages and artifact
	// events stored under the task's h and a keys.
	History   uint32 `json:"h,omitempty"`
	Artifacts uint32 `json:"a,omitempty"`
}

// taskState is a task as a fold batch sees it.
type taskState struct {
	id      string
	head    *taskHead         // nil until a created event is folded
	indexed schemas.TaskState // the state the list indexes hold ("" for none)
	dirty   bool
}

// Owner fields are bounded like the edge bounds them (taskstore's
// validateOwner), so a created event the edge would refuse is refused here.
const maxOwnerField = 1024

// errRefused marks an event the fold rules refuse; it is skipped.
var errRefused = errors.New("event refused")

func refused(e *schemas.TaskEvent, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", errRefused, e.Type, fmt.Sprintf(format, args...))
}

// apply folds one event into t, mirroring the A2A edge's own fold
// (edges/a2a/taskstore Task.apply): an event it refuses leaves t exactly as
// it was. Only what the projection serves is kept: the deferred request
// and the execution lease are not (the request may hold a capability).
func (t *taskState) apply(tx *txn, e *schemas.TaskEvent, seq uint64) error {
	if e.Type == schemas.TaskEventCreated {
		if t.head != nil {
			return refused(e, "task already exists")
		}
		o := e.Owner
		if o == nil || o.Subject == "" || len(o.Subject) > maxOwnerField || len(o.Tenant) > maxOwnerField || e.ContextID == "" {
			return refused(e, "missing owner or context id")
		}
		if len(e.ContextID) > maxKeyPart {
			return refused(e, "context id longer than %d bytes", maxKeyPart)
		}
		t.head = &taskHead{ContextID: e.ContextID, Owner: *o, State: schemas.TaskSubmitted,
			StatusTime: formatTime(e.Time), Metadata: e.Metadata, CreatedSeq: seq}
		if len(e.Message) > 0 {
			t.appendHistory(tx, e.Message)
		}
		t.dirty = true
		return nil
	}
	h := t.head
	if h == nil {
		return refused(e, "task has no created event")
	}
	if h.State.Terminal() && e.Type != schemas.TaskEventReceipt {
		return refused(e, "task is already %s", h.State)
	}
	switch e.Type {
	case schemas.TaskEventStatus:
		if !e.State.Valid() || e.State.Terminal() {
			return refused(e, "state %q is not a non-terminal state", e.State)
		}
		h.State, h.StatusMessage, h.StatusTime = e.State, e.Message, formatTime(e.Time)
	case schemas.TaskEventMessage:
		if len(e.Message) == 0 {
			return refused(e, "empty message")
		}
		t.appendHistory(tx, e.Message)
	case schemas.TaskEventArtifact:
		if len(e.Artifact) == 0 {
			return refused(e, "empty artifact")
		}
		if _, err := artifactID(e.Artifact); err != nil {
			return refused(e, "%v", err)
		}
		flag := byte(0)
		if e.Append {
			flag = 1
		}
		k := appendU32(appendStr([]byte{prefixArtifact}, t.id), h.Artifacts)
		tx.set(k, append([]byte{flag}, e.Artifact...))
		h.Artifacts++
	case schemas.TaskEventMetadata:
		h.Metadata = e.Metadata
	case schemas.TaskEventRequest, schemas.TaskEventClaimed, schemas.TaskEventReleased:
		// They change who executes the task and with what, never what is
		// served: nothing to keep.
		return nil
	case schemas.TaskEventReceipt:
		if e.ReceiptID == "" {
			return refused(e, "empty receipt id")
		}
		if slices.Contains(h.ReceiptIDs, e.ReceiptID) {
			return nil
		}
		h.ReceiptIDs = append(h.ReceiptIDs, e.ReceiptID)
	case schemas.TaskEventCanceled:
		h.State, h.StatusMessage, h.StatusTime = schemas.TaskCanceled, e.Message, formatTime(e.Time)
	case schemas.TaskEventFinished:
		switch e.State {
		case schemas.TaskCompleted, schemas.TaskFailed, schemas.TaskRejected:
		default:
			return refused(e, "state %q is not completed, failed or rejected", e.State)
		}
		h.State, h.StatusMessage, h.StatusTime = e.State, e.Message, formatTime(e.Time)
	default:
		return refused(e, "unknown event type")
	}
	t.dirty = true
	return nil
}

func (t *taskState) appendHistory(tx *txn, msg json.RawMessage) {
	k := appendU32(appendStr([]byte{prefixHistory}, t.id), t.head.History)
	tx.set(k, msg)
	t.head.History++
}

// flush writes the head and, when the state changed, the list indexes.
func (t *taskState) flush(tx *txn) {
	if !t.dirty {
		return
	}
	raw, err := json.Marshal(t.head)
	if err != nil {
		tx.fail(fmt.Errorf("encode task %s: %w", t.id, err))
		return
	}
	tx.set(append([]byte{prefixTask}, t.id...), raw)
	if t.head.State != t.indexed {
		state := []byte(t.head.State)
		tx.set(taskOrderKey(t.head.CreatedSeq, t.id), state)
		tx.set(taskByContextKey(t.head.ContextID, t.head.CreatedSeq, t.id), state)
		t.indexed = t.head.State
	}
	t.dirty = false
}

func taskOrderKey(seq uint64, id string) []byte {
	return append(appendU64([]byte{prefixTaskOrder}, seq), id...)
}

func taskByContextKey(contextID string, seq uint64, id string) []byte {
	return append(appendU64(appendStr([]byte{prefixTaskByCtx}, contextID), seq), id...)
}

// formatTime is the stored and served form of an event time; the zero
// time (an event without one) is "".
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// artifactID checks that an artifact is an A2A artifact object (a string
// artifactId; parts, if present, an array) and returns its id: the edge
// would fail to read a task holding anything else.
func artifactID(raw json.RawMessage) (string, error) {
	var a struct {
		ArtifactID *string          `json:"artifactId"`
		Parts      *json.RawMessage `json:"parts"`
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return "", fmt.Errorf("artifact is not an object: %w", err)
	}
	if a.ArtifactID == nil {
		return "", errors.New("artifact has no artifactId")
	}
	if a.Parts != nil && !strings.HasPrefix(strings.TrimSpace(string(*a.Parts)), "[") {
		return "", errors.New("artifact parts are not an array")
	}
	return *a.ArtifactID, nil
}

// taskIDFromSubject returns the task id of a subject on the task stream.
func taskIDFromSubject(subject string) (string, bool) {
	id, ok := strings.CutPrefix(subject, schemas.TasksSubjectPrefix)
	return id, ok && schemas.ValidName(id) && !strings.ContainsAny(id, ".*>")
}

// Task is a task as the HTTP API serves it: A2A 1.0 JSON, plus the ids of
// the receipts linked to it (also in metadata.chio.receiptIds).
type Task struct {
	ID         string            `json:"id"`
	ContextID  string            `json:"contextId"`
	Status     TaskStatus        `json:"status"`
	Artifacts  []json.RawMessage `json:"artifacts,omitempty"`
	History    []json.RawMessage `json:"history,omitempty"`
	Metadata   json.RawMessage   `json:"metadata,omitempty"`
	ReceiptIDs []string          `json:"receiptIds"`
}

// TaskStatus is a task's A2A 1.0 status.
type TaskStatus struct {
	State     string          `json:"state"`
	Message   json.RawMessage `json:"message,omitempty"`
	Timestamp string          `json:"timestamp,omitempty"`
}

// loadTask reads task id from r; errNotFound when there is none.
func loadTask(v view, id string) (*Task, error) {
	raw, err := getFrom(v, append([]byte{prefixTask}, id...))
	if err != nil {
		return nil, err
	}
	var h taskHead
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("task %s: decode: %w", id, err)
	}
	t := &Task{ID: id, ContextID: h.ContextID, ReceiptIDs: h.ReceiptIDs,
		Status: TaskStatus{State: h.State.A2A(), Message: h.StatusMessage, Timestamp: h.StatusTime}}
	if t.ReceiptIDs == nil {
		t.ReceiptIDs = []string{}
	}
	err = scan(v, appendStr([]byte{prefixHistory}, id), func(_, v []byte) error {
		t.History = append(t.History, json.RawMessage(bytes.Clone(v))) // v is only valid during the call
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("task %s: history: %w", id, err)
	}
	if t.Artifacts, err = mergeArtifacts(v, id); err != nil {
		return nil, fmt.Errorf("task %s: artifacts: %w", id, err)
	}
	if t.Metadata, err = linkReceipts(h.Metadata, t.ReceiptIDs); err != nil {
		return nil, fmt.Errorf("task %s: metadata: %w", id, err)
	}
	return t, nil
}

// mergeArtifacts folds a task's artifact events as the edge does
// (edges/a2a mergeArtifacts): a chunk that appends extends the parts of the
// artifact of its id, any other replaces it or adds one.
func mergeArtifacts(v view, id string) ([]json.RawMessage, error) {
	var out []map[string]json.RawMessage
	index := map[string]int{}
	err := scan(v, appendStr([]byte{prefixArtifact}, id), func(_, rec []byte) error {
		if len(rec) < 1 {
			return errors.New("corrupt artifact record")
		}
		appends, raw := rec[0] == 1, rec[1:]
		var a map[string]json.RawMessage
		if err := json.Unmarshal(raw, &a); err != nil {
			return err
		}
		aid, err := artifactID(raw)
		if err != nil {
			return err
		}
		i, seen := index[aid]
		switch {
		case seen && appends:
			var have, more []json.RawMessage
			if p := out[i]["parts"]; len(p) > 0 {
				if err := json.Unmarshal(p, &have); err != nil {
					return err
				}
			}
			if p := a["parts"]; len(p) > 0 {
				if err := json.Unmarshal(p, &more); err != nil {
					return err
				}
			}
			parts, err := json.Marshal(append(have, more...))
			if err != nil {
				return err
			}
			out[i]["parts"] = parts
		case seen:
			out[i] = a
		default:
			index[aid] = len(out)
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	arts := make([]json.RawMessage, len(out))
	for i, a := range out {
		if arts[i], err = json.Marshal(a); err != nil {
			return nil, err
		}
	}
	return arts, nil
}

// linkReceipts sets metadata.chio.receiptIds, creating metadata and
// metadata.chio when absent. Metadata or metadata.chio that is not an
// object is served as it is.
func linkReceipts(meta json.RawMessage, receipts []string) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	if len(meta) > 0 && string(meta) != "null" {
		if err := json.Unmarshal(meta, &m); err != nil {
			return meta, nil
		}
	}
	c := map[string]json.RawMessage{}
	if raw := m["chio"]; len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &c); err != nil {
			return meta, nil
		}
	}
	ids, err := json.Marshal(receipts)
	if err != nil {
		return nil, err
	}
	c["receiptIds"] = ids
	if m["chio"], err = json.Marshal(c); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// parseTaskState accepts a state as the projection stores it
// ("completed") or as A2A 1.0 spells it ("TASK_STATE_COMPLETED").
func parseTaskState(s string) (schemas.TaskState, bool) {
	for _, st := range []schemas.TaskState{schemas.TaskSubmitted, schemas.TaskWorking, schemas.TaskCompleted,
		schemas.TaskFailed, schemas.TaskCanceled, schemas.TaskRejected, schemas.TaskInputRequired, schemas.TaskAuthRequired} {
		if s == string(st) || s == st.A2A() {
			return st, true
		}
	}
	return "", false
}
