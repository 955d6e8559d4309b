package projections

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/chio-ledger/chio/internal/diskspace"
	"github.com/chio-ledger/chio/internal/pebblelog"
)

// Key layout. Every variable-length part that is followed by another part
// is length-prefixed (u16), so ids may hold any byte and prefix scans stay
// exact; numbers are fixed-width big-endian so keys sort numerically. Each
// stream owns its own prefixes: the three folds never write the same key,
// which is what lets them commit independently and still rebuild to the
// same bytes.
const (
	prefixMeta     = 'm' // m | name → value (store-wide settings)
	prefixPosition = 'p' // p | stream name → u64 last folded stream sequence

	// CHIO_TASKS
	prefixTask      = 't' // t | task id → taskHead JSON
	prefixTimeline  = 'T' // T | str(task id) | u64 commit seq → timelineRecord JSON (timeline.go)
	prefixHistory   = 'h' // h | str(task id) | u32 n → history message JSON
	prefixArtifact  = 'a' // a | str(task id) | u32 n → append flag byte | artifact JSON
	prefixTaskOrder = 'o' // o | u64 created seq | task id → state
	prefixTaskByCtx = 'x' // x | str(context id) | u64 created seq | task id → state

	// CHIO_EVENTS
	prefixLineage  = 'l' // l | capability id → CapabilityLineage JSON
	prefixAncestry = 'P' // P | principal → JSON array of the principals of its path's prefixes, root first, ending with it

	// CHIO_RECEIPTS
	prefixReceiptID    = 'r' // r | receipt id → u64 leaf index
	prefixReceiptLeaf  = 'L' // L | u64 leaf index | receipt id → receipt record
	prefixReceiptByCap = 'C' // C | str(capability id) | u64 leaf index | receipt id → empty
	prefixUnattributed = 'U' // U | u64 leaf index | receipt id → empty (no usable capability id)
	prefixGoverned     = 'G' // G | u64 leaf index | receipt id → authz.Governed JSON (governed receipts only)
	prefixCallStats    = 'S' // S | u64 minute (unix s) | kind byte | label → u64 count (stats.go)
)

// metaKernelKey records the kernel key the receipts were verified against:
// the verified flags are only meaningful for that key.
const metaKernelKey = "kernel_key"

// errNotFound is returned by reads of keys that do not exist.
var errNotFound = errors.New("not found")

// Memory of the store's Pebble database by default. The fold's reads are
// mostly of keys that do not exist (bloom filters answer them) and of
// tasks touched moments ago (still in the memtable), so the block cache
// serves the HTTP reads; 32 MiB holds their recent pages. RSS holds the
// cache once full and up to two memtables (the one filling, the one being
// flushed), so together about DefaultCacheSize + 2×DefaultMemTableSize.
const (
	DefaultCacheSize    = 32 << 20
	DefaultMemTableSize = 16 << 20
)

// storeMemory sizes the store's Pebble block cache and memtables (bytes).
type storeMemory struct{ cache, memTable int64 }

// store is the projections' Pebble database.
type store struct {
	db *pebble.DB
	// guard refuses a fold's commit while the filesystem is short of its
	// reserve: Pebble treats a failed WAL write as fatal.
	guard diskspace.Guard
}

// reserveFor is the free space a store with memtables of memTable bytes
// leaves on its filesystem: a flush of both memtables and a compaction's
// output.
func reserveFor(memTable int64) uint64 { return 2*uint64(memTable) + 32<<20 }

// writable returns why the store takes no fold now (its filesystem is
// short of the reserve), or nil.
func (s *store) writable() error { return s.guard.Check() }

// openStore opens (or creates) the store in dir. kernelKey is the trusted
// kernel key in wire form; a store that was folded trusting another key is
// refused, because its verified flags would be wrong.
func openStore(dir string, kernelKey string, mem storeMemory, log *slog.Logger) (*store, error) {
	opts := &pebble.Options{Logger: pebblelog.Logger{L: log}, CacheSize: mem.cache, MemTableSize: uint64(mem.memTable)}
	for i := range opts.Levels {
		// Most point reads during a fold are for keys that do not exist yet
		// (a new receipt id, a new capability id).
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].FilterType = pebble.TableFilter
		// The values are JSON (receipts, task heads, history, lineage):
		// zstd stores them in well under half of Snappy's bytes, for CPU
		// spent in flushes and compactions, off the fold's path.
		opts.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.ZstdCompression }
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open projection store %s: %w", dir, err)
	}
	s := &store{db: db, guard: diskspace.Guard{Store: "projection store", Dir: dir, Reserve: reserveFor(mem.memTable)}}
	if err := s.pinKernelKey(kernelKey); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open projection store %s: %w", dir, err)
	}
	return s, nil
}

