package taskstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// Errors returned by the store. They are wrapped with the operation that
// failed; test them with errors.Is.
var (
	// ErrNotFound means the task does not exist or belongs to another
	// owner: the two are indistinguishable by design.
	ErrNotFound = errors.New("task not found")
	// ErrConflict means another writer kept appending to the task while a
	// transition retried, and the retry budget ran out.
	ErrConflict = errors.New("task changed concurrently")
	// ErrNotCancelable means the task is already in a terminal state.
	ErrNotCancelable = errors.New("task is not cancelable")
	// ErrAlreadyTerminal means an event would change a task that is
	// already terminal (completed, failed, canceled or rejected); nothing
	// was written. It is the fold's own error, schemas.ErrTaskTerminal.
	ErrAlreadyTerminal = schemas.ErrTaskTerminal
	// ErrTooLarge means a payload, a commit or the task as a whole would
	// exceed a configured size limit; nothing was written.
	ErrTooLarge = errors.New("task payload too large")
	// ErrInvalidEvent means an event is malformed or not allowed in the
	// task's current state; nothing was written. It is the fold's own
	// error, schemas.ErrTaskEvent.
	ErrInvalidEvent = schemas.ErrTaskEvent
	// ErrInvalidArgument means a caller-supplied argument is malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidPageToken means a List page token was not issued by List.
	ErrInvalidPageToken = errors.New("invalid page token")
)

// Owner is the identity a task belongs to (schemas.TaskOwner). Every read
// and write is scoped to it.
type Owner = schemas.TaskOwner

// maxOwnerField bounds each Owner field, so that the summary header every
// commit carries stays small; the fold refuses a created event beyond it.
const maxOwnerField = schemas.MaxTaskOwnerField

// Create must not accept a context id the fold would refuse.
const _ = uint(schemas.MaxTaskContextID - maxContextID)

func validateOwner(o Owner) error {
	if o.Subject == "" {
		return fmt.Errorf("%w: owner subject is empty", ErrInvalidArgument)
	}
	if len(o.Subject) > maxOwnerField || len(o.Tenant) > maxOwnerField {
		return fmt.Errorf("%w: owner subject or tenant longer than %d bytes", ErrInvalidArgument, maxOwnerField)
	}
	return nil
}

// State is a task state (schemas.TaskState).
type State = schemas.TaskState

// Task states.
const (
	StateSubmitted     = schemas.TaskSubmitted
	StateWorking       = schemas.TaskWorking
	StateCompleted     = schemas.TaskCompleted
	StateFailed        = schemas.TaskFailed
	StateCanceled      = schemas.TaskCanceled
	StateRejected      = schemas.TaskRejected
	StateInputRequired = schemas.TaskInputRequired
	StateAuthRequired  = schemas.TaskAuthRequired
)

// Task is the fold of a task's events: the head schemas.TaskHead.Apply
// keeps (state, status, owner, context, metadata, request, receipts and
// the execution lease, as promoted fields), with the history and
// artifacts it hands over. Payloads are opaque JSON: the edge decides
// their shape.
type Task struct {
	ID string
	schemas.TaskHead
	// History and Artifacts are what the head only counts.
	History   []json.RawMessage // opaque messages, oldest first
	Artifacts []Artifact        // in append order
	// Seq is the stream sequence of the task's last commit.
	Seq uint64

	size      int      // bytes of all commits folded so far
	commitIDs []string // message ids of the commits folded, in order
}

// Claimed reports whether a replica holds an unexpired lease at now.
func (t *Task) Claimed(now time.Time) bool {
	return t.ClaimedBy != "" && now.Before(t.ClaimExpires)
}

func (t *Task) clone() *Task {
	c := *t
	c.History = slices.Clone(t.History)
	c.Artifacts = slices.Clone(t.Artifacts)
	c.ReceiptIDs = slices.Clone(t.ReceiptIDs)
	c.commitIDs = slices.Clone(t.commitIDs)
	return &c
}

