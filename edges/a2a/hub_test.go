package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/internal/natstest"
)

// Readers of one feed: a reader that never reads holds up nobody, every
// reader sees every event from the first, another owner gets not-found,
// and the last reader leaving stops the watch and forgets the feed.
func TestHubFeed(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	store, err := taskstore.Open(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	h := newHub(store)
	alice := taskstore.Owner{Subject: "alice"}
	task, err := store.Create(ctx, alice, "", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.watch(ctx, task.ID, taskstore.Owner{Subject: "mallory"}); !errors.Is(err, taskstore.ErrNotFound) {
		t.Fatalf("another owner: %v", err)
	}
	stuckCtx, unstick := context.WithCancel(ctx)
	if _, err := h.watch(stuckCtx, task.ID, alice); err != nil { // never read
		t.Fatal(err)
	}
	reader, err := h.watch(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100 // more than any channel buffer
	for i := range n {
		if _, err := store.Transition(ctx, task.ID, alice, func(*taskstore.Task) ([]taskstore.Event, error) {
			return []taskstore.Event{taskstore.MessageEvent(json.RawMessage(`{"i":` + string(rune('0'+i%10)) + `}`))}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Transition(ctx, task.ID, alice, func(*taskstore.Task) ([]taskstore.Event, error) {
		return []taskstore.Event{taskstore.FinishEvent(taskstore.StateCompleted, nil)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	got := 0
	timeout := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case _, ok := <-reader:
			if !ok {
				done = true
				break
			}
			got++
		case <-timeout:
			t.Fatalf("the reader saw %d events and stalled", got)
		}
	}
	if got != n+2 { // created, the messages, finished
		t.Fatalf("%d events, want %d", got, n+2)
	}
	unstick()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h.mu.Lock()
		left := len(h.feeds)
		h.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d feeds left after every reader went", left)
		}
	}
}
