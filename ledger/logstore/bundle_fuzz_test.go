package logstore

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"golang.org/x/mod/sumdb/tlog"
)

// refEntries is the C2SP entry bundle format read the plain way: each
// entry a big-endian uint16 length and that many bytes, to the end.
func refEntries(b []byte) ([][]byte, bool) {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, false
		}
		n := int(b[0])<<8 | int(b[1])
		if len(b) < 2+n {
			return nil, false
		}
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out, true
}

// FuzzEntryBundle reads bytes as an entry bundle (or a stored segment of
// one) the way the store does, and checks the tile geometry that decides
// how much of a bundle or hash tile is served. Properties:
//   - bundleLen accepts exactly what the reference reader accepts and
//     counts the same entries; re-encoding those entries gives the bytes
//     back;
//   - bundlePrefix(b, k) is the byte length of the first k entries for
//     every k up to the count, and an error past it;
//   - two segments that each parse concatenate into a bundle of both
//     counts, as readBundle joins them;
//   - PartialTileWidth agrees with golang.org/x/mod/sumdb/tlog on the
//     width of every tile (bundle or hash tile, any level) that a tree
//     growing to the fuzzed size publishes, and servedWidth serves those
//     widths and refuses wider ones.
func FuzzEntryBundle(f *testing.F) {
	leaves := [][]byte{[]byte(`{"id":"r-1"}`), {}, bytes.Repeat([]byte{0xff}, 300), []byte("x")}
	f.Add(wantBundle(leaves, 0, len(leaves)), uint16(7), uint64(300), uint16(45))
	f.Add(wantBundle(leaves, 0, 1), uint16(0), uint64(TileWidth), uint16(0))
	f.Add([]byte{0x00}, uint16(1), uint64(1<<40+3), uint16(1000))
	f.Add([]byte{0x01, 0x00, 'a'}, uint16(2), uint64(math.MaxInt64), uint16(65535))
	f.Fuzz(func(t *testing.T, b []byte, split uint16, size uint64, delta uint16) {
		want, ok := refEntries(b)
		n, err := bundleLen(b)
		if (err == nil) != ok || ok && n != len(want) {
			t.Fatalf("bundleLen = %d, %v; reference reads %d entries, ok %v", n, err, len(want), ok)
		}
		if ok {
			var again []byte
			off := 0
			for k, e := range want {
				if p, err := bundlePrefix(b, k); err != nil || p != off {
					t.Fatalf("bundlePrefix(%d) = %d, %v; want %d", k, p, err, off)
				}
				again = binary.BigEndian.AppendUint16(again, uint16(len(e)))
				again = append(again, e...)
				off += 2 + len(e)
			}
			if p, err := bundlePrefix(b, len(want)); err != nil || p != len(b) {
				t.Fatalf("bundlePrefix(all %d) = %d, %v; want %d", len(want), p, err, len(b))
			}
			if _, err := bundlePrefix(b, len(want)+1); err == nil {
				t.Fatalf("bundlePrefix past the %d entries succeeded", len(want))
			}
			if !bytes.Equal(again, b) {
				t.Fatal("re-encoded entries differ from the bundle")
			}
		}
		if i := int(split) % (len(b) + 1); i > 0 {
			m1, err1 := bundleLen(b[:i])
			m2, err2 := bundleLen(b[i:])
			if err1 == nil && err2 == nil {
				if m, err := bundleLen(b); err != nil || m != m1+m2 {
					t.Fatalf("segments of %d and %d entries join into %d, %v", m1, m2, m, err)
				}
			}
		}

		size &= math.MaxInt64 // tlog counts in int64
		old := size - min(size, uint64(delta))
		for _, tile := range tlog.NewTiles(TileHeight, int64(old), int64(size)) {
			w := PartialTileWidth(uint(tile.L), uint64(tile.N), size)
			if w != tile.W {
				t.Fatalf("tree of %d: tile %d/%d is %d wide, sumdb/tlog says %d", size, tile.L, tile.N, w, tile.W)
			}
			if got, err := servedWidth(w, tile.W%TileWidth); err != nil || got != tile.W {
				t.Fatalf("tree of %d: tile %d/%d.p/%d served %d wide, %v", size, tile.L, tile.N, tile.W, got, err)
			}
			if w < TileWidth {
				if _, err := servedWidth(w, 0); err == nil {
					t.Fatalf("tree of %d: partial tile %d/%d served as a full one", size, tile.L, tile.N)
				}
				if _, err := servedWidth(w, w+1); err == nil {
					t.Fatalf("tree of %d: tile %d/%d served wider than the tree", size, tile.L, tile.N)
				}
			}
			if next := PartialTileWidth(uint(tile.L), uint64(tile.N)+1, size); next != 0 && w != TileWidth {
				t.Fatalf("tree of %d: tile %d/%d is partial but the next holds %d hashes", size, tile.L, tile.N, next)
			}
		}
	})
}
