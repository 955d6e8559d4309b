// Package logstore is the ledger's Pebble-backed Merkle log: C2SP tiles and
// entry bundles, signed checkpoints, the exact dedup index and the receipt
// index, all written in one synced batch per ledger batch.
//
// One process writes (Pebble locks its directory); any number of goroutines
// read. Invariants, each checked by tests:
//   - the state record, tiles, bundles, indexes and the checkpoint for a new
//     size are committed atomically with pebble.Sync;
//   - on Open the root recomputed from stored tiles must equal the state
//     record's root and the latest stored checkpoint, or Open fails;
//   - a checkpoint is stored only for a size the tree has just grown to, so
//     no size ever has two checkpoints;
//   - every leaf is written once, in the bundle segment of the batch that
//     appended it (see Layout).
package logstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/chio-ledger/chio/internal/diskspace"
	"github.com/chio-ledger/chio/internal/pebblelog"
)

// Key prefixes. Every numeric part is fixed-width big-endian so keys sort in
// append order and flushed sstables do not overlap.
const (
	prefixState      = 's' // single state record
	prefixTile       = 't' // t | u8 level | u64 index → tile hashes (partial tiles grow in place)
	prefixBundle     = 'e' // e | u64 index | u8 first → entries first.. of a bundle, as one batch appended them (uint16-length-prefixed leaves)
	prefixEdgeLeaf   = 'l' // layout 2 only: l | u64 leaf index → a leaf of the incomplete right-edge bundle
	prefixCheckpoint = 'c' // c | u64 size → signed checkpoint note
	prefixStatement  = 'k' // k | u64 checkpoint_seq → chio.checkpoint_statement.v1 JSON
	prefixDedup      = 'd' // d | event id → u64 leaf index of its receipt; empty while the call has none
	prefixReceipt    = 'r' // r | receipt id → u64 leaf index
	prefixPending    = 'p' // p | receipt id → caller's pending record
	prefixSummary    = 'm' // m | u64 index → Summary JSON, for queries
	prefixByCap      = 'C' // C | capability id | 0 | u64 index
	prefixByServer   = 'S' // S | tool server | 0 | u64 index
	prefixByTool     = 'T' // T | tool server | 0 | tool name | 0 | u64 index
	prefixByOwner    = 'P' // P | principal | 0 | u64 index: every prefix of the call's authority path
	prefixEdgeCred   = 'E' // E | credential id → canonical chio.edge_credential.v1 that signed folded events
)

// Layout is the version of the key layout this package writes, recorded
// in the state record. Layout 2 added the per-principal receipt index
// (prefixByOwner) that scopes reads to tenants; a store of an older layout
// is refused on Open, since that index cannot be derived from the leaves
// (a receipt does not carry its delegation chain).
//
// Layout 3 writes every leaf once. Layout 2 kept the right edge's leaves
// under their own keys (prefixEdgeLeaf) and wrote them all again as one
// record (e | u64 index) when their bundle completed, so each leaf crossed
// Pebble's WAL, memtable and compactions twice. Layout 3 stores a bundle as
// segments, e | u64 index | u8 first, each holding the leaves one batch
// appended to it, in that batch; a complete bundle is its segments in key
// order (one when a batch covered it whole, as under load). Readers take
// either form: a 9-byte key is a layout-2 complete bundle, which stays as
// it is. Open migrates a layout-2 store's right edge (its prefixEdgeLeaf
// leaves and any older partial record) into one segment, in one synced
// batch that also records layout 3, so only complete bundles keep the old
// form and nothing else reads prefixEdgeLeaf.
const Layout = 3

// oldestLayout is the oldest layout Open accepts (migrating it).
const oldestLayout = 2

// ErrOldLayout is returned by Open for a store written by an older layout.
var ErrOldLayout = errors.New("store layout is older than this release")

// ErrNotFound is returned when a requested record does not exist.
var ErrNotFound = errors.New("not found")

