package schemas

import (
	"encoding/json"
	"time"
)

// TaskView is a folded task as a reader serves it, for comparing readers:
// its head's served fields, history, artifacts as MergeTaskArtifacts
// merges them and metadata as LinkTaskReceipts links it. Times are UTC.
type TaskView struct {
	ContextID     string            `json:"contextId"`
	State         TaskState         `json:"state"`
	StatusMessage json.RawMessage   `json:"statusMessage,omitempty"`
	StatusTime    time.Time         `json:"statusTime,omitzero"`
	History       []json.RawMessage `json:"history,omitempty"`
	Artifacts     []json.RawMessage `json:"artifacts,omitempty"`
	Metadata      json.RawMessage   `json:"metadata,omitempty"`
	ReceiptIDs    []string          `json:"receiptIds,omitempty"`
}

// TaskFixture is one task's commits, as a stream holds them, and the view
// that folding them must give. Readers of the task stream test against it.
type TaskFixture struct {
	ID      string // a canonical UUID, as the edge names tasks
	Owner   TaskOwner
	Commits []TaskCommit
	Want    TaskView
	// WantHead is the head's lease after the fold; only a reader that
	// keeps the lease can check it.
	WantClaimedBy   string
	WantAttempt     int
	WantExecutionID string
}

// TaskFoldFixture is the shared fixture of the task fold: refused events
// before the created one and after cancel, a lease taken, released and
// reset by a new request, artifact chunks, a replaced artifact and one
// that is no A2A artifact, a follow-up turn's metadata, and receipts
// linked (one twice) after cancel. It returns new values on every call.
func TaskFoldFixture() TaskFixture {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	msg := func(id, role, text string) json.RawMessage {
		return raw(`{"messageId":"` + id + `","role":"` + role + `","parts":[{"text":"` + text + `"}]}`)
	}
	art := func(s int, data string, appends bool) TaskEvent {
		return TaskEvent{Type: TaskEventArtifact, Time: at(s), Artifact: raw(data), Append: appends}
	}
	owner := TaskOwner{Subject: "fixture-subject", Tenant: "acme"}
	commit := func(events ...TaskEvent) TaskCommit { return TaskCommit{V: TaskCommitVersion, Events: events} }
	return TaskFixture{
		ID:    "019a0000-0000-7000-8000-00000000f01d",
		Owner: owner,
		Commits: []TaskCommit{
			commit(TaskEvent{Type: TaskEventStatus, Time: at(0), State: TaskWorking}), // before created: refused
			commit(TaskEvent{Type: TaskEventCreated, Time: at(1), Owner: &owner, ContextID: "ctx-fixture",
				Message: msg("m0", "ROLE_USER", "hello"), Request: raw(`{"tool":"one"}`),
				Metadata: raw(`{"chio":{"receiptId":null,"receiptPending":true,"lifecycle":{"mode":"deferred"}}}`)}),
			commit(TaskEvent{Type: TaskEventClaimed, Time: at(2), ReplicaID: "replica-a", LeaseExpires: at(62), Attempt: 1, ExecutionID: "exec-1"},
				TaskEvent{Type: TaskEventStatus, Time: at(2), State: TaskWorking, Message: msg("s1", "ROLE_AGENT", "on it")}),
			commit(art(3, `{"artifactId":"a","name":"result","parts":[{"text":"1"}]}`, false),
				art(3, `{"artifactId":"a","parts":[{"text":"2"}]}`, true)),
			commit(art(4, `{"artifactId":"b","parts":[{"text":"x"}]}`, false),
				TaskEvent{Type: TaskEventMessage, Time: at(4), Message: msg("m1", "ROLE_AGENT", "half way")},
				art(4, `{"artifactId":"b","parts":[{"text":"y"}]}`, false),
				art(4, `{"parts":[{"text":"no id"}]}`, true)), // no A2A artifact: folded, never served
			commit(TaskEvent{Type: TaskEventReleased, Time: at(5), ReplicaID: "replica-b"}), // not the holder: refused
			commit(TaskEvent{Type: TaskEventReleased, Time: at(6), ReplicaID: "replica-a"},
				TaskEvent{Type: TaskEventStatus, Time: at(6), State: TaskInputRequired, Message: msg("s2", "ROLE_AGENT", "more?")}),
			commit(TaskEvent{Type: TaskEventMessage, Time: at(7), Message: msg("m2", "ROLE_USER", "more")},
				TaskEvent{Type: TaskEventRequest, Time: at(7), Request: raw(`{"tool":"two"}`)},
				TaskEvent{Type: TaskEventMetadata, Time: at(7), Metadata: raw(`{"chio":{"receiptId":null,"receiptPending":true,"turn":2},"x":1}`)},
				TaskEvent{Type: TaskEventStatus, Time: at(7), State: TaskWorking},
				TaskEvent{Type: TaskEventClaimed, Time: at(7), ReplicaID: "replica-b", LeaseExpires: at(67), Attempt: 1, ExecutionID: "exec-2"}),
			commit(art(8, `{"artifactId":"a","parts":[{"text":"3"}]}`, true)),
			commit(TaskEvent{Type: TaskEventCanceled, Time: at(9), State: TaskCanceled, Message: msg("s3", "ROLE_AGENT", "stopped")}),
			commit(TaskEvent{Type: TaskEventFinished, Time: at(10), State: TaskCompleted, Message: msg("late", "ROLE_AGENT", "done")},
				art(10, `{"artifactId":"a","parts":[{"text":"late"}]}`, true),
				TaskEvent{Type: TaskEventMessage, Time: at(10), Message: msg("m3", "ROLE_AGENT", "late")},
				TaskEvent{Type: TaskEventMetadata, Time: at(10), Metadata: raw(`{"late":true}`)},
				TaskEvent{Type: TaskEventReceipt, Time: at(10), ReceiptID: "rcpt-1"},
				TaskEvent{Type: TaskEventReceipt, Time: at(10), ReceiptID: "rcpt-1"}),
			commit(TaskEvent{Type: TaskEventReceipt, Time: at(11), ReceiptID: "rcpt-2"}),
		},
		Want: TaskView{
			ContextID:     "ctx-fixture",
			State:         TaskCanceled,
			StatusMessage: msg("s3", "ROLE_AGENT", "stopped"),
			StatusTime:    at(9),
			History:       []json.RawMessage{msg("m0", "ROLE_USER", "hello"), msg("m1", "ROLE_AGENT", "half way"), msg("m2", "ROLE_USER", "more")},
			Artifacts: []json.RawMessage{
				raw(`{"artifactId":"a","name":"result","parts":[{"text":"1"},{"text":"2"},{"text":"3"}]}`),
				raw(`{"artifactId":"b","parts":[{"text":"y"}]}`),
			},
			Metadata:   raw(`{"chio":{"receiptBearing":true,"receiptId":"rcpt-2","receiptIds":["rcpt-1","rcpt-2"],"receiptPending":false,"turn":2},"x":1}`),
			ReceiptIDs: []string{"rcpt-1", "rcpt-2"},
		},
		WantAttempt:     1,
		WantExecutionID: "exec-2",
	}
}

// View is the task h heads, with its history and artifact events, as a
// reader serves it.
func (h *TaskHead) View(history []json.RawMessage, artifacts []TaskArtifact) (TaskView, error) {
	arts, err := MergeTaskArtifacts(artifacts)
	if err != nil {
		return TaskView{}, err
	}
	meta, err := LinkTaskReceipts(h.Metadata, h.ReceiptIDs)
	if err != nil {
		return TaskView{}, err
	}
	return TaskView{ContextID: h.ContextID, State: h.State, StatusMessage: h.StatusMessage, StatusTime: h.StatusTime.UTC(),
		History: history, Artifacts: arts, Metadata: meta, ReceiptIDs: h.ReceiptIDs}, nil
}
