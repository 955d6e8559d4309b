package projections

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// A projections service started fresh over a task stream that retention
// has purged tasks from folds what the stream still holds, and reads each
// purged stretch as one gap, not one request per sequence it lacks.
func TestFreshProjectionsOverPurgedTasks(t *testing.T) {
	h := newHarness(t)
	finished := schemas.TaskEvent{Type: schemas.TaskEventFinished, Time: at(20), State: schemas.TaskCompleted}
	h.commit("kept", created("ctx", 0))
	const purged = 1000
	for i := range purged {
		id := fmt.Sprintf("old-%d", i)
		h.commit(id, created("ctx", 1))
		h.commit(id, finished)
	}
	h.commit("kept", finished)
	stream, err := h.js.Stream(h.ctx, schemas.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	for i := range purged {
		if err := stream.Purge(h.ctx, jetstream.WithPurgeSubject(schemas.TaskSubject(fmt.Sprintf("old-%d", i)))); err != nil {
			t.Fatal(err)
		}
	}

	sent := h.nc.Stats().OutMsgs // the service shares the harness's connection
	r := h.start("fresh")
	h.caughtUp(r)
	if n := h.nc.Stats().OutMsgs - sent; n > purged/4 {
		t.Errorf("%d messages sent to fold a stream of 2 commits with %d purged between them", n, 2*purged)
	}
	srv := server(t, r.Service)
	code, body, raw := get(t, srv.URL, "/v1/tasks/kept", opToken)
	if code != http.StatusOK || body["status"] == nil {
		t.Fatalf("the kept task: %d %s", code, raw)
	}
	if state := body["status"].(map[string]any)["state"]; state != "TASK_STATE_COMPLETED" {
		t.Fatalf("the kept task's state %v: %s", state, raw)
	}
	if code, _, raw := get(t, srv.URL, "/v1/tasks/old-7", opToken); code != http.StatusNotFound {
		t.Fatalf("a purged task: %d %s", code, raw)
	}
}

// A message that carries a Nats-Sequence header of its own, in a gap the
// fold reads directly, is folded at the sequence the server gives it: the
// fold neither reads it again forever nor skips what follows.
func TestGapFillIgnoresForgedSequence(t *testing.T) {
	h := newHarness(t)
	h.commit("a", created("ctx", 0))
	h.commit("gone", created("ctx", 1))
	raw, err := json.Marshal(schemas.TaskCommit{V: schemas.TaskCommitVersion, Events: []schemas.TaskEvent{created("ctx", 2)}})
	if err != nil {
		t.Fatal(err)
	}
	h.publish(schemas.TaskSubject("b"), raw, nats.Header{"Nats-Sequence": {"1"}})
	h.commit("c", created("ctx", 3))
	stream, err := h.js.Stream(h.ctx, schemas.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(h.ctx, jetstream.WithPurgeSubject(schemas.TaskSubject("gone"))); err != nil {
		t.Fatal(err)
	}
	r := h.start("fresh")
	h.caughtUpWithin(r, 20*time.Second)
	srv := server(t, r.Service)
	for _, id := range []string{"a", "b", "c"} {
		if code, _, body := get(t, srv.URL, "/v1/tasks/"+id, opToken); code != http.StatusOK {
			t.Errorf("task %s: %d %s", id, code, body)
		}
	}
}
