package projections

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// TestTaskFoldContract folds the shared fixture of the task fold and checks
// that the task served is the view the fixture wants, whatever the batch
// boundaries: the projections and the edge serve the same task from the
// same commits. The live projection sees the fixture in two batches, cut
// while a lease is held, so it folds the release without the claim it
// does not store; the rebuilds see it in batches of one and of all.
func TestTaskFoldContract(t *testing.T) {
	h := newHarness(t)
	f := schemas.TaskFoldFixture()
	const cut = 4 // after the claim, before its release
	for _, c := range f.Commits[:cut] {
		h.commit(f.ID, c.Events...)
	}
	live := h.start("live", WithName("contract-live"))
	h.caughtUp(live)
	for _, c := range f.Commits[cut:] {
		h.commit(f.ID, c.Events...)
	}
	h.caughtUp(live)
	digest, err := live.Digest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(f.Want)
	check := func(t *testing.T, svc *Service) {
		t.Helper()
		code, _, raw := get(t, server(t, svc).URL, "/v1/tasks/"+f.ID, opToken)
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, raw)
		}
		var task Task
		if err := json.Unmarshal(raw, &task); err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(served(t, &task)); string(got) != string(want) {
			t.Errorf("task served\n%s\nwant\n%s", got, want)
		}
	}
	check(t, live.Service)
	if err := live.stop(); err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{1, DefaultBatch} {
		t.Run(fmt.Sprintf("rebuild batch=%d", batch), func(t *testing.T) {
			dir := fmt.Sprintf("rebuilt-%d", batch)
			if res := h.rebuild(dir, WithBatch(batch)); res.Digest != digest {
				t.Errorf("rebuild digest %s, live %s", res.Digest, digest)
			}
			check(t, h.start(dir, WithName("contract-"+dir)).Service)
		})
	}
}

// served is a task as the API serves it, as a schemas.TaskView.
func served(t *testing.T, task *Task) schemas.TaskView {
	t.Helper()
	state, ok := parseTaskState(task.Status.State)
	if !ok {
		t.Fatalf("state %q", task.Status.State)
	}
	v := schemas.TaskView{ContextID: task.ContextID, State: state, StatusMessage: task.Status.Message,
		History: task.History, Artifacts: task.Artifacts, Metadata: task.Metadata, ReceiptIDs: task.ReceiptIDs}
	if task.Status.Timestamp != "" {
		st, err := time.Parse(time.RFC3339Nano, task.Status.Timestamp)
		if err != nil {
			t.Fatal(err)
		}
		v.StatusTime = st.UTC()
	}
	return v
}
