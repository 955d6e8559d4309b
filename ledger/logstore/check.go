package logstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/time/rate"
)

// CheckResult is what a Check read.
type CheckResult struct {
	Size    uint64 // the tree size checked
	Bundles uint64 // entry bundles read, each leaf hashed
	Tiles   uint64 // full tiles rehashed against the level above
	Root    []byte // the root the tiles give at Size
}

// Check reads the whole tree of the store's current size and checks it:
// every leaf of every entry bundle hashes to its entry in the level-0
// tile, every full tile hashes to its entry in the tile above, and the
// tiles give the state's root. Each read also passes Pebble's block
// checksums. pace, when not nil, is called before each bundle with the
// number of leaves it holds (a rate limiter's WaitN), and an error from it
// ends the check.
//
// A mismatch is an error wrapping ErrCorrupt that names the bundle or
// tile, and marks the store corrupt (Corrupt, readiness): what Pebble's
// checksums cannot see (a record written wrong, a tile that does not
// match its leaves) is found here. Appends may go on meanwhile: the part
// of the tree below the size taken at the start never changes.
func (s *Store) Check(ctx context.Context, pace func(ctx context.Context, leaves int) error) (CheckResult, error) {
	st := s.State()
	size := st.Size
	res := CheckResult{Size: size}
	r := s.newReader()
	r.fresh = true
	for b := uint64(0); b*TileWidth < size; b++ {
		n := int(min(size-b*TileWidth, TileWidth))
		if pace != nil {
			if err := pace(ctx, n); err != nil {
				return res, err
			}
		} else if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := s.checkBundle(r, b, n); err != nil {
			return res, s.found(err)
		}
		res.Bundles++
		if n == TileWidth {
			k, err := s.checkTilesAbove(r, b)
			res.Tiles += k
			if err != nil {
				return res, s.found(err)
			}
		}
		clear(r.tiles) // a bundle's tiles are not read again, but their parents are
	}
	fr := s.newReader()
	fr.fresh = true
	rng, err := s.treeRange(fr, size)
	if err != nil {
		return res, s.found(missing(err))
	}
	root, err := s.rootOf(rng)
	if err != nil {
		return res, err
	}
	res.Root = root
	if !bytes.Equal(root, st.Root) {
		return res, s.found(fmt.Errorf("%w: the root the tiles give at size %d, %x, is not the state's %x", ErrCorrupt, size, root, st.Root))
	}
	return res, nil
}

// checkBundle checks the first n leaves of entry bundle b against the
// level-0 tile b.
func (s *Store) checkBundle(r *reader, b uint64, n int) error {
	bundle, err := s.bundleAt(b)
	if err != nil {
		return missing(fmt.Errorf("read entry bundle %d: %w", b, err))
	}
	tile, err := r.tile(0, b)
	if err != nil {
		return missing(fmt.Errorf("read: %w", err))
	}
	if len(tile) < n*HashSize {
		return fmt.Errorf("%w: tile 0/%d holds %d hashes, the tree needs %d", ErrCorrupt, b, len(tile)/HashSize, n)
	}
	off := 0
	for i := range n {
		if off+2 > len(bundle) {
			return fmt.Errorf("%w: entry bundle %d holds %d entries, the tree needs %d", ErrCorrupt, b, i, n)
		}
		l := int(binary.BigEndian.Uint16(bundle[off:]))
		if off+2+l > len(bundle) {
			return fmt.Errorf("%w: entry bundle %d: entry %d overruns the bundle", ErrCorrupt, b, i)
		}
		leaf := bundle[off+2 : off+2+l]
		off += 2 + l
		if h := rfc6962.DefaultHasher.HashLeaf(leaf); !bytes.Equal(h, tile[i*HashSize:(i+1)*HashSize]) {
			return fmt.Errorf("%w: leaf %d (entry %d of bundle %d) does not hash to its entry in tile 0/%d", ErrCorrupt, b*TileWidth+uint64(i), i, b, b)
		}
	}
	return nil
}