// State is the log's persistent head, rewritten in every batch.
type State struct {
	Size uint64 `json:"size"`
	Root []byte `json:"root"`
	// StreamSeq is the last JetStream sequence folded into the log.
	StreamSeq uint64 `json:"stream_seq"`
	// EventsStream is the schemas.StreamIdentity of the stream StreamSeq
	// is a position in; empty in a log of an older release.
	EventsStream string `json:"events_stream,omitempty"`
	// CheckpointSeq numbers chio.checkpoint_statement.v1 records.
	CheckpointSeq uint64 `json:"checkpoint_seq"`
	// Layout is the key layout the store was written with (see Layout);
	// absent (0) in stores from before layouts were numbered.
	Layout int `json:"layout,omitempty"`
}

// Summary is the per-leaf record queries filter on.
type Summary struct {
	ReceiptID    string `json:"id"`
	Timestamp    uint64 `json:"t"`
	CapabilityID string `json:"c"`
	ToolServer   string `json:"s"`
	ToolName     string `json:"n"`
	Verdict      string `json:"v"`
	// Principals names every prefix of the authority path of the
	// capability the call was made with (schemas.PathPrincipals), root
	// first; empty when no capability verified. Reads are scoped by it.
	Principals []string `json:"p,omitempty"`
}

// Store is an open log.
type Store struct {
	dbmu sync.Mutex // guards cur, and is held for nothing else
	cur  *dbRef     // nil while Recover reopens the database
	log  *slog.Logger
	// corrupt is the first on-disk corruption Pebble found (corruption):
	// set from Pebble's read paths, which may hold mu, so it has no lock.
	corrupt atomic.Pointer[error]
	dir     string
	opts    options
	guard   diskspace.Guard

	wmu    sync.Mutex   // held by the one open Txn
	mu     sync.RWMutex // guards the fields below
	state  State
	rng    *compact.Range  // frontier of [0, state.Size)
	edge   map[uint][]byte // right-edge tile per tile level (its index follows from the size)
	bundle []byte          // right-edge entry bundle, as its segments in Pebble hold it
	latest []byte          // latest checkpoint note
	rf     *compact.RangeFactory
	nodes  nodeCache // recomputed upper-level subtree hashes, for proofs
	// broken is why the database can take no more writes (Pebble met a
	// write error it treats as fatal); Recover reopens it.
	broken error
}

// Option configures Open.
type Option func(*options)

type options struct {
	log              *slog.Logger
	checkpoints      CheckpointVerifier
	cache, memtables int64
	reserve          uint64
	reserveSet       bool
	readOnly         bool
}

// DefaultReserveBytes is the free space a store leaves on its filesystem:
// below it Commit refuses the batch (ErrNoSpace) instead of letting Pebble
// meet ENOSPC in its WAL or MANIFEST, which it treats as fatal. It covers a
// flush of both default memtables and a compaction's output.
const DefaultReserveBytes = 2*DefaultMemTableBytes + 32<<20

// WithReserve sets the free space the store leaves on its filesystem
// (DefaultReserveBytes by default; 0 turns the check off).
func WithReserve(bytes uint64) Option {
	return func(o *options) { o.reserve, o.reserveSet = bytes, true }
}

// Default memory of a store: Pebble's block cache and memtable size.
// Built without cgo, both are Go heap, so they bound most of the store's
// share of the process's memory; the cache holds the tree's right edge and
// recent bundles, which is what appends and fresh proofs read.
const (
	DefaultCacheBytes    = 128 << 20
	DefaultMemTableBytes = 32 << 20
)

// WithMemory sizes the store's block cache and memtables (bytes; 0 keeps
// the default).
func WithMemory(cache, memtables int64) Option {
	return func(o *options) { o.cache, o.memtables = cache, memtables }
}

// WithReadOnly opens the store read-only, for an offline check: Open
// fails with ErrNoStore where dir holds no store, instead of creating
// one, and nothing is written (no WAL flush, no migration: a store of an
// older layout is refused, for the ledger to migrate when it starts).
func WithReadOnly() Option { return func(o *options) { o.readOnly = true } }

// ErrNoStore: WithReadOnly, and no store in the directory.
var ErrNoStore = errors.New("no log store here")

// CheckpointVerifier checks a stored checkpoint note on Open and returns the
// size and root it commits to.
type CheckpointVerifier func(note []byte) (size uint64, root []byte, err error)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithCheckpointVerifier makes Open verify the latest stored checkpoint with
// v and compare it with the recomputed tree. Without it Open only compares
// the state record with the tiles.
func WithCheckpointVerifier(v CheckpointVerifier) Option {
	return func(o *options) { o.checkpoints = v }
}

