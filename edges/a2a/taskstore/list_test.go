package taskstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestList(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	clk := newClock()
	s := openStore(t, ns, WithClock(clk.Now))
	other := openStore(t, ns, WithClock(clk.Now)) // a second replica

	// 30 tasks of alice in two contexts, every third completed, and a few
	// of bob's and of alice under another tenant in between.
	start := clk.Now()
	var want []string // alice's ids, newest status first
	completed := map[string]bool{}
	for i := range 30 {
		clk.Advance(time.Second)
		task, err := s.Create(ctx, alice, fmt.Sprintf("ctx-%d", i%2), msg(fmt.Sprint(i)), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := complete(ctx, s, task.ID, alice, StateCompleted, nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			completed[task.ID] = true
		}
		want = append([]string{task.ID}, want...)
		if i%10 == 0 {
			if _, err := other.Create(ctx, bob, "ctx-0", nil, nil, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Create(ctx, Owner{Subject: alice.Subject, Tenant: "elsewhere"}, "ctx-0", nil, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Moving a task's status moves it to the front.
	clk.Advance(time.Second)
	moved := want[28] // the second task, still submitted
	if _, err := s.Transition(ctx, moved, alice, func(*Task) ([]Event, error) {
		return []Event{StatusEvent(StateWorking, nil)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	want = append([]string{moved}, append(want[:28:28], want[29])...)

	ids := func(tasks []*Task) []string {
		var out []string
		for _, t := range tasks {
			out = append(out, t.ID)
		}
		return out
	}
	pages := func(f ListFilter) ([]string, int) {
		t.Helper()
		var all []string
		total := -1
		for n := 0; ; n++ {
			tasks, next, tot, err := other.List(ctx, alice, f)
			if err != nil {
				t.Fatal(err)
			}
			if total >= 0 && tot != total {
				t.Fatalf("total changed between pages: %d -> %d", total, tot)
			}
			total = tot
			for _, task := range tasks {
				if task.Owner != alice {
					t.Fatalf("listed a task of %+v", task.Owner)
				}
			}
			all = append(all, ids(tasks)...)
			if next == "" {
				return all, total
			}
			if len(tasks) != f.PageSize && f.PageSize != 0 {
				t.Fatalf("short page %d: %d tasks", n, len(tasks))
			}
			f.PageToken = next
		}
	}
	filter := func(keep func(i int, id string) bool) []string {
		var out []string
		for i, id := range want {
			if keep(i, id) {
				out = append(out, id)
			}
		}
		return out
	}
	ctxOf := map[string]string{}
	for _, id := range want {
		task, err := s.Load(ctx, id, alice)
		if err != nil {
			t.Fatal(err)
		}
		ctxOf[id] = task.ContextID
	}

	for _, tt := range []struct {
		name   string
		filter ListFilter
		want   []string
	}{
		{"all, default page", ListFilter{}, want},
		{"pages of 7", ListFilter{PageSize: 7}, want},
		{"pages of 1", ListFilter{PageSize: 1}, want},
		{"page larger than the maximum", ListFilter{PageSize: 1000}, want},
		{"context", ListFilter{ContextID: "ctx-1", PageSize: 4}, filter(func(_ int, id string) bool { return ctxOf[id] == "ctx-1" })},
		{"completed", ListFilter{State: StateCompleted, PageSize: 3}, filter(func(_ int, id string) bool { return completed[id] })},
		{"submitted in ctx-0", ListFilter{State: StateSubmitted, ContextID: "ctx-0"}, filter(func(_ int, id string) bool {
			return !completed[id] && ctxOf[id] == "ctx-0" && id != want[0]
		})},
		{"status after (inclusive)", ListFilter{StatusAfter: start.Add(21 * time.Second), PageSize: 5}, filter(func(i int, _ string) bool { return i < 11 })},
		{"unknown context", ListFilter{ContextID: "nope"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, total := pages(tt.filter)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %d ids %v\nwant %d ids %v", len(got), got, len(tt.want), tt.want)
			}
			if total != len(tt.want) {
				t.Fatalf("total = %d, want %d", total, len(tt.want))
			}
		})
	}

	first, next, total, err := s.List(ctx, alice, ListFilter{PageSize: 10})
	if err != nil || len(first) != 10 || next == "" || total != 30 {
		t.Fatalf("first page: %d, %q, %d, %v", len(first), next, total, err)
	}
	if len(first[0].History) != 1 || first[0].Seq == 0 {
		t.Fatalf("listed task is not a full fold: %+v", first[0])
	}
	bobs, _, total, err := s.List(ctx, bob, ListFilter{})
	if err != nil || total != 3 || len(bobs) != 3 {
		t.Fatalf("bob: %d/%d, %v", len(bobs), total, err)
	}
	for _, bad := range []ListFilter{
		{PageToken: "not-a-token"},
		{PageToken: encodePageToken(taskSummary{id: "x"})},
		{PageSize: -1},
		{State: "paused"},
	} {
		if _, _, _, err := s.List(ctx, alice, bad); !errors.Is(err, ErrInvalidPageToken) && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("list %+v: %v", bad, err)
		}
	}
}

func TestListEmpty(t *testing.T) {
	s := openStore(t, startNATS(t))
	tasks, next, total, err := s.List(t.Context(), alice, ListFilter{})
	if err != nil || len(tasks) != 0 || next != "" || total != 0 {
		t.Fatalf("empty list: %v %q %d %v", tasks, next, total, err)
	}
	refs, err := s.Claimable(t.Context(), 0)
	if err != nil || len(refs) != 0 {
		t.Fatalf("claimable: %v, %v", refs, err)
	}
}

func TestClaimableSkipsFreshAndUndeferred(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	s := openStore(t, startNATS(t), WithClock(clk.Now))
	deferred, err := s.Create(ctx, alice, "", nil, json.RawMessage(`{"run":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, alice, "", nil, nil, nil); err != nil { // nothing to execute
		t.Fatal(err)
	}
	if refs, _ := s.Claimable(ctx, time.Minute); len(refs) != 0 {
		t.Fatalf("fresh task claimable: %v", refs)
	}
	clk.Advance(2 * time.Minute)
	refs, err := s.Claimable(ctx, time.Minute)
	if err != nil || len(refs) != 1 || refs[0].ID != deferred.ID {
		t.Fatalf("claimable = %v, %v", refs, err)
	}
}
