package projections

import (
	"fmt"
	"net/http"
	"testing"

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
