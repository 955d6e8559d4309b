package taskstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natstest"
)

// hold counts n fake commits as published alone and in flight, so that
// nothing queued goes out alone until the returned release (or a batch
// being due) lets it: the tests decide when batches form, not timing.
func hold(c *committer, n int) (release func()) {
	for range n {
		c.goAlone()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for range n {
				c.aloneDone()
			}
		})
	}
}

// waitUntil polls cond until it holds or ctx ends (the test's own
// deadline bounds it), and reports whether it held.
func waitUntil(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Millisecond):
		}
	}
	return true
}

func streamMsgs(t *testing.T, s *Store) uint64 {
	t.Helper()
	info, err := s.stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func createTasks(t *testing.T, s *Store, n int) []*Task {
	t.Helper()
	tasks := make([]*Task, n)
	for i := range tasks {
		task, err := s.Create(t.Context(), alice, "", msg(fmt.Sprint(i)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		tasks[i] = task
	}
	return tasks
}

// Concurrent Starts and Transitions on distinct tasks go out in batches;
// each lands exactly once, with the sequence its caller was told.
func TestGroupCommitLandsOnce(t *testing.T) {
	const n = 40
	for _, tt := range []struct {
		name    string
		setup   func(t *testing.T, s *Store) []*Task // the tasks before, nil for none
		write   func(ctx context.Context, s *Store, i int, before *Task) (*Task, error)
		commits int // of each task afterwards
	}{
		{
			name: "start",
			write: func(ctx context.Context, s *Store, i int, _ *Task) (*Task, error) {
				return s.Start(ctx, NewTask{Owner: alice, Message: msg(fmt.Sprint(i))})
			},
			commits: 1,
		},
		{
			name:  "transition",
			setup: func(t *testing.T, s *Store) []*Task { return createTasks(t, s, n) },
			write: func(ctx context.Context, s *Store, i int, before *Task) (*Task, error) {
				return s.Transition(ctx, before.ID, alice, func(*Task) ([]Event, error) {
					return []Event{MessageEvent(msg(fmt.Sprint(i)))}, nil
				})
			},
			commits: 2,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s := openStore(t, startNATS(t), WithBatchThreshold(2))
			if s.batch == nil {
				t.Fatal("no group commit on a single-replica stream")
			}
			before := make([]*Task, n)
			if tt.setup != nil {
				before = tt.setup(t, s)
			}
			msgs := streamMsgs(t, s)
			release := hold(s.batch, 1)
			go func() { // once a batch was written, let the rest go however it may
				waitUntil(t.Context(), func() bool { return s.batch.stats().batches > 0 })
				release()
			}()
			after := make([]*Task, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					got, err := tt.write(ctx, s, i, before[i])
					if err != nil {
						t.Errorf("write %d: %v", i, err)
						return
					}
					after[i] = got
				})
			}
			wg.Wait()
			release()
			if t.Failed() {
				return
			}
			st := s.batch.stats()
			if st.batches == 0 || st.commits < 2 {
				t.Fatalf("stats %+v: no batch written", st)
			}
			var seqs []uint64
			for i, want := range after {
				got, err := s.Load(ctx, want.ID, alice)
				if err != nil {
					t.Fatalf("load %d: %v", i, err)
				}
				last := string(got.History[len(got.History)-1])
				if got.Seq != want.Seq || len(got.commitIDs) != tt.commits || !slices.Equal(got.commitIDs, want.commitIDs) || last != string(msg(fmt.Sprint(i))) {
					t.Errorf("task %d: seq %d (told %d), commits %v (told %v), last message %s", i, got.Seq, want.Seq, got.commitIDs, want.commitIDs, last)
				}
				seqs = append(seqs, got.Seq)
			}
			slices.Sort(seqs)
			if len(slices.Compact(seqs)) != n {
				t.Errorf("sequences not distinct: %v", seqs)
			}
			if got := streamMsgs(t, s); got != msgs+n {
				t.Errorf("stream holds %d messages, want %d", got, msgs+n)
			}
		})
	}
}