func (s *store) pinKernelKey(kernelKey string) error {
	key := metaKey(metaKernelKey)
	got, err := s.get(key)
	switch {
	case errors.Is(err, errNotFound):
		if err := s.db.Set(key, []byte(kernelKey), pebble.Sync); err != nil {
			return fmt.Errorf("record kernel key: %w", err)
		}
		return nil
	case err != nil:
		return err
	case string(got) != kernelKey:
		return fmt.Errorf("%w: the store verified receipts against kernel key %s, not %s; rebuild it into an empty directory",
			ErrKernelKeyChanged, got, kernelKey)
	}
	return nil
}

func (s *store) close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close projection store: %w", err)
	}
	return nil
}

// empty reports whether the store holds nothing but its settings.
func (s *store) empty() (bool, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return false, fmt.Errorf("open iterator: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if it.Key()[0] != prefixMeta {
			return false, nil
		}
	}
	return true, it.Error()
}

// position returns the last stream sequence folded from stream.
func (s *store) position(stream string) (uint64, error) {
	v, err := s.get(positionKey(stream))
	if errors.Is(err, errNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return decodeU64(v)
}

// digest is the SHA-256 over every key and value in key order, each
// length-prefixed: two stores with the same digest hold the same state and
// the same positions.
func (s *store) digest() (string, error) {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(nil)
	if err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	defer it.Close()
	h := sha256.New()
	var n [4]byte
	for it.First(); it.Valid(); it.Next() {
		binary.BigEndian.PutUint32(n[:], uint32(len(it.Key())))
		h.Write(n[:])
		h.Write(it.Key())
		v, err := it.ValueAndErr()
		if err != nil {
			return "", fmt.Errorf("digest: %w", err)
		}
		binary.BigEndian.PutUint32(n[:], uint32(len(v)))
		h.Write(n[:])
		h.Write(v)
	}
	if err := it.Error(); err != nil {
		return "", fmt.Errorf("digest: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (s *store) get(key []byte) ([]byte, error) { return getFrom(s.db, key) }

// reader is what point reads go through: the DB, a snapshot or an
// indexed batch (which also sees its own writes).
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
}

// getFrom reads one key and copies the value out.
func getFrom(r reader, key []byte) ([]byte, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", key[:1], err)
	}
	out := bytes.Clone(v)
	_ = closer.Close()
	return out, nil
}

// Key helpers.

func metaKey(name string) []byte       { return append([]byte{prefixMeta}, name...) }
func positionKey(stream string) []byte { return append([]byte{prefixPosition}, stream...) }

// appendStr appends a u16 length and s.
func appendStr(k []byte, s string) []byte {
	k = binary.BigEndian.AppendUint16(k, uint16(len(s)))
	return append(k, s...)
}

func appendU64(k []byte, n uint64) []byte { return binary.BigEndian.AppendUint64(k, n) }
func appendU32(k []byte, n uint32) []byte { return binary.BigEndian.AppendUint32(k, n) }

func encodeU64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func decodeU64(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("corrupt u64 value of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// prefixEnd is the smallest key greater than every key starting with p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// maxKeyPart bounds an id that becomes a length-prefixed key part.
const maxKeyPart = 1<<16 - 1

// iterSource opens iterators: the DB, a snapshot or an indexed batch.
type iterSource interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

// view is a consistent source of reads.
type view interface {
	reader
	iterSource
}

// scan calls fn with every key and value under prefix, in key order. The
// slices are valid only during the call.
func scan(src iterSource, prefix []byte, fn func(k, v []byte) error) error {
	return scanUntil(src, prefix, func(k, v []byte) (bool, error) { return true, fn(k, v) })
}
