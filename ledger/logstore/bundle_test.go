package logstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

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
// was built in one batch or leaf by leaf, before and after a reopen; every
// leaf is stored once, in the segment of the batch that appended it, never
// again when its bundle completes.
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
				// Every leaf is stored once: the bundle records hold
				// exactly the leaves, and no leaf has a key of its own.
				stored := 0
				it, err := s.cur.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixBundle}, UpperBound: []byte{prefixBundle + 1}})
				if err != nil {
					t.Fatal(err)
				}
				for it.First(); it.Valid(); it.Next() {
					stored += len(it.Value())
				}
				_ = it.Close()
				if want := len(wantBundle(all, 0, size)); stored != want {
					t.Fatalf("size %d: bundle records hold %d bytes, the leaves encode to %d", size, stored, want)
				}
				if n := countKeys(t, s, prefixEdgeLeaf); n != 0 {
					t.Fatalf("size %d: %d leaves stored under their own keys", size, n)
				}
			}
			for k, n := range tc.sizes {
				from := len(all)
				appendN(t, s, from, n)
				for i := from; i < from+n; i++ {
					all = append(all, leaf(i))
				}
				check(s)
				if k%3 == 2 { // reopen now and then: the edge is rebuilt from its segments
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

func countKeys(t *testing.T, s *Store, prefix byte) int {
	t.Helper()
	it, err := s.cur.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// toLayout2 rewrites a closed store of size leaves as layout 2 wrote it:
// each complete bundle one record (e | u64 index), the right edge's leaves
// under their own keys, the first record of them (if record > 0) as a
// partial bundle record as stores older still had it, and layout 2 in the
// state record.
func toLayout2(t *testing.T, dir string, all [][]byte, record int) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.Logger{L: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := db.NewBatch()
	size := len(all)
	_ = b.DeleteRange([]byte{prefixBundle}, []byte{prefixBundle + 1}, nil)
	for i := 0; i+TileWidth <= size; i += TileWidth {
		_ = b.Set(bundleKey(uint64(i/TileWidth)), wantBundle(all, i, i+TileWidth), nil)
	}
	if edge := size - size%TileWidth; edge < size {
		if record > 0 {
			_ = b.Set(bundleKey(uint64(edge/TileWidth)), wantBundle(all, edge, edge+record), nil)
		}
		for i := edge + record; i < size; i++ {
			_ = b.Set(edgeLeafKey(uint64(i)), all[i], nil)
		}
	}
	raw, closer, err := db.Get([]byte{prefixState})
	if err != nil {
		t.Fatal(err)
	}
	var st State
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	_ = closer.Close()
	st.Layout = 2
	raw, _ = json.Marshal(st)
	_ = b.Set([]byte{prefixState}, raw, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// checkReads checks every read path over the leaves in all: entries one by
// one and in ranges, entry bundles full and partial, stored leaf hashes and
// inclusion proofs against the recomputed root, the receipt index and the
// query summaries.
func checkReads(t *testing.T, s *Store, all [][]byte) {
	t.Helper()
	size := uint64(len(all))
	if st := s.State(); st.Size != size || !bytes.Equal(st.Root, mth(all)) {
		t.Fatalf("state size %d root %x, want %d %x", st.Size, st.Root, size, mth(all))
	}
	i := uint64(0)
	if err := s.Entries(0, size, func(idx uint64, l []byte) error {
		if idx != i || !bytes.Equal(l, all[idx]) {
			return fmt.Errorf("entries: entry %d (want %d) differs", idx, i)
		}
		i++
		return nil
	}); err != nil || i != size {
		t.Fatalf("entries: %v after %d of %d", err, i, size)
	}
	for b := uint64(0); b*TileWidth < size; b++ {
		first := int(b * TileWidth)
		w := min(TileWidth, int(size)-first)
		width := w
		if w == TileWidth {
			width = 0
		}
		got, err := s.EntryBundle(b, width)
		if err != nil || !bytes.Equal(got, wantBundle(all, first, first+w)) {
			t.Fatalf("bundle %d width %d: %v", b, width, err)
		}
	}
	// Every entry, whichever segment, layout-2 record or right edge holds it.
	for idx := range size {
		e, err := s.Entry(idx)
		if err != nil || !bytes.Equal(e, all[idx]) {
			t.Fatalf("entry %d: %v", idx, err)
		}
	}
	if _, err := s.Entry(size); !errors.Is(err, ErrNotFound) {
		t.Fatalf("entry past the log: %v", err)
	}
	for _, idx := range []uint64{0, size / 2, size - 1, size - size%TileWidth} {
		if idx >= size {
			continue
		}
		lh, path, err := s.InclusionProof(idx, size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(lh, rfc6962.DefaultHasher.HashLeaf(all[idx])) {
			t.Fatalf("leaf %d: stored hash differs", idx)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, size, lh, path, mth(all)); err != nil {
			t.Fatalf("inclusion of %d: %v", idx, err)
		}
		if got, err := s.LeafIndex(fmt.Sprintf("r%d", idx)); err != nil || got != idx {
			t.Fatalf("leaf index of r%d: %d, %v", idx, got, err)
		}
		if sum, err := s.Summary(idx); err != nil || sum.ReceiptID != fmt.Sprintf("r%d", idx) {
			t.Fatalf("summary %d: %+v, %v", idx, sum, err)
		}
	}
}

// A store written by layout 2 (complete bundles as one record, the right
// edge as leaves under their own keys, in older stores a partial record
// first) opens: Open migrates its right edge to a layout-3 segment in one
// synced batch, every read path serves the same bytes, the log grows on
// (completing the migrated bundle) and reopens.
func TestLayout2StoreOpensAndMigrates(t *testing.T) {
	for _, tc := range []struct {
		name         string
		size, record int // leaves; of the right edge's, how many in an old partial record
		grow         []int
	}{
		{"empty", 0, 0, []int{3}},
		{"within the first bundle", 10, 0, []int{5, TileWidth}},
		{"partial record then leaves", 10, 4, []int{TileWidth - 10, 1}},
		{"partial record only", 10, 10, []int{300}},
		{"complete bundles and an edge", 2*TileWidth + 37, 0, []int{1, TileWidth}},
		{"complete bundles only", 2 * TileWidth, 0, []int{TileWidth + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			var all [][]byte
			for i := range tc.size {
				all = append(all, leaf(i))
			}
			appendN(t, s, 0, tc.size)
			_ = s.Close()
			toLayout2(t, dir, all, tc.record)

			open := func() *Store {
				t.Helper()
				s, err := Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			// An Open that fails its integrity checks (here: a checkpoint
			// verifier that refuses) migrates nothing: the store stays
			// layout 2 for the next Open.
			// A read-only Open (an offline check) migrates nothing either.
			if _, err := Open(dir, WithReadOnly(), WithLogger(slog.New(slog.DiscardHandler))); err == nil || !strings.Contains(err.Error(), "start the ledger once") {
				t.Fatalf("a read-only Open of a layout-2 store: %v", err)
			}
			refuse := func([]byte) (uint64, []byte, error) { return 0, nil, errors.New("wrong key") }
			if _, err := Open(dir, WithCheckpointVerifier(refuse), WithLogger(slog.New(slog.DiscardHandler))); err == nil && tc.size > 0 {
				t.Fatal("Open with a verifier that refuses every checkpoint succeeded")
			}
			if tc.size%TileWidth > tc.record { // there are leaf keys to lose
				if n := countLeafKeysIn(t, dir); n == 0 {
					t.Fatal("a refused Open migrated the store: its layout-2 leaf keys are gone")
				}
			}
			s = open()
			if st := s.State(); st.Layout != Layout {
				t.Fatalf("after Open the state says layout %d, want %d", st.Layout, Layout)
			}
			if n := countKeys(t, s, prefixEdgeLeaf); n != 0 {
				t.Fatalf("%d layout-2 leaf keys left after the migration", n)
			}
			if tc.size > 0 {
				checkReads(t, s, all)
			}
			for _, n := range tc.grow {
				from := len(all)
				appendN(t, s, from, n)
				for i := from; i < from+n; i++ {
					all = append(all, leaf(i))
				}
				checkReads(t, s, all)
			}
			_ = s.Close()
			s = open()
			defer s.Close()
			checkReads(t, s, all)
		})
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
	before := s.cur.db.Metrics().WAL.BytesIn
	for i := 0; b.Loop(); i++ {
		tx := s.Begin()
		if _, err := tx.Append(leaf, Summary{ReceiptID: fmt.Sprint(i), CapabilityID: "c", ToolServer: "s", ToolName: "t"}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(testSign); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(s.cur.db.Metrics().WAL.BytesIn-before)/float64(b.N), "WAL-bytes/leaf")
}

// Each leaf crosses Pebble's WAL once: batches of several sizes, some
// completing bundles part-way, write about one leaf's bytes per leaf (plus
// its index entries and summary), where layout 2 wrote each twice (its own
// key, then its completed bundle).
func TestLeavesAreWrittenOnce(t *testing.T) {
	const leafSize = 1200
	for _, per := range []int{1, 100, TileWidth, 1000} {
		t.Run(fmt.Sprint(per), func(t *testing.T) {
			s, err := Open(t.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			appendN(t, s, 0, 0) // the size-0 checkpoint, outside the measure
			l := bytes.Repeat([]byte("x"), leafSize)
			const total = 3*TileWidth + 17
			before := s.cur.db.Metrics().WAL.BytesIn
			commits := 0
			for done := 0; done < total; commits++ {
				tx := s.Begin()
				for i := done; i < min(done+per, total); i++ {
					if _, err := tx.Append(l, Summary{ReceiptID: fmt.Sprint(i), CapabilityID: "c", ToolServer: "s", ToolName: "t"}); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.Commit(testSign); err != nil {
					t.Fatal(err)
				}
				done = min(done+per, total)
			}
			// Per commit: the state record, checkpoint, statement and the
			// right-edge tile (up to 8 KiB) are rewritten; per leaf,
			// everything but the leaf is under 200 bytes.
			wal := s.cur.db.Metrics().WAL.BytesIn - before
			budget := uint64(total*(leafSize+2+200) + commits*(TileWidth*HashSize+1024))
			if wal > budget {
				t.Fatalf("%d leaves of %d bytes in %d commits wrote %d WAL bytes (%.0f per leaf), over the write-once budget %d",
					total, leafSize, commits, wal, float64(wal)/total, budget)
			}
			t.Logf("%.0f WAL bytes per %d-byte leaf", float64(wal)/total, leafSize)
		})
	}
}

// countLeafKeysIn counts the layout-2 leaf keys of the closed store in dir.
func countLeafKeysIn(t *testing.T, dir string) int {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEdgeLeaf}, UpperBound: []byte{prefixEdgeLeaf + 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// BenchmarkEntry reads one receipt's leaf out of complete bundles, as a
// query page does for each receipt: its cost (B/op) is the leaf, not the
// bundle around it.
func BenchmarkEntry(b *testing.B) {
	for _, perCommit := range []int{256, 8} { // one segment a bundle, or 32
		b.Run(fmt.Sprintf("leaves-per-commit=%d", perCommit), func(b *testing.B) {
			s, err := Open(b.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const n = 16 * TileWidth
			fill(b, s, n, perCommit)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := s.Entry(uint64(i*97) % (n - TileWidth)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
