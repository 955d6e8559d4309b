package a2aadapter

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
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

// TestRegistryBounds: the bucket keeps a record for its TTL after the
// task's last observation and holds at most its cap of records, refusing
// new tasks (before the partner is asked) at 90% of it while the tasks it
// holds still update.
func TestRegistryBounds(t *testing.T) {
	_, _, js := natstest.Start(t)
	reg, err := OpenTaskRegistry(t.Context(), js, 1, WithMaxRecords(10), WithRecordTTL(2*time.Second), WithMaxLiveTasks(0))
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(t.Context(), "KV_"+TaskBucket)
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.MaxMsgs != 10 || c.Discard.String() != "DiscardNew" || c.MaxAge != 2*time.Second {
		t.Fatalf("bucket stream: max msgs %d, discard %s, max age %s", c.MaxMsgs, c.Discard, c.MaxAge)
	}
	p := startPartner(t, partnerOpts{})
	a := discover(t, p, Config{Tasks: reg})

	slow, err := sendAs(t, a, "alice", "slow")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := sendAs(t, a, "alice", "echo"); err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
	}
	var refused error
	waitUntil(t, "the registry to refuse new tasks at 9 of 10 records", func() bool {
		before := p.requests.Load()
		_, refused = sendAs(t, a, "alice", "echo")
		return refused != nil && p.requests.Load() == before
	})
	if !errors.Is(refused, ErrRegistryFull) || !regexp.MustCompile(`the registry holds (9|10) records, 90% of its cap of 10 is for new tasks`).MatchString(refused.Error()) {
		t.Fatalf("a new task at the cap: %v, want ErrRegistryFull with the count and cap", refused)
	}
	// A task already recorded still updates.
	p.agent.release <- struct{}{}
	get := callAs(a, "alice", "slow", fmt.Sprintf(`{"get_task":{"id":%q}}`, slow.ID))
	waitUntil(t, "the slow task's end to be recorded", func() bool {
		_, err := a.Invoke(t.Context(), get)
		rec, lerr := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID))
		return err == nil && lerr == nil && a2a.TaskState(rec.State) == a2a.TaskStateCompleted
	})
	// Records expire: the slow task is forgotten, and room is made.
	waitUntil(t, "the records to expire", func() bool {
		_, err := reg.Lookup(t.Context(), a.ServerID(), string(slow.ID))
		return errors.Is(err, ErrTaskNotRecorded)
	})
	if _, err := a.Invoke(t.Context(), get); !errors.Is(err, ErrFollowUpRefused) {
		t.Fatalf("a follow-up of an expired record: %v, want ErrFollowUpRefused", err)
	}
	waitUntil(t, "a new task to be admitted", func() bool {
		_, err := sendAs(t, a, "alice", "echo")
		return err == nil
	})
}

// TestLiveIndexExpiry: a live task the bucket's TTL removed stops
// counting, though the watch sees no mark of its removal.
func TestLiveIndexExpiry(t *testing.T) {
	_, _, js := natstest.Start(t)
	reg, err := OpenTaskRegistry(t.Context(), js, 1, WithMaxLiveTasks(1), WithRecordTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p := startPartner(t, partnerOpts{})
	a := discover(t, p, Config{Tasks: reg})
	if _, err := sendAs(t, a, "alice", "slow"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.agent.release <- struct{}{} })
	waitUntil(t, "the live task to be counted", func() bool {
		_, err := sendAs(t, a, "alice", "echo")
		return errors.Is(err, ErrTaskQuota)
	})
	waitUntil(t, "the expired task to stop counting", func() bool {
		_, err := sendAs(t, a, "alice", "echo")
		return err == nil
	})
}
