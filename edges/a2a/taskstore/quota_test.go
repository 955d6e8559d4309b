package taskstore

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAdmitOwnerQuota: a principal holding the maximum of live tasks is
// refused another (a clear error naming the count and the limit), over all
// its tenants; another principal is not; a task that ends makes room; and
// a second store on the same stream (another replica) counts the same
// tasks, so the quota holds across replicas.
func TestAdmitOwnerQuota(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	s := openStore(t, ns, WithMaxLiveTasksPerOwner(3))
	other := Owner{Subject: alice.Subject, Tenant: "globex"}
	var first *Task
	for i, o := range []Owner{alice, alice, other} {
		if err := s.AdmitOwner(ctx, o); err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		tk, err := s.Create(ctx, o, "", msg("hi"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = tk
		}
	}
	err := s.AdmitOwner(ctx, alice)
	if !errors.Is(err, ErrQuotaExceeded) || !strings.Contains(err.Error(), "principal alice-key holds 3 live tasks (limit 3)") {
		t.Fatalf("fourth task: %v, want ErrQuotaExceeded naming count and limit", err)
	}
	if err := s.AdmitOwner(ctx, bob); err != nil {
		t.Fatalf("another principal: %v", err)
	}
	replica := openStore(t, ns, WithMaxLiveTasksPerOwner(3))
	if err := replica.AdmitOwner(ctx, alice); !errors.Is(err, ErrQuotaExceeded) {
		t.Fatalf("the same principal on another replica: %v, want ErrQuotaExceeded", err)
	}
	if _, err := s.Cancel(ctx, first.ID, alice); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, replica} {
		waitFor(t, "a canceled task frees its slot", func() bool { return st.AdmitOwner(ctx, alice) == nil })
	}
}

// TestQuotaForgetsEndedTasks: tasks that end are not counted, however the
// store's own writes and its follow of the stream interleave. Tasks that
// end in their first commit (a tool that answered at once) and a late note
// of a commit the follow had already read once stayed counted for good,
// and a principal calling steadily was refused every new task after a
// thousand of them.
func TestQuotaForgetsEndedTasks(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	s := openStore(t, ns, WithMaxLiveTasksPerOwner(1))
	if err := s.AdmitOwner(ctx, alice); err != nil {
		t.Fatal(err)
	}
	idx, err := s.owners(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Many tasks at once, each ended in its first commit: the follow often
	// reads a commit before its writer has the ack.
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			if _, err := s.Start(ctx, NewTask{Owner: alice, Message: msg("done at once"), Then: []Event{FinishEvent(StateCompleted, msg("done"))}}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// A live task, created and ended before its writer's note of the
	// create arrives (the follow has read both): the late note must not
	// count it.
	live, err := s.Create(ctx, alice, "", msg("live"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended, err := s.Cancel(ctx, live.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follow to read the cancel", func() bool {
		idx.mu.Lock()
		defer idx.mu.Unlock()
		return idx.read >= ended.Seq
	})
	s.noteStarted(live, alice)
	if got := idx.count(alice.Subject); got != 0 {
		t.Fatalf("an ended task counted %d times after a late note", got)
	}
	if err := s.AdmitOwner(ctx, alice); err != nil {
		t.Fatalf("a principal holding no live task: %v", err)
	}
}

// TestStreamCaps: the stream refuses writes past its caps rather than
// dropping old commits (DiscardNew), and new tasks are refused at 90% of
// the commit cap while a task already accepted can still be written to
// its end; one task's commits are capped too, the last kept for its end.
func TestStreamCaps(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	s := openStore(t, ns, WithMaxStreamMsgs(100), WithMaxCommitsPerTask(16), WithBatchThreshold(0))
	info, err := s.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Config; c.MaxMsgs != 100 || c.MaxMsgsPerSubject != 16 || !c.DiscardNewPerSubject || c.Discard.String() != "DiscardNew" {
		t.Fatalf("stream config: max msgs %d, per subject %d, discard new per subject %v, discard %s", c.MaxMsgs, c.MaxMsgsPerSubject, c.DiscardNewPerSubject, c.Discard)
	}

	// One task: 15 commits, then only its end.
	long, err := s.Create(ctx, alice, "", msg("long"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 14 {
		if long, err = s.TransitionFrom(ctx, long, func(*Task) ([]Event, error) {
			return []Event{StatusEvent(StateWorking, nil)}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TransitionFrom(ctx, long, func(*Task) ([]Event, error) {
		return []Event{StatusEvent(StateWorking, nil)}, nil
	}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("16th commit that does not end the task: %v, want ErrTooLarge", err)
	}
	if long, err = s.TransitionFrom(ctx, long, func(*Task) ([]Event, error) {
		return []Event{FinishEvent(StateCompleted, nil)}, nil
	}); err != nil || long.State != StateCompleted {
		t.Fatalf("the task's end as its 16th commit: %v", err)
	}
	// Past its cap the server refuses the task's commit (a receipt link,
	// which a terminal task still takes) and keeps its first ones.
	if _, err := s.TransitionFrom(ctx, long, func(*Task) ([]Event, error) {
		return []Event{ReceiptEvent("01900000-0000-7000-8000-000000000001")}, nil
	}); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "per subject") {
		t.Fatalf("a 17th commit: %v, want the server's per-task refusal as ErrTooLarge", err)
	}

	// Fill the stream to 90 commits: then no new task is admitted.
	var open *Task
	for n := 16; n < 90; n++ {
		tk, err := s.Create(ctx, bob, "", msg("fill"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		open = tk
	}
	fresh := openStore(t, ns, WithMaxStreamMsgs(100), WithMaxCommitsPerTask(16))
	err = fresh.AdmitOwner(ctx, Owner{Subject: "carol"})
	if !errors.Is(err, ErrStoreFull) || !strings.Contains(err.Error(), "holds 90 commits") {
		t.Fatalf("admission at 90%% of the commit cap: %v, want ErrStoreFull", err)
	}
	// An accepted task still runs to its end in the headroom.
	for range 5 {
		if open, err = s.TransitionFrom(ctx, open, func(*Task) ([]Event, error) {
			return []Event{StatusEvent(StateWorking, nil)}, nil
		}); err != nil {
			t.Fatalf("an accepted task's update in the headroom: %v", err)
		}
	}
	if open, err = s.TransitionFrom(ctx, open, func(*Task) ([]Event, error) {
		return []Event{FinishEvent(StateCompleted, nil)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// At the hard cap the server refuses, and keeps every commit.
	for n := 96; n < 100; n++ {
		if _, err := s.Create(ctx, bob, "", msg("fill"), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, bob, "", msg("over"), nil, nil); !errors.Is(err, ErrStoreFull) {
		t.Fatalf("a write past the stream's cap: %v, want ErrStoreFull", err)
	}
	if got, err := s.Load(ctx, long.ID, alice); err != nil || got.State != StateCompleted || len(got.commitIDs) != 16 {
		t.Fatalf("the first task after the stream filled: %v", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
