package logstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cockroachdb/pebble/v2"
	"sync"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// ErrBeyondCheckpoint is returned for tiles, bundles and proofs that no
// signed checkpoint implies yet.
var ErrBeyondCheckpoint = errors.New("beyond the latest signed checkpoint")

// reader reads tiles once per request: a proof touches at most a few tiles,
// several nodes of each.
type reader struct {
	s     *Store
	tiles map[[2]uint64][]byte
	fresh bool                       // read every tile from the store, past the node cache (Check)
	row   [TileWidth * HashSize]byte // scratch for rehashing one tile row
}

func (s *Store) newReader() *reader { return &reader{s: s, tiles: map[[2]uint64][]byte{}} }

func (r *reader) tile(level uint, index uint64) ([]byte, error) {
	k := [2]uint64{uint64(level), index}
	if t, ok := r.tiles[k]; ok {
		return t, nil
	}
	t, err := r.s.get(tileKey(level, index))
	if err != nil {
		return nil, fmt.Errorf("tile %d/%d: %w", level, index, err)
	}
	r.tiles[k] = t
	return t, nil
}

// node returns the hash of the perfect subtree (level, index), which must lie
// inside a tree of the given size. Levels that are multiples of 8 are stored
// in tiles; others are recomputed from the tile row below them.
func (r *reader) node(level uint, index uint64, size uint64) ([]byte, error) {
	if level >= 64 || (index+1)<<level > size || index > (size>>level) {
		return nil, fmt.Errorf("node %d/%d is not inside a tree of size %d", level, index, size)
	}
	tl, sub := level/TileHeight, level%TileHeight
	cacheable := tl > 0 && !r.fresh // upper levels: few nodes, on every proof
	if cacheable {
		if h, ok := r.s.nodes.get(level, index); ok {
			return h, nil
		}
	}
	first := index << sub // first hash of the node at tile row 8·tl
	t, err := r.tile(tl, first/TileWidth)
	if err != nil {
		return nil, err
	}
	off, n := int(first%TileWidth), 1<<sub
	if len(t) < (off+n)*HashSize {
		return nil, fmt.Errorf("%w: tile %d/%d holds %d hashes, node %d/%d needs %d", ErrCorrupt, tl, first/TileWidth, len(t)/HashSize, level, index, off+n)
	}
	h := hashRow(r.row[:n*HashSize], t[off*HashSize:(off+n)*HashSize])
	if cacheable {
		r.s.nodes.put(level, index, h)
	}
	return h, nil
}

// hashRow returns the root of the perfect subtree over the hashes in row
// (a power of two of them), computed in scratch. A proof recomputes up to
// 247 interior nodes of its leaf's tile, so this is the proof's hot path:
// hashing in place with sha256.Sum256 allocates nothing per node, where
// rfc6962.DefaultHasher.HashChildren allocates a digest and its sum.
func hashRow(scratch, row []byte) []byte {
	if len(row) == HashSize {
		return bytes.Clone(row)
	}
	copy(scratch, row)
	var in [1 + 2*HashSize]byte
	in[0] = rfc6962.RFC6962NodeHashPrefix
	for n := len(row) / HashSize; n > 1; n /= 2 {
		for i := 0; i < n/2; i++ {
			copy(in[1:], scratch[2*i*HashSize:(2*i+2)*HashSize])
			sum := sha256.Sum256(in[:])
			copy(scratch[i*HashSize:], sum[:])
		}
	}
	return bytes.Clone(scratch[:HashSize])
}

// nodeCache keeps the hashes proofs read or recompute from tiles of level 1
// and up, so a proof reads at most one tile (its level-0 tile) from Pebble. A perfect subtree's hash never changes, so the
// cache never needs invalidating; it is bounded by not adding once full
// (at 1<<18 nodes it covers every such node of a 64-million-leaf log).
type nodeCache struct {
	mu sync.RWMutex
	m  map[[2]uint64][]byte
}

const maxCachedNodes = 1 << 18

func (c *nodeCache) get(level uint, index uint64) ([]byte, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, ok := c.m[[2]uint64{uint64(level), index}]
	return h, ok
}

