package dpopreplay_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

func check(err error) dpop.Check {
	var de *dpop.Error
	if errors.As(err, &de) {
		return de.Check
	}
	return ""
}

// TestClaimOnce: of many racers on one key, across two connections (two
// replicas), exactly one wins; the others see replayed.
func TestClaimOnce(t *testing.T) {
	ns, _, js := natstest.Start(t)
	_, js2 := natstest.Connect(t, ns)
	ctx := context.Background()
	a, err := dpopreplay.Open(ctx, js, 1, time.Minute, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dpopreplay.Open(ctx, js2, 1, time.Minute, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make(chan error, 16)
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() { defer wg.Done(); results <- s.Start(ctx, "key-1", time.Now()).Wait(ctx) }()
	}
	wg.Wait()
	close(results)
	won := 0
	for err := range results {
		switch check(err) {
		case "":
			won++
		case dpop.CheckReplayed:
		default:
			t.Fatalf("claim: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d claims won, want 1", won)
	}
	if err := a.Claim(ctx, "key-2", time.Now()); err != nil {
		t.Fatalf("another key: %v", err)
	}
}

// TestWindowNeverShrinks: an opener with a shorter window leaves a longer
// one in place; a longer one extends it.
func TestWindowNeverShrinks(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	ttl := func() time.Duration {
		kv, err := js.KeyValue(ctx, schemas.ProofsBucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.TTL()
	}
	for _, c := range []struct {
		open, want time.Duration
	}{{2 * time.Minute, 2 * time.Minute}, {time.Minute, 2 * time.Minute}, {3 * time.Minute, 3 * time.Minute}} {
		if _, err := dpopreplay.Open(ctx, js, 1, c.open, 0); err != nil {
			t.Fatal(err)
		}
		if got := ttl(); got != c.want {
			t.Fatalf("after opening with %s: TTL %s, want %s", c.open, got, c.want)
		}
	}
}

// TestFailsClosed: with the connection gone, a claim is refused as
// state_unavailable, never accepted.
func TestFailsClosed(t *testing.T) {
	_, nc, js := natstest.Start(t)
	ctx := context.Background()
	s, err := dpopreplay.Open(ctx, js, 1, time.Minute, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if got := check(s.Claim(ctx, "key", time.Now())); got != dpop.CheckState {
		t.Fatalf("claim on a closed connection: %q", got)
	}
}

// TestLostBucket: when the memory bucket is lost (its servers restarted)
// and made again, a proof claimed in the lost one cannot be claimed in
// the new one: proofs issued before the new bucket (plus the skew) are
// stale, on every replica, and proofs issued after it are claimed once.
// The first bucket ever made has no floor.
func TestLostBucket(t *testing.T) {
	ns, _, js := natstest.Start(t)
	_, js2 := natstest.Connect(t, ns)
	ctx := context.Background()
	skew := time.Second
	a, err := dpopreplay.Open(ctx, js, 1, time.Minute, skew)
	if err != nil {
		t.Fatal(err)
	}
	issued := time.Now().Add(-30 * time.Second) // a proof made before the first bucket: no floor yet
	if err := a.Claim(ctx, "key", issued); err != nil {
		t.Fatalf("first claim: %v", err)
	}
	// The servers lose the memory bucket.
	if err := js.DeleteKeyValue(ctx, schemas.ProofsBucket); err != nil {
		t.Fatal(err)
	}
	// The next claim makes it again, with a floor: the old proof is stale now.
	if got := check(a.Claim(ctx, "key", issued)); got != dpop.CheckStale {
		t.Fatalf("the lost bucket's proof: %q", got)
	}
	b, err := dpopreplay.Open(ctx, js2, 1, time.Minute, skew)
	if err != nil {
		t.Fatal(err)
	}
	if got := check(b.Claim(ctx, "key", issued)); got != dpop.CheckStale {
		t.Fatalf("the lost bucket's proof on another replica: %q", got)
	}
	later := time.Now().Add(skew + 2*time.Second) // a proof made after the floor
	if err := b.Claim(ctx, "key-later", later); err != nil {
		t.Fatalf("a proof after the floor: %v", err)
	}
	if got := check(a.Claim(ctx, "key-later", later)); got != dpop.CheckReplayed {
		t.Fatalf("its replay: %q", got)
	}
}

// TestBrokenState: a bucket that answers but refuses every write (as
// natstest.BreakProofState makes it) is state_unavailable, not remade.
func TestBrokenState(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	s, err := dpopreplay.Open(ctx, js, 1, time.Minute, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	natstest.BreakProofState(t, js)
	if got := check(s.Claim(ctx, "key", time.Now())); got != dpop.CheckState {
		t.Fatalf("claim on a broken bucket: %q", got)
	}
}
