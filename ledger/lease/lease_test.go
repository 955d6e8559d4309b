package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/ledger/lease"
)

// ttl leaves each renewal (one synced KV update, ttl/4 apart) room on a
// loaded CI machine: with 400 ms a single slow fsync could fence a live
// holder.
const ttl = 1500 * time.Millisecond

// bus starts a NATS server listening on TCP, so a client can be cut off by
// closing its connection while the server lives on.
func bus(t *testing.T) *natsembed.Server {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	return ns
}

// contender connects its own client, as a separate ledger process would.
func contender(t *testing.T, ns *natsembed.Server, holder string) (*lease.Lease, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := lease.Bucket(ctx, js, lease.DefaultBucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lease.New(kv, holder, lease.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	return l, nc
}

func acquire(t *testing.T, l *lease.Lease, within time.Duration) (*lease.Term, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return l.Acquire(ctx)
}

func TestOneHolderAtATime(t *testing.T) {
	ns := bus(t)
	a, _ := contender(t, ns, "a")
	b, _ := contender(t, ns, "b")
	ta, err := acquire(t, a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// A live holder keeps renewing: the standby never gets in.
	if _, err := acquire(t, b, 3*ttl); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("standby acquired a held lease: %v", err)
	}
	if err := ta.Valid(); err != nil {
		t.Fatalf("holder fenced while renewing: %v", err)
	}
	if who, _, err := a.Holder(context.Background()); err != nil || who != "a" {
		t.Fatalf("holder %q, %v", who, err)
	}
	// A clean release hands over at once (well under a TTL).
	if err := ta.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ta.Valid() == nil {
		t.Fatal("a released term is still valid")
	}
	start := time.Now()
	tb, err := acquire(t, b, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Release(context.Background())
	if waited := time.Since(start); waited >= ttl {
		t.Logf("hand-over after release took %s (TTL %s)", waited, ttl) // slow machine; not a failure
	}
	if tb.Epoch() <= ta.Epoch() {
		t.Fatalf("epochs do not grow: %d then %d", ta.Epoch(), tb.Epoch())
	}
}

// A holder cut off from NATS fences itself before a standby takes over:
// the old writer stops appending before the new one starts.
func TestCutOffHolderIsFencedBeforeTakeover(t *testing.T) {
	ns := bus(t)
	a, anc := contender(t, ns, "a")
	b, _ := contender(t, ns, "b")
	ta, err := acquire(t, a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The holder's appends: each checks Valid first and records when it
	// last succeeded.
	var mu sync.Mutex
	var lastAppend time.Time
	stopAppending := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stopAppending:
				return
			case <-time.After(time.Millisecond):
			}
			// The time of the check, not after it: a preemption between
			// the two would otherwise look like an append after takeover.
			checked := time.Now()
			if ta.Valid() == nil {
				mu.Lock()
				lastAppend = checked
				mu.Unlock()
			}
		}
	})
	anc.Close() // the holder loses NATS: no renewal can succeed
	tb, err := acquire(t, b, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Now()
	defer tb.Release(context.Background())
	close(stopAppending)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if !lastAppend.Before(took) {
		t.Fatalf("old holder appended at %s, after the takeover at %s", lastAppend, took)
	}
	if ta.Valid() == nil {
		t.Fatal("the cut-off holder still thinks it holds the lease")
	}
	select {
	case <-ta.Context().Done():
		if !errors.Is(context.Cause(ta.Context()), lease.ErrLost) {
			t.Fatalf("term ended with %v, want ErrLost", context.Cause(ta.Context()))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cut-off holder's term did not end")
	}
	t.Logf("fenced %s before the takeover", took.Sub(lastAppend).Round(time.Millisecond))
}

// Many contenders at once: exactly one wins each term.
func TestContendersElectOne(t *testing.T) {
	ns := bus(t)
	const n = 4
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	won := make(chan *lease.Term, n)
	for i := range n {
		l, _ := contender(t, ns, fmt.Sprintf("c%d", i))
		go func() {
			if term, err := l.Acquire(ctx); err == nil {
				won <- term
			}
		}()
	}
	first := <-won
	select {
	case other := <-won:
		t.Fatalf("two holders at once: epochs %d and %d", first.Epoch(), other.Epoch())
	case <-time.After(2 * ttl):
	}
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case next := <-won:
		if next.Epoch() <= first.Epoch() {
			t.Fatalf("epoch went from %d to %d", first.Epoch(), next.Epoch())
		}
		next.Release(context.Background())
	case <-time.After(10 * time.Second):
		t.Fatal("no contender took the released lease")
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	for _, tc := range []struct {
		holder    string
		ttl, poll time.Duration
	}{{"", time.Second, 0}, {"a", time.Millisecond, 0}, {"a", time.Second, -time.Second}} {
		if _, err := lease.New(nil, tc.holder, lease.WithTTL(tc.ttl), lease.WithPollInterval(tc.poll)); err == nil {
			t.Errorf("New(%q, ttl %s, poll %s): no error", tc.holder, tc.ttl, tc.poll)
		}
	}
}

// A standby waiting for a held lease takes it the moment the holder
// releases it, not at its next poll: with polls an hour apart, only the
// watch on the entry can wake it within the test's minute.
func TestWaitingStandbyWakesOnRelease(t *testing.T) {
	ns := bus(t)
	long := func(holder string) *lease.Lease {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := lease.Bucket(context.Background(), js, lease.DefaultBucket, 1)
		if err != nil {
			t.Fatal(err)
		}
		l, err := lease.New(kv, holder, lease.WithTTL(time.Hour), lease.WithPollInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, b := long("a"), long("b")
	ta, err := acquire(t, a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var tb *lease.Term
	go func() {
		var err error
		tb, err = acquire(t, b, time.Minute)
		got <- err
	}()
	// b has read the held entry (and waits for it to change) once it is
	// seen contending: give it until its first read is certainly done.
	select {
	case err := <-got:
		t.Fatalf("the standby acquired a held lease: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := ta.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the standby did not take the released lease: %v", err)
	}
	defer tb.Release(context.Background())
	if who, _, err := b.Holder(context.Background()); err != nil || who != "b" {
		t.Fatalf("holder %q, %v", who, err)
	}
}