func (c *nodeCache) put(level uint, index uint64, h []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[2]uint64][]byte{}
	}
	if len(c.m) < maxCachedNodes {
		c.m[[2]uint64{uint64(level), index}] = h
	}
}

func (r *reader) nodes(ids []compact.NodeID, size uint64) ([][]byte, error) {
	hashes := make([][]byte, len(ids))
	for i, id := range ids {
		h, err := r.node(id.Level, id.Index, size)
		if err != nil {
			return nil, err
		}
		hashes[i] = h
	}
	return hashes, nil
}

// checkpointedSize is the size of the latest signed checkpoint.
func (s *Store) checkpointedSize() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.latest == nil {
		return 0
	}
	return s.state.Size // a checkpoint is stored with every commit that grows the tree
}

// Tile returns tile (level, index) as served by tlog-tiles: width 0 asks for
// the full tile, 1–255 for a partial one. Only widths implied by the latest
// checkpoint are served.
func (s *Store) Tile(level uint, index uint64, width int) ([]byte, error) {
	if level > MaxTileLevel {
		return nil, fmt.Errorf("tile level %d: %w", level, ErrNotFound)
	}
	w, err := servedWidth(PartialTileWidth(level, index, s.checkpointedSize()), width)
	if err != nil {
		return nil, err
	}
	t, err := s.get(tileKey(level, index))
	if err != nil {
		return nil, err
	}
	if len(t) < w*HashSize {
		return nil, fmt.Errorf("tile %d/%d holds %d hashes, its checkpointed width is %d", level, index, len(t)/HashSize, w)
	}
	return t[:w*HashSize], nil
}

// EntryBundle returns entry bundle index, full (width 0) or partial.
func (s *Store) EntryBundle(index uint64, width int) ([]byte, error) {
	w, err := servedWidth(PartialTileWidth(0, index, s.checkpointedSize()), width)
	if err != nil {
		return nil, err
	}
	b, err := s.bundleAt(index)
	if err != nil {
		return nil, err
	}
	end, err := bundlePrefix(b, w)
	if err != nil {
		return nil, fmt.Errorf("entry bundle %d: %w", index, err)
	}
	return b[:end], nil
}

// servedWidth resolves a requested width (0 = full) against the width the
// latest checkpoint implies.
func servedWidth(avail, width int) (int, error) {
	if avail == 0 || (width == 0 && avail < TileWidth) || width > avail {
		return 0, ErrBeyondCheckpoint
	}
	if width == 0 {
		return TileWidth, nil
	}
	return width, nil
}

// bundlePrefix returns the byte length of the first n entries of a bundle.
func bundlePrefix(b []byte, n int) (int, error) {
	off := 0
	for i := 0; i < n; i++ {
		if off+2 > len(b) {
			return 0, fmt.Errorf("bundle holds fewer than %d entries", n)
		}
		off += 2 + int(binary.BigEndian.Uint16(b[off:]))
		if off > len(b) {
			return 0, errors.New("bundle entry overruns the bundle")
		}
	}
	return off, nil
}

// Entry returns the leaf bytes at index. It copies that leaf alone, not
// the bundle around it: a page of N receipts costs N leaves of memory,
// not N bundles of up to 256.
func (s *Store) Entry(index uint64) ([]byte, error) {
	if index >= s.State().Size {
		return nil, ErrNotFound
	}
	bi, pos := index/TileWidth, int(index%TileWidth)
	s.mu.RLock()
	if s.state.Size%TileWidth != 0 && bi == s.state.Size/TileWidth {
		leaf, err := leafOf(s.bundle, pos)
		s.mu.RUnlock()
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", index, err)
		}
		return leaf, nil
	}
	s.mu.RUnlock()
	leaf, err := s.readEntry(bi, pos)
	if err != nil {
		return nil, fmt.Errorf("entry %d: %w", index, err)
	}
	return leaf, nil
}

// leafOf returns a copy of entry pos of an encoded bundle or segment.
func leafOf(b []byte, pos int) ([]byte, error) {
	start, err := bundlePrefix(b, pos)
	if err != nil {
		return nil, err
	}
	end, err := bundlePrefix(b[start:], 1)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(b[start+2 : start+end]), nil
}

