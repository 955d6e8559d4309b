package projections

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/schemas"
)

// commitFrom publishes one task commit with a Chio-Replica header naming
// replica ("" for none, as commits written before the header).
func (h *harness) commitFrom(replica, taskID string, events ...schemas.TaskEvent) uint64 {
	h.t.Helper()
	raw, err := json.Marshal(schemas.TaskCommit{V: schemas.TaskCommitVersion, Events: events})
	if err != nil {
		h.t.Fatal(err)
	}
	var hdr nats.Header
	if replica != "" {
		hdr = nats.Header{schemas.HeaderReplica: {replica}}
	}
	return h.publish(schemas.TaskSubject(taskID), raw, hdr)
}

func TestTaskTimeline(t *testing.T) {
	h := newHarness(t)
	chunk := json.RawMessage(`{"artifactId":"a1","parts":[{"text":" more"}]}`)
	s1 := h.commitFrom("", "t1", created("ctx-1", 0),
		schemas.TaskEvent{Type: schemas.TaskEventStatus, Time: at(0), State: schemas.TaskWorking})
	s2 := h.commitFrom("", "t1", schemas.TaskEvent{Type: schemas.TaskEventClaimed, Time: at(1), ReplicaID: "edge-3",
		LeaseExpires: at(60), Attempt: 1, ExecutionID: "exec-1"})
	s3 := h.commitFrom("edge-7", "t1",
		schemas.TaskEvent{Type: schemas.TaskEventArtifact, Time: at(2), Artifact: artifact("a1", "part one")},
		schemas.TaskEvent{Type: schemas.TaskEventReceipt, Time: at(2), ReceiptID: "rcpt-1"},
		schemas.TaskEvent{Type: schemas.TaskEventMessage, Time: at(2), Message: message("m1", "ROLE_AGENT", "working on it")})
	s4 := h.commitFrom("edge-7", "t1",
		schemas.TaskEvent{Type: schemas.TaskEventReceipt, Time: at(3), ReceiptID: "rcpt-1"}, // linked before
		schemas.TaskEvent{Type: schemas.TaskEventReceipt, Time: at(3), ReceiptID: "rcpt-2"},
		schemas.TaskEvent{Type: schemas.TaskEventArtifact, Time: at(3), Artifact: chunk, Append: true, LastChunk: true},
		schemas.TaskEvent{Type: schemas.TaskEventFinished, Time: at(3), State: schemas.TaskCompleted})
	// Refused whole (the task is terminal): no entry.
	h.commitFrom("edge-9", "t1", schemas.TaskEvent{Type: schemas.TaskEventStatus, Time: at(4), State: schemas.TaskWorking})
	// Refused in part: the entry lists what applied.
	h.commitFrom("", "t2", created("ctx-2", 5), schemas.TaskEvent{Type: schemas.TaskEventStatus, Time: at(5), State: schemas.TaskCompleted})

	// A commit written by the task store of a replica that names itself.
	store, err := taskstore.Open(h.ctx, h.js, taskstore.WithReplicaID("edge-real"))
	if err != nil {
		t.Fatal(err)
	}
	written, err := store.Create(h.ctx, schemas.TaskOwner{Subject: subjectHex}, "", message("m0", "ROLE_USER", "hi"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}

	live := h.start("live")
	h.caughtUp(live)
	srv := server(t, live.Service)

	ts := func(n int) string { return formatTime(at(n)) }
	want := TaskTimeline{ID: "t1", Generations: []TimelineEntry{
		{Generation: 2, Seq: s1, Time: ts(0), State: "working", Events: []string{"created", "status"}, Replica: "",
			ReceiptIDs: []string{}, Artifacts: []TimelineArtifact{}},
		{Generation: 2, Seq: s2, Time: ts(1), State: "working", Events: []string{"claimed"}, Replica: "edge-3",
			ReceiptIDs: []string{}, Artifacts: []TimelineArtifact{}},
		{Generation: 3, Seq: s3, Time: ts(2), State: "working", Events: []string{"artifact", "receipt", "message"}, Replica: "edge-7",
			ReceiptIDs: []string{"rcpt-1"}, Artifacts: []TimelineArtifact{{Append: false, Artifact: artifact("a1", "part one")}}},
		{Generation: 5, Seq: s4, Time: ts(3), State: "completed", Events: []string{"receipt", "receipt", "artifact", "finished"}, Replica: "edge-7",
			ReceiptIDs: []string{"rcpt-2"}, Artifacts: []TimelineArtifact{{Append: true, Artifact: chunk}}},
	}}
	code, _, raw := get(t, srv.URL, "/v1/tasks/t1/timeline", opToken)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, raw)
	}
	var got TaskTimeline
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(t, got), normalize(t, want)) {
		t.Errorf("timeline\n got %s\nwant %s", raw, mustJSON(t, want))
	}

	cases := []struct {
		name, path, wantReplica string
		wantEvents              []string
	}{
		{"partly refused commit", "/v1/tasks/t2/timeline", "", []string{"created"}},
		{"task store names its replica", "/v1/tasks/" + written.ID + "/timeline", "edge-real", []string{"created"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, raw := get(t, srv.URL, c.path, opToken)
			var got TaskTimeline
			if code != http.StatusOK || json.Unmarshal(raw, &got) != nil || len(got.Generations) != 1 {
				t.Fatalf("%d %s", code, raw)
			}
			if g := got.Generations[0]; g.Replica != c.wantReplica || !reflect.DeepEqual(g.Events, c.wantEvents) || g.Generation != 1 {
				t.Errorf("%s", raw)
			}
		})
	}

	for _, c := range []struct {
		path  string
		code  int
		param string
	}{
		{"/v1/tasks/nope/timeline", http.StatusNotFound, ""},
		{"/v1/tasks/t1/timeline?limit=1", http.StatusBadRequest, "limit"},
		{"/v1/tasks/%01/timeline", http.StatusBadRequest, "id"},
	} {
		code, body, raw := get(t, srv.URL, c.path, opToken)
		switch {
		case code != c.code:
			t.Errorf("%s: %d %s, want %d", c.path, code, raw, c.code)
		case c.code == http.StatusNotFound && body["code"] != CodeTaskNotFound:
			t.Errorf("%s: %s", c.path, raw)
		case c.code == http.StatusBadRequest && (body["code"] != CodeInvalidParameter || body["param"] != c.param):
			t.Errorf("%s: %s", c.path, raw)
		}
	}

	// The records are part of the task fold: a rebuild holds the same.
	digest, err := live.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if res := h.rebuild("rebuilt"); res.Digest != digest {
		t.Errorf("rebuild digest %s, live %s", res.Digest, digest)
	}
}

