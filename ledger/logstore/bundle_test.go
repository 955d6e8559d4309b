package logstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/chio-ledger/chio/internal/pebblelog"
)

// wantBundle is the reference encoding of leaves [from, to).
func wantBundle(all [][]byte, from, to int) []byte {
	var b []byte
	for _, l := range all[from:to] {
		b = binary.BigEndian.AppendUint16(b, uint16(len(l)))
		b = append(b, l...)
	}
	return b
}

// Entry bundles, whole or partial, read the same whether the right edge
// was built in one batch or leaf by leaf, before and after a reopen; the
// right edge's leaves are stored once each, never as a growing record,
// and go when their bundle completes.
func TestRightEdgeBundle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int // leaves per commit
	}{
		{"one batch", []int{300}},
		{"leaf by leaf", func() []int {
			s := make([]int, 300)
			for i := range s {
				s[i] = 1
			}
			return s
		}()},
		{"mixed", []int{1, 7, 100, 148, 1, 43}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			var all [][]byte
			check := func(s *Store) {
				t.Helper()
				size := len(all)
				if size >= TileWidth {
					b, err := s.EntryBundle(0, 0)
					if err != nil || !bytes.Equal(b, wantBundle(all, 0, TileWidth)) {
						t.Fatalf("size %d: full bundle 0: %v", size, err)
					}
				}
				if w := size % TileWidth; w != 0 {
					first := size - w
					for _, width := range []int{1, w} {
						b, err := s.EntryBundle(uint64(size/TileWidth), width)
						if err != nil || !bytes.Equal(b, wantBundle(all, first, first+width)) {
							t.Fatalf("size %d: partial bundle width %d: %v", size, width, err)
						}
					}
					e, err := s.Entry(uint64(size - 1))
					if err != nil || !bytes.Equal(e, all[size-1]) {
						t.Fatalf("size %d: last entry: %v", size, err)
					}
					if _, err := s.get(bundleKey(uint64(size / TileWidth))); !errors.Is(err, ErrNotFound) {
						t.Fatalf("size %d: the incomplete bundle is stored as a record (%v)", size, err)
					}
				}
				var got [][]byte
				if err := s.Entries(0, uint64(size), func(_ uint64, l []byte) error { got = append(got, bytes.Clone(l)); return nil }); err != nil {
					t.Fatal(err)
				}
				for i := range all {
					if !bytes.Equal(got[i], all[i]) {
						t.Fatalf("size %d: entry %d differs", size, i)
					}
				}
				// Leaves kept one by one: exactly those of the right edge.
				n := 0
				it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEdgeLeaf}, UpperBound: []byte{prefixEdgeLeaf + 1}})
				if err != nil {
					t.Fatal(err)
				}
				for it.First(); it.Valid(); it.Next() {
					n++
				}
				_ = it.Close()
				if n != size%TileWidth {
					t.Fatalf("size %d: %d right-edge leaves stored, want %d", size, n, size%TileWidth)
				}
			}
			for k, n := range tc.sizes {
				from := len(all)
				appendN(t, s, from, n)
				for i := from; i < from+n; i++ {
					all = append(all, leaf(i))
				}
				check(s)
				if k%3 == 2 { // reopen now and then: the edge is rebuilt from its leaves
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					if s, err = Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler))); err != nil {
						t.Fatal(err)
					}
					check(s)
				}
			}
			_ = s.Close()
		})
	}
}

// A store whose incomplete bundle was written as one record (the layout
// before leaves were kept one by one) opens, serves it, and grows on.
func TestOldPartialBundleRecordOpens(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 0, 10)
	var all [][]byte
	for i := range 10 {
		all = append(all, leaf(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Rewrite the edge as the old layout had it.
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.Logger{L: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	_ = b.Set(bundleKey(0), wantBundle(all, 0, 10), nil)
	_ = b.DeleteRange(edgeLeafKey(0), edgeLeafKey(10), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()

	if s, err = Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 10, 5)
	for i := 10; i < 15; i++ {
		all = append(all, leaf(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.EntryBundle(0, 15)
	if err != nil || !bytes.Equal(got, wantBundle(all, 0, 15)) {
		t.Fatalf("partial bundle after the old record and five leaves: %v", err)
	}
	appendN(t, s, 15, TileWidth-15)
	for i := 15; i < TileWidth; i++ {
		all = append(all, leaf(i))
	}
	if got, err = s.EntryBundle(0, 0); err != nil || !bytes.Equal(got, wantBundle(all, 0, TileWidth)) {
		t.Fatalf("completed bundle: %v", err)
	}
}

// Readers of the right edge while batches append to it (run with -race):
// every read is the exact prefix the checkpointed size implies.
func TestRightEdgeReadWhileAppending(t *testing.T) {
	s, err := Open(t.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const total = 2*TileWidth + 10
	var all [][]byte
	for i := range total {
		all = append(all, leaf(i))
	}
	done := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				size := int(s.State().Size)
				if size%TileWidth == 0 {
					continue
				}
				w := size % TileWidth
				b, err := s.EntryBundle(uint64(size/TileWidth), w)
				if errors.Is(err, ErrBeyondCheckpoint) {
					continue // the checkpointed size moved on between the two reads
				}
				first := size - w
				if err != nil || !bytes.Equal(b, wantBundle(all, first, first+w)) {
					errs <- fmt.Errorf("size %d: partial bundle of width %d wrong (%v)", size, w, err)
					return
				}
			}
		}()
	}
	for i := range total {
		appendN(t, s, i, 1)
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkAppendOneLeafPerCommit measures the ledger at low load, where
// every batch holds one receipt: what each synced commit costs, and how
// many bytes it writes to Pebble's WAL per leaf (1,200-byte leaves, about
// a signed receipt's size).
func BenchmarkAppendOneLeafPerCommit(b *testing.B) {
	s, err := Open(b.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	leaf := bytes.Repeat([]byte("x"), 1200)
	before := s.db.Metrics().WAL.BytesIn
	for i := 0; b.Loop(); i++ {
		tx := s.Begin()
		if _, err := tx.Append(leaf, Summary{ReceiptID: fmt.Sprint(i), CapabilityID: "c", ToolServer: "s", ToolName: "t"}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(testSign); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.db.Metrics().WAL.BytesIn-before)/float64(b.N), "WAL-bytes/leaf")
}