// A batch the server refuses (a stale expected sequence, a message id it
// already holds) stores nothing; its commits then go out alone, so each
// gets its own exact result, the same as without group commit: the stale
// one a conflict (which Transition retries), the rest success. A retried
// commit (the same id and expected sequence as one that landed) is a
// conflict too, as it always was (the server checks the expected sequence
// before the message id); its caller's read-back finds the first one, and
// nothing is stored twice.
func TestGroupCommitRefusedBatch(t *testing.T) {
	const n = 8
	moveOn := func(t *testing.T, s *Store, task *Task) (*Task, string, *Task) {
		moved, err := s.Transition(t.Context(), task.ID, alice, func(*Task) ([]Event, error) {
			return []Event{MessageEvent(msg("first"))}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return task, "stale-commit", moved
	}
	for _, tt := range []struct {
		name string
		// first writes task 0 before the batch and returns what the
		// batch's write of task 0 starts from, the commit id it uses
		// and the task as first written.
		first func(t *testing.T, s *Store, task *Task) (stale *Task, cid string, landed *Task)
		// write0 is task 0's write in the batch.
		write0  func(ctx context.Context, s *Store, stale *Task, cid string) (*Task, error)
		check0  func(t *testing.T, s *Store, got *Task, err error, landed *Task)
		written uint64 // messages the batch round adds
	}{
		{
			name:  "stale sequence",
			first: moveOn,
			write0: func(ctx context.Context, s *Store, stale *Task, cid string) (*Task, error) {
				return s.commit(ctx, stale, []Event{MessageEvent(msg("late"))}, cid)
			},
			check0: func(t *testing.T, _ *Store, got *Task, err error, _ *Task) {
				if !errors.Is(err, ErrConflict) {
					t.Errorf("stale commit: %+v, %v; want ErrConflict", got, err)
				}
			},
			written: n - 1,
		},
		{
			name:  "stale transition retries",
			first: moveOn,
			write0: func(ctx context.Context, s *Store, stale *Task, _ string) (*Task, error) {
				return s.TransitionFrom(ctx, stale, func(*Task) ([]Event, error) {
					return []Event{MessageEvent(msg("late"))}, nil
				})
			},
			check0: func(t *testing.T, _ *Store, got *Task, err error, landed *Task) {
				if err != nil || got.Seq <= landed.Seq || len(got.History) != 3 || string(got.History[2]) != string(msg("late")) {
					t.Errorf("retried transition: %+v, %v", got, err)
				}
			},
			written: n,
		},
		{
			name: "retried commit id",
			first: func(t *testing.T, s *Store, task *Task) (*Task, string, *Task) {
				landed, err := s.commit(t.Context(), task, []Event{MessageEvent(msg("once"))}, "retried-commit")
				if err != nil {
					t.Fatal(err)
				}
				return task, "retried-commit", landed
			},
			write0: func(ctx context.Context, s *Store, stale *Task, cid string) (*Task, error) {
				return s.commit(ctx, stale, []Event{MessageEvent(msg("once"))}, cid)
			},
			check0: func(t *testing.T, s *Store, got *Task, err error, landed *Task) {
				if !errors.Is(err, ErrConflict) {
					t.Errorf("retried commit: %+v, %v; want ErrConflict", got, err)
				}
				loaded, err := s.Load(t.Context(), landed.ID, alice)
				if err != nil || loaded.Seq != landed.Seq || !slices.Equal(loaded.commitIDs, landed.commitIDs) {
					t.Errorf("after the retry: %+v, %v; want %v", loaded, err, landed.commitIDs)
				}
			},
			written: n - 1,
		},
	} {
		for _, batched := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/batched=%v", tt.name, batched), func(t *testing.T) {
				ctx := t.Context()
				threshold := 0 // as without group commit: the reference
				if batched {
					threshold = n
				}
				s := openStore(t, startNATS(t), WithBatchThreshold(threshold))
				tasks := createTasks(t, s, n)
				stale, cid, landed := tt.first(t, s, tasks[0])
				msgs := streamMsgs(t, s)
				if batched {
					// n commits in flight: the n writes below wait until
					// all n are queued, then go out as one batch.
					release := hold(s.batch, n)
					defer release()
					go func() { // a retry after the refusal must not wait for a batch
						waitUntil(t.Context(), func() bool { return s.batch.stats().refused > 0 })
						release()
					}()
				}
				got := make([]*Task, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				wg.Go(func() { got[0], errs[0] = tt.write0(ctx, s, stale, cid) })
				for i := 1; i < n; i++ {
					wg.Go(func() {
						got[i], errs[i] = s.Transition(ctx, tasks[i].ID, alice, func(*Task) ([]Event, error) {
							return []Event{MessageEvent(msg("batched"))}, nil
						})
					})
				}
				wg.Wait()
				if batched {
					if st := s.batch.stats(); st.refused != 1 || st.batches != 0 {
						t.Errorf("stats %+v: want one refused batch", st)
					}
				}
				tt.check0(t, s, got[0], errs[0], landed)
				for i := 1; i < n; i++ {
					if errs[i] != nil {
						t.Errorf("task %d: %v", i, errs[i])
						continue
					}
					loaded, err := s.Load(ctx, tasks[i].ID, alice)
					if err != nil || loaded.Seq != got[i].Seq || len(loaded.History) != 2 {
						t.Errorf("task %d: loaded %+v, %v; told seq %d", i, loaded, err, got[i].Seq)
					}
				}
				if m := streamMsgs(t, s); m != msgs+tt.written {
					t.Errorf("stream holds %d messages, want %d", m, msgs+tt.written)
				}
			})
		}
	}
}

