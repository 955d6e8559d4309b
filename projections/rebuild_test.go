package projections

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

// TestRebuildProgressAndInterrupt rebuilds with a progress callback: run
// to the end it reports every message of the three streams and gives the
// digest of a rebuild without one; cancelling from it stops the rebuild
// at once.
func TestRebuildProgressAndInterrupt(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 12)
	var msgs uint64
	for _, str := range streams() {
		s, err := h.js.Stream(h.ctx, str.name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		msgs += info.State.Msgs
	}
	want := h.rebuild("plain", WithBatch(5))
	key := WithKernelKey(kernelPriv.Public().(ed25519.PublicKey))
	cases := []struct {
		name     string
		cancelAt uint64 // 0: never
	}{{"to the end", 0}, {"interrupted early", 1}, {"interrupted part way", msgs / 3}}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(h.ctx)
			defer cancel()
			var seen [][2]uint64
			res, err := RebuildWithProgress(ctx, h.js, filepath.Join(h.dir, fmt.Sprint("r", i)), func(done, total uint64) {
				seen = append(seen, [2]uint64{done, total})
				if c.cancelAt != 0 && done == c.cancelAt {
					cancel()
				}
			}, WithLogger(quiet()), key, WithBatch(5))
			if seen[0] != [2]uint64{0, msgs} {
				t.Fatalf("first progress call %v, want 0 of %d", seen[0], msgs)
			}
			if c.cancelAt == 0 {
				if err != nil || res.Digest != want.Digest || res.Positions != want.Positions {
					t.Fatalf("rebuild with progress: %+v, want %+v: %v", res, want, err)
				}
				if uint64(len(seen)) != msgs+1 || seen[msgs] != [2]uint64{msgs, msgs} {
					t.Fatalf("%d progress calls ending at %v, want %d ending at %d of %d", len(seen), seen[len(seen)-1], msgs+1, msgs, msgs)
				}
				return
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted rebuild: %v, want context.Canceled", err)
			}
			// The three streams fold concurrently: each may finish the
			// message it holds, no more.
			if last := seen[len(seen)-1][0]; last > c.cancelAt+2 {
				t.Fatalf("progress went on to %d after the cancel at %d", last, c.cancelAt)
			}
		})
	}
}
