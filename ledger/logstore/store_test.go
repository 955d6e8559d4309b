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

// mth is the recursive RFC 6962 Merkle Tree Hash, the reference the stored
// tiles are checked against.
func mth(leaves [][]byte) []byte {
	if len(leaves) == 0 {
		return rfc6962.DefaultHasher.EmptyRoot()
	}
	hashes := make([][]byte, len(leaves))
	for i, l := range leaves {
		hashes[i] = rfc6962.DefaultHasher.HashLeaf(l)
	}
	return mthHashes(hashes)
}

func leaf(i int) []byte { return []byte(fmt.Sprintf(`{"id":"r%d","pad":"%0*d"}`, i, i%97, 0)) }

// testSign stands in for the ledger's signer: a note that encodes size and
// root, so the Open-time check can be exercised without key material.
func testSign(from, to uint64, root []byte, seq uint64) ([]byte, []byte, error) {
	return []byte(fmt.Sprintf("%d %x", to, root)), []byte(fmt.Sprintf(`{"seq":%d}`, seq)), nil
}

func testVerify(note []byte) (uint64, []byte, error) {
	var size uint64
	var root []byte
	if _, err := fmt.Sscanf(string(note), "%d %x", &size, &root); err != nil {
		return 0, nil, err
	}
	return size, root, nil
}

