package ledger

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// An active writer and a following standby keep identical logs; a fenced
// writer stops before it appends; the standby takes over from its warm
// store and the log goes on with every call receipted once, on both.
func TestStandbyFollowsFencesAndTakesOver(t *testing.T) {
	h := newHarness(t)
	a, b := h.openStore("a"), h.openStore("b")
	defer a.Close()
	defer b.Close()
	var fenced atomic.Bool
	errFenced := errors.New("lease lost")
	active := h.start(a, WithFence(func() error {
		if fenced.Load() {
			return errFenced
		}
		return nil
	}))
	standby, err := New(h.js, b, h.keys, WithLogger(quiet()), WithBatch(16, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	followCtx, stopFollow := context.WithCancel(context.Background())
	followed := make(chan error, 1)
	go func() { followed <- standby.Follow(followCtx) }()

	first := make([]call, 0, 120)
	for range 40 {
		first = append(first, newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""),
			newCall(schemas.VerdictAllow, schemas.OutcomeFailed))
	}
	h.publishCalls(first, uint64(time.Now().Unix()))
	waitSize(t, a, uint64(len(first)))
	waitSize(t, b, uint64(len(first)))
	if sa, sb := a.State(), b.State(); sa.Size != sb.Size || !bytes.Equal(sa.Root, sb.Root) {
		t.Fatalf("standby diverged: active %d %x, standby %d %x", sa.Size, sa.Root, sb.Size, sb.Root)
	}

	// The writer loses its lease: the next batch is not committed and Run
	// stops with the fence's error.
	fenced.Store(true)
	second := []call{newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, "")}
	h.publishCalls(second, uint64(time.Now().Unix()))
	select {
	case err := <-active.done:
		if !errors.Is(err, errFenced) {
			t.Fatalf("fenced writer stopped with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a fenced writer kept running")
	}
	if got := a.State().Size; got != uint64(len(first)) {
		t.Fatalf("fenced writer appended: size %d, want %d", got, len(first))
	}

	// The standby stops following and becomes the writer.
	stopFollow()
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	next := h.start(b)
	all := append(first, second...)
	waitSize(t, b, uint64(len(all)))
	h.checkPublished(t, all)

	// The old writer, now a standby, catches up to the same log.
	l, err := New(h.js, a, h.keys, WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Follow(ctx) }()
	waitSize(t, a, uint64(len(all)))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := next.stop(t); err != nil {
		t.Fatal(err)
	}
	if sa, sb := a.State(), b.State(); sa.Size != sb.Size || !bytes.Equal(sa.Root, sb.Root) {
		t.Fatalf("logs differ after failover: %d %x vs %d %x", sa.Size, sa.Root, sb.Size, sb.Root)
	}
}