// Artifact is one artifact event as folded (schemas.TaskArtifact): an
// opaque artifact, or a chunk of one that Append says extends the artifact
// of the same id; schemas.MergeTaskArtifacts merges them.
type Artifact = schemas.TaskArtifact

// EventType discriminates events (schemas.TaskEventType).
type EventType = schemas.TaskEventType

// Event types; see schemas for their meaning.
const (
	EventCreated  = schemas.TaskEventCreated
	EventStatus   = schemas.TaskEventStatus
	EventMessage  = schemas.TaskEventMessage
	EventArtifact = schemas.TaskEventArtifact
	EventMetadata = schemas.TaskEventMetadata
	EventRequest  = schemas.TaskEventRequest
	EventClaimed  = schemas.TaskEventClaimed
	EventReleased = schemas.TaskEventReleased
	EventReceipt  = schemas.TaskEventReceipt
	EventCanceled = schemas.TaskEventCanceled
	EventFinished = schemas.TaskEventFinished
)

// Event is one fact about a task (schemas.TaskEvent).
type Event = schemas.TaskEvent

// StatusEvent moves a task to a non-terminal state.
func StatusEvent(state State, message json.RawMessage) Event {
	return Event{Type: EventStatus, State: state, Message: message}
}

// MessageEvent appends a history message.
func MessageEvent(message json.RawMessage) Event {
	return Event{Type: EventMessage, Message: message}
}

// ArtifactEvent appends a whole artifact.
func ArtifactEvent(artifact json.RawMessage) Event {
	return Event{Type: EventArtifact, Artifact: artifact, LastChunk: true}
}

// ArtifactChunkEvent appends one chunk of a streamed artifact.
func ArtifactChunkEvent(artifact json.RawMessage, appends, last bool) Event {
	return Event{Type: EventArtifact, Artifact: artifact, Append: appends, LastChunk: last}
}

// MetadataEvent replaces the task metadata.
func MetadataEvent(metadata json.RawMessage) Event {
	return Event{Type: EventMetadata, Metadata: metadata}
}

// RequestEvent replaces the deferred request.
func RequestEvent(request json.RawMessage) Event {
	return Event{Type: EventRequest, Request: request}
}

// ReceiptEvent links a receipt id.
func ReceiptEvent(receiptID string) Event {
	return Event{Type: EventReceipt, ReceiptID: receiptID}
}

// ReleaseEvent gives back replicaID's lease.
func ReleaseEvent(replicaID string) Event {
	return Event{Type: EventReleased, ReplicaID: replicaID}
}

// CancelEvent ends a task as canceled.
func CancelEvent(message json.RawMessage) Event {
	return Event{Type: EventCanceled, State: StateCanceled, Message: message}
}

// FinishEvent ends a task as completed, failed or rejected.
func FinishEvent(state State, message json.RawMessage) Event {
	return Event{Type: EventFinished, State: state, Message: message}
}

// ClaimEvent records a lease of replicaID until expires; Attempt and
// ExecutionID are filled in by the store when committed.
func ClaimEvent(replicaID string, expires time.Time) Event {
	return Event{Type: EventClaimed, ReplicaID: replicaID, LeaseExpires: expires}
}

// apply folds e into t by the one task fold (schemas.TaskHead.Apply). It
// refuses (and leaves t unchanged) any event that is malformed or not
// allowed in t's state; the store uses it strictly before writing and
// leniently (skipping refused events) when reading, so that even a stray
// writer cannot revive a terminal task.
func (t *Task) apply(e *Event) error {
	_, err := t.applyEffect(e)
	return err
}

// applyEffect is apply, returning what the event did.
func (t *Task) applyEffect(e *Event) (schemas.TaskEffect, error) {
	eff, err := t.TaskHead.Apply(e)
	if err != nil {
		return eff, err
	}
	if eff.Message != nil {
		t.History = append(t.History, eff.Message)
	}
	if eff.Artifact != nil {
		t.Artifacts = append(t.Artifacts, *eff.Artifact)
	}
	return eff, nil
}