// Open opens (or creates) the log in dir and checks its integrity.
func Open(dir string, opts ...Option) (*Store, error) {
	o := options{log: slog.Default(), cache: DefaultCacheBytes, memtables: DefaultMemTableBytes}
	for _, f := range opts {
		f(&o)
	}
	if o.cache <= 0 {
		o.cache = DefaultCacheBytes
	}
	if o.memtables <= 0 {
		o.memtables = DefaultMemTableBytes
	}
	if !o.reserveSet {
		o.reserve = DefaultReserveBytes
	}
	s := &Store{dir: dir, opts: o, log: o.log, guard: diskspace.Guard{Store: "log store", Dir: dir, Reserve: o.reserve}}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

// open opens the Pebble database in s.dir and loads the log from it,
// checking its integrity. s is not shared yet.
func (s *Store) open() error {
	opts := pebbleOptions(s.opts)
	opts.EventListener = &pebble.EventListener{DataCorruption: s.corruption}
	opts.ReadOnly = s.opts.readOnly
	db, err := pebble.Open(s.dir, opts)
	if s.opts.readOnly && errors.Is(err, pebble.ErrDBDoesNotExist) {
		return fmt.Errorf("open log store %s: %w", s.dir, ErrNoStore)
	}
	if err != nil {
		return fmt.Errorf("open log store %s: %w", s.dir, err)
	}
	s.cur, s.edge, s.rf = &dbRef{db: db}, map[uint][]byte{}, &compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}
	if err := s.load(s.opts.checkpoints); err != nil {
		_ = db.Close()
		s.cur = nil
		return fmt.Errorf("open log store %s: %w", s.dir, err)
	}
	return nil
}

// dbRef is the open database and how many reads are using it, so that
// Recover closes it only once they are done.
type dbRef struct {
	db   *pebble.DB
	refs atomic.Int64
}

// errReopening is what reads get while Recover reopens the database.
var errReopening = errors.New("log store is being reopened")

// acquire returns the database for one read, and what to call when the
// read is done.
func (s *Store) acquire() (*pebble.DB, func(), error) {
	s.dbmu.Lock()
	r := s.cur
	if r != nil {
		r.refs.Add(1)
	}
	s.dbmu.Unlock()
	if r == nil {
		return nil, nil, &unavailableError{errReopening}
	}
	return r.db, func() { r.refs.Add(-1) }, nil
}

// ErrUnavailable matches the errors of a store that takes no writes for
// now: its filesystem has less free space than the reserve, or Pebble
// failed a write and the database must be reopened (Recover). Nothing of
// the refused batch is durable; the caller retries it once Err is nil.
var ErrUnavailable = errors.New("log store unavailable")

// unavailableError marks err as ErrUnavailable, keeping err's message.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string        { return e.err.Error() }
func (e *unavailableError) Unwrap() error        { return e.err }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// Err returns why the store takes no writes now (its filesystem is short
// of the reserve, or its database failed a write and is not reopened yet),
// or nil: the storage readiness of the ledger.
func (s *Store) Err() error {
	s.mu.RLock()
	broken := s.broken
	s.mu.RUnlock()
	if broken != nil {
		return broken
	}
	if err := s.guard.Check(); err != nil {
		return &unavailableError{err}
	}
	return nil
}

// ErrCorrupt marks the error of a store Pebble found corrupt on disk.
var ErrCorrupt = errors.New("log store is corrupt on disk")

// corruption is Pebble's DataCorruption event: a checksum that did not
// match in a read, a compaction or at open. The read that met it fails
// (nothing wrong is served); the store is marked, for readiness, and the
// file and key range are logged. Pebble's default would end the process
// at the first such read. The cure is a rebuild from the events stream.
func (s *Store) corruption(info pebble.DataCorruptionInfo) {
	err := fmt.Errorf("%w: %s, keys %s: %v; rebuild the log from the events stream", ErrCorrupt, info.Path, info.Bounds, info.Details)
	if s.corrupt.CompareAndSwap(nil, &err) {
		s.log.Error("log store is corrupt on disk: reads of this range fail; rebuild the log", "file", info.Path, "keys", info.Bounds.String(), "err", info.Details)
	}
}

