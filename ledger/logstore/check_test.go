package logstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Check reads the whole tree: a record whose checksum is fine but whose
// bytes are wrong (a leaf, a tile, a tile missing) is found, named, and
// marks the store corrupt; an intact store passes with its root.
func TestCheckFindsWhatChecksumsCannot(t *testing.T) {
	quiet := WithLogger(slog.New(slog.DiscardHandler))
	const size = 3*TileWidth + 17 // full tiles 0/0..0/2, a right edge
	tests := []struct {
		name   string
		key    []byte // flipped (or deleted) before Check
		offset int
		delete bool
		memory bool   // the right edge: flipped in memory too, where it is read from
		want   string // in the error; "" for an intact store
	}{
		{name: "intact"},
		{name: "a leaf of a full bundle", key: segmentKey(1, 0), offset: 40, want: "leaf 256 (entry 0 of bundle 1) does not hash"},
		{name: "the right edge's leaf", key: segmentKey(3, 0), offset: 40, memory: true, want: "leaf 768 (entry 0 of bundle 3)"},
		{name: "a level-0 tile", key: tileKey(0, 0), offset: 5 * HashSize, want: "leaf 5 (entry 5 of bundle 0) does not hash"},
		{name: "a level-0 tile's entry above", key: tileKey(1, 0), offset: HashSize + 3, want: "tile 0/1 does not hash to its entry 1 in tile 1/0"},
		{name: "a missing tile", key: tileKey(0, 2), delete: true, want: "tile 0/2: " + ErrNotFound.Error()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			appendN(t, s, 0, 2*TileWidth)
			appendN(t, s, 2*TileWidth, size-2*TileWidth)
			if tc.key != nil {
				// Written behind the store's back, through its own
				// database: Pebble's checksums are right.
				if tc.delete {
					err = s.cur.db.Delete(tc.key, nil)
				} else {
					v, closer, gerr := s.cur.db.Get(tc.key)
					if gerr != nil {
						t.Fatal(gerr)
					}
					bad := append([]byte(nil), v...)
					_ = closer.Close()
					bad[tc.offset] ^= 1
					err = s.cur.db.Set(tc.key, bad, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				if tc.memory {
					s.bundle[tc.offset] ^= 1
				}
			}
			res, err := s.Check(context.Background(), nil)
			if tc.want == "" {
				if err != nil || res.Size != size || res.Bundles != 4 || res.Tiles != 3 || string(res.Root) != string(s.State().Root) {
					t.Fatalf("Check = %+v, %v", res, err)
				}
				if s.Corrupt() != nil {
					t.Fatalf("an intact store marked corrupt: %v", s.Corrupt())
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want ErrCorrupt with %q", err, tc.want)
			}
			if c := s.Corrupt(); c == nil || !strings.Contains(c.Error(), tc.want) {
				t.Fatalf("Corrupt() = %v", c)
			}
		})
	}
}

// A right-edge leaf that no longer hashes to its tile stops Open: the
// cheap check at open covers the bundle the next append extends.
func TestOpenChecksTheRightEdgeBundle(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithCheckpointVerifier(testVerify))
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 0, TileWidth+10)
	_ = s.Close()
	flipByte(t, dir, segmentKey(1, 0), 40)
	if _, err := Open(dir, WithCheckpointVerifier(testVerify)); err == nil || !strings.Contains(err.Error(), "leaf 256 (entry 0 of bundle 1) does not hash") {
		t.Fatalf("Open of a store with a wrong right-edge leaf = %v", err)
	}
}

// A pace that fails ends the check with its error, marking nothing.
func TestCheckPaceEnds(t *testing.T) {
	s, err := Open(t.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendN(t, s, 0, 2*TileWidth)
	stop := errors.New("stop")
	calls := 0
	res, err := s.Check(context.Background(), func(context.Context, int) error {
		if calls++; calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || res.Bundles != 1 || s.Corrupt() != nil {
		t.Fatalf("Check = %+v, %v; corrupt %v", res, err, s.Corrupt())
	}
}

// WithReadOnly opens only a store that is there, and writes nothing to
// it: an offline check must not make a store, or change one.
func TestOpenReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, WithReadOnly()); !errors.Is(err, ErrNoStore) {
		t.Fatalf("Open(WithReadOnly) of an empty directory = %v, want ErrNoStore", err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 0, 3)
	s.Close()
	s, err = Open(dir, WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if res, err := s.Check(context.Background(), nil); err != nil || res.Size != 3 {
		t.Fatalf("Check of the read-only store = %+v, %v", res, err)
	}
	tx := s.Begin()
	if _, err := tx.Append(leaf(3), Summary{ReceiptID: "r3"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(testSign); err == nil {
		t.Fatal("a read-only store took a commit")
	}
}

// BenchmarkCheck: what a scrub pass costs, per receipt-sized leaf.
func BenchmarkCheck(b *testing.B) {
	s, err := Open(b.TempDir(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 8 * TileWidth // small: CI runs every benchmark 2000 times
	fill(b, s, n, TileWidth)
	for b.Loop() {
		if _, err := s.Check(context.Background(), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "µs/leaf")
}
