package ledger

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// TestRebuildProgressAndInterrupt rebuilds with a progress callback: run
// to the end it reports every message of the stream and gives the root of
// a rebuild without one; cancelling from it stops the rebuild at once.
func TestRebuildProgressAndInterrupt(t *testing.T) {
	h := newHarness(t)
	var calls []call
	for range 40 {
		calls = append(calls, newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""))
	}
	h.publishCalls(calls, uint64(time.Now().Unix())-10)
	const msgs = 120 // two messages per allowed call, one per denied one

	// rebuild rebuilds into a new store named name, with a progress
	// callback given the calls so far and ctx's cancel.
	rebuild := func(name string, progress func(seen [][2]uint64, cancel context.CancelFunc)) (logstore.State, [][2]uint64, error) {
		t.Helper()
		store := h.openStore(name)
		defer store.Close()
		l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithBatch(16, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if progress == nil {
			st, err := l.Rebuild(ctx)
			return st, nil, err
		}
		var seen [][2]uint64
		st, err := l.Rebuild(ctx, WithProgress(func(done, total uint64) {
			seen = append(seen, [2]uint64{done, total})
			progress(seen, cancel)
		}))
		return st, seen, err
	}

	want, _, err := rebuild("plain", nil)
	if err != nil || want.Size != uint64(len(calls)) {
		t.Fatalf("rebuild without progress: size %d: %v", want.Size, err)
	}
	cases := []struct {
		name     string
		cancelAt uint64 // 0: never
	}{{"to the end", 0}, {"interrupted early", 1}, {"interrupted part way", msgs / 3}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, seen, err := rebuild(string(rune('a'+i)), func(seen [][2]uint64, cancel context.CancelFunc) {
				if c.cancelAt != 0 && seen[len(seen)-1][0] == c.cancelAt {
					cancel()
				}
			})
			if seen[0] != [2]uint64{0, msgs} {
				t.Fatalf("first progress call %v, want 0 of %d", seen[0], msgs)
			}
			if c.cancelAt == 0 {
				if err != nil || !bytes.Equal(st.Root, want.Root) {
					t.Fatalf("rebuild with progress: root %x, want %x: %v", st.Root, want.Root, err)
				}
				if len(seen) != msgs+1 || seen[msgs] != [2]uint64{msgs, msgs} {
					t.Fatalf("%d progress calls ending at %v, want %d ending at %d of %d", len(seen), seen[len(seen)-1], msgs+1, msgs, msgs)
				}
				return
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted rebuild: %v, want context.Canceled", err)
			}
			// The callback that cancelled was the last: nothing was read
			// after the interrupt.
			if last := seen[len(seen)-1]; last[0] != c.cancelAt {
				t.Fatalf("progress went on to %v after the cancel at %d", last, c.cancelAt)
			}
		})
	}
}