// Corrupt is why the store is known corrupt on disk (wrapping
// ErrCorrupt), or nil.
func (s *Store) Corrupt() error {
	if p := s.corrupt.Load(); p != nil {
		return *p
	}
	return nil
}

// Free returns the free bytes of the store's filesystem.
func (s *Store) Free() (uint64, error) { return diskspace.Free(s.dir) }

// Reserve returns the free space the store leaves on its filesystem.
func (s *Store) Reserve() uint64 { return s.guard.Reserve }

// commitBatch commits b durably. Pebble treats a failed WAL write as
// fatal (its logger's Fatalf, which panics): the panic is caught here and,
// like any commit error, leaves the store broken until Recover reopens it.
func (s *Store) commitBatch(b *pebble.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble: %v", r)
		}
		if err != nil {
			err = s.fail(err)
		}
	}()
	return b.Commit(pebble.Sync)
}

// fail records that the database failed a write.
func (s *Store) fail(err error) error {
	if diskspace.IsNoSpace(err) {
		free, _ := diskspace.Free(s.dir)
		err = &diskspace.Error{Store: "log store", Free: free, Reserve: s.guard.Reserve, Err: err}
	} else {
		err = fmt.Errorf("log store: write failed, reopening needed: %w", err)
	}
	s.log.Error("log store: a write failed; no more batches until it is reopened", "err", err)
	ue := &unavailableError{err}
	s.mu.Lock()
	s.broken = ue
	s.mu.Unlock()
	return ue
}

// reopenWait bounds how long Recover waits for reads of the failed
// database to finish before closing it anyway.
const reopenWait = 10 * time.Second

// Recover makes a broken store usable again once its filesystem has the
// reserve free: it closes the failed database and opens it anew, which
// replays its WAL up to the last synced batch and checks the log's
// integrity as Open does (the recomputed root against the state record
// and the latest checkpoint). Nothing a failed commit wrote counts: the
// log is what the last successful commit left. For a store that is not
// broken it returns Err at once; a broken one stays broken while space is
// short. Nil means the store takes writes.
func (s *Store) Recover() error {
	s.wmu.Lock() // no batch is open while the database changes
	defer s.wmu.Unlock()
	s.mu.RLock()
	broken := s.broken
	s.mu.RUnlock()
	if broken == nil {
		return s.Err()
	}
	// Closing flushes the memtables: with less room than that, Close
	// would wait for a flush that cannot finish.
	free, total, err := diskspace.Stat(s.dir)
	if err != nil || free < max(diskspace.Effective(s.guard.Reserve, total), 2*uint64(s.opts.memtables)) {
		return broken
	}
	s.dbmu.Lock()
	old := s.cur
	s.cur = nil
	s.dbmu.Unlock()
	if old != nil {
		for deadline := time.Now().Add(reopenWait); old.refs.Load() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		closeFailed(old.db, s.log)
	}
	fresh := &Store{dir: s.dir, opts: s.opts, log: s.log, guard: s.guard}
	if err := fresh.open(); err != nil {
		ue := &unavailableError{fmt.Errorf("log store: reopen after a failed write: %w", err)}
		s.mu.Lock()
		s.broken = ue
		s.mu.Unlock()
		return ue
	}
	s.mu.Lock()
	s.state, s.rng, s.edge, s.bundle, s.latest, s.rf = fresh.state, fresh.rng, fresh.edge, fresh.bundle, fresh.latest, fresh.rf
	s.broken = nil
	s.mu.Unlock()
	s.dbmu.Lock()
	s.cur = fresh.cur
	s.dbmu.Unlock()
	s.log.Info("log store reopened", "size", fresh.state.Size, "stream_seq", fresh.state.StreamSeq)
	return nil
}

// closeFailed closes a database that failed a write; Pebble may panic or
// complain closing it, and either is only logged: what matters is that
// its directory lock is released for the reopen.
func closeFailed(db *pebble.DB, log *slog.Logger) {
	defer func() {
		if r := recover(); r != nil {
			log.Warn("log store: close the failed database", "panic", r)
		}
	}()
	if err := db.Close(); err != nil {
		log.Warn("log store: close the failed database", "err", err)
	}
}