// normalize re-encodes v through JSON, so raw artifacts compare by value.
func normalize(t *testing.T, v any) any {
	t.Helper()
	var out any
	if err := json.Unmarshal([]byte(mustJSON(t, v)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTimelineIsScoped: a task's timeline is visible exactly when the
// task is, and answers the same 404 otherwise.
func TestTimelineIsScoped(t *testing.T) {
	f := newScopeFixture(t)
	all := []string{"task-A1", "task-B1", "task-C1", "task-B2", "task-A2", "task-B3", "task-U1", "task-A3", "task-R1", "task-none"}
	for _, reader := range []string{"operator", "read-all", "A", "C", "B", "tenant-A", "auditor"} {
		t.Run(reader, func(t *testing.T) {
			tok := f.readers[reader]
			for _, id := range all {
				taskCode, taskBody, _ := f.get(t, "/v1/tasks/"+id, tok)
				path := "/v1/tasks/" + id + "/timeline"
				code, body, raw := f.get(t, path, tok)
				if code != taskCode {
					t.Errorf("%s: %d %s, the task answers %d", path, code, raw, taskCode)
					continue
				}
				switch code {
				case http.StatusOK:
					if body["id"] != id || len(body["generations"].([]any)) != 1 {
						t.Errorf("%s: %s", path, raw)
					}
				case http.StatusNotFound:
					want := map[string]any{"error": fmt.Sprintf("task %s is not known", id), "code": CodeTaskNotFound}
					if !reflect.DeepEqual(body, want) || !reflect.DeepEqual(body, taskBody) {
						t.Errorf("%s: %s, want the 404 of a missing task", path, raw)
					}
				default:
					t.Errorf("%s: %d %s", path, code, raw)
				}
				f.noLeak(t, reader, path, raw, id)
			}
		})
	}
}
