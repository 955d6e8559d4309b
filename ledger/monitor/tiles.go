package monitor

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// tileHeight is C2SP tlog-tiles' tile height: 2^8 hashes per tile.
const tileHeight = 8

// tilePath is the C2SP tlog-tiles path of t under the log's prefix:
// tile/<L>/<N>[.p/<W>]. sumdb/tlog's own paths carry the height as well
// (tile/<H>/<L>/…); the index and partial-width encodings are the same.
func tilePath(t tlog.Tile) string {
	return "tile/" + strings.TrimPrefix(t.Path(), fmt.Sprintf("tile/%d/", t.H))
}

// tileReader fetches the hash tiles of one check. sumdb/tlog's interfaces
// take no context, so the check's context travels here. Tiles are kept
// for the check only: each check re-reads what it relies on.
type tileReader struct {
	ctx   context.Context
	m     *Monitor
	cache map[tlog.Tile][]byte
}

func (m *Monitor) newTileReader(ctx context.Context) *tileReader {
	return &tileReader{ctx: ctx, m: m, cache: make(map[tlog.Tile][]byte)}
}

func (r *tileReader) Height() int { return tileHeight }

func (r *tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		b, err := r.tile(t)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// SaveTiles is a no-op: nothing outlives the check.
func (r *tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

func (r *tileReader) tile(t tlog.Tile) ([]byte, error) {
	if b, ok := r.cache[t]; ok {
		return b, nil
	}
	want := t.W * tlog.HashSize
	b, err := r.m.get(r.ctx, "/log/"+tilePath(t), int64(want)+1)
	if err != nil {
		return nil, fmt.Errorf("fetch tile %s: %w", tilePath(t), err)
	}
	if len(b) != want {
		return nil, &Finding{Kind: TileMismatch, Reason: fmt.Sprintf("tile %s holds %d bytes, want %d", tilePath(t), len(b), want)}
	}
	r.cache[t] = b
	return b, nil
}

// unauthenticated reads stored hashes straight from the tiles of a tree of
// size n, trusting them: what the tiles say, to compare with a checkpoint.
func (r *tileReader) unauthenticated(n int64) tlog.HashReader {
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			t := tlog.TileForIndex(tileHeight, x)
			// The tile as wide as the tree makes it, so one fetch serves
			// every hash in it (the server has no other width once full).
			avail := n>>(uint(t.L)*tileHeight) - t.N<<tileHeight
			t.W = int(min(avail, 1<<tileHeight))
			b, err := r.tile(t)
			if err != nil {
				return nil, err
			}
			if out[i], err = tlog.HashFromTile(t, b, x); err != nil {
				return nil, err
			}
		}
		return out, nil
	})
}
