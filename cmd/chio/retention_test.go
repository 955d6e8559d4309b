package main

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
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

// chio up with --event-retention purges CHIO_EVENTS of the events its
// ledger and projections have folded once they are older than the
// retention; the log goes on over the purged stream, and a rebuild from
// it is refused with the reason (the unit tests of the ledger cover what
// it must keep).
func TestUpPurgesFoldedEvents(t *testing.T) {
	ctx := t.Context()
	up := startUp(t, "--event-retention", "1s")
	client := cardClient(t, up.httpURL)
	for i := range 3 {
		sendTask(t, client, fmt.Sprint("purged ", i))
	}
	js, err := jetstream.New(dialUp(t, up.natsURL, up.dir, natsauth.Reader))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 && info.State.FirstSeq > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CHIO_EVENTS long past its retention: %+v", info.State)
		}
	}
	size := logSize(t, up.httpURL)
	if size < 3 {
		t.Fatalf("log size %d after 3 calls", size)
	}
	if _, body := httpGet(t, up.httpURL+"/metrics"); !strings.Contains(string(body), "chio_ledger_events_first_sequence") ||
		strings.Contains(string(body), "chio_ledger_events_purged_total 0\n") {
		t.Errorf("/metrics does not count the purge:\n%s", grepLines(string(body), "chio_ledger_events"))
	}
	sendTask(t, client, "after the purge")
	for deadline := time.Now().Add(30 * time.Second); logSize(t, up.httpURL) <= size; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no receipt for a call after the purge")
		}
	}
	_, err = chio(ctx, "ledger", "rebuild", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Reader), "--edge-issuer", filepath.Join(up.dir, "keys", issuerPubFile),
		"--data-dir", filepath.Join(t.TempDir(), "rebuilt"), "--keys", filepath.Join(up.dir, "keys"))
	if err == nil || !strings.Contains(err.Error(), "a log cannot be rebuilt from it") {
		t.Fatalf("rebuild from a purged stream: %v", err)
	}
}
