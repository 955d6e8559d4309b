package taskstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
)

// server is an embedded NATS server with its store directory, so a test
// can restart it on the same data.
type server struct {
	*natsembed.Server
	dir string
}

func startNATS(t testing.TB) *server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nats")
	ns, err := natsembed.Start(natsembed.Config{StoreDir: dir, DontListen: true, SyncInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	return &server{Server: ns, dir: dir}
}

func openStore(t testing.TB, ns *server, opts ...Option) *Store {
	t.Helper()
	_, js := natstest.Connect(t, ns.Server)
	s, err := Open(t.Context(), js, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clock is a settable clock, safe for concurrent use.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var (
	alice = Owner{Subject: "alice-key", Tenant: "acme"}
	bob   = Owner{Subject: "bob-key", Tenant: "acme"}
)

func msg(text string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"role":"user","parts":[{"text":%q}]}`, text))
}

func TestCreateLoadFold(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	s := openStore(t, startNATS(t), WithClock(clk.Now))

	created, err := s.Create(ctx, alice, "", msg("hi"), json.RawMessage(`{"tool":"echo"}`), json.RawMessage(`{"k":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if !validID(created.ID) || created.ContextID == "" || created.State != StateSubmitted || created.Seq == 0 {
		t.Fatalf("created = %+v", created)
	}
	if v := created.ID[14]; v != '7' {
		t.Fatalf("id %s is not a UUIDv7", created.ID)
	}
	clk.Advance(time.Second)
	if _, err := s.Transition(ctx, created.ID, alice, func(t *Task) ([]Event, error) {
		return []Event{StatusEvent(StateWorking, msg("on it")), MessageEvent(msg("more")), ArtifactEvent(json.RawMessage(`{"artifactId":"a1"}`))}, nil
	}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	done, err := complete(ctx, s, created.ID, alice, StateCompleted, msg("done"), []json.RawMessage{json.RawMessage(`{"artifactId":"a2"}`)}, []string{"r1", "r2", "r1"})
	if err != nil {
		t.Fatal(err)
	}

	got, err := s.Load(ctx, created.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"state", got.State, StateCompleted},
		{"context", got.ContextID, created.ContextID},
		{"owner", got.Owner, alice},
		{"status message", string(got.StatusMessage), string(msg("done"))},
		{"status time", got.StatusTime, clk.Now()},
		{"created", got.Created, clk.Now().Add(-2 * time.Second)},
		{"history", len(got.History), 2},
		{"first message", string(got.History[0]), string(msg("hi"))},
		{"artifacts", len(got.Artifacts), 2},
		{"last artifact", string(got.Artifacts[1].Data), `{"artifactId":"a2"}`},
		{"receipts", strings.Join(got.ReceiptIDs, ","), "r1,r2"},
		{"request", string(got.Request), `{"tool":"echo"}`},
		{"metadata", string(got.Metadata), `{"k":1}`},
		{"seq", got.Seq, done.Seq},
		{"commits", got.Seq, created.Seq + 2},
	} {
		if fmt.Sprint(tt.got) != fmt.Sprint(tt.want) {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}

	// A caller-chosen context id is kept.
	withCtx, err := s.Create(ctx, alice, "ctx-1", nil, nil, nil)
	if err != nil || withCtx.ContextID != "ctx-1" {
		t.Fatalf("create with context id: %+v, %v", withCtx, err)
	}
}

func TestNotFoundNeverRevealsOtherOwners(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t))
	task, err := s.Create(ctx, alice, "", msg("secret"), json.RawMessage(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	missing := "0190a2b4-0000-7000-8000-000000000000"
	for _, tt := range []struct {
		name  string
		id    string
		owner Owner
	}{
		{"other subject", task.ID, bob},
		{"other tenant", task.ID, Owner{Subject: alice.Subject, Tenant: "other"}},
		{"no tenant", task.ID, Owner{Subject: alice.Subject}},
		{"missing task", missing, alice},
		{"uppercase id", strings.ToUpper(task.ID), alice},
		{"wildcard", "*", alice},
		{"subject tokens", task.ID + ".x", alice},
		{"empty", "", alice},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ops := map[string]func() error{
				"load": func() error { _, err := s.Load(ctx, tt.id, tt.owner); return err },
				"cancel": func() error {
					_, err := s.Cancel(ctx, tt.id, tt.owner)
					return err
				},
				"claim": func() error {
					_, _, err := s.Claim(ctx, tt.id, tt.owner, "r1", time.Minute)
					return err
				},
				"complete": func() error {
					_, err := complete(ctx, s, tt.id, tt.owner, StateCompleted, nil, nil, nil)
					return err
				},
				"watch": func() error { _, err := s.Watch(ctx, tt.id, tt.owner); return err },
			}
			for op, f := range ops {
				if err := f(); !errors.Is(err, ErrNotFound) {
					t.Errorf("%s: err = %v, want ErrNotFound", op, err)
				}
			}
		})
	}
	got, err := s.Load(ctx, task.ID, alice)
	if err != nil || got.State != StateSubmitted || got.Seq != task.Seq {
		t.Fatalf("owner's task changed: %+v, %v", got, err)
	}
	if tasks, _, total, err := s.List(ctx, bob, ListFilter{}); err != nil || total != 0 || len(tasks) != 0 {
		t.Fatalf("bob lists %d (%d) tasks, %v", len(tasks), total, err)
	}
}

func TestTwoReplicas(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	a, b := openStore(t, ns), openStore(t, ns)
	task, err := a.Create(ctx, alice, "", msg("hello"), json.RawMessage(`{"x":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Load(ctx, task.ID, alice)
	if err != nil || got.ContextID != task.ContextID || string(got.History[0]) != string(msg("hello")) {
		t.Fatalf("load on B: %+v, %v", got, err)
	}
	canceled, err := b.Cancel(ctx, task.ID, alice)
	if err != nil || canceled.State != StateCanceled {
		t.Fatalf("cancel on B: %+v, %v", canceled, err)
	}
	got, err = a.Load(ctx, task.ID, alice)
	if err != nil || got.State != StateCanceled {
		t.Fatalf("load on A after cancel: %+v, %v", got, err)
	}
}

func TestConcurrentClaimHasOneWinner(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	stores := []*Store{openStore(t, ns), openStore(t, ns)}
	const tasks, perStore = 5, 16
	for range tasks {
		task, err := stores[0].Create(ctx, alice, "", msg("go"), json.RawMessage(`{"deferred":true}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		var (
			wg      sync.WaitGroup
			winners atomic.Int32
			mu      sync.Mutex
			winner  string
		)
		start := make(chan struct{})
		for si, s := range stores {
			for g := range perStore {
				replica := fmt.Sprintf("replica-%d-%d", si, g)
				wg.Go(func() {
					<-start
					got, won, err := s.Claim(ctx, task.ID, alice, replica, time.Minute)
					if err != nil {
						t.Errorf("%s: %v", replica, err)
						return
					}
					if won {
						winners.Add(1)
						mu.Lock()
						winner = replica
						mu.Unlock()
						if got.ClaimedBy != replica {
							t.Errorf("winner %s sees claim by %s", replica, got.ClaimedBy)
						}
					} else if got.ClaimedBy == replica {
						t.Errorf("loser %s holds the claim", replica)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		if n := winners.Load(); n != 1 {
			t.Fatalf("%d winners, want 1", n)
		}
		got, err := stores[1].Load(ctx, task.ID, alice)
		if err != nil || got.ClaimedBy != winner || got.Attempt != 1 || got.ExecutionID == "" || got.Seq != task.Seq+1 {
			t.Fatalf("after claims: %+v, %v (winner %s)", got, err, winner)
		}
	}
}

func TestLeaseExpiryAndTakeover(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	clk := newClock()
	a, b := openStore(t, ns, WithClock(clk.Now)), openStore(t, ns, WithClock(clk.Now))
	task, err := a.Create(ctx, alice, "", msg("go"), json.RawMessage(`{"deferred":true}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	step := func(s *Store, replica string, wantWon bool, wantAttempt int) *Task {
		t.Helper()
		got, won, err := s.Claim(ctx, task.ID, alice, replica, time.Minute)
		if err != nil || won != wantWon || got.Attempt != wantAttempt {
			t.Fatalf("claim by %s: won=%v attempt=%d err=%v, want won=%v attempt=%d", replica, won, got.Attempt, err, wantWon, wantAttempt)
		}
		return got
	}
	first := step(a, "r1", true, 1)
	step(b, "r2", false, 1)
	clk.Advance(30 * time.Second)
	step(a, "r1", true, 1) // renewal keeps the attempt
	clk.Advance(61 * time.Second)
	if refs, err := b.Claimable(ctx, time.Hour); err != nil || len(refs) != 1 || refs[0].ID != task.ID || refs[0].Owner != alice {
		t.Fatalf("claimable = %+v, %v", refs, err)
	}
	taken := step(b, "r2", true, 2)
	if taken.ExecutionID != first.ExecutionID {
		t.Fatalf("execution id changed on takeover: %s -> %s", first.ExecutionID, taken.ExecutionID)
	}
	step(a, "r1", false, 2)
	if refs, err := b.Claimable(ctx, 0); err != nil || len(refs) != 0 {
		t.Fatalf("claimable while leased = %+v, %v", refs, err)
	}

	// A released lease may be claimed again at once; a new request
	// starts a new execution.
	if _, err := b.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
		return []Event{ReleaseEvent("r2")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	step(a, "r1", true, 3)
	next, err := a.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
		return []Event{MessageEvent(msg("again")), RequestEvent(json.RawMessage(`{"turn":2}`))}, nil
	})
	if err != nil || next.ClaimedBy != "" || next.ExecutionID != "" {
		t.Fatalf("new request: %+v, %v", next, err)
	}
	if got := step(b, "r2", true, 1); got.ExecutionID == first.ExecutionID {
		t.Fatal("new request kept the old execution id")
	}

	// Terminal and interrupted tasks cannot be claimed.
	if _, err := a.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
		return []Event{StatusEvent(StateInputRequired, msg("need more"))}, nil
	}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	step(a, "r1", false, 1)
	if _, _, err := a.Claim(ctx, task.ID, alice, "", time.Minute); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("claim without replica: %v", err)
	}
}

func TestCancelWinsOverCompletion(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	a, b := openStore(t, ns), openStore(t, ns)

	t.Run("cancel then complete", func(t *testing.T) {
		task, err := a.Create(ctx, alice, "", msg("go"), json.RawMessage(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		canceled, err := b.Cancel(ctx, task.ID, alice)
		if err != nil {
			t.Fatal(err)
		}
		got, err := complete(ctx, a, task.ID, alice, StateCompleted, msg("result"), []json.RawMessage{json.RawMessage(`{"artifactId":"x"}`)}, []string{"r1"})
		if !errors.Is(err, ErrAlreadyTerminal) || got == nil || got.State != StateCanceled {
			t.Fatalf("complete after cancel: %+v, %v", got, err)
		}
		after, err := a.Load(ctx, task.ID, alice)
		if err != nil || after.State != StateCanceled || after.Seq != canceled.Seq || len(after.Artifacts) != 0 || len(after.ReceiptIDs) != 0 {
			t.Fatalf("after refused completion: %+v, %v", after, err)
		}
	})

	t.Run("cancel lands mid-flight", func(t *testing.T) {
		task, err := a.Create(ctx, alice, "", msg("go"), json.RawMessage(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		// The completing replica decided on a working task; the cancel
		// lands on the other replica before its append.
		_, err = a.Transition(ctx, task.ID, alice, func(tk *Task) ([]Event, error) {
			calls++
			if calls == 1 {
				if _, err := b.Cancel(ctx, task.ID, alice); err != nil {
					return nil, err
				}
			}
			return []Event{ArtifactEvent(json.RawMessage(`{"artifactId":"late"}`)), FinishEvent(StateCompleted, msg("late"))}, nil
		})
		if !errors.Is(err, ErrAlreadyTerminal) || calls != 2 {
			t.Fatalf("completion racing a cancel: calls=%d err=%v", calls, err)
		}
		got, err := b.Load(ctx, task.ID, alice)
		if err != nil || got.State != StateCanceled || len(got.Artifacts) != 0 {
			t.Fatalf("after race: %+v, %v", got, err)
		}
	})
}

func TestCancelTerminal(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t))
	for _, final := range []State{StateCompleted, StateFailed, StateRejected, StateCanceled} {
		t.Run(string(final), func(t *testing.T) {
			task, err := s.Create(ctx, alice, "", msg("go"), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if final == StateCanceled {
				_, err = s.Cancel(ctx, task.ID, alice)
			} else {
				_, err = complete(ctx, s, task.ID, alice, final, nil, nil, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Cancel(ctx, task.ID, alice)
			if !errors.Is(err, ErrNotCancelable) || got == nil || got.State != final {
				t.Fatalf("cancel on %s: %+v, %v", final, got, err)
			}
			// A receipt may still be linked to a terminal task.
			linked, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
				return []Event{ReceiptEvent("late-receipt")}, nil
			})
			if err != nil || linked.State != final || !slices.Contains(linked.ReceiptIDs, "late-receipt") {
				t.Fatalf("receipt after %s: %+v, %v", final, linked, err)
			}
		})
	}
}

func TestRefusedEventsWriteNothing(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t))
	task, err := s.Create(ctx, alice, "", msg("go"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name   string
		events []Event
		want   error
	}{
		{"terminal status", []Event{StatusEvent(StateCompleted, nil)}, ErrInvalidEvent},
		{"unknown state", []Event{StatusEvent("paused", nil)}, ErrInvalidEvent},
		{"finish as working", []Event{FinishEvent(StateWorking, nil)}, ErrInvalidEvent},
		{"second created", []Event{{Type: EventCreated, Owner: &alice, ContextID: "c"}}, ErrInvalidEvent},
		{"empty message", []Event{MessageEvent(nil)}, ErrInvalidEvent},
		{"bad json", []Event{MessageEvent(json.RawMessage(`{"a":`))}, ErrInvalidEvent},
		{"release unheld", []Event{ReleaseEvent("r9")}, ErrInvalidEvent},
		{"unknown type", []Event{{Type: "teleported"}}, ErrInvalidEvent},
		{"valid then invalid", []Event{ArtifactEvent(json.RawMessage(`{}`)), FinishEvent(StateCompleted, nil), StatusEvent(StateWorking, nil)}, ErrAlreadyTerminal},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) { return tt.events, nil })
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			got, err := s.Load(ctx, task.ID, alice)
			if err != nil || got.Seq != task.Seq || got.State != StateSubmitted || len(got.Artifacts) != 0 {
				t.Fatalf("task changed: %+v, %v", got, err)
			}
		})
	}
	fnErr := errors.New("edge says no")
	if _, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) { return nil, fnErr }); !errors.Is(err, fnErr) {
		t.Fatalf("fn error: %v", err)
	}
	if got, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) { return nil, nil }); err != nil || got.Seq != task.Seq {
		t.Fatalf("no events: %+v, %v", got, err)
	}
	for _, tt := range []struct {
		name  string
		owner Owner
		ctxID string
		body  json.RawMessage
	}{
		{"no owner", Owner{}, "", nil},
		{"long tenant", Owner{Subject: "s", Tenant: strings.Repeat("t", 2000)}, "", nil},
		{"long context", alice, strings.Repeat("c", 300), nil},
		{"bad json", alice, "", json.RawMessage(`nope`)},
	} {
		if _, err := s.Create(ctx, tt.owner, tt.ctxID, tt.body, nil, nil); !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("create %s: %v", tt.name, err)
		}
	}
}

func TestSizeLimits(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	s := openStore(t, ns, WithMaxMessageBytes(8<<10), WithMaxTaskBytes(20<<10))
	big := json.RawMessage(`"` + strings.Repeat("x", 9<<10) + `"`)
	if _, err := s.Create(ctx, alice, "", big, nil, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("create with a big message: %v", err)
	}
	if tasks, _, total, err := s.List(ctx, alice, ListFilter{}); err != nil || total != 0 || len(tasks) != 0 {
		t.Fatalf("a refused create left %d tasks (%v)", total, err)
	}
	task, err := s.Create(ctx, alice, "", msg("small"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	part := json.RawMessage(`"` + strings.Repeat("y", 3<<10) + `"`)
	// Three artifacts fit one by one but not in one commit.
	if _, err := complete(ctx, s, task.ID, alice, StateCompleted, nil, []json.RawMessage{part, part, part}, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize completion: %v", err)
	}
	if got, err := s.Load(ctx, task.ID, alice); err != nil || got.Seq != task.Seq || got.State != StateSubmitted {
		t.Fatalf("oversize completion wrote: %+v, %v", got, err)
	}
	// The task as a whole is bounded too.
	var last error
	for range 10 {
		_, last = s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) { return []Event{ArtifactEvent(part)}, nil })
		if last != nil {
			break
		}
	}
	if !errors.Is(last, ErrTooLarge) {
		t.Fatalf("task grew without bound: %v", last)
	}
	if got, err := s.Load(ctx, task.ID, alice); err != nil || got.size > 20<<10 || len(got.Artifacts) == 0 {
		t.Fatalf("after task limit: %d bytes, %d artifacts, %v", got.size, len(got.Artifacts), err)
	}
	if _, err := Open(ctx, s.js, WithMaxMessageBytes(10)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("tiny message limit: %v", err)
	}
}

func TestRestartSeesEverything(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	s := openStore(t, ns)
	var ids []string
	for i := range 5 {
		task, err := s.Create(ctx, alice, "ctx", msg(fmt.Sprint(i)), json.RawMessage(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	if _, err := complete(ctx, s, ids[0], alice, StateCompleted, msg("ok"), nil, []string{"rcpt"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, ids[1], alice); err != nil {
		t.Fatal(err)
	}
	check := func(s *Store) {
		t.Helper()
		tasks, _, total, err := s.List(ctx, alice, ListFilter{})
		if err != nil || total != 5 || len(tasks) != 5 {
			t.Fatalf("list: %d/%d, %v", len(tasks), total, err)
		}
		for i, want := range []State{StateCompleted, StateCanceled, StateSubmitted} {
			got, err := s.Load(ctx, ids[i], alice)
			if err != nil || got.State != want {
				t.Fatalf("task %d: %+v, %v", i, got, err)
			}
		}
	}
	check(openStore(t, ns)) // a new replica

	// The server itself restarts on the same store directory.
	ns.Stop()
	ns2, err := natsembed.Start(natsembed.Config{StoreDir: ns.dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns2.Stop)
	check(openStore(t, &server{Server: ns2, dir: ns.dir}))
}

func TestConcurrentAppendsAllLand(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	stores := []*Store{openStore(t, ns, WithMaxAttempts(200)), openStore(t, ns, WithMaxAttempts(200))}
	task, err := stores[0].Create(ctx, alice, "", msg("start"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 24
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			if _, err := stores[i%2].Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
				return []Event{MessageEvent(msg(fmt.Sprint(i)))}, nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := stores[1].Load(ctx, task.ID, alice)
	if err != nil || len(got.History) != writers+1 || got.Seq != task.Seq+writers {
		t.Fatalf("after %d concurrent appends: %d messages, seq %d, %v", writers, len(got.History), got.Seq, err)
	}

	// With a single attempt, losing the race is ErrConflict.
	one := openStore(t, ns, WithMaxAttempts(1))
	_, err = one.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
		if _, err := stores[0].Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
			return []Event{MessageEvent(msg("sneaky"))}, nil
		}); err != nil {
			return nil, err
		}
		return []Event{MessageEvent(msg("loser"))}, nil
	})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("lost race: %v", err)
	}
}

func TestLoadManyCommits(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t))
	s.readBatch = 4
	task, err := s.Create(ctx, alice, "", msg("0"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4*4 + 3 // several direct get batches, the last one short
	for i := 1; i < n; i++ {
		if _, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
			return []Event{MessageEvent(msg(fmt.Sprint(i)))}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, batch := range []int{4, 19, 1, defaultReadBatch} { // 19: exactly one full batch
		s.readBatch = batch
		got, err := s.Load(ctx, task.ID, alice)
		if err != nil || len(got.History) != n || got.Seq != task.Seq+n-1 {
			t.Fatalf("batch %d: loaded %d messages, want %d (%v)", batch, len(got.History), n, err)
		}
	}
	got, err := s.Load(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range got.History {
		if string(m) != string(msg(fmt.Sprint(i))) {
			t.Fatalf("message %d = %s", i, m)
		}
	}
}

// A writer that bypasses Transition (an old replica, a bug) cannot revive
// a canceled task: the fold skips what Transition would have refused, on
// Load and on Watch alike.
func TestStrayCommitIsIgnored(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t))
	task, err := s.Create(ctx, alice, "", msg("go"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	canceled, err := s.Cancel(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	stray, _ := json.Marshal(commit{V: commitVersion, Events: []Event{
		{Type: EventArtifact, Artifact: json.RawMessage(`{"late":true}`), Time: time.Now()},
		{Type: EventFinished, State: StateCompleted, Time: time.Now()},
		{Type: EventReceipt, ReceiptID: "rcpt", Time: time.Now()},
	}})
	if _, err := s.js.Publish(ctx, Subject(task.ID), stray); err != nil {
		t.Fatal(err)
	}
	if _, err := s.js.Publish(ctx, Subject(task.ID), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, task.ID, alice)
	if err != nil || got.State != StateCanceled || len(got.Artifacts) != 0 || !slices.Equal(got.ReceiptIDs, []string{"rcpt"}) || got.Seq != canceled.Seq+2 {
		t.Fatalf("after stray commits: %+v, %v", got, err)
	}
}
