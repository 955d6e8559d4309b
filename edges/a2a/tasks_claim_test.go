package a2a

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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
			task, held, err := e.createTask(context.Background(), owner, p, execRequest{Native: tc.native}, map[string]any{}, tc.claim, nil)
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

// A blocking send makes two rounds of durable writes: its decision event,
// which names the task, this replica and the execution (the durable
// record of the task's acceptance); then its outcome event with the task,
// written once with its result (no outcome for a denied call). The task
// reads back completed (or failed) with its receipt, from another replica.
func TestBlockingSendWritesTwoRounds(t *testing.T) {
	cl := startCluster(t, 2, "")
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		tok      string
		meta     map[string]any
		state    a2apb.TaskState
		outcomes int
	}{
		{"allowed", token(t, agentKey, "cap-rounds"), helloTarget, a2apb.TaskStateCompleted, 1},
		// A governed intent naming another server: the kernel denies the
		// call, which fails its task (a refused capability is a 401 instead).
		{"denied", token(t, agentKey, "cap-rounds"), map[string]any{"chio": map[string]any{"targetSkillId": "hello_task",
			"governedIntent": map[string]any{"id": "gi-1", "server_id": "other-srv", "tool_name": "hello_task", "purpose": "a mismatch"}}},
			a2apb.TaskStateFailed, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sdkClient(t, cl.edges[0].URL, tc.tok)
			res, err := c.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("world")), Metadata: tc.meta})
			if err != nil {
				t.Fatal(err)
			}
			task := res.(*a2apb.Task)
			rid, _ := chioMetaOf(t, task.Metadata)["receiptId"].(string)
			if task.Status.State != tc.state || rid == "" {
				t.Fatalf("state %s, receipt %q", task.Status.State, rid)
			}
			if n := commits(t, cl, string(task.ID)); n != 1 {
				t.Fatalf("%d commits for the task, want 1 (created, working, claimed, receipt, result, finished)", n)
			}
			dec, ok := decisionEvents(t, cl.js)[rid]
			if !ok || dec.TaskID != string(task.ID) || dec.EdgeID == "" {
				t.Fatalf("decision event of %s: %+v", rid, dec)
			}
			if _, ok := outcomeOf(t, cl.js, rid); ok != (tc.outcomes == 1) {
				t.Fatalf("outcome event present: %v, want %d", ok, tc.outcomes)
			}
			// Read back on the other replica, as the store serves it.
			other := cl.raw[1]
			owner, werr := other.owner(context.Background(), caller{token: tc.tok}, "")
			if werr != nil {
				t.Fatal(werr)
			}
			got, err := other.tasks.Load(ctx, string(task.ID), owner)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.State) != strings.ToLower(strings.TrimPrefix(string(tc.state), "TASK_STATE_")) || !slices.Contains(got.ReceiptIDs, rid) ||
				got.ExecutionID != rid || got.ClaimedBy != "" {
				t.Fatalf("read back %s, receipts %v, execution %s, claimed by %q", got.State, got.ReceiptIDs, got.ExecutionID, got.ClaimedBy)
			}
		})
	}
}

// commits counts a task's commits on the task stream.
func commits(t *testing.T, cl *cluster, id string) uint64 {
	t.Helper()
	stream, err := cl.js.Stream(context.Background(), taskstore.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(taskstore.Subject(id)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[taskstore.Subject(id)]
}

// A blocking send whose tool outlasts storeRunningAfter is stored while it
// runs, claimed by its replica: another replica lists it as working, and a
// cancel there stops the tool; the call then answers with the canceled
// task, its receipt linked.
func TestLongBlockingSendIsStoredWhileItRuns(t *testing.T) {
	cl := startCluster(t, 2, "")
	ctx := context.Background()
	tok := token(t, agentKey, "cap-long")
	type answer struct {
		m   map[string]any
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				answered <- answer{err: fmt.Errorf("%v", r)}
			}
		}()
		answered <- answer{m: rpc(t, cl.edges[0].URL, tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"long-1","parts":[{"text":"x"}]},"metadata":{"chio":{"targetSkillId":"slow_task"}}}}`)}
	}()
	select {
	case <-cl.slow.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the tool never started")
	}
	other := cl.raw[1]
	owner, werr := other.owner(context.Background(), caller{token: tok}, "")
	if werr != nil {
		t.Fatal(werr)
	}
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(10 * time.Millisecond) {
		tasks, _, _, err := other.tasks.List(ctx, owner, taskstore.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range tasks {
			if tk.State == taskstore.StateWorking && tk.ClaimedBy == cl.raw[0].cfg.EdgeID {
				id = tk.ID
			}
		}
		if id == "" && time.Now().After(deadline) {
			t.Fatal("the running task was never listed")
		}
	}
	cancelRunning(t, cl, cl.edges[1].URL, tok, id)
	var a answer
	select {
	case a = <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking call never answered")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	task := a.m["result"].(map[string]any)["task"].(map[string]any)
	chio := task["metadata"].(map[string]any)["chio"].(map[string]any)
	if task["id"] != id || task["status"].(map[string]any)["state"] != "TASK_STATE_CANCELED" || !hasReceipts(chio) {
		t.Fatalf("answer: %v", a.m)
	}
	if n := commits(t, cl, id); n < 3 {
		t.Fatalf("%d commits, want the running task's, the cancel and the receipt link", n)
	}
}

// A blocking send's early store that landed although its answer was lost
// does not make the result unwritable: the result commits onto it.
func TestPendingTaskCommitsOntoAnUnseenEarlyStore(t *testing.T) {
	cl := startCluster(t, 1, "")
	e := cl.raw[0]
	ctx := context.Background()
	owner := taskstore.Owner{Subject: "agent-under-test"}
	p := &wire.SendParams{Message: wire.Message{Role: wire.RoleUser, Parts: []wire.Part{wire.TextPart("hi")}}}
	nt, err := e.newTask(owner, p, execRequest{ServerID: "hello-a2a-srv", ToolName: "hello_task", Mode: modeBlocking}, map[string]any{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.tasks.Start(ctx, nt); err != nil { // landed; the run never heard
		t.Fatal(err)
	}
	pt := &pendingTask{e: e, nt: nt}
	done, err := pt.commit(ctx, nil, func(cur *taskstore.Task) ([]taskstore.Event, error) {
		return []taskstore.Event{taskstore.FinishEvent(taskstore.StateCompleted, nil)}, nil
	})
	if err != nil || done.State != taskstore.StateCompleted || done.ExecutionID == "" {
		t.Fatalf("result after an unseen early store: %v, %+v", err, done)
	}
	if n := commits(t, cl, nt.ID); n != 2 {
		t.Fatalf("%d commits, want the early store and the result", n)
	}
}
