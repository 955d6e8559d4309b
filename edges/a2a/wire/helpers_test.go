package wire

import (
	"encoding/json"
	"time"
)

func strp(s string) *string { return &s }

// sampleTask exercises every part kind, history, artifacts and metadata.
func sampleTask() *Task {
	return &Task{
		ID:        "t1",
		ContextID: "c1",
		Status: TaskStatus{
			State:     StateCompleted,
			Timestamp: time.Date(2026, 3, 12, 10, 4, 5, 123456789, time.FixedZone("X", 3600)),
			Message:   &Message{MessageID: "m2", Role: RoleAgent, Parts: []Part{TextPart("done")}},
		},
		Artifacts: []Artifact{{
			ArtifactID: "a1",
			Name:       "result",
			Parts: []Part{
				TextPart("hi <b>"),
				DataPart(json.RawMessage(`{"k": 1}`)),
				DataPart(json.RawMessage(`[1,2]`)),
				RawPart([]byte("xyz"), "text/plain", "x.txt"),
				URLPart("https://example.com/o.txt", "text/plain", ""),
			},
		}},
		History: []Message{{
			MessageID: "m1", ContextID: "c1", TaskID: "t1", Role: RoleUser,
			Parts: []Part{TextPart("hello")},
		}},
		Metadata: map[string]any{"chio": map[string]any{"receiptId": "r1"}},
	}
}