// pebbleOptions tunes Pebble for this workload: every event costs a few
// point lookups of keys that mostly do not exist (dedup, receipt id,
// pending), so every level gets a bloom filter, and the block cache holds
// the right edge of the tree and recent bundles.
func pebbleOptions(o options) *pebble.Options {
	opts := &pebble.Options{Logger: pebblelog.Logger{L: o.log}, CacheSize: o.cache, MemTableSize: uint64(o.memtables)}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].FilterType = pebble.TableFilter
	}
	return opts
}

// Close closes the store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dbmu.Lock()
	r := s.cur
	s.cur = nil
	s.dbmu.Unlock()
	if r == nil {
		return nil // a reopen failed: nothing is open
	}
	if err := r.db.Close(); err != nil {
		return fmt.Errorf("close log store: %w", err)
	}
	return nil
}

func (s *Store) load(verify CheckpointVerifier) error {
	raw, err := s.get([]byte{prefixState})
	switch {
	case errors.Is(err, ErrNotFound):
		s.rng = s.rf.NewEmptyRange(0)
		s.state.Root = rfc6962.DefaultHasher.EmptyRoot()
		s.state.Layout = Layout
		return nil
	case err != nil:
		return err
	}
	if err := json.Unmarshal(raw, &s.state); err != nil {
		return fmt.Errorf("decode state record: %w", err)
	}
	if s.state.Layout < oldestLayout {
		return fmt.Errorf("%w: it has layout %d (size %d), this release reads layouts %d and up, which index receipts by "+
			"authority path so that reads are scoped to tenants; rebuild it from the event stream into a new directory "+
			"(chio ledger rebuild --data-dir NEW: the same leaves, root and checkpoints' roots) and start the ledger on that directory",
			ErrOldLayout, s.state.Layout, s.state.Size, oldestLayout)
	}
	if s.state.Layout > Layout {
		return fmt.Errorf("store has layout %d, newer than this release's %d: run a newer release", s.state.Layout, Layout)
	}
	// Rebuild the frontier from stored tiles and recompute the root: corrupt
	// or missing tiles fail here, before anything new is appended.
	if s.rng, err = s.treeRange(s.newReader(), s.state.Size); err != nil {
		return fmt.Errorf("rebuild %w", err)
	}
	root, err := s.rootOf(s.rng)
	if err != nil {
		return err
	}
	if !bytes.Equal(root, s.state.Root) {
		return fmt.Errorf("%w: root recomputed from tiles %x differs from the state record %x at size %d", ErrCorrupt, root, s.state.Root, s.state.Size)
	}
	for level := uint(0); ; level++ {
		w := PartialTileWidth(level, 0, s.state.Size)
		if w == 0 {
			break
		}
		idx := (s.state.Size >> (TileHeight * level)) / TileWidth
		if PartialTileWidth(level, idx, s.state.Size) == 0 {
			continue // the right edge of this level is a just-completed tile
		}
		t, err := s.get(tileKey(level, idx))
		if err != nil {
			return fmt.Errorf("load right-edge tile %d/%d: %w", level, idx, err)
		}
		s.edge[level] = t
	}
	// An older layout is migrated in one batch, committed only once the
	// migrated store has passed every integrity check below: a store that
	// fails them (corrupt, or opened with the wrong key) is left as it was.
	var migration *pebble.Batch
	var migratedEdge []byte
	if s.state.Layout < Layout {
		if s.opts.readOnly {
			return fmt.Errorf("store has layout %d, which this release migrates to %d when the ledger starts: start the ledger once, or check it with the release that wrote it", s.state.Layout, Layout)
		}
		if migration, migratedEdge, err = s.migrateEdge(); err != nil {
			return fmt.Errorf("migrate layout %d to %d: %w", s.state.Layout, Layout, err)
		}
		defer migration.Close()
	}
	if s.state.Size%TileWidth != 0 {
		if migration != nil {
			s.bundle = migratedEdge
		} else if s.bundle, err = s.readBundle(s.state.Size / TileWidth); err != nil {
			return fmt.Errorf("load right-edge bundle: %w", err)
		}
		if n, err := bundleLen(s.bundle); err != nil || n != int(s.state.Size%TileWidth) {
			return fmt.Errorf("%w: right-edge bundle %d holds %d entries (%v), the tree size %d implies %d",
				ErrCorrupt, s.state.Size/TileWidth, n, err, s.state.Size, s.state.Size%TileWidth)
		}
		// What is cheap at open: the right edge's leaves against its tile
		// (the frontier above was checked against the state's root).
		if migration == nil {
			if err := s.checkBundle(s.newReader(), s.state.Size/TileWidth, int(s.state.Size%TileWidth)); err != nil {
				return fmt.Errorf("integrity: %w", err)
			}
		}
	}
	if s.latest, err = s.latestCheckpoint(); err != nil {
		return fmt.Errorf("load latest checkpoint: %w", err)
	}
	if verify != nil {
		size, croot, err := verify(s.latest)
		if err != nil {
			return fmt.Errorf("integrity: latest stored checkpoint: %w", err)
		}
		if size != s.state.Size || !bytes.Equal(croot, root) {
			return fmt.Errorf("%w: latest checkpoint (size %d, root %x) does not match the tree recomputed from tiles (size %d, root %x)", ErrCorrupt, size, croot, s.state.Size, root)
		}
	}
	if migration != nil {
		if err := s.commitBatch(migration); err != nil {
			return fmt.Errorf("migrate layout %d to %d: %w", s.state.Layout, Layout, err)
		}
		s.log.Info("log store migrated", "from_layout", s.state.Layout, "to_layout", Layout, "size", s.state.Size)
		s.state.Layout = Layout
	}
	return nil
}

