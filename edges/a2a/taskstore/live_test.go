package taskstore

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// The live index answers Claimable as the full scan does: tasks written
// before it started and after, claims that run out, claims renewed, and
// tasks that end and leave it.
func TestLiveAgreesWithTheScan(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	s := openStore(t, startNATS(t), WithClock(clk.Now))
	req := json.RawMessage(`{"run":1}`)
	before, err := s.Create(ctx, alice, "", nil, req, nil) // stored before the index starts
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, alice, "", nil, nil, nil); err != nil { // nothing to execute: never live
		t.Fatal(err)
	}
	live, err := s.FollowLive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Create(ctx, alice, "", nil, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, won, err := s.Claim(ctx, claimed.ID, alice, "edge-a", time.Minute); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	ended, err := s.Create(ctx, alice, "", nil, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, ended.ID, alice); err != nil {
		t.Fatal(err)
	}

	agree := func(step string, grace time.Duration, want ...string) {
		t.Helper()
		var refs []TaskRef
		deadline := time.Now().Add(30 * time.Second)
		for {
			var ok bool
			if refs, ok = live.Claimable(grace); ok {
				scan, err := s.Claimable(ctx, grace)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Equal(refs, scan) && len(refs) == len(want) {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: live %v, want ids %v", step, refs, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for i, id := range want {
			if refs[i].ID != id {
				t.Fatalf("%s: live %v, want ids %v", step, refs, want)
			}
		}
	}
	agree("fresh", time.Minute)
	clk.Advance(2 * time.Minute) // the claim has run out; the unclaimed task is past grace
	want := []string{before.ID, claimed.ID}
	slices.Sort(want)
	agree("after two minutes", time.Minute, want...)
	if _, won, err := s.Claim(ctx, claimed.ID, alice, "edge-b", time.Minute); err != nil || !won {
		t.Fatalf("reclaim: %v %v", won, err)
	}
	if _, err := s.Cancel(ctx, before.ID, alice); err != nil {
		t.Fatal(err)
	}
	agree("renewed and ended", time.Minute)
	if live.Len() != 1 {
		t.Fatalf("live index holds %d tasks, want 1 (the claimed one)", live.Len())
	}
}
