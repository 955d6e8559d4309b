package a2aadapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/natstest"
)

// callAs is call with the capability subject of the caller.
func callAs(a *Adapter, caller, tool, args string) tools.Invocation {
	inv := call(a, tool, args)
	inv.Governance = &tools.Governance{RequestID: inv.ID, ReceiptID: inv.ID, Subject: caller}
	return inv
}

// sendAs starts tool's task for caller, returning it (or the refusal): a
// slow task is answered at once, still working; the others once ended.
func sendAs(t *testing.T, a *Adapter, caller, tool string) (*a2a.Task, error) {
	t.Helper()
	args := `{"message":"hi"}`
	if tool == "slow" {
		args = `{"message":"hi","return_immediately":true}`
	}
	out, err := a.Invoke(t.Context(), callAs(a, caller, tool, args))
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return taskOf(t, m), nil
}

// slowTaskOn starts a partner, an adapter on reg and one slow task of
// alice's on it, still working; the task is let go at the test's end.
func slowTaskOn(t *testing.T, reg *TaskRegistry) (*partner, *Adapter, *a2a.Task) {
	t.Helper()
	p := startPartner(t, partnerOpts{})
	a := discover(t, p, Config{Tasks: reg})
	slow, err := sendAs(t, a, "alice", "slow")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.agent.release <- struct{}{} })
	return p, a, slow
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTaskQuota: a caller holding its maximum of live tasks on the
// partners is refused another send before the partner is asked, with the
// count and limit, on every replica of the registry; another caller is
// not; tasks that ended (at once, or cancelled) do not count.
func TestTaskQuota(t *testing.T) {
	_, _, js := natstest.Start(t)
	reg, err := OpenTaskRegistry(t.Context(), js, 1, WithMaxLiveTasks(2))
	if err != nil {
		t.Fatal(err)
	}
	p := startPartner(t, partnerOpts{})
	a := discover(t, p, Config{Tasks: reg})

	// Tasks that end in the partner's first answer never count.
	for i := range 10 {
		if task, err := sendAs(t, a, "alice", "echo"); err != nil || task.Status.State != a2a.TaskStateCompleted {
			t.Fatalf("echo %d: %v", i, err)
		}
	}
	var live []a2a.TaskID
	for i := range 2 {
		task, err := sendAs(t, a, "alice", "slow")
		if err != nil {
			t.Fatalf("slow %d: %v", i, err)
		}
		live = append(live, task.ID)
	}
	t.Cleanup(func() { // let the partner's waiting tasks end
		for range live {
			p.agent.release <- struct{}{}
		}
	})

	replica, err := OpenTaskRegistry(t.Context(), js, 1, WithMaxLiveTasks(2))
	if err != nil {
		t.Fatal(err)
	}
	other := discover(t, p, Config{Tasks: replica})
	for name, ad := range map[string]*Adapter{"this replica": a, "another replica": other} {
		var refused error
		waitUntil(t, name+" to count alice's 2 live tasks", func() bool {
			before := p.requests.Load()
			_, refused = sendAs(t, ad, "alice", "echo")
			if refused == nil {
				t.Fatalf("%s: a send past the quota reached the partner", name)
			}
			return p.requests.Load() == before
		})
		if !errors.Is(refused, ErrTaskQuota) || !strings.Contains(refused.Error(), "caller alice holds 2 live tasks on this adapter's partners (limit 2)") {
			t.Fatalf("%s: a third live task: %v, want ErrTaskQuota naming count and limit", name, refused)
		}
	}
	if _, err := sendAs(t, other, "bob", "echo"); err != nil {
		t.Fatalf("another caller: %v", err)
	}
	// Follow-ups of alice's tasks are not sends: they still go through.
	cancel := callAs(a, "alice", "slow", fmt.Sprintf(`{"cancel_task":{"id":%q}}`, live[0]))
	if _, err := a.Invoke(t.Context(), cancel); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	live = live[1:]
	for name, ad := range map[string]*Adapter{"this replica": a, "another replica": other} {
		waitUntil(t, name+" to see the cancelled task end", func() bool {
			_, err := sendAs(t, ad, "alice", "echo")
			return err == nil
		})
	}
}