func (s *Store) rootOf(r *compact.Range) ([]byte, error) {
	if r.End() == 0 {
		return rfc6962.DefaultHasher.EmptyRoot(), nil
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return nil, fmt.Errorf("compute root: %w", err)
	}
	return root, nil
}

// State returns a copy of the log head.
func (s *Store) State() State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.state
	st.Root = bytes.Clone(st.Root)
	return st
}

// LatestCheckpoint returns the newest signed checkpoint note (nil before the
// first one is stored).
func (s *Store) LatestCheckpoint() []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.latest
}

// Head returns the latest signed checkpoint note and the tree size it
// signs, read together.
func (s *Store) Head() (size uint64, note []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.Size, s.latest
}

// Checkpoint returns the signed checkpoint note stored for exactly size.
func (s *Store) Checkpoint(size uint64) ([]byte, error) { return s.get(checkpointKey(size)) }

func (s *Store) latestCheckpoint() ([]byte, error) {
	db, done, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixCheckpoint}, UpperBound: []byte{prefixCheckpoint + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if !it.Last() {
		return nil, ErrNotFound
	}
	return bytes.Clone(it.Value()), nil
}

// EdgeCredential returns the edge credential with the given id, as the
// ledger kept it (Txn.PutEdgeCredential), or ErrNotFound.
func (s *Store) EdgeCredential(id string) ([]byte, error) { return s.get(strKey(prefixEdgeCred, id)) }

// Statement returns the checkpoint statement with the given sequence number.
func (s *Store) Statement(seq uint64) ([]byte, error) { return s.get(u64Key(prefixStatement, seq)) }

// Summary returns the query summary of leaf idx.
func (s *Store) Summary(idx uint64) (Summary, error) {
	var sum Summary
	v, err := s.get(u64Key(prefixSummary, idx))
	if err != nil {
		return sum, fmt.Errorf("summary of leaf %d: %w", idx, err)
	}
	if err := json.Unmarshal(v, &sum); err != nil {
		return sum, fmt.Errorf("summary of leaf %d: %w", idx, err)
	}
	return sum, nil
}

// LeafIndex returns the leaf index of a receipt id in the committed log.
func (s *Store) LeafIndex(receiptID string) (uint64, error) {
	v, err := s.get(strKey(prefixReceipt, receiptID))
	if err != nil {
		return 0, err
	}
	idx, err := decodeU64(v)
	if err == nil && idx >= s.State().Size {
		return 0, ErrNotFound // its batch is durable but not yet the published head
	}
	return idx, err
}

