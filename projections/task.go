package projections

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
	// Generation is the task's generation (schemas.TaskHead.Generation).
	Generation int64 `json:"g,omitempty"`
	// LastSeq is the stream sequence of the last commit on the task's
	// subject, folded or not: the one a signed commit must follow (0 in
	// heads stored before it was kept: not checked).
	LastSeq uint64 `json:"ls,omitempty"`
}

// taskState is a task as a fold batch sees it.
type taskState struct {
	id   string
	head *taskHead // as stored; nil until a created event is folded
	// fold is head as the task fold sees it, decoded at the batch's first
	// event of the task and encoded into head by flush. The request and
	// the lease it holds are not stored (the request may hold a
	// capability): they change nothing served (schemas.TaskHead).
	fold    *schemas.TaskHead
	indexed schemas.TaskState // the state the list indexes hold ("" for none)
	dirty   bool
}

// The fold bounds a context id far below what a key part holds.
const _ = uint(maxKeyPart - schemas.MaxTaskContextID)

// apply folds one event into t by the one task fold (schemas.TaskHead.Apply),
// writing the history message or artifact event it adds under the task's
// h or a keys, and returns its effect. An event the fold refuses leaves t
// exactly as it was.
func (t *taskState) apply(tx *txn, e *schemas.TaskEvent, seq uint64) (schemas.TaskEffect, error) {
	if t.fold == nil {
		fold, err := t.head.decode()
		if err != nil {
			// The store is damaged, not the event: fail the batch.
			err = fmt.Errorf("task %s: decode stored head: %w", t.id, err)
			tx.fail(err)
			return schemas.TaskEffect{}, err
		}
		t.fold = fold
	}
	eff, err := t.fold.Apply(e)
	if err != nil {
		return eff, err
	}
	if e.Type == schemas.TaskEventCreated {
		t.head = &taskHead{CreatedSeq: seq}
	}
	if eff.Message != nil {
		tx.set(appendU32(appendStr([]byte{prefixHistory}, t.id), uint32(t.fold.History-1)), eff.Message)
	}
	if a := eff.Artifact; a != nil {
		flag := byte(0)
		if a.Append {
			flag = 1
		}
		tx.set(appendU32(appendStr([]byte{prefixArtifact}, t.id), uint32(t.fold.Artifacts-1)), append([]byte{flag}, a.Data...))
	}
	t.dirty = t.dirty || eff.Served
	return eff, nil
}

// decode is h as the task fold sees it; a nil h is a task not created.
func (h *taskHead) decode() (*schemas.TaskHead, error) {
	if h == nil {
		return new(schemas.TaskHead), nil
	}
	f := &schemas.TaskHead{Owner: h.Owner, ContextID: h.ContextID, State: h.State, StatusMessage: h.StatusMessage,
		Metadata: h.Metadata, ReceiptIDs: h.ReceiptIDs, History: int(h.History), Artifacts: int(h.Artifacts),
		Generation: h.Generation}
	if h.StatusTime != "" {
		st, err := time.Parse(time.RFC3339Nano, h.StatusTime)
		if err != nil {
			return nil, fmt.Errorf("stored status time: %w", err)
		}
		f.StatusTime = st
	}
	return f, nil
}

// encode stores f's served fields in h.
func (h *taskHead) encode(f *schemas.TaskHead) {
	h.ContextID, h.Owner, h.State, h.StatusMessage = f.ContextID, f.Owner, f.State, f.StatusMessage
	h.StatusTime, h.Metadata, h.ReceiptIDs = formatTime(f.StatusTime), f.Metadata, f.ReceiptIDs
	h.History, h.Artifacts, h.Generation = uint32(f.History), uint32(f.Artifacts), f.Generation
}

// flush writes the head and, when the state changed, the list indexes.
func (t *taskState) flush(tx *txn) {
	if !t.dirty {
		return
	}
	if t.fold != nil { // nil: only LastSeq moved
		t.head.encode(t.fold)
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

// loadTask reads task id from v; errNotFound when there is none.
func loadTask(v view, id string) (*Task, error) {
	h, err := loadHead(v, id)
	if err != nil {
		return nil, err
	}
	return buildTask(v, id, h)
}

// loadHead reads the stored head of task id; errNotFound when there is none.
func loadHead(v view, id string) (*taskHead, error) {
	raw, err := getFrom(v, append([]byte{prefixTask}, id...))
	if err != nil {
		return nil, err
	}
	var h taskHead
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("task %s: decode: %w", id, err)
	}
	return &h, nil
}

// buildTask reads the rest of task id, whose head is h, from v.
func buildTask(v view, id string, h *taskHead) (*Task, error) {
	t := &Task{ID: id, ContextID: h.ContextID, ReceiptIDs: h.ReceiptIDs,
		Status: TaskStatus{State: h.State.A2A(), Message: h.StatusMessage, Timestamp: h.StatusTime}}
	if t.ReceiptIDs == nil {
		t.ReceiptIDs = []string{}
	}
	err := scan(v, appendStr([]byte{prefixHistory}, id), func(_, v []byte) error {
		t.History = append(t.History, json.RawMessage(bytes.Clone(v))) // v is only valid during the call
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("task %s: history: %w", id, err)
	}
	if t.Artifacts, err = mergeArtifacts(v, id); err != nil {
		return nil, fmt.Errorf("task %s: artifacts: %w", id, err)
	}
	if t.Metadata, err = schemas.LinkTaskReceipts(h.Metadata, t.ReceiptIDs); err != nil {
		return nil, fmt.Errorf("task %s: metadata: %w", id, err)
	}
	return t, nil
}

// mergeArtifacts reads a task's artifact events and merges them as the
// edge does (schemas.MergeTaskArtifacts).
func mergeArtifacts(v view, id string) ([]json.RawMessage, error) {
	var events []schemas.TaskArtifact
	err := scan(v, appendStr([]byte{prefixArtifact}, id), func(_, rec []byte) error {
		if len(rec) < 1 {
			return errors.New("corrupt artifact record")
		}
		// rec is only valid during the call.
		events = append(events, schemas.TaskArtifact{Append: rec[0] == 1, Data: bytes.Clone(rec[1:])})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return schemas.MergeTaskArtifacts(events)
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
