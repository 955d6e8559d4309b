package a2a

import (
	"context"
	"testing"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// A send that will run now claims its task in the commit that makes it
// working (one synced write fewer per call); a deferred send leaves it
// unclaimed, and a native tool's task stays submitted and unclaimed.
func TestCreateClaimsInTheWorkingCommit(t *testing.T) {
	cl := startCluster(t, 1, "")
	e := cl.raw[0]
	owner := taskstore.Owner{Subject: "agent-under-test"}
	for _, tc := range []struct {
		name                string
		claim, native, held bool
		state               taskstore.State
	}{
		{"runs now", true, false, true, taskstore.StateWorking},
		{"deferred", false, false, false, taskstore.StateWorking},
		{"native", true, true, false, taskstore.StateSubmitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &wire.SendParams{Message: wire.Message{Role: wire.RoleUser, Parts: []wire.Part{wire.TextPart("hi")}}}
			task, held, err := e.createTask(context.Background(), owner, p, execRequest{Native: tc.native}, map[string]any{}, tc.claim)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := e.tasks.Load(context.Background(), task.ID, owner)
			if err != nil {
				t.Fatal(err)
			}
			if held != tc.held || (stored.ClaimedBy == e.cfg.EdgeID) != tc.held || stored.State != tc.state {
				t.Fatalf("held %v, stored claimed by %q in %s; want held %v in %s", held, stored.ClaimedBy, stored.State, tc.held, tc.state)
			}
		})
	}
}