// readEntry reads entry pos of stored bundle bi: from the segment that
// holds it (the last whose first entry is at or before pos), or from a
// layout-2 record of the whole bundle.
func (s *Store) readEntry(bi uint64, pos int) ([]byte, error) {
	lo := bundleKey(bi)
	db, done, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: bundleKey(bi + 1)})
	if err != nil {
		return nil, fmt.Errorf("read bundle %d: %w", bi, err)
	}
	defer it.Close()
	// Forward only: a reverse seek copies the value it lands on, a whole
	// bundle. The keys are walked first (a bundle has at most 256
	// segments, nearly always 1), then the one holding pos is read.
	var target []byte
	first := 0
	for ok := it.First(); ok; ok = it.Next() {
		k, f := it.Key(), 0
		if len(k) == len(lo)+1 {
			f = int(k[len(lo)])
		}
		if f > pos {
			break
		}
		target, first = append(target[:0], k...), f
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("read bundle %d: %w", bi, err)
	}
	if target == nil {
		return nil, ErrNotFound
	}
	if !it.SeekGE(target) || !bytes.Equal(it.Key(), target) {
		if err := it.Error(); err != nil {
			return nil, fmt.Errorf("read bundle %d: %w", bi, err)
		}
		return nil, fmt.Errorf("read bundle %d: segment %d went away", bi, first)
	}
	return leafOf(it.Value(), pos-first)
}

// InclusionProof returns the stored leaf hash of leaf index and its RFC 6962
// audit path in the tree of the given size, which must be a checkpointed
// size. Both come from one reader, so the leaf's tile is read once.
func (s *Store) InclusionProof(index, size uint64) (leafHash []byte, path [][]byte, err error) {
	if size > s.checkpointedSize() {
		return nil, nil, ErrBeyondCheckpoint
	}
	if index >= size {
		return nil, nil, fmt.Errorf("leaf %d is not in a tree of size %d", index, size)
	}
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, nil, fmt.Errorf("plan inclusion proof: %w", err)
	}
	r := s.newReader()
	if leafHash, err = r.node(0, index, size); err != nil {
		return nil, nil, err
	}
	path, err = rehash(r, nodes, size)
	return leafHash, path, err
}

// ConsistencyProof returns the RFC 6962 proof that the tree of size from is a
// prefix of the tree of size to.
func (s *Store) ConsistencyProof(from, to uint64) ([][]byte, error) {
	if to > s.checkpointedSize() {
		return nil, ErrBeyondCheckpoint
	}
	if from > to {
		return nil, fmt.Errorf("consistency from %d to %d: from is larger", from, to)
	}
	nodes, err := proof.Consistency(from, to)
	if err != nil {
		return nil, fmt.Errorf("plan consistency proof: %w", err)
	}
	return rehash(s.newReader(), nodes, to)
}

func rehash(r *reader, nodes proof.Nodes, size uint64) ([][]byte, error) {
	hashes, err := r.nodes(nodes.IDs, size)
	if err != nil {
		return nil, err
	}
	p, err := nodes.Rehash(hashes, rfc6962.DefaultHasher.HashChildren)
	if err != nil {
		return nil, fmt.Errorf("rehash proof: %w", err)
	}
	return p, nil
}

// Entries calls f for each leaf in [from, to), reading each bundle once.
func (s *Store) Entries(from, to uint64, f func(index uint64, leaf []byte) error) error {
	if to > s.State().Size {
		return fmt.Errorf("entries up to %d: %w", to, ErrNotFound)
	}
	for bi := from / TileWidth; from < to; bi++ {
		b, err := s.bundleAt(bi)
		if err != nil {
			return fmt.Errorf("entry bundle %d: %w", bi, err)
		}
		off := 0
		for i := bi * TileWidth; i < (bi+1)*TileWidth && i < to; i++ {
			if off+2 > len(b) {
				return fmt.Errorf("entry bundle %d ends before entry %d", bi, i)
			}
			n := int(binary.BigEndian.Uint16(b[off:]))
			if off+2+n > len(b) {
				return fmt.Errorf("entry %d overruns bundle %d", i, bi)
			}
			if i >= from {
				if err := f(i, b[off+2:off+2+n]); err != nil {
					return err
				}
			}
			off += 2 + n
		}
		from = (bi + 1) * TileWidth
	}
	return nil
}
