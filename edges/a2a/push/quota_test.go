package push

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestStoreOwnerQuota: an owner's configs over all its tasks are bounded,
// each task well within its own limit; other owners are unaffected,
// replacing is not adding, ending a task makes room, and concurrent Puts
// across many tasks never leave the owner over its limit.
func TestStoreOwnerQuota(t *testing.T) {
	e := newEnv(t, WithMaxConfigsPerOwner(3))
	ctx := t.Context()
	var first Config
	tasks := make([]string, 3)
	for i := range tasks {
		tasks[i] = newTaskID()
		c, err := e.store.Put(ctx, Config{TaskID: tasks[i], Owner: alice, URL: "https://h.example.com/"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = c
		}
	}
	_, err := e.store.Put(ctx, Config{TaskID: newTaskID(), Owner: alice, URL: "https://h.example.com/"})
	if !errors.Is(err, ErrOwnerQuota) || !strings.Contains(err.Error(), "holds 3 push configs (limit 3)") {
		t.Fatalf("fourth config of the owner: %v, want ErrOwnerQuota naming the count and limit", err)
	}
	if _, err := e.store.Put(ctx, Config{TaskID: tasks[0], Owner: bob, URL: "https://h.example.com/"}); err != nil {
		t.Fatalf("another owner: %v", err)
	}
	first.URL = "https://h.example.com/replaced"
	if _, err := e.store.Put(ctx, first); err != nil {
		t.Fatalf("replace at the owner's limit: %v", err)
	}
	if err := e.store.DeleteTask(ctx, tasks[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Put(ctx, Config{TaskID: newTaskID(), Owner: alice, URL: "https://h.example.com/"}); err != nil {
		t.Fatalf("after a task ended: %v", err)
	}

	const carol = "carol"
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := e.store.Put(ctx, Config{TaskID: newTaskID(), Owner: carol, URL: "https://h.example.com/"})
			if err != nil && !errors.Is(err, ErrOwnerQuota) && !errors.Is(err, ErrTooMany) {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	keys, err := e.store.keys(ctx, ownerFilter(carol))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 || len(keys) > 3 {
		t.Fatalf("concurrent puts left the owner %d configs, want 1..3", len(keys))
	}
}

func TestStoreOwnerQuotaOption(t *testing.T) {
	for _, n := range []int{0, -1, 1<<20 + 1} {
		if _, err := OpenStore(t.Context(), newEnv(t).js, WithMaxConfigsPerOwner(n)); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "WithMaxConfigsPerOwner") {
			t.Errorf("WithMaxConfigsPerOwner(%d): %v", n, err)
		}
	}
}
