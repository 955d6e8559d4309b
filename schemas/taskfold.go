package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The task fold: the one definition of what a task's events mean. The A2A
// edge folds a task's commits on every read and checks a transition
// against it before writing; the projections fold the same commits into
// their store. Both call TaskHead.Apply and store what it returns their
// own way, so they cannot disagree on a task.
//
// Invariants of TaskHead.Apply, each tested in taskfold_test.go:
//
//   - An event it refuses leaves the head exactly as it was.
//   - Nothing but the created event applies to a head without state, and
//     the created event applies only to one.
//   - After a terminal state (TaskState.Terminal) only a receipt link
//     applies: the first terminal event wins (a cancel landing while the
//     task runs beats its late completion), and the receipt of a call that
//     ran still links.
//   - The lease (ClaimedBy, ClaimExpires, Attempt, ExecutionID) decides
//     only whether claimed and released events apply, Request decides
//     nothing, and request, claimed and released events change nothing
//     served (TaskEffect.Served is false). A reader that does not keep the
//     request and the lease (the projections: the request may hold a
//     capability) therefore serves the same task as one that does.
//   - Generation counts the task's client-visible mutations (see below):
//     it is 1 after the created event and grows by exactly 1 per mutation,
//     never otherwise.
//
// # Generations
//
// A task's generation (A2A 1.1 draft, Task.generation) numbers its
// client-visible mutations, each of which a stream carries as exactly one
// event. The rule, which every reader folding the task's events computes
// identically because it is part of Apply:
//
//   - created sets it to 1 (the task as first created, a Task object);
//   - status, canceled and finished each add 1 (one TaskStatusUpdateEvent
//     each, a progress status that keeps the state included);
//   - artifact adds 1 when it is an A2A artifact (one
//     TaskArtifactUpdateEvent; an event MergeTaskArtifacts leaves out
//     changes nothing served and adds nothing);
//   - message, metadata, request, claimed, released and receipt add
//     nothing: history messages, metadata, receipt links, claims and lease
//     renewals ride along and show in the next mutation's event (or the
//     next read of the task), never as events of their own.
//
// The commit boundary does not matter: a commit of created and status
// (working) is generation 2, and a stream from its start shows the task at
// 2; a reader replaying from generation 1 gets the working status as
// generation 2. TaskEffect.Mutation reports which events counted.
//
// Whether an accepted event counts depends on the event alone
// (TaskEvent.Mutates), never on the task it applies to, and Apply counts
// by that very predicate. A reader that has only one commit, every event
// of which applied (the A2A edge's writer applies them strictly), and the
// generation after it can therefore number the commit's mutations without
// folding the task: the last mutation has that generation, each one before
// it one less.

// Errors of TaskHead.Apply, wrapped with the event they refuse; test them
// with errors.Is.
var (
	// ErrTaskTerminal means the event would change a task that is already
	// terminal (completed, failed, canceled or rejected).
	ErrTaskTerminal = errors.New("task is already terminal")
	// ErrTaskEvent means the event is malformed or not allowed in the
	// task's current state.
	ErrTaskEvent = errors.New("invalid task event")
)

// Bounds of a task's identity, which every commit's summary header
// carries and the projections' index keys hold.
const (
	// MaxTaskOwnerField bounds TaskOwner.Subject and TaskOwner.Tenant.
	MaxTaskOwnerField = 1024
	// MaxTaskContextID bounds a task's context id.
	MaxTaskContextID = 256
)

// Valid reports whether o can own a task: a subject, and both fields at
// most MaxTaskOwnerField bytes.
func (o TaskOwner) Valid() bool {
	return o.Subject != "" && len(o.Subject) <= MaxTaskOwnerField && len(o.Tenant) <= MaxTaskOwnerField
}

