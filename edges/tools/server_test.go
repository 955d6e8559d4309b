package tools

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestRunning(t *testing.T) {
	var r Running
	ctx := context.Background()

	runCtx, finish, err := r.Start(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Start(ctx, "a"); !errors.Is(err, ErrDuplicateInvocation) {
		t.Errorf("second Start(a) = %v, want ErrDuplicateInvocation", err)
	}
	if c, f, err := r.Start(ctx, ""); !errors.Is(err, ErrNoInvocationID) || c == nil || f == nil {
		t.Errorf("Start(\"\") = %v, %v, %v", c, f != nil, err)
	}
	if err := r.Cancel(ctx, "b"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Cancel(b) = %v, want ErrNotRunning", err)
	}
	if err := r.Cancel(ctx, "a"); err != nil {
		t.Fatalf("Cancel(a): %v", err)
	}
	<-runCtx.Done()
	if cause := context.Cause(runCtx); !errors.Is(cause, ErrCanceled) {
		t.Errorf("cause = %v, want ErrCanceled", cause)
	}
	if err := r.Cancel(ctx, "a"); err != nil {
		t.Errorf("repeated Cancel(a) while winding down = %v, want nil", err)
	}
	finish()
	finish() // idempotent
	if err := r.Cancel(ctx, "a"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Cancel after finish = %v, want ErrNotRunning", err)
	}
	if r.Len() != 0 {
		t.Errorf("Len = %d after finish", r.Len())
	}

	// The id is free again once finished, and a stale finish does not
	// unregister the new run.
	_, finish2, err := r.Start(ctx, "a")
	if err != nil {
		t.Fatalf("Start(a) after finish: %v", err)
	}
	finish()
	if r.Len() != 1 {
		t.Error("a stale finish removed the new run")
	}
	finish2()
}

func TestRunningParentCancel(t *testing.T) {
	var r Running
	parent, cancel := context.WithCancel(context.Background())
	runCtx, finish, err := r.Start(parent, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer finish()
	cancel()
	<-runCtx.Done()
	if cause := context.Cause(runCtx); !errors.Is(cause, context.Canceled) || errors.Is(cause, ErrCanceled) {
		t.Errorf("cause = %v, want the parent's context.Canceled", cause)
	}
}

func TestRunningConcurrent(t *testing.T) {
	var r Running
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprint(i)
			runCtx, finish, err := r.Start(ctx, id)
			if err != nil {
				t.Error(err)
				return
			}
			defer finish()
			if err := r.Cancel(ctx, id); err != nil {
				t.Error(err)
			}
			<-runCtx.Done()
		}()
	}
	wg.Wait()
	if r.Len() != 0 {
		t.Errorf("Len = %d", r.Len())
	}
}