// checkTilesAbove checks the full level-0 tile b against its entry in the
// tile above, and each tile it completes in turn against the one above it.
func (s *Store) checkTilesAbove(r *reader, b uint64) (checked uint64, err error) {
	var row [TileWidth * HashSize]byte
	for level, idx := uint(0), b; ; level, idx = level+1, idx/TileWidth {
		t, err := r.tile(level, idx)
		if err != nil {
			return checked, missing(fmt.Errorf("read: %w", err))
		}
		if len(t) != TileWidth*HashSize {
			return checked, fmt.Errorf("%w: tile %d/%d holds %d hashes, a full one %d", ErrCorrupt, level, idx, len(t)/HashSize, TileWidth)
		}
		parent, err := r.tile(level+1, idx/TileWidth)
		if err != nil {
			return checked, missing(fmt.Errorf("read the tile above %d/%d: %w", level, idx, err))
		}
		pos := int(idx % TileWidth)
		if len(parent) < (pos+1)*HashSize {
			return checked, fmt.Errorf("%w: tile %d/%d holds %d hashes, the full tile %d/%d below needs %d", ErrCorrupt, level+1, idx/TileWidth, len(parent)/HashSize, level, idx, pos+1)
		}
		if h := hashRow(row[:], t); !bytes.Equal(h, parent[pos*HashSize:(pos+1)*HashSize]) {
			return checked, fmt.Errorf("%w: tile %d/%d does not hash to its entry %d in tile %d/%d", ErrCorrupt, level, idx, pos, level+1, idx/TileWidth)
		}
		checked++
		if pos != TileWidth-1 {
			return checked, nil // the tile above is not full yet
		}
	}
}

// treeRange is the compact range of the tree of the given size, from its
// stored tiles (the frontier of compact.RangeNodes).
func (s *Store) treeRange(r *reader, size uint64) (*compact.Range, error) {
	ids := compact.RangeNodes(0, size, nil)
	hashes := make([][]byte, len(ids))
	var err error
	for i, id := range ids {
		if hashes[i], err = r.node(id.Level, id.Index, size); err != nil {
			return nil, fmt.Errorf("frontier: %w", err)
		}
	}
	rng, err := s.rf.NewRange(0, size, hashes)
	if err != nil {
		return nil, fmt.Errorf("frontier: %w", err)
	}
	return rng, nil
}

// missing makes a record the tree needs and the store does not hold a
// corruption.
func missing(err error) error {
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// found marks the store corrupt when err is a mismatch Check found, and
// returns err; the caller says so (Scrub logs it, the command prints it).
func (s *Store) found(err error) error {
	if errors.Is(err, ErrCorrupt) {
		err := fmt.Errorf("%w; rebuild the log from the events stream", err)
		s.corrupt.CompareAndSwap(nil, &err) // the first corruption found is the one readiness names
		return err
	}
	return err
}

// Scrub checks the store with Check in the background, leavesPerSecond at
// most, once when it starts and again each interval after a pass ends,
// until ctx ends. A pass that finds the store corrupt marks it (Corrupt)
// and ends the scrub; a read that fails otherwise is logged and the pass
// tried again at the next interval.
func (s *Store) Scrub(ctx context.Context, leavesPerSecond int, interval time.Duration) {
	if leavesPerSecond <= 0 {
		return
	}
	lim := rate.NewLimiter(rate.Limit(leavesPerSecond), TileWidth)
	for {
		start := time.Now()
		res, err := s.Check(ctx, lim.WaitN)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrCorrupt):
			s.log.Error("log store scrub: stopped at a corruption; rebuild the log", "size", res.Size, "bundles_checked", res.Bundles, "err", err)
			return // marked
		case err != nil:
			s.log.Warn("log store scrub: a read failed; trying again later", "size", res.Size, "bundles_checked", res.Bundles, "err", err)
		default:
			s.log.Info("log store scrubbed: every leaf and tile checked", "size", res.Size, "bundles", res.Bundles, "tiles", res.Tiles, "took", time.Since(start).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