// A stream that stops allowing atomic batches (an operator changed it)
// refuses the first one; its commits go out alone, and so does every
// commit after it.
func TestGroupCommitStreamRefusesBatches(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t), WithBatchThreshold(2))
	tasks := createTasks(t, s, 4)
	cfg := s.stream.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	msgs := streamMsgs(t, s)
	for round := range 2 {
		// The two commits of a round wait for each other: a batch is due
		// in the first round, and would be in the second if one were
		// still tried.
		release := hold(s.batch, 1)
		var wg sync.WaitGroup
		for _, task := range tasks[2*round : 2*round+2] {
			wg.Go(func() {
				if _, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
					return []Event{MessageEvent(msg("alone"))}, nil
				}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		release()
	}
	if st := s.batch.stats(); st.refused != 1 || st.batches != 0 {
		t.Errorf("stats %+v: want the first batch refused, no other", st)
	}
	if m := streamMsgs(t, s); m != msgs+4 {
		t.Errorf("stream holds %d messages, want %d", m, msgs+4)
	}
}

// A commit whose caller leaves while it is queued is not written, and the
// caller learns so (no unknown outcome to read back).
func TestGroupCommitCallerLeaves(t *testing.T) {
	s := openStore(t, startNATS(t), WithBatchThreshold(4))
	task := createTasks(t, s, 1)[0]
	msgs := streamMsgs(t, s)
	release := hold(s.batch, 4)
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.commit(ctx, task, []Event{MessageEvent(msg("gone"))}, "left")
		done <- err
	}()
	if !waitUntil(t.Context(), func() bool {
		s.batch.mu.Lock()
		defer s.batch.mu.Unlock()
		return len(s.batch.queue) == 1
	}) {
		t.Fatal("the commit was never queued")
	}
	cancel()
	err := <-done
	var unknown *unknownOutcomeError
	if !errors.Is(err, context.Canceled) || errors.As(err, &unknown) {
		t.Fatalf("left: %v; want canceled, known not written", err)
	}
	if m := streamMsgs(t, s); m != msgs {
		t.Fatalf("stream holds %d messages, want %d", m, msgs)
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if len(s.batch.queue) != 0 || len(s.batch.subjects) != 0 {
		t.Fatalf("queue %d, subjects %v after the caller left", len(s.batch.queue), s.batch.subjects)
	}
}

// A batch whose commit gets no answer leaves every commit's outcome
// unknown; one nobody receives (no responders) stored nothing, so its
// commits go out alone.
func TestGroupCommitUnanswered(t *testing.T) {
	for _, tt := range []struct {
		name      string
		subscribe bool // a subscriber that never answers
		check     func(t *testing.T, alone bool, err error)
	}{
		{"no answer", true, func(t *testing.T, alone bool, err error) {
			var unknown *unknownOutcomeError
			if alone || !errors.As(err, &unknown) {
				t.Errorf("alone %v, err %v; want unknown outcome", alone, err)
			}
		}},
		{"no responders", false, func(t *testing.T, alone bool, err error) {
			if !alone || err != nil {
				t.Errorf("alone %v, err %v; want to go alone", alone, err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nc, js := natstest.Connect(t, startNATS(t).Server)
			if tt.subscribe {
				sub, err := nc.SubscribeSync("void.*")
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			}
			c := newCommitter(js, 2, slog.Default())
			c.timeout = 100 * time.Millisecond // the wait for an answer that never comes
			release := hold(c, 1)
			defer release()
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() {
					m := &nats.Msg{Subject: fmt.Sprintf("void.%d", i), Data: []byte("{}"), Header: nats.Header{}}
					_, alone, err := c.append(t.Context(), &pending{ctx: t.Context(), msg: m, id: fmt.Sprint(i), done: make(chan outcome, 1)})
					if alone {
						c.aloneDone()
					}
					tt.check(t, alone, err)
				})
			}
			wg.Wait()
		})
	}
}

// Without group commit (threshold 0, or a replicated stream) every commit
// is a message of its own, as before; the stream configuration depends on
// the replicas only, so a store and the projections never disagree on it.
// allCurrent reports whether every peer of a replicated stream is current.
func allCurrent(peers []*jetstream.PeerInfo) bool {
	for _, p := range peers {
		if !p.Current || p.Offline {
			return false
		}
	}
	return len(peers) > 0
}

func TestGroupCommitOff(t *testing.T) {
	for _, tt := range []struct {
		name   string
		open   func(t *testing.T) *Store
		atomic bool
	}{
		{"threshold 0", func(t *testing.T) *Store { return openStore(t, startNATS(t), WithBatchThreshold(0)) }, true},
		{"replicas 3", func(t *testing.T) *Store {
			if testing.Short() {
				t.Skip("starts a three-node cluster")
			}
			_, js := natstest.Dial(t, startCluster(t)[0].ClientURL())
			s, err := Open(t.Context(), js, WithReplicas(3))
			if err != nil {
				t.Fatal(err)
			}
			// A new R3 stream answers once its leader is elected; on a
			// loaded machine that can follow Open.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				// A leader alone can still answer the first publishes with
				// "no response" on a loaded machine: wait for every peer
				// to be current as well.
				if info, err := s.stream.Info(t.Context()); err == nil && info.Cluster != nil && info.Cluster.Leader != "" && allCurrent(info.Cluster.Replicas) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the task stream has no leader with current peers after 30s")
				}
			}
			return s
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			s := tt.open(t)
			if s.batch != nil {
				t.Fatal("group commit is on")
			}
			if got := s.stream.CachedInfo().Config.AllowAtomicPublish; got != tt.atomic {
				t.Fatalf("AllowAtomicPublish = %v, want %v", got, tt.atomic)
			}
			const n = 16
			tasks := createTasks(t, s, n)
			var wg sync.WaitGroup
			for i, task := range tasks {
				wg.Go(func() {
					got, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
						return []Event{MessageEvent(msg("more"))}, nil
					})
					if err != nil || got.Seq <= task.Seq {
						t.Errorf("task %d: %+v, %v", i, got, err)
					}
				})
			}
			wg.Wait()
			if m := streamMsgs(t, s); m != 2*n {
				t.Fatalf("stream holds %d messages, want %d", m, 2*n)
			}
		})
	}
}

// A stream created by the previous layout (no atomic publish) is updated
// when a store opens on it: its tasks read on, and commits are batched
// from then on.
func TestGroupCommitOnAnOlderStream(t *testing.T) {
	ns := startNATS(t)
	_, js := natstest.Connect(t, ns.Server)
	old := StreamConfig(1, DefaultMaxMessageBytes, DefaultDuplicateWindow)
	old.AllowAtomicPublish = false
	if _, err := js.CreateStream(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	before, err := js.Publish(t.Context(), Subject("00000000-0000-7000-8000-000000000000"), []byte(`{"v":1,"events":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t, ns, WithBatchThreshold(2))
	if s.batch == nil {
		t.Fatal("no group commit on an updated single-replica stream")
	}
	info, err := s.stream.Info(t.Context())
	if err != nil || !info.Config.AllowAtomicPublish || info.State.LastSeq != before.Sequence {
		t.Fatalf("stream after open: %+v (%v)", info, err)
	}
}