// TaskHead is the fold of a task's events apart from its history and
// artifacts, which a reader stores its own way (Apply hands them over in
// a TaskEffect); History and Artifacts count them. Payloads are opaque
// JSON. The zero TaskHead is a task not yet created.
type TaskHead struct {
	Owner     TaskOwner
	ContextID string
	// State is "" until a created event is folded.
	State         TaskState
	StatusMessage json.RawMessage // nil if none
	StatusTime    time.Time
	Created       time.Time
	Metadata      json.RawMessage
	// Request is the deferred execution request.
	Request json.RawMessage
	// ReceiptIDs are the linked receipts, in link order, without repeats.
	ReceiptIDs []string
	// ClaimedBy is the replica holding the execution lease until
	// ClaimExpires, "" if none. Attempt counts the claims of the current
	// Request by a new holder; ExecutionID, fixed by its first claim,
	// identifies its execution across takeovers.
	ClaimedBy    string
	ClaimExpires time.Time
	Attempt      int
	ExecutionID  string
	// History counts the history messages folded, Artifacts the artifact
	// events (whole artifacts and chunks).
	History   int
	Artifacts int
	// Generation counts the client-visible mutations folded (see
	// Generations above): 0 before the created event, then 1, 2, ….
	Generation int64
}

// TaskArtifact is one artifact event as folded: an opaque artifact, or a
// chunk of one that Append says extends the artifact of the same id.
type TaskArtifact struct {
	Data      json.RawMessage
	Append    bool
	LastChunk bool
}

// TaskEffect is what an applied event adds to its task beyond the head.
type TaskEffect struct {
	// Message is the history message it appends (the History-th, counting
	// from 1), nil for none.
	Message json.RawMessage
	// Artifact is the artifact event it appends (the Artifacts-th), nil
	// for none.
	Artifact *TaskArtifact
	// Served reports whether the event changed the task as a reader serves
	// it (state, status, history, artifacts, metadata, receipt ids). It is
	// false for request, claimed and released events and for a receipt
	// that was linked already.
	Served bool
	// Mutation reports whether the event is a client-visible mutation: it
	// advanced Generation by 1, and a stream shows it as one event.
	Mutation bool
}