func appendN(t *testing.T, s *Store, from, n int) {
	t.Helper()
	tx := s.Begin()
	for i := from; i < from+n; i++ {
		if _, err := tx.Append(leaf(i), Summary{ReceiptID: fmt.Sprintf("r%d", i), CapabilityID: fmt.Sprintf("cap%d", i%3),
			ToolServer: "srv", ToolName: fmt.Sprintf("tool%d", i%2), Verdict: "allow", Timestamp: uint64(1000 + i),
			Principals: testPrincipals(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(testSign); err != nil {
		t.Fatal(err)
	}
}

// fill appends n copies of a 1,200-byte (receipt-sized) leaf, perCommit
// a commit, and returns the leaf.
func fill(tb testing.TB, s *Store, n, perCommit int) []byte {
	tb.Helper()
	leaf := bytes.Repeat([]byte("x"), 1200)
	for i := 0; i < n; {
		tx := s.Begin()
		for j := 0; j < perCommit && i < n; j, i = j+1, i+1 {
			if _, err := tx.Append(leaf, Summary{ReceiptID: fmt.Sprint(i), CapabilityID: "c", ToolServer: "s", ToolName: "t"}); err != nil {
				tb.Fatal(err)
			}
		}
		if err := tx.Commit(testSign); err != nil {
			tb.Fatal(err)
		}
	}
	return leaf
}

// testPrincipals: leaf i was made by tenant "ta" when i is even, else by
// "tb"; every third leaf by tb's delegate "tb>d" (so under both).
func testPrincipals(i int) []string {
	switch {
	case i%2 == 0:
		return []string{"ta"}
	case i%3 == 0:
		return []string{"tb", "tb>d"}
	}
	return []string{"tb"}
}

func TestAppendProofsAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithCheckpointVerifier(testVerify))
	if err != nil {
		t.Fatal(err)
	}
	var all [][]byte
	// Batches that straddle tile and bundle boundaries, and one large enough
	// to complete a level-1 tile hash (256·256 leaves is too slow; 256+ is not).
	total := 0
	for _, n := range []int{1, 2, 253, 1, 255, 256, 300, 7, 1000} {
		appendN(t, s, total, n)
		for i := total; i < total+n; i++ {
			all = append(all, leaf(i))
		}
		total += n
		st := s.State()
		if got, want := st.Root, mth(all); !bytes.Equal(got, want) {
			t.Fatalf("size %d: root %x, want %x", total, got, want)
		}
	}
	size := uint64(total)
	root := mth(all)
	for _, idx := range []uint64{0, 1, 255, 256, 511, 1000, size - 1} {
		for _, sz := range []uint64{idx + 1, size} {
			if _, err := s.Checkpoint(sz); err != nil {
				continue // only checkpointed sizes are provable
			}
			_, p, err := s.InclusionProof(idx, sz)
			if err != nil {
				t.Fatalf("inclusion %d@%d: %v", idx, sz, err)
			}
			if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, sz, rfc6962.DefaultHasher.HashLeaf(all[idx]), p, mth(all[:sz])); err != nil {
				t.Fatalf("inclusion %d@%d does not verify: %v", idx, sz, err)
			}
		}
		e, err := s.Entry(idx)
		if err != nil || !bytes.Equal(e, all[idx]) {
			t.Fatalf("entry %d = %q, %v", idx, e, err)
		}
	}
	for _, pair := range [][2]uint64{{1, 3}, {3, 256}, {256, 512}, {3, size}, {512, size}, {size, size}} {
		p, err := s.ConsistencyProof(pair[0], pair[1])
		if err != nil {
			t.Fatalf("consistency %v: %v", pair, err)
		}
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, pair[0], pair[1], p, mth(all[:pair[0]]), mth(all[:pair[1]])); err != nil {
			t.Fatalf("consistency %v does not verify: %v", pair, err)
		}
	}
	if _, _, err := s.InclusionProof(0, size+1); !errors.Is(err, ErrBeyondCheckpoint) {
		t.Fatalf("proof beyond the checkpoint: %v", err)
	}

	// Tiles: level-0 hashes are leaf hashes, level-1 hashes are roots of full level-0 tiles.
	t0, err := s.Tile(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(t0[32:64], rfc6962.DefaultHasher.HashLeaf(all[1])) {
		t.Fatal("tile 0/0 slot 1 is not the leaf hash of entry 1")
	}
	t1, err := s.Tile(1, 0, int(size/256))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(t1[32:64], mth(all[256:512])) {
		t.Fatal("tile 1/0 slot 1 is not the root of entries 256..511")
	}
	if _, err := s.Tile(0, size/256, 0); !errors.Is(err, ErrBeyondCheckpoint) {
		t.Fatalf("full tile for the partial right edge: %v", err)
	}
	w := int(size % 256)
	edge, err := s.Tile(0, size/256, w)
	if err != nil || len(edge) != w*32 {
		t.Fatalf("partial tile: %d bytes, %v", len(edge), err)
	}
	b, err := s.EntryBundle(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := binary.BigEndian.Uint16(b); !bytes.Equal(b[2:2+l], all[0]) {
		t.Fatal("bundle 0 does not start with entry 0")
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, WithCheckpointVerifier(testVerify))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.State(); got.Size != size || !bytes.Equal(got.Root, root) {
		t.Fatalf("reopened at %d %x", got.Size, got.Root)
	}
	// Appending after a reopen continues the same tree.
	appendN(t, s, total, 300)
	for i := total; i < total+300; i++ {
		all = append(all, leaf(i))
	}
	if !bytes.Equal(s.State().Root, mth(all)) {
		t.Fatal("root after reopen and append differs from the reference")
	}
	_ = s.Close()
}

func TestOpenRefusesTamperedTiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithCheckpointVerifier(testVerify))
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 0, 600)
	_ = s.Close()

	// The frontier of 600 leaves is read from tile 1/0 (the roots of the
	// full level-0 tiles) and the partial tile 0/2: a flipped bit in either
	// must stop Open.
	for _, k := range [][]byte{tileKey(1, 0), tileKey(0, 2)} {
		flipByte(t, dir, k, 40)
		if _, err := Open(dir, WithCheckpointVerifier(testVerify)); err == nil {
			t.Fatalf("Open accepted a store whose tile %x does not match its root", k)
		}
		flipByte(t, dir, k, 40)
		s, err := Open(dir, WithCheckpointVerifier(testVerify))
		if err != nil {
			t.Fatalf("restored store: %v", err)
		}
		_ = s.Close()
	}
}

