package taskstore

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// TestFoldContract folds the shared fixture of the task fold (as a stray
// writer would publish it, straight onto the task's subject) and checks
// that the task Load returns is the view the fixture wants: the edge and
// the projections serve the same task from the same commits.
func TestFoldContract(t *testing.T) {
	ctx := t.Context()
	// The fixture's refused events are expected: keep their warnings out.
	s := openStore(t, startNATS(t), WithLogger(slog.New(slog.DiscardHandler)))
	f := schemas.TaskFoldFixture()
	var last uint64
	for _, c := range f.Commits {
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := s.js.Publish(ctx, Subject(f.ID), raw)
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	got, err := s.Load(ctx, f.ID, f.Owner)
	if err != nil {
		t.Fatal(err)
	}
	view, err := got.View(got.History, got.Artifacts)
	if err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.Marshal(view)
	wantJSON, _ := json.Marshal(f.Want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("task as loaded\n%s\nwant\n%s", gotJSON, wantJSON)
	}
	if got.ID != f.ID || got.Owner != f.Owner || got.Seq != last || got.ClaimedBy != f.WantClaimedBy ||
		got.Attempt != f.WantAttempt || got.ExecutionID != f.WantExecutionID {
		t.Errorf("task %+v: want id %s, owner %+v, seq %d, lease %q/%d/%q",
			got, f.ID, f.Owner, last, f.WantClaimedBy, f.WantAttempt, f.WantExecutionID)
	}
	if _, err := s.Load(ctx, f.ID, Owner{Subject: f.Owner.Subject}); err == nil {
		t.Error("another owner loaded the task")
	}
}