// Apply folds e into h and returns what it adds. It refuses an event that
// is malformed or not allowed in h's state with an error wrapping
// ErrTaskEvent or ErrTaskTerminal, and then leaves h unchanged. Writers
// apply strictly (a refused event fails the write); readers skip refused
// events, so that even a stray writer cannot revive a terminal task.
func (h *TaskHead) Apply(e *TaskEvent) (TaskEffect, error) {
	bad := func(format string, args ...any) (TaskEffect, error) {
		return TaskEffect{}, fmt.Errorf("%w: %s: %s", ErrTaskEvent, e.Type, fmt.Sprintf(format, args...))
	}
	for _, p := range []json.RawMessage{e.Message, e.Request, e.Metadata, e.Artifact} {
		if len(p) > 0 && !json.Valid(p) {
			return bad("payload is not valid JSON")
		}
	}
	if e.Type == TaskEventCreated {
		switch {
		case h.State != "":
			return bad("task already exists")
		case e.Owner == nil || !e.Owner.Valid() || e.ContextID == "":
			return bad("missing owner or context id")
		case len(e.ContextID) > MaxTaskContextID:
			return bad("context id longer than %d bytes", MaxTaskContextID)
		}
		*h = TaskHead{Owner: *e.Owner, ContextID: e.ContextID, State: TaskSubmitted, StatusTime: e.Time,
			Created: e.Time, Metadata: e.Metadata, Request: e.Request}
		eff := TaskEffect{Served: true}
		if len(e.Message) > 0 {
			eff.Message = e.Message
			h.History = 1
		}
		return h.count(e, eff), nil
	}
	if h.State == "" {
		return bad("task has no created event")
	}
	if h.State.Terminal() && e.Type != TaskEventReceipt {
		return TaskEffect{}, fmt.Errorf("%w (%s): %s refused", ErrTaskTerminal, h.State, e.Type)
	}
	served := TaskEffect{Served: true}
	switch e.Type {
	case TaskEventStatus:
		if !e.State.Valid() || e.State.Terminal() {
			return bad("state %q is not a non-terminal state", e.State)
		}
		h.State, h.StatusMessage, h.StatusTime = e.State, e.Message, e.Time
	case TaskEventMessage:
		if len(e.Message) == 0 {
			return bad("empty message")
		}
		h.History++
		served.Message = e.Message
	case TaskEventArtifact:
		if len(e.Artifact) == 0 {
			return bad("empty artifact")
		}
		h.Artifacts++
		served.Artifact = &TaskArtifact{Data: e.Artifact, Append: e.Append, LastChunk: e.LastChunk}
	case TaskEventMetadata:
		h.Metadata = e.Metadata
	case TaskEventRequest:
		// A new request is a new execution: the lease of the old one goes.
		h.Request = e.Request
		h.ClaimedBy, h.ClaimExpires, h.Attempt, h.ExecutionID = "", time.Time{}, 0, ""
		return TaskEffect{}, nil
	case TaskEventClaimed:
		if e.ReplicaID == "" || e.LeaseExpires.IsZero() || e.Attempt < 1 || e.ExecutionID == "" {
			return bad("missing replica, lease, attempt or execution id")
		}
		if h.ExecutionID != "" && e.ExecutionID != h.ExecutionID {
			return bad("execution id changed")
		}
		h.ClaimedBy, h.ClaimExpires, h.Attempt, h.ExecutionID = e.ReplicaID, e.LeaseExpires, e.Attempt, e.ExecutionID
		return TaskEffect{}, nil
	case TaskEventReleased:
		if e.ReplicaID == "" || e.ReplicaID != h.ClaimedBy {
			return bad("replica %q does not hold the claim", e.ReplicaID)
		}
		h.ClaimedBy, h.ClaimExpires = "", time.Time{}
		return TaskEffect{}, nil
	case TaskEventReceipt:
		if e.ReceiptID == "" {
			return bad("empty receipt id")
		}
		if slices.Contains(h.ReceiptIDs, e.ReceiptID) {
			return TaskEffect{}, nil
		}
		h.ReceiptIDs = append(h.ReceiptIDs, e.ReceiptID)
	case TaskEventCanceled:
		h.State, h.StatusMessage, h.StatusTime = TaskCanceled, e.Message, e.Time
		h.ClaimedBy, h.ClaimExpires = "", time.Time{}
	case TaskEventFinished:
		switch e.State {
		case TaskCompleted, TaskFailed, TaskRejected:
		default:
			return bad("state %q is not completed, failed or rejected", e.State)
		}
		h.State, h.StatusMessage, h.StatusTime = e.State, e.Message, e.Time
		h.ClaimedBy, h.ClaimExpires = "", time.Time{}
	default:
		return bad("unknown event type")
	}
	return h.count(e, served), nil
}

// count advances h's generation when e, which Apply just accepted, is a
// mutation, and says so in eff.
func (h *TaskHead) count(e *TaskEvent, eff TaskEffect) TaskEffect {
	if e.Mutates() {
		h.Generation++
		eff.Mutation = true
	}
	return eff
}

// Mutates reports whether e is a client-visible mutation once Apply
// accepts it (see Generations): created, status, canceled, finished, and
// an artifact event holding an A2A artifact. It looks at the event alone,
// so that the mutations of a commit can be told without its task; Apply
// counts generations by it, and TaskEffect.Mutation is its answer for an
// accepted event.
func (e *TaskEvent) Mutates() bool {
	switch e.Type {
	case TaskEventCreated, TaskEventStatus, TaskEventCanceled, TaskEventFinished:
		return true
	case TaskEventArtifact:
		_, _, ok := decodeTaskArtifact(e.Artifact)
		return ok
	}
	return false
}

