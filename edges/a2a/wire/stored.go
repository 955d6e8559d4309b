package wire

import (
	"encoding/json"
	"time"
)

// StoredTask is a task whose messages, artifacts and metadata are JSON in
// the 1.0 shapes already, as the edge stores them (it stores every message
// and artifact with the 1.0 dialect's encoder, whatever binding wrote it).
// Answering in 1.0 then needs no decode into the canonical model and
// encode out of it: EncodeStoredTask10 splices the stored JSON into the
// Task around it. Each value must be what this package's 1.0 encoder
// produced (the output is then what EncodeTask gives for its decode);
// json.Marshal still checks that every one is valid JSON.
type StoredTask struct {
	ID, ContextID string
	State         TaskState
	Timestamp     time.Time       // zero: none
	StatusMessage json.RawMessage // nil: none
	History       []json.RawMessage
	Artifacts     []json.RawMessage // whole artifacts, merged
	Metadata      json.RawMessage   // a JSON object, or nil
}

// storedTask10 is task10 with the stored JSON in place of the model: the
// same members in the same order.
type storedTask10 struct {
	ID        string            `json:"id"`
	ContextID string            `json:"contextId,omitempty"`
	Status    storedStatus10    `json:"status"`
	Artifacts []json.RawMessage `json:"artifacts,omitempty"`
	History   []json.RawMessage `json:"history,omitempty"`
	Metadata  json.RawMessage   `json:"metadata,omitempty"`
}

type storedStatus10 struct {
	State     string          `json:"state"`
	Message   json.RawMessage `json:"message,omitempty"`
	Timestamp string          `json:"timestamp,omitempty"`
}

// EncodeStoredTask10 encodes t as a 1.0 Task; with asSendResult, as the
// 1.0 SendMessage result ({"task": …}).
func EncodeStoredTask10(t *StoredTask, asSendResult bool) (json.RawMessage, error) {
	if t == nil {
		return nil, invalid("nil task")
	}
	st := storedStatus10{Message: t.StatusMessage}
	var err error
	if st.State, err = encodeState(V10, t.State); err != nil {
		return nil, err
	}
	if !t.Timestamp.IsZero() {
		st.Timestamp = formatTime(t.Timestamp)
	}
	w := storedTask10{ID: t.ID, ContextID: t.ContextID, Status: st, Artifacts: t.Artifacts, History: t.History, Metadata: t.Metadata}
	if asSendResult {
		return marshal(struct {
			Task storedTask10 `json:"task"`
		}{w})
	}
	return marshal(w)
}
