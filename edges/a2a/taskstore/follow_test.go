package taskstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startFollow runs Follow on s with a fresh durable until the test ends,
// sending each commit of a task in ids to the returned channel, and
// returns once the durable consumer exists, so that every commit written
// afterwards reaches it.
func startFollow(t *testing.T, s *Store, opts ...FollowOption) <-chan Commit {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	durable := "follow-test-" + uuid.NewString()[:8]
	out := make(chan Commit, 256)
	done := make(chan error, 1)
	go func() {
		done <- s.Follow(ctx, durable, func(ctx context.Context, c Commit) error {
			select {
			case out <- c:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, opts...)
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("follow: %v", err)
		}
	})
	for { // wait for the consumer, not for a time
		if _, err := s.stream.Consumer(ctx, durable); err == nil {
			return out
		} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("follow ended before its consumer existed: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// followed reads commits of task id from ch until one with n events in
// all has arrived (a failsafe deadline only guards against a hang).
func followed(t *testing.T, ch <-chan Commit, id string, n int) []Commit {
	t.Helper()
	var out []Commit
	events := 0
	deadline := time.After(time.Minute)
	for events < n {
		select {
		case c := <-ch:
			if c.TaskID == id {
				out = append(out, c)
				events += len(c.Events)
			}
		case <-deadline:
			t.Fatalf("follow delivered %d of %d events of %s", events, n, id)
		}
	}
	return out
}

func describeGenerations(events []Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%d:%s:%d", e.Seq, e.Type, e.Generation))
	}
	return out
}

// TestFollowGenerations checks that Follow numbers a task's events exactly
// as Watch does, over commits holding one mutation, several, and none.
func TestFollowGenerations(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	s, other := openStore(t, ns), openStore(t, ns)
	follow := startFollow(t, s)

	art := func(id, text string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"artifactId":%q,"parts":[{"text":%q}]}`, id, text))
	}
	// Created, working status and claim in one commit: two mutations.
	task, err := s.Start(ctx, NewTask{Owner: alice, Message: msg("start"), Request: json.RawMessage(`{}`),
		Then: []Event{StatusEvent(StateWorking, nil), ClaimEvent("r1", time.Now().Add(time.Hour))}})
	if err != nil {
		t.Fatal(err)
	}
	steps := [][]Event{
		// Nothing visible: no generation at all.
		{MetadataEvent(json.RawMessage(`{"k":1}`)), MessageEvent(msg("note"))},
		// Several mutations around events that ride along, and an
		// artifact event that is no A2A artifact (not a mutation).
		{StatusEvent(StateWorking, msg("step")), MessageEvent(msg("history")), ArtifactEvent(art("a", "one")),
			ArtifactEvent(json.RawMessage(`"not an artifact"`)), ArtifactEvent(art("b", "two")), ReceiptEvent("r-0")},
		// One mutation, a progress status that keeps the state.
		{StatusEvent(StateWorking, msg("still"))},
	}
	for i, events := range steps {
		st := []*Store{s, other}[i%2]
		if task, err = st.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) { return events, nil }); err != nil {
			t.Fatal(err)
		}
	}
	// Then a commit of several mutations through TransitionFrom, and the
	// terminal commit: two artifacts, a receipt, the finish.
	if task, err = s.TransitionFrom(ctx, task, func(*Task) ([]Event, error) {
		return []Event{ArtifactEvent(art("c", "x")), StatusEvent(StateWorking, nil)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	done, err := complete(ctx, other, task.ID, alice, StateCompleted, msg("done"),
		[]json.RawMessage{art("d", "y"), art("e", "z")}, []string{"r-1"})
	if err != nil {
		t.Fatal(err)
	}

	ch, err := other.Watch(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	watched := collect(t, ch, time.Minute)
	commits := followed(t, follow, task.ID, len(watched))
	var got []Event
	for _, c := range commits {
		if c.Generation == 0 {
			t.Fatalf("commit %d records no generation", c.Seq)
		}
		last := int64(0)
		for _, e := range c.Events {
			last = max(last, e.Generation)
		}
		if last != 0 && last != c.Generation {
			t.Fatalf("commit %d: generation %d, its last mutation %d", c.Seq, c.Generation, last)
		}
		got = append(got, c.Events...)
	}
	if !slices.Equal(describeGenerations(got), describeGenerations(watched)) {
		t.Fatalf("follow and watch differ:\nfollow %v\nwatch  %v", describeGenerations(got), describeGenerations(watched))
	}
	// The generations are 1, 2, … on the mutations, and end at the task's.
	var want int64
	for _, e := range watched {
		switch {
		case e.Mutates():
			want++
			if e.Generation != want {
				t.Fatalf("%s at seq %d: generation %d, want %d", e.Type, e.Seq, e.Generation, want)
			}
		case e.Generation != 0:
			t.Fatalf("%s at seq %d: generation %d on a non-mutation", e.Type, e.Seq, e.Generation)
		}
	}
	if want != done.Generation || commits[len(commits)-1].Generation != done.Generation || want != 11 {
		t.Fatalf("generations end at %d, last commit says %d, task %d (want 11)", want, commits[len(commits)-1].Generation, done.Generation)
	}
}

// TestFollowLegacyCommit checks that a commit written before commits
// recorded their generation still decodes, its events at generation 0.
func TestFollowLegacyCommit(t *testing.T) {
	ctx := t.Context()
	s := openStore(t, startNATS(t))
	follow := startFollow(t, s)

	id := uuid.NewString()
	now := time.Now().UTC()
	owner := alice
	body, err := json.Marshal(commit{V: commitVersion, Events: []Event{
		{Type: EventCreated, Time: now, Owner: &owner, ContextID: "ctx", Message: msg("hi")},
		{Type: EventStatus, Time: now, State: StateWorking},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// The summary header as it was: no "g".
	legacy, err := json.Marshal(map[string]any{"o": alice.Subject, "n": alice.Tenant, "c": "ctx", "s": StateWorking, "t": now, "cr": now})
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: Subject(id), Data: body, Header: nats.Header{}}
	m.Header.Set(summaryHeader, base64.RawURLEncoding.EncodeToString(legacy))
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	c := followed(t, follow, id, 2)[0]
	if c.Generation != 0 || c.State != StateWorking || c.Owner != alice {
		t.Fatalf("legacy commit: %+v", c)
	}
	for _, e := range c.Events {
		if e.Generation != 0 {
			t.Fatalf("legacy %s: generation %d", e.Type, e.Generation)
		}
	}
	// The store still reads it; the next commit, written now, numbers its
	// mutation from the fold.
	task, err := s.Transition(ctx, id, alice, func(*Task) ([]Event, error) {
		return []Event{StatusEvent(StateWorking, msg("on"))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	next := followed(t, follow, id, 1)[0]
	if task.Generation != 3 || next.Generation != 3 || next.Events[0].Generation != 3 {
		t.Fatalf("after a legacy commit: task %d, commit %d, event %d (want 3)", task.Generation, next.Generation, next.Events[0].Generation)
	}
}

// TestNumberMutations checks the backward numbering of one commit,
// including commits that record no generation or one too small.
func TestNumberMutations(t *testing.T) {
	art := ArtifactEvent(json.RawMessage(`{"artifactId":"a","parts":[]}`))
	events := func() []Event {
		return []Event{MessageEvent(msg("m")), StatusEvent(StateWorking, nil), art, ArtifactEvent(json.RawMessage(`1`)),
			ReceiptEvent("r"), FinishEvent(StateCompleted, nil)}
	}
	gens := func(evs []Event) []int64 {
		var out []int64
		for _, e := range evs {
			out = append(out, e.Generation)
		}
		return out
	}
	for _, tc := range []struct {
		after int64
		want  []int64
	}{
		{7, []int64{0, 5, 6, 0, 0, 7}},
		{3, []int64{0, 1, 2, 0, 0, 3}},
		{0, []int64{0, 0, 0, 0, 0, 0}}, // written before commits recorded it
		{2, []int64{0, 0, 0, 0, 0, 0}}, // inconsistent: not a store's commit
	} {
		evs := events()
		numberMutations(evs, tc.after)
		if got := gens(evs); !slices.Equal(got, tc.want) {
			t.Fatalf("after %d: %v, want %v", tc.after, got, tc.want)
		}
	}
}

// TestFollowTasks: with FollowTasks, fn gets every commit of the tasks
// the filter accepts and none of the others; a filter error offers the
// commit again.
func TestFollowTasks(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	s := openStore(t, ns)
	var mu sync.Mutex
	wanted, failed := map[string]bool{}, false
	follow := startFollow(t, s, FollowTasks(func(_ context.Context, id string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if wanted[id] && !failed {
			failed = true
			return false, errors.New("not now")
		}
		return wanted[id], nil
	}))
	start := func() *Task {
		task, err := s.Start(ctx, NewTask{Owner: alice, Message: msg("start"), Request: json.RawMessage(`{}`),
			Then: []Event{StatusEvent(StateWorking, nil)}})
		if err != nil {
			t.Fatal(err)
		}
		return task
	}
	mu.Lock()
	a := start()
	wanted[a.ID] = true
	mu.Unlock()
	// Stored with its task already wanted, so the filter sees it wanted.
	b := start()
	if _, err := complete(ctx, s, b.ID, alice, StateCompleted, msg("done"), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := complete(ctx, s, a.ID, alice, StateCompleted, msg("done"), nil, nil); err != nil {
		t.Fatal(err)
	}
	ch, err := s.Watch(ctx, a.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	watched := collect(t, ch, time.Minute)
	got := followed(t, follow, a.ID, len(watched))
	if len(got) != 2 {
		t.Fatalf("followed %d commits of the wanted task, want 2", len(got))
	}
	for {
		select {
		case c := <-follow:
			if c.TaskID != a.ID {
				t.Fatalf("a commit of an unwanted task was handed over: %+v", c)
			}
		default:
			mu.Lock()
			defer mu.Unlock()
			if !failed {
				t.Fatal("the filter was never asked about the wanted task")
			}
			return
		}
	}
}
