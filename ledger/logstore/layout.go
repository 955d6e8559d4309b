package logstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// C2SP tlog-tiles geometry: tiles are 2^8 hashes wide, so tile level L holds
// tree level 8L, and entry bundles hold 256 entries.
const (
	TileHeight = 8
	TileWidth  = 1 << TileHeight
	HashSize   = 32
	// MaxTileLevel is the highest level a tile path may name (L is 0–63).
	MaxTileLevel = 63
)

// EncodeTileIndex writes N as 3-digit groups with an x prefix on all but the
// last (1234067 → x001/x234/067), as tlog-tiles requires.
func EncodeTileIndex(n uint64) string {
	s := fmt.Sprintf("%03d", n%1000)
	for n /= 1000; n > 0; n /= 1000 {
		s = fmt.Sprintf("x%03d/%s", n%1000, s)
	}
	return s
}

// ParseTileIndex parses the path elements of a tile index and an optional
// ".p/W" partial width (0 means a full tile). It refuses anything that is
// not the one canonical encoding, so each tile has exactly one URL.
func ParseTileIndex(elems []string) (index uint64, width int, err error) {
	if len(elems) == 0 {
		return 0, 0, errors.New("tile index: empty")
	}
	last := len(elems) - 1
	if len(elems) >= 2 && elems[last-1] != "" && strings.HasSuffix(elems[last-1], ".p") {
		w, err := strconv.Atoi(elems[last])
		if err != nil || w < 1 || w >= TileWidth || strconv.Itoa(w) != elems[last] {
			return 0, 0, fmt.Errorf("tile index: partial width %q is not 1–255", elems[last])
		}
		width = w
		elems = append(elems[:last-1:last-1], strings.TrimSuffix(elems[last-1], ".p"))
		last = len(elems) - 1
	}
	if len(elems) > 7 { // 2^64 has 20 digits: at most 7 groups
		return 0, 0, errors.New("tile index: too many path elements")
	}
	for i, e := range elems {
		if i < last {
			if len(e) != 4 || e[0] != 'x' {
				return 0, 0, fmt.Errorf("tile index: element %q is not xNNN", e)
			}
			e = e[1:]
		}
		if len(e) != 3 || strings.Trim(e, "0123456789") != "" {
			return 0, 0, fmt.Errorf("tile index: element %q is not three digits", e)
		}
		d, _ := strconv.ParseUint(e, 10, 64)
		if index > (^uint64(0)-d)/1000 {
			return 0, 0, errors.New("tile index: overflows 64 bits")
		}
		index = index*1000 + d
	}
	if len(elems) > 1 && elems[0] == "x000" {
		return 0, 0, errors.New("tile index: leading zero group")
	}
	return index, width, nil
}

// PartialTileWidth is the width of tile (level, index) in a tree of the given
// size: TileWidth for a full tile, 1–255 for the right edge, 0 when the tree
// holds no hash of that tile.
func PartialTileWidth(level uint, index, size uint64) int {
	shift := uint(TileHeight) * level
	if shift >= 64 {
		return 0
	}
	n := size >> shift // number of hashes at tree level 8·level
	start := index * TileWidth
	if index > (^uint64(0))/TileWidth || n <= start {
		return 0
	}
	if n-start >= TileWidth {
		return TileWidth
	}
	return int(n - start)
}