// Lookup answers point reads of the indexes from one consistent view of the
// store. Unlike DB.Get it consults bloom filters on every level, bottom
// level included, which matters here: almost every lookup is for a key that
// does not exist yet (a new event id, a new receipt id). Not safe for
// concurrent use; Close it when done.
type Lookup struct {
	it   *pebble.Iterator
	done func()
	err  error
}

// NewLookup opens a Lookup on the committed state; an error opening it is
// returned by every read.
func (s *Store) NewLookup() *Lookup {
	db, done, err := s.acquire()
	if err != nil {
		return &Lookup{err: fmt.Errorf("open lookup: %w", err)}
	}
	it, err := db.NewIter(&pebble.IterOptions{UseL6Filters: true})
	if err != nil {
		done()
		return &Lookup{err: fmt.Errorf("open lookup: %w", err)}
	}
	return &Lookup{it: it, done: done}
}

// Close releases the view.
func (l *Lookup) Close() {
	if l.it != nil {
		_ = l.it.Close()
		l.it = nil
		l.done()
	}
}

func (l *Lookup) get(key []byte) ([]byte, bool, error) {
	if l.err != nil {
		return nil, false, l.err
	}
	if l.it.SeekPrefixGE(key) && bytes.Equal(l.it.Key(), key) {
		return l.it.Value(), true, nil
	}
	return nil, false, l.it.Error()
}

// EventSeen reports whether an event id is in the exact dedup index.
func (l *Lookup) EventSeen(id string) (bool, error) {
	_, ok, err := l.get(strKey(prefixDedup, id))
	return ok, err
}

// HasReceipt reports whether a receipt id is in the log.
func (l *Lookup) HasReceipt(id string) (bool, error) {
	_, ok, err := l.get(strKey(prefixReceipt, id))
	return ok, err
}

// Pending returns the pending record of a receipt id (ErrNotFound if none);
// the bytes are valid until the next call.
func (l *Lookup) Pending(id string) ([]byte, error) {
	v, ok, err := l.get(strKey(prefixPending, id))
	if err == nil && !ok {
		err = ErrNotFound
	}
	return v, err
}

// EventLeaf returns the leaf index of the receipt an event id belongs to;
// ok is false while the event's call has no receipt yet.
func (s *Store) EventLeaf(id string) (idx uint64, ok bool, err error) {
	v, err := s.get(strKey(prefixDedup, id))
	if err != nil || len(v) == 0 {
		return 0, false, err
	}
	idx, err = decodeU64(v)
	return idx, err == nil && idx < s.State().Size, err
}

// Pending returns the pending record stored for a receipt id.
func (s *Store) Pending(receiptID string) ([]byte, error) {
	return s.get(strKey(prefixPending, receiptID))
}

// ForEachPending calls f for every pending record, in key order.
func (s *Store) ForEachPending(f func(receiptID string, rec []byte) error) error {
	db, done, err := s.acquire()
	if err != nil {
		return err
	}
	defer done()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixPending}, UpperBound: []byte{prefixPending + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := f(string(it.Key()[1:]), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

func (s *Store) get(key []byte) ([]byte, error) {
	db, done, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", key[:1], err)
	}
	out := bytes.Clone(v)
	_ = closer.Close()
	return out, nil
}

func tileKey(level uint, index uint64) []byte {
	k := make([]byte, 10)
	k[0] = prefixTile
	k[1] = byte(level)
	binary.BigEndian.PutUint64(k[2:], index)
	return k
}

func bundleKey(index uint64) []byte { return u64Key(prefixBundle, index) }
func segmentKey(index uint64, first int) []byte {
	return append(u64Key(prefixBundle, index), byte(first))
}
func edgeLeafKey(index uint64) []byte     { return u64Key(prefixEdgeLeaf, index) }
func checkpointKey(size uint64) []byte    { return u64Key(prefixCheckpoint, size) }
func strKey(prefix byte, s string) []byte { return append([]byte{prefix}, s...) }

func u64Key(prefix byte, n uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], n)
	return k
}

