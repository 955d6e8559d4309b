package schemas

import (
	"encoding/json"
	"testing"
)

// TestTaskGeneration checks the generation rule: 1 at creation, +1 per
// status, artifact (A2A artifacts only), cancel and finish, nothing for
// the events that ride along, nothing for refused events.
func TestTaskGeneration(t *testing.T) {
	f := TaskFoldFixture()
	var h TaskHead
	var want int64
	for _, c := range f.Commits {
		for i := range c.Events {
			e := c.Events[i]
			before := h
			eff, err := h.Apply(&e)
			if err != nil {
				if h.Generation != before.Generation {
					t.Fatalf("refused %s changed the generation", e.Type)
				}
				continue
			}
			counts := false
			switch e.Type {
			case TaskEventCreated:
				want, counts = 1, true
			case TaskEventStatus, TaskEventCanceled, TaskEventFinished:
				want, counts = want+1, true
			case TaskEventArtifact:
				if _, _, ok := decodeTaskArtifact(e.Artifact); ok {
					want, counts = want+1, true
				}
			}
			if h.Generation != want || eff.Mutation != counts {
				t.Fatalf("%s: generation %d mutation %v, want %d %v", e.Type, h.Generation, eff.Mutation, want, counts)
			}
			if e.Mutates() != eff.Mutation {
				t.Fatalf("%s: Mutates %v, Apply's mutation %v", e.Type, e.Mutates(), eff.Mutation)
			}
		}
	}
	if want < 5 {
		t.Fatalf("the fixture counted only %d generations", want)
	}

	// A progress status that keeps the state is a mutation too; a second
	// metadata or receipt is not.
	owner := TaskOwner{Subject: "s"}
	h = TaskHead{}
	for _, e := range []TaskEvent{
		{Type: TaskEventCreated, Owner: &owner, ContextID: "c"},
		{Type: TaskEventStatus, State: TaskWorking},
		{Type: TaskEventStatus, State: TaskWorking},
		{Type: TaskEventMetadata, Metadata: json.RawMessage(`{}`)},
		{Type: TaskEventArtifact, Artifact: json.RawMessage(`"not an artifact"`)},
		{Type: TaskEventArtifact, Artifact: json.RawMessage(`{"artifactId":"a","parts":[]}`)},
		{Type: TaskEventFinished, State: TaskCompleted},
		{Type: TaskEventReceipt, ReceiptID: "r"},
	} {
		eff, err := h.Apply(&e)
		if err != nil {
			t.Fatal(err)
		}
		if e.Mutates() != eff.Mutation {
			t.Fatalf("%s: Mutates %v, Apply's mutation %v", e.Type, e.Mutates(), eff.Mutation)
		}
	}
	if h.Generation != 5 {
		t.Fatalf("generation %d, want 5", h.Generation)
	}
}