// TestRegistryBounds: the bucket holds at most its cap of records, and
// new tasks are refused (before the partner is asked) at 90% of it while
// the tasks it holds still update; a reopen changes the bounds in place.
func TestRegistryBounds(t *testing.T) {
	_, _, js := natstest.Start(t)
	reg, err := OpenTaskRegistry(t.Context(), js, 1, WithMaxRecords(10), WithRecordTTL(time.Hour), WithMaxLiveTasks(0))
	if err != nil {
		t.Fatal(err)
	}
	checkStream := func(maxMsgs int64, maxAge time.Duration) {
		t.Helper()
		st, err := js.Stream(t.Context(), "KV_"+TaskBucket)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.CachedInfo().Config; c.MaxMsgs != maxMsgs || c.Discard.String() != "DiscardNew" || c.MaxAge != maxAge || c.MaxMsgsPerSubject != 1 {
			t.Fatalf("bucket stream: max msgs %d, discard %s, max age %s, per key %d; want %d, DiscardNew, %s, 1",
				c.MaxMsgs, c.Discard, c.MaxAge, c.MaxMsgsPerSubject, maxMsgs, maxAge)
		}
	}
	checkStream(10, time.Hour)

	p := startPartner(t, partnerOpts{})
	a := discover(t, p, Config{Tasks: reg})
	b := a.bindingOf(t.Context(), a.byTool["slow"])
	for i := range 10 {
		if err := reg.observe(t.Context(), TaskRecord{TaskID: fmt.Sprint("t", i), TaskBinding: b, State: string(a2a.TaskStateWorking)}); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	err = reg.observe(t.Context(), TaskRecord{TaskID: "one-more", TaskBinding: b, State: string(a2a.TaskStateWorking)})
	if !errors.Is(err, ErrRegistryFull) {
		t.Fatalf("a record past the cap: %v, want ErrRegistryFull", err)
	}
	if err := reg.observe(t.Context(), TaskRecord{TaskID: "t0", TaskBinding: b, State: string(a2a.TaskStateCompleted)}); err != nil {
		t.Fatalf("a recorded task's update at the cap: %v", err)
	}
	var refused error
	waitUntil(t, "new tasks to be refused at the cap", func() bool {
		before := p.requests.Load()
		_, refused = sendAs(t, a, "", "echo")
		return refused != nil && p.requests.Load() == before
	})
	if !errors.Is(refused, ErrRegistryFull) || !strings.Contains(refused.Error(), "the registry holds 10 records, 90% of its cap of 10 is for new tasks; records expire 1h0m0s after a task was last seen") {
		t.Fatalf("a new task at the cap: %v, want ErrRegistryFull with the count and cap", refused)
	}

	// Reopened with other bounds (another release, another operator):
	// changed in place, the records kept.
	if _, err := OpenTaskRegistry(t.Context(), js, 1, WithMaxRecords(20), WithRecordTTL(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkStream(20, 2*time.Hour)
	if _, err := reg.Lookup(t.Context(), a.ServerID(), "t9"); err != nil {
		t.Fatalf("a record after the reopen: %v", err)
	}
}

// TestRecordTTL: a record expires its TTL after the task was last seen,
// and a follow-up after that is refused as for a task never seen; seeing
// the task again, unchanged, past half its TTL keeps its record.
func TestRecordTTL(t *testing.T) {
	_, _, js := natstest.Start(t)
	const ttl = 5 * time.Second
	reg, err := OpenTaskRegistry(t.Context(), js, 1, WithRecordTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	_, a, slow := slowTaskOn(t, reg)
	get := callAs(a, "alice", "slow", fmt.Sprintf(`{"get_task":{"id":%q}}`, slow.ID))
	if _, err := a.Invoke(t.Context(), get); err != nil { // source: get_task
		t.Fatal(err)
	}
	first, err := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID))
	if err != nil {
		t.Fatal(err)
	}
	// The partner moves its slow task on by itself (submitted, then
	// working): an observation of a new state is written, so the check is
	// of the first observation that repeats the one before.
	for attempt := 0; ; attempt++ {
		if _, err := a.Invoke(t.Context(), get); err != nil {
			t.Fatal(err)
		}
		again, _ := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID))
		if again.State != first.State && attempt < 3 {
			first = again
			continue
		}
		if !again.Updated.Equal(first.Updated) {
			t.Fatal("the same observation again, early in the TTL, was written")
		}
		break
	}
	time.Sleep(ttl/2 + 100*time.Millisecond)
	if _, err := a.Invoke(t.Context(), get); err != nil {
		t.Fatal(err)
	}
	renewed, _ := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID))
	if !renewed.Updated.After(first.Updated) {
		t.Fatal("a task seen past half its record's TTL did not renew the record")
	}
	time.Sleep(ttl / 2) // past the first write's TTL, well within the renewal's
	if _, err := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID)); err != nil {
		t.Fatalf("the renewed record: %v", err)
	}
	waitUntil(t, "the record to expire", func() bool {
		_, err := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID))
		return errors.Is(err, ErrTaskNotRecorded)
	})
	if _, err := a.Invoke(t.Context(), get); !errors.Is(err, ErrFollowUpRefused) {
		t.Fatalf("a follow-up of an expired record: %v, want ErrFollowUpRefused", err)
	}
}

// TestLiveIndexExpiry: a task not known to have ended stops counting when
// the bucket's TTL removes its record, though the watch sees no mark of
// the removal, or once the live window since it was last recorded is past,
// though its record stays (its caller may never look at it again).
func TestLiveIndexExpiry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []RegistryOption
		removed bool
	}{
		{"record expired", []RegistryOption{WithRecordTTL(3 * time.Second)}, true},
		{"live window past", []RegistryOption{WithRecordTTL(time.Hour), WithLiveWindow(5 * time.Second)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, js := natstest.Start(t)
			reg, err := OpenTaskRegistry(t.Context(), js, 1, append(tc.opts, WithMaxLiveTasks(1))...)
			if err != nil {
				t.Fatal(err)
			}
			_, a, slow := slowTaskOn(t, reg)
			waitUntil(t, "the live task to be counted", func() bool {
				_, err := sendAs(t, a, "alice", "echo")
				return errors.Is(err, ErrTaskQuota)
			})
			waitUntil(t, "the task to stop counting", func() bool {
				_, err := sendAs(t, a, "alice", "echo")
				return err == nil
			})
			if tc.removed {
				waitUntil(t, "the record to be removed", func() bool {
					_, err := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID))
					return errors.Is(err, ErrTaskNotRecorded)
				})
			} else if _, err := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID)); err != nil {
				t.Fatalf("the record, within its TTL: %v", err)
			}
		})
	}
}