func encodeU64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func decodeU64(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("corrupt index value of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// migrateEdge turns a layout-2 store into layout 3: its incomplete
// right-edge bundle, kept as leaves one by one (after, in stores older
// still, a partial record of its first part), becomes one segment, and the
// state record says layout 3, all in one synced batch. A crash before it
// commits leaves the layout-2 store as it was, to be migrated next time.
// Complete layout-2 bundles are read as they are.
func (s *Store) migrateEdge() (*pebble.Batch, []byte, error) {
	index := s.state.Size / TileWidth
	b := s.cur.db.NewBatch() // during Open: s is not shared yet
	fail := func(err error) (*pebble.Batch, []byte, error) { b.Close(); return nil, nil, err }
	var bundle []byte
	if s.state.Size%TileWidth != 0 {
		var err error
		bundle, err = s.get(bundleKey(index)) // a partial record of its first leaves, in older stores
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fail(err)
		}
		have, err := bundleLen(bundle)
		if err != nil {
			return fail(fmt.Errorf("partial bundle %d: %w", index, err))
		}
		for i := index*TileWidth + uint64(have); i < s.state.Size; i++ {
			leaf, err := s.get(edgeLeafKey(i))
			if err != nil {
				return fail(fmt.Errorf("leaf %d of the right-edge bundle: %w", i, err))
			}
			bundle = binary.BigEndian.AppendUint16(bundle, uint16(len(leaf)))
			bundle = append(bundle, leaf...)
		}
		if err := b.Delete(bundleKey(index), nil); err != nil {
			return fail(err)
		}
		if err := b.Set(segmentKey(index, 0), bundle, nil); err != nil {
			return fail(err)
		}
	}
	// Every leaf key goes, including any a crash left behind a completed
	// bundle.
	if err := b.DeleteRange([]byte{prefixEdgeLeaf}, []byte{prefixEdgeLeaf + 1}, nil); err != nil {
		return fail(err)
	}
	st := s.state
	st.Layout = Layout
	raw, err := json.Marshal(st)
	if err != nil {
		return fail(err)
	}
	if err := b.Set([]byte{prefixState}, raw, nil); err != nil {
		return fail(err)
	}
	return b, bundle, nil
}

// readBundle reads entry bundle index from Pebble: a layout-2 record
// (e | u64 index) as it is, or the concatenation of its segments, each of
// which must start where the previous one ended. A bundle with nothing
// stored is ErrNotFound.
func (s *Store) readBundle(index uint64) ([]byte, error) {
	lo := bundleKey(index)
	db, done, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: bundleKey(index + 1)})
	if err != nil {
		return nil, fmt.Errorf("read bundle %d: %w", index, err)
	}
	defer it.Close()
	var b []byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) == len(lo) { // layout 2: the whole bundle
			return bytes.Clone(v), nil
		}
		if len(k) != len(lo)+1 || int(k[len(lo)]) != n {
			return nil, fmt.Errorf("%w: bundle %d: segment at entry %d follows %d entries", ErrCorrupt, index, k[len(k)-1], n)
		}
		m, err := bundleLen(v)
		if err != nil {
			return nil, fmt.Errorf("%w: bundle %d: segment at entry %d: %w", ErrCorrupt, index, n, err)
		}
		b = append(b, v...) // one segment, the usual case: one copy, as a Get would make
		n += m
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("read bundle %d: %w", index, err)
	}
	if n == 0 {
		return nil, ErrNotFound
	}
	return b, nil
}

// bundleLen counts the entries of an encoded bundle or segment.
func bundleLen(b []byte) (int, error) {
	n := 0
	for off := 0; off < len(b); n++ {
		if off+2 > len(b) {
			return 0, errors.New("truncated entry length")
		}
		off += 2 + int(binary.BigEndian.Uint16(b[off:]))
		if off > len(b) {
			return 0, errors.New("entry overruns the bundle")
		}
	}
	return n, nil
}

// bundleAt returns the bytes of entry bundle index: the stored record of
// a complete one, a copy of the in-memory right edge otherwise. The
// choice and the copy are made under one lock, so a bundle completed
// meanwhile is already in Pebble when it is no longer the right edge.
func (s *Store) bundleAt(index uint64) ([]byte, error) {
	s.mu.RLock()
	if s.state.Size%TileWidth != 0 && index == s.state.Size/TileWidth {
		b := bytes.Clone(s.bundle)
		s.mu.RUnlock()
		return b, nil
	}
	s.mu.RUnlock()
	return s.readBundle(index)
}
