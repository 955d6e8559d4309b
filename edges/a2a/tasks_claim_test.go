package a2a

import (
	"context"
	"slices"
	"strings"
	"testing"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/nats-io/nats.go/jetstream"

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

// A blocking send makes two rounds of durable writes: the task's first
// commit (created, working, claimed) with the decision event, and its
// terminal commit with the outcome event (none for a denied call). Every
// stored fact is still there: the task reads back completed (or failed)
// with its receipt linked, from another replica.
func TestBlockingSendWritesTwoRounds(t *testing.T) {
	cl := startCluster(t, 2, "")
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		tok      string
		state    a2apb.TaskState
		outcomes int
	}{
		{"allowed", token(t, agentKey, "cap-rounds"), a2apb.TaskStateCompleted, 1},
		{"denied", "not-a-capability", a2apb.TaskStateFailed, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sdkClient(t, cl.edges[0].URL, tc.tok)
			res, err := c.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("world")), Metadata: helloTarget})
			if err != nil {
				t.Fatal(err)
			}
			task := res.(*a2apb.Task)
			rid, _ := chioMetaOf(t, task.Metadata)["receiptId"].(string)
			if task.Status.State != tc.state || rid == "" {
				t.Fatalf("state %s, receipt %q", task.Status.State, rid)
			}
			stream, err := cl.js.Stream(ctx, taskstore.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			info, err := stream.Info(ctx, jetstream.WithSubjectFilter(taskstore.Subject(string(task.ID))))
			if err != nil {
				t.Fatal(err)
			}
			if n := info.State.Subjects[taskstore.Subject(string(task.ID))]; n != 2 {
				t.Fatalf("%d commits for the task, want 2 (created+working+claimed, finished)", n)
			}
			if _, ok := decisionEvents(t, cl.js)[rid]; !ok {
				t.Fatalf("no decision event for %s", rid)
			}
			if _, ok := outcomeOf(t, cl.js, rid); ok != (tc.outcomes == 1) {
				t.Fatalf("outcome event present: %v, want %d", ok, tc.outcomes)
			}
			// Read back on the other replica, as the store serves it.
			other := cl.raw[1]
			got, err := other.tasks.Load(ctx, string(task.ID), other.sendOwner(caller{token: tc.tok}, ""))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.State) != strings.ToLower(strings.TrimPrefix(string(tc.state), "TASK_STATE_")) || !slices.Contains(got.ReceiptIDs, rid) {
				t.Fatalf("read back %s %v", got.State, got.ReceiptIDs)
			}
		})
	}
}