// MergeTaskArtifacts is a task's artifacts as served, from its artifact
// events in fold order: an event that appends extends the parts of the
// artifact of its id, any other replaces the artifact of its id or adds
// one; artifacts keep the order of their first event. An event that is not
// an A2A artifact (an object with a string artifactId and, if present, an
// array of parts) is left out: Apply takes any JSON, and one such event
// must not make its task unreadable. Artifacts are re-encoded as JSON
// objects with sorted keys; the error is one of encoding.
func MergeTaskArtifacts(events []TaskArtifact) ([]json.RawMessage, error) {
	var out []map[string]json.RawMessage
	index := map[string]int{}
	for _, ev := range events {
		a, id, ok := decodeTaskArtifact(ev.Data)
		if !ok {
			continue
		}
		i, seen := index[id]
		switch {
		case seen && ev.Append:
			var have, more []json.RawMessage
			// Both decode: decodeTaskArtifact checked that parts, when
			// present, are an array.
			_ = json.Unmarshal(out[i]["parts"], &have)
			_ = json.Unmarshal(a["parts"], &more)
			parts, err := json.Marshal(append(have, more...))
			if err != nil {
				return nil, fmt.Errorf("artifact %q: encode parts: %w", id, err)
			}
			out[i]["parts"] = parts
		case seen:
			out[i] = a
		default:
			index[id] = len(out)
			out = append(out, a)
		}
	}
	arts := make([]json.RawMessage, len(out))
	for i, a := range out {
		raw, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("encode artifact: %w", err)
		}
		arts[i] = raw
	}
	return arts, nil
}

// decodeTaskArtifact decodes an A2A artifact object and its id; ok is
// false for anything else. A null parts counts as none.
func decodeTaskArtifact(raw json.RawMessage) (a map[string]json.RawMessage, id string, ok bool) {
	if json.Unmarshal(raw, &a) != nil || a == nil {
		return nil, "", false
	}
	if jsonKind(a["artifactId"]) != '"' || json.Unmarshal(a["artifactId"], &id) != nil {
		return nil, "", false
	}
	if k := jsonKind(a["parts"]); k != 0 && k != 'n' && k != '[' {
		return nil, "", false
	}
	return a, id, true
}

// jsonKind is the first byte of a JSON value ('{', '[', '"', 't', 'f',
// 'n' or a digit or '-'), 0 for an absent one.
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// LinkTaskReceipts is a task's metadata as served: metadata.chio.receiptIds
// lists receipts, in order (an empty list for none), metadata and
// metadata.chio being created when absent or null. While metadata.chio says
// receiptPending and names no receiptId (absent or null), the last receipt
// resolves it: receiptId becomes that receipt, receiptPending false and
// receiptBearing true. That is a task canceled while its call ran, which
// keeps the metadata of its start although the call happened and bears a
// receipt. Metadata, or metadata.chio, that is not a JSON object is
// returned as it is. The result is re-encoded with sorted keys at the top
// two levels; the error is one of encoding.
func LinkTaskReceipts(meta json.RawMessage, receipts []string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if k := jsonKind(meta); k != 0 && k != 'n' {
		if json.Unmarshal(meta, &m) != nil {
			return meta, nil
		}
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	var c map[string]json.RawMessage
	if k := jsonKind(m["chio"]); k != 0 && k != 'n' {
		if json.Unmarshal(m["chio"], &c) != nil {
			return meta, nil
		}
	}
	if c == nil {
		c = map[string]json.RawMessage{}
	}
	if receipts == nil {
		receipts = []string{}
	}
	ids, err := json.Marshal(receipts)
	if err != nil {
		return nil, fmt.Errorf("encode receipt ids: %w", err)
	}
	c["receiptIds"] = ids
	pending := strings.TrimSpace(string(c["receiptPending"])) == "true"
	if k := jsonKind(c["receiptId"]); pending && (k == 0 || k == 'n') && len(receipts) > 0 {
		last, err := json.Marshal(receipts[len(receipts)-1])
		if err != nil {
			return nil, fmt.Errorf("encode receipt id: %w", err)
		}
		c["receiptId"], c["receiptPending"], c["receiptBearing"] = last, json.RawMessage("false"), json.RawMessage("true")
	}
	if m["chio"], err = json.Marshal(c); err != nil {
		return nil, fmt.Errorf("encode metadata.chio: %w", err)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	return out, nil
}
