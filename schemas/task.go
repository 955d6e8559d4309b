package schemas

import (
	"encoding/json"
	"time"
)

// Task events: the contract between the A2A edge, which writes them, and
// the projections, which fold them into task state. Every message on a
// task's subject is one TaskCommit: the events of one transition, written
// atomically. Messages and artifacts inside events are A2A 1.0 JSON.
// TaskHead.Apply (taskfold.go) is what the events mean.
const (
	// TasksStream holds every task's commits.
	TasksStream = "CHIO_TASKS"
	// TasksSubjectPrefix starts the subject of every task: one per task,
	// chio.tasks.<task id>.
	TasksSubjectPrefix = "chio.tasks."
	// TasksSubjects is the subject filter of TasksStream.
	TasksSubjects = TasksSubjectPrefix + "*"
	// TaskCommitVersion is the V of the commits written today.
	TaskCommitVersion = 1
)

// TaskSubject is the subject of task id's commits.
func TaskSubject(id string) string { return TasksSubjectPrefix + id }

// TaskCommit is one message on a task's subject.
type TaskCommit struct {
	V      int         `json:"v"`
	Events []TaskEvent `json:"events"`
}

// TaskOwner is the identity a task belongs to: a task is visible only to
// the exact (Subject, Tenant) pair that created it.
type TaskOwner struct {
	// Subject is the caller key (the capability subject).
	Subject string `json:"subject"`
	// Tenant is the A2A tenant the caller addressed, possibly empty.
	Tenant string `json:"tenant,omitempty"`
}

// TaskState is a task state, version-neutral (A2A 1.0 spells it
// "TASK_STATE_COMPLETED", 0.3 "completed").
type TaskState string

// Task states.
const (
	TaskSubmitted     TaskState = "submitted"
	TaskWorking       TaskState = "working"
	TaskCompleted     TaskState = "completed"
	TaskFailed        TaskState = "failed"
	TaskCanceled      TaskState = "canceled"
	TaskRejected      TaskState = "rejected"
	TaskInputRequired TaskState = "input-required"
	TaskAuthRequired  TaskState = "auth-required"
)

// Terminal reports whether no further state change is possible.
func (s TaskState) Terminal() bool {
	switch s {
	case TaskCompleted, TaskFailed, TaskCanceled, TaskRejected:
		return true
	}
	return false
}

// Interrupted reports whether the task waits for the client.
func (s TaskState) Interrupted() bool { return s == TaskInputRequired || s == TaskAuthRequired }

// Valid reports whether s is one of the defined states.
func (s TaskState) Valid() bool {
	switch s {
	case TaskSubmitted, TaskWorking, TaskCompleted, TaskFailed, TaskCanceled,
		TaskRejected, TaskInputRequired, TaskAuthRequired:
		return true
	}
	return false
}

// A2A is the A2A 1.0 spelling of s ("TASK_STATE_INPUT_REQUIRED"), or ""
// for an unknown state.
func (s TaskState) A2A() string {
	switch s {
	case TaskSubmitted:
		return "TASK_STATE_SUBMITTED"
	case TaskWorking:
		return "TASK_STATE_WORKING"
	case TaskCompleted:
		return "TASK_STATE_COMPLETED"
	case TaskFailed:
		return "TASK_STATE_FAILED"
	case TaskCanceled:
		return "TASK_STATE_CANCELED"
	case TaskRejected:
		return "TASK_STATE_REJECTED"
	case TaskInputRequired:
		return "TASK_STATE_INPUT_REQUIRED"
	case TaskAuthRequired:
		return "TASK_STATE_AUTH_REQUIRED"
	}
	return ""
}

// TaskEventType discriminates task events.
type TaskEventType string

// Task event types.
const (
	// TaskEventCreated starts every task: owner, context id, the first
	// message, the deferred request and metadata.
	TaskEventCreated TaskEventType = "created"
	// TaskEventStatus moves a task to a non-terminal state with a status
	// message.
	TaskEventStatus TaskEventType = "status"
	// TaskEventMessage appends a message to the history.
	TaskEventMessage TaskEventType = "message"
	// TaskEventArtifact appends an artifact, or a chunk of one.
	TaskEventArtifact TaskEventType = "artifact"
	// TaskEventMetadata replaces the task metadata.
	TaskEventMetadata TaskEventType = "metadata"
	// TaskEventRequest replaces the deferred request (a follow-up turn).
	TaskEventRequest TaskEventType = "request"
	// TaskEventClaimed records an execution lease.
	TaskEventClaimed TaskEventType = "claimed"
	// TaskEventReleased gives a lease back before it expires.
	TaskEventReleased TaskEventType = "released"
	// TaskEventReceipt links a receipt id; it is the only event accepted
	// after a terminal state.
	TaskEventReceipt TaskEventType = "receipt"
	// TaskEventCanceled ends a task as canceled.
	TaskEventCanceled TaskEventType = "canceled"
	// TaskEventFinished ends a task as completed, failed or rejected.
	TaskEventFinished TaskEventType = "finished"
)

// TaskEvent is one fact about a task. Which fields are set depends on
// Type. Time, and for claims Attempt and ExecutionID, are stamped by the
// writer when the event is committed.
type TaskEvent struct {
	Type TaskEventType `json:"type"`
	Time time.Time     `json:"time"`
	// Owner and ContextID: created.
	Owner     *TaskOwner `json:"owner,omitempty"`
	ContextID string     `json:"contextId,omitempty"`
	// State: status, canceled, finished.
	State TaskState `json:"state,omitempty"`
	// Message: the first message (created), the status message (status,
	// canceled, finished) or the appended history message (message).
	Message json.RawMessage `json:"message,omitempty"`
	// Request: created, request.
	Request json.RawMessage `json:"request,omitempty"`
	// Metadata: created, metadata.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Artifact: artifact.
	Artifact json.RawMessage `json:"artifact,omitempty"`
	// Append says the artifact chunk extends the artifact of the same id;
	// LastChunk that it is the last chunk of it.
	Append    bool `json:"append,omitempty"`
	LastChunk bool `json:"lastChunk,omitempty"`
	// ReceiptID: receipt.
	ReceiptID string `json:"receiptId,omitempty"`
	// ReplicaID, LeaseExpires, Attempt, ExecutionID: claimed (ReplicaID
	// also for released).
	ReplicaID    string    `json:"replicaId,omitempty"`
	LeaseExpires time.Time `json:"leaseExpires,omitzero"`
	Attempt      int       `json:"attempt,omitempty"`
	ExecutionID  string    `json:"executionId,omitempty"`
	// Seq is the stream sequence of the commit that carried the event; it
	// is set on events read back, never stored.
	Seq uint64 `json:"-"`
	// Generation is the task's generation after the event when the event
	// is a client-visible mutation (TaskEffect.Mutation), else 0; like Seq
	// it is set on events read back (by the A2A edge's Watch and Follow),
	// never stored in the event.
	Generation int64 `json:"-"`
}

// Terminal reports whether the event ends its task.
func (e TaskEvent) Terminal() bool { return e.Type == TaskEventCanceled || e.Type == TaskEventFinished }
