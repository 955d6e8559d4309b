package main

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// chio up purges an A2A task from CHIO_TASKS once it has ended, its
// retention has passed and the projections have folded it, with the edge's
// own NATS role: tasks/get then answers TaskNotFound, while the
// projections still serve the task's history (the unit tests of
// taskstore.Expirer cover the tasks it must keep).
func TestUpExpiresEndedTasks(t *testing.T) {
	ctx := t.Context()
	up := startUp(t, "--task-retention", "1s")
	client := cardClient(t, up.httpURL)
	task := sendTask(t, client, "kept a second")
	if task.Status.State != a2apb.TaskStateCompleted {
		t.Fatalf("answer %#v, want a completed task", task)
	}
	id := string(task.ID)
	if _, err := client.GetTask(ctx, &a2apb.GetTaskRequest{ID: task.ID}); err != nil {
		t.Fatalf("tasks/get right after the answer: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := client.GetTask(ctx, &a2apb.GetTaskRequest{ID: task.ID})
		if errors.Is(err, a2apb.ErrTaskNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tasks/get %s long past its retention: %v", id, err)
		}
	}
	js, err := jetstream.New(dialUp(t, up.natsURL, up.dir, natsauth.Reader))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, schemas.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.GetLastMsgForSubject(ctx, schemas.TaskSubject(id)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("CHIO_TASKS still holds the task: %v, %v", m, err)
	}
	// Counted where operators look.
	if _, body := httpGet(t, up.httpURL+"/metrics"); !strings.Contains(string(body), "chio_a2a_tasks_expired_total 1") {
		t.Errorf("/metrics does not count the purge:\n%s", grepLines(string(body), "chio_a2a_tasks"))
	}
	// The projections folded it before it went, and keep it.
	if code, body := httpGetAs(t, up.token, up.httpURL+"/v1/tasks/"+id); code != http.StatusOK {
		t.Fatalf("/v1/tasks/%s after the purge: %d %.300s", id, code, body)
	}
}

// cardClient is an a2a-go client built from the agent card at base.
func cardClient(t *testing.T, base string) *a2aclient.Client {
	t.Helper()
	card, err := agentcard.DefaultResolver.Resolve(t.Context(), base)
	if err != nil {
		t.Fatal(err)
	}
	client, err := a2aclient.NewFromCard(t.Context(), card)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// sendTask sends text as a blocking message and returns the task answered.
func sendTask(t *testing.T, client *a2aclient.Client, text string) *a2apb.Task {
	t.Helper()
	res, err := client.SendMessage(t.Context(), &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(text))})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok {
		t.Fatalf("answer %T, want a task", res)
	}
	return task
}
