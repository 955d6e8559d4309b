package logstore

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"testing"

	"github.com/chio-ledger/chio/internal/tmpfs"
)

// TestDiskFull fills the store's filesystem to the last byte. With a
// reserve the guard refuses the batch before Pebble sees it; with none
// Pebble meets ENOSPC itself (its WAL, or a flush), which leaves the
// database unusable until Recover reopens it. Either way the refused batch
// leaves nothing behind, Err says why, and once space is back the store
// takes writes again and reopens with its root intact.
func TestDiskFull(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve uint64
	}{
		{"guarded", 4 << 20},
		{"unguarded", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tmpfs.Mount(t, 24)
			opts := []Option{WithCheckpointVerifier(testVerify), WithMemory(1<<20, 1<<20), WithReserve(tc.reserve),
				WithLogger(slog.New(slog.DiscardHandler))}
			s, err := Open(dir, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			n := 0
			var leaves [][]byte
			commit := func(k int) error {
				tx := s.Begin()
				for i := n; i < n+k; i++ {
					if _, err := tx.Append(leaf(i), Summary{ReceiptID: fmt.Sprintf("r%d", i), Verdict: "allow"}); err != nil {
						tx.Discard()
						return err
					}
				}
				err := tx.Commit(testSign)
				if err == nil {
					for i := n; i < n+k; i++ {
						leaves = append(leaves, leaf(i))
					}
					n += k
				}
				return err
			}
			for range 20 {
				if err := commit(50); err != nil {
					t.Fatal(err)
				}
			}
			filler := tmpfs.Fill(t, dir)
			var ferr error
			for range 2000 { // with no reserve, Pebble fails once its preallocated WAL is used up
				if ferr = commit(50); ferr != nil {
					break
				}
			}
			if ferr == nil {
				t.Fatalf("%d leaves committed on a full filesystem, no error", n)
			}
			t.Logf("commit on a full filesystem at size %d: %v", n, ferr)
			if !errors.Is(ferr, ErrUnavailable) || !errors.Is(ferr, syscall.ENOSPC) {
				t.Fatalf("commit error is not ErrUnavailable and ENOSPC: %v", ferr)
			}
			if err := s.Err(); err == nil || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Err on a full filesystem: %v", err)
			}
			if got := s.State().Size; got != uint64(n) {
				t.Fatalf("size %d after the refused batch, want %d", got, n)
			}
			if err := s.Recover(); err == nil {
				t.Fatal("Recover succeeded with the filesystem still full")
			}
			filler.Remove(t)
			if err := s.Recover(); err != nil {
				t.Fatalf("recover with space back: %v", err)
			}
			if err := s.Err(); err != nil {
				t.Fatalf("Err with space back: %v", err)
			}
			if got, want := s.State().Root, mth(leaves); string(got) != string(want) {
				t.Fatalf("root after recovery %x, want %x", got, want)
			}
			for range 5 {
				if err := commit(50); err != nil {
					t.Fatalf("commit with space back: %v", err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(dir, opts...) // the integrity checks of Open
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if got, want := s.State().Root, mth(leaves); string(got) != string(want) || s.State().Size != uint64(n) {
				t.Fatalf("reopened at size %d root %x, want %d %x", s.State().Size, got, n, want)
			}
			for i := range n {
				e, err := s.Entry(uint64(i))
				if err != nil || string(e) != string(leaves[i]) {
					t.Fatalf("entry %d after reopen: %q %v", i, e, err)
				}
			}
		})
	}
}
