package wire

import (
	"encoding/json"
	"time"
)

// Role is who authored a message.
type Role string

// Message roles. The zero value is unspecified and invalid on the wire.
const (
	RoleUser  Role = "user"
	RoleAgent Role = "agent"
)

// TaskState is a task's lifecycle state. The values are the 0.3 wire strings;
// 1.0 spells them TASK_STATE_*.
type TaskState string

// Task states.
const (
	StateSubmitted     TaskState = "submitted"
	StateWorking       TaskState = "working"
	StateCompleted     TaskState = "completed"
	StateFailed        TaskState = "failed"
	StateCanceled      TaskState = "canceled"
	StateInputRequired TaskState = "input-required"
	StateRejected      TaskState = "rejected"
	StateAuthRequired  TaskState = "auth-required"
	// StateUnknown exists only in 0.3; 1.0 encodes it as TASK_STATE_UNSPECIFIED.
	StateUnknown TaskState = "unknown"
)

// Terminal reports whether no further transition is allowed: completed,
// failed, canceled or rejected.
func (s TaskState) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCanceled, StateRejected:
		return true
	}
	return false
}

// Interrupted reports whether the task waits on the client: input-required
// or auth-required. A blocking send returns at a terminal or interrupted state.
func (s TaskState) Interrupted() bool {
	return s == StateInputRequired || s == StateAuthRequired
}

// Valid reports whether s is one of the defined states.
func (s TaskState) Valid() bool {
	_, ok := stateTo10[s]
	return ok
}

// Message is one turn of a conversation.
type Message struct {
	// MessageID may be empty on input (the hello-a2a profile omits it); the
	// server should assign one before storing the message.
	MessageID        string
	ContextID        string
	TaskID           string
	Role             Role
	Parts            []Part
	Metadata         map[string]any
	Extensions       []string
	ReferenceTaskIDs []string
}

// Part is one piece of content. Exactly one of Text, Data, Raw and URL is
// set: Text non-nil, Data non-empty (JSON null is the 4 bytes "null"), Raw
// non-nil (an empty non-nil slice is zero bytes of content) or URL non-empty.
// Use the constructors to build parts and Kind to inspect them.
type Part struct {
	Text      *string
	Data      json.RawMessage
	Raw       []byte
	URL       string
	MediaType string
	Filename  string
	Metadata  map[string]any
}

// PartKind names the content a Part carries.
type PartKind int

// Part kinds. PartInvalid is a part with no content or with several.
const (
	PartInvalid PartKind = iota
	PartText
	PartData
	PartRaw
	PartURL
)

// Kind reports which content p carries, or PartInvalid unless exactly one is set.
func (p Part) Kind() PartKind {
	k, n := PartInvalid, 0
	if p.Text != nil {
		k, n = PartText, n+1
	}
	if len(p.Data) > 0 {
		k, n = PartData, n+1
	}
	if p.Raw != nil {
		k, n = PartRaw, n+1
	}
	if p.URL != "" {
		k, n = PartURL, n+1
	}
	if n != 1 {
		return PartInvalid
	}
	return k
}

// TextPart returns a text part.
func TextPart(s string) Part { return Part{Text: &s} }

// DataPart returns a structured-data part holding the JSON value data; nil
// or empty data becomes JSON null so the part stays valid.
func DataPart(data json.RawMessage) Part {
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	return Part{Data: data}
}

// RawPart returns an inline file part; nil b becomes zero bytes of content.
func RawPart(b []byte, mediaType, filename string) Part {
	if b == nil {
		b = []byte{}
	}
	return Part{Raw: b, MediaType: mediaType, Filename: filename}
}

// URLPart returns a file-by-reference part.
func URLPart(url, mediaType, filename string) Part {
	return Part{URL: url, MediaType: mediaType, Filename: filename}
}

// TaskStatus is a task's current state.
type TaskStatus struct {
	State TaskState
	// Message is an optional agent message explaining the state.
	Message *Message
	// Timestamp is omitted on the wire when zero.
	Timestamp time.Time
}

// Task is a unit of work and its results.
type Task struct {
	ID        string
	ContextID string
	Status    TaskStatus
	// Artifacts and History are omitted on the wire when empty.
	Artifacts []Artifact
	History   []Message
	Metadata  map[string]any
}

// Artifact is an output of a task.
type Artifact struct {
	ArtifactID  string
	Name        string
	Description string
	Parts       []Part
	Metadata    map[string]any
	Extensions  []string
}

// ListTasksResult is the answer to ListTasks.
type ListTasksResult struct {
	Tasks []Task
	// NextPageToken is "" on the last page; it is always emitted.
	NextPageToken string
	PageSize      int
	TotalSize     int
}