func flipByte(t *testing.T, dir string, k []byte, off int) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.Logger{L: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, closer, err := db.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(v)
	_ = closer.Close()
	bad[off] ^= 1
	if err := db.Set(k, bad, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesCheckpointMismatch(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 0, 10)
	_ = s.Close()
	lie := func(note []byte) (uint64, []byte, error) { return 10, make([]byte, 32), nil }
	if _, err := Open(dir, WithCheckpointVerifier(lie)); err == nil {
		t.Fatal("Open accepted a checkpoint whose root differs from the tiles")
	}
}

// TestOpenRefusesAnOlderLayout: a store written before layouts were
// numbered has no per-principal index, which its leaves cannot restore, so
// Open refuses it and says how to rebuild it.
func TestOpenRefusesAnOlderLayout(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 0, 5)
	st := s.State()
	if st.Layout != Layout {
		t.Fatalf("a new store has layout %d, want %d", st.Layout, Layout)
	}
	_ = s.Close()
	st.Layout = 0
	old, _ := json.Marshal(st)
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebblelog.Logger{L: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte{prefixState}, old, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	_, err = Open(dir)
	if !errors.Is(err, ErrOldLayout) || !strings.Contains(err.Error(), "chio ledger rebuild") {
		t.Fatalf("Open of a layout-0 store: %v", err)
	}
}

func TestQuery(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendN(t, s, 0, 30)
	cases := []struct {
		name  string
		f     Filter
		from  uint64
		limit int
		want  []uint64
		total uint64
	}{
		{"all", Filter{}, 0, 3, []uint64{0, 1, 2}, 30},
		{"cursor", Filter{}, 28, 5, []uint64{28, 29}, 30},
		{"capability", Filter{CapabilityID: "cap1"}, 0, 3, []uint64{1, 4, 7}, 10},
		{"capability after cursor", Filter{CapabilityID: "cap1"}, 26, 10, []uint64{28}, 10},
		{"server", Filter{ToolServer: "srv"}, 5, 2, []uint64{5, 6}, 30},
		{"server and tool", Filter{ToolServer: "srv", ToolName: "tool1"}, 0, 2, []uint64{1, 3}, 15},
		{"capability and tool", Filter{CapabilityID: "cap0", ToolServer: "srv", ToolName: "tool1"}, 0, 10, []uint64{3, 9, 15, 21, 27}, 5},
		{"time window", Filter{Since: 1010, Until: 1012}, 0, 10, []uint64{10, 11, 12}, 3},
		{"verdict none", Filter{Verdict: "deny"}, 0, 10, nil, 0},
		{"unknown server", Filter{ToolServer: "nope"}, 0, 10, nil, 0},
		{"principal", Filter{Principals: []string{"ta"}}, 0, 3, []uint64{0, 2, 4}, 15},
		{"delegate's principal", Filter{Principals: []string{"tb>d"}}, 0, 10, []uint64{3, 9, 15, 21, 27}, 5},
		{"tenant sees its delegate", Filter{Principals: []string{"tb"}}, 0, 4, []uint64{1, 3, 5, 7}, 15},
		{"two principals", Filter{Principals: []string{"tb>d", "ta"}}, 0, 5, []uint64{0, 2, 3, 4, 6}, 20},
		{"principal and capability", Filter{Principals: []string{"ta"}, CapabilityID: "cap1"}, 0, 10, []uint64{4, 10, 16, 22, 28}, 5},
		{"unknown principal", Filter{Principals: []string{"nobody"}}, 0, 10, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := s.Query(c.f, c.from, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(p.Indexes) != fmt.Sprint(c.want) || p.Total != c.total {
				t.Fatalf("got %v total %d, want %v total %d", p.Indexes, p.Total, c.want, c.total)
			}
		})
	}
}

func TestTileIndexEncoding(t *testing.T) {
	for _, n := range []uint64{0, 7, 999, 1000, 1234067, 1 << 40, ^uint64(0)} {
		enc := EncodeTileIndex(n)
		got, w, err := ParseTileIndex(splitPath(enc))
		if err != nil || got != n || w != 0 {
			t.Fatalf("%d → %q → %d, %d, %v", n, enc, got, w, err)
		}
	}
	if EncodeTileIndex(1234067) != "x001/x234/067" {
		t.Fatal(EncodeTileIndex(1234067))
	}
	got, w, err := ParseTileIndex(splitPath("x001/x234/067.p/8"))
	if err != nil || got != 1234067 || w != 8 {
		t.Fatalf("partial: %d %d %v", got, w, err)
	}
	for _, bad := range []string{"", "1", "0001", "x01/000", "001/002", "x000/001", "001.p/0", "001.p/256", "001.p/08", "001.p/x",
		"x018/x446/x744/x073/x709/x551/616", "abc", "x001/x234/067/"} {
		if _, _, err := ParseTileIndex(splitPath(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// BenchmarkAppendCommit measures appending 1,024-leaf batches of 500-byte
// receipts with one synced commit each.
func BenchmarkAppendCommit(b *testing.B) {
	s, err := Open(b.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	leaf := bytes.Repeat([]byte("x"), 500)
	b.ResetTimer()
	for i := 0; i < b.N; {
		tx := s.Begin()
		for j := 0; j < 1024 && i < b.N; j, i = j+1, i+1 {
			if _, err := tx.Append(leaf, Summary{ReceiptID: fmt.Sprint(i), CapabilityID: "c", ToolServer: "s", ToolName: "t"}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(testSign); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "leaves/s")
}

// BenchmarkInclusionProof measures proofs from tiles in a 100,000-leaf log.
func BenchmarkInclusionProof(b *testing.B) {
	s, err := Open(b.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 100000
	for i := 0; i < n; {
		tx := s.Begin()
		for j := 0; j < 4096 && i < n; j, i = j+1, i+1 {
			if _, err := tx.Append(leaf(i), Summary{ReceiptID: fmt.Sprint(i)}); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(testSign); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := s.InclusionProof(uint64(i*7919)%n, n); err != nil {
			b.Fatal(err)
		}
	}
}

// A log past 256·256 leaves completes a level-1 tile and starts level 2:
// proofs, tiles and the reopened frontier stay exact across that boundary.
func TestLevelTwoTiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 66,000-leaf log")
	}
	dir := t.TempDir()
	s, err := Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	const n = 256*256 + 300
	var hashes [][]byte
	for i := 0; i < n; {
		batch := 4096
		if i < 65536 && i+batch > 65536 {
			batch = 65536 - i // one commit ends exactly at the level-1 boundary
		}
		tx := s.Begin()
		for j := 0; j < batch && i < n; j, i = j+1, i+1 {
			l := []byte(fmt.Sprint(i))
			hashes = append(hashes, rfc6962.DefaultHasher.HashLeaf(l))
			if _, err := tx.Append(l, Summary{ReceiptID: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(testSign); err != nil {
			t.Fatal(err)
		}
		if i == 65536 { // reopen right at the boundary
			_ = s.Close()
			if s, err = Open(dir, WithCheckpointVerifier(testVerify), WithLogger(slog.New(slog.DiscardHandler))); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer s.Close()
	root := mthHashes(hashes)
	if !bytes.Equal(s.State().Root, root) {
		t.Fatal("root differs from the reference")
	}
	t1, err := s.Tile(1, 0, 0)
	if err != nil || len(t1) != 8192 {
		t.Fatalf("full level-1 tile: %d bytes, %v", len(t1), err)
	}
	t2, err := s.Tile(2, 0, 1)
	if err != nil || !bytes.Equal(t2, mthHashes(hashes[:65536])) {
		t.Fatalf("level-2 tile: %v", err)
	}
	for _, idx := range []uint64{0, 255, 256, 65535, 65536, 65600, n - 1} {
		_, p, err := s.InclusionProof(idx, n)
		if err != nil {
			t.Fatal(err)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, n, hashes[idx], p, root); err != nil {
			t.Fatalf("leaf %d: %v", idx, err)
		}
	}
	p, err := s.ConsistencyProof(65536, n)
	if err != nil {
		t.Fatal(err)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, 65536, n, p, mthHashes(hashes[:65536]), root); err != nil {
		t.Fatal(err)
	}
}

func mthHashes(h [][]byte) []byte {
	if len(h) == 1 {
		return h[0]
	}
	k := 1
	for k*2 < len(h) {
		k *= 2
	}
	return rfc6962.DefaultHasher.HashChildren(mthHashes(h[:k]), mthHashes(h[k:]))
}

// Any path either parses to the one canonical encoding of its index (and
// width) or is refused; nothing panics.
func FuzzParseTileIndex(f *testing.F) {
	for _, s := range []string{"000", "x001/x234/067", "x001/x234/067.p/8", "001.p/255", "x000/001", "1", "", "a/b/c", "067.p/", ".p/1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		idx, w, err := ParseTileIndex(strings.Split(path, "/"))
		if err != nil {
			return
		}
		want := EncodeTileIndex(idx)
		if w > 0 {
			want += fmt.Sprintf(".p/%d", w)
		}
		if want != path {
			t.Fatalf("%q parsed to index %d width %d, whose encoding is %q", path, idx, w, want)
		}
	})
}
