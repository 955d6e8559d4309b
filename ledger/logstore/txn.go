package logstore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/cockroachdb/pebble/v2"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
)

// Txn is one ledger batch: leaves, index entries and pending records
// accumulate in a pebble.Batch and become durable together in Commit. It is
// write-only: reads go to the Store, which shows committed state, and the
// caller keeps its own view of what the batch has written. Only one Txn may
// be open at a time; Begin blocks until the previous one ends.
type Txn struct {
	s      *Store
	b      *pebble.Batch
	rng    *compact.Range
	edge   map[uint][]byte
	dirty  map[uint]bool
	bundle []byte
	// segFirst is the bundle slot of this batch's first leaf in the current
	// bundle and segOff its byte offset in bundle: bundle[segOff:] is the
	// segment this batch writes (layout 3, every leaf written once).
	segFirst, segOff int
	state            State
	start            uint64
	err              error
	done             bool
	resign           bool // sign the head again though the batch adds no leaf
}

// Begin starts a batch. The caller must Commit or Discard it.
func (s *Store) Begin() *Txn {
	s.wmu.Lock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	// cur changes only under wmu (Recover), which this batch now holds.
	var b *pebble.Batch
	var unavailable error
	if s.cur != nil {
		b = s.cur.db.NewBatch()
	} else {
		b, unavailable = new(pebble.Batch), cmp.Or(s.broken, error(&unavailableError{errReopening}))
	}
	t := &Txn{
		s: s, b: b, state: s.state, start: s.state.Size, err: unavailable,
		edge: make(map[uint][]byte, len(s.edge)), dirty: map[uint]bool{},
		// Shared, not copied: the batch only appends past what readers
		// see (len(s.bundle)), and starts a new array for a new bundle.
		bundle:   s.bundle[:len(s.bundle):cap(s.bundle)],
		segFirst: int(s.state.Size % TileWidth), segOff: len(s.bundle),
	}
	for l, e := range s.edge {
		t.edge[l] = bytes.Clone(e)
	}
	hashes := s.rng.Hashes()
	cp := make([][]byte, len(hashes))
	for i, h := range hashes {
		cp[i] = bytes.Clone(h)
	}
	var err error
	t.rng, err = s.rf.NewRange(0, s.rng.End(), cp)
	t.setErr(err)
	return t
}

// Size is the tree size including leaves appended in this batch.
func (t *Txn) Size() uint64 { return t.rng.End() }

// Discard abandons the batch.
func (t *Txn) Discard() {
	if t.done {
		return
	}
	t.done = true
	_ = t.b.Close()
	t.s.wmu.Unlock()
}

// MarkEvent records an event id in the exact dedup index, with no leaf yet.
func (t *Txn) MarkEvent(id string) {
	t.setErr(t.b.Set(strKey(prefixDedup, id), nil, nil))
}

// LinkEvent records an event id in the exact dedup index as belonging to
// the receipt at leaf index idx.
func (t *Txn) LinkEvent(id string, idx uint64) {
	t.setErr(t.b.Set(strKey(prefixDedup, id), encodeU64(idx), nil))
}

// PutPending stores a pending record for a receipt id.
func (t *Txn) PutPending(id string, rec []byte) {
	t.setErr(t.b.Set(strKey(prefixPending, id), rec, nil))
}

// PutPendingParts stores the concatenation of parts as a receipt id's
// pending record, assembled in the batch's own buffer: a record that wraps
// an event's bytes (the ledger's open-call record) costs one copy, into the
// batch, however the parts are held.
func (t *Txn) PutPendingParts(id string, parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	op := t.b.SetDeferred(1+len(id), n)
	op.Key[0] = prefixPending
	copy(op.Key[1:], id)
	off := 0
	for _, p := range parts {
		off += copy(op.Value[off:], p)
	}
	t.setErr(op.Finish())
}

// DeletePending removes a receipt id's pending record.
func (t *Txn) DeletePending(id string) {
	t.setErr(t.b.Delete(strKey(prefixPending, id), nil))
}

// PutEdgeCredential keeps an edge credential (its canonical JSON) under
// its id: what an evidence package carries for an auditor to check the
// edge a receipt names against the issuer's key.
func (t *Txn) PutEdgeCredential(id string, cred []byte) {
	t.setErr(t.b.Set(strKey(prefixEdgeCred, id), cred, nil))
}

// SetStreamSeq records the last stream sequence folded by this batch.
func (t *Txn) SetStreamSeq(seq uint64) { t.state.StreamSeq = seq }

// Resign makes Commit sign the tree head again even if the batch adds no
// leaf: an idle log's periodic statement, so that its age measures the
// ledger's health, not the traffic.
func (t *Txn) Resign() { t.resign = true }

// SetEventsStream records which stream (its schemas.StreamIdentity) the
// stream sequence is a position in.
func (t *Txn) SetEventsStream(id string) { t.state.EventsStream = id }

// Leaf is a leaf made ready for Append: its RFC 6962 leaf hash and its
// summary's encoding are the per-leaf CPU work of an append, so the ledger
// computes them on its signer pool, on every core, leaving the one writer
// only the tree and the batch.
type Leaf struct {
	Data        []byte
	Hash        []byte // rfc6962 leaf hash of Data
	Summary     Summary
	summaryJSON []byte
}

// PrepareLeaf hashes leaf and encodes its summary. It touches no store,
// so any number of goroutines may call it at once.
func PrepareLeaf(leaf []byte, sum Summary) (Leaf, error) {
	if len(leaf) > 1<<16-1 {
		return Leaf{}, fmt.Errorf("prepare leaf: entry of %d bytes exceeds the 65535-byte bundle limit", len(leaf))
	}
	sumJSON, err := json.Marshal(sum)
	if err != nil {
		return Leaf{}, fmt.Errorf("prepare leaf: encode summary of %s: %w", sum.ReceiptID, err)
	}
	return Leaf{Data: leaf, Hash: rfc6962.DefaultHasher.HashLeaf(leaf), Summary: sum, summaryJSON: sumJSON}, nil
}

// Append adds leaf as the next entry and indexes it under sum.ReceiptID.
func (t *Txn) Append(leaf []byte, sum Summary) (uint64, error) {
	if t.err != nil {
		return 0, t.err
	}
	p, err := PrepareLeaf(leaf, sum)
	if err != nil {
		return 0, fmt.Errorf("append leaf %d: %w", t.rng.End(), err)
	}
	return t.AppendLeaf(&p)
}

// AppendLeaf adds a prepared leaf as the next entry and indexes it under
// its summary's receipt id.
func (t *Txn) AppendLeaf(p *Leaf) (uint64, error) {
	if t.err != nil {
		return 0, t.err
	}
	leaf, sum := p.Data, &p.Summary
	if len(leaf) > 1<<16-1 || len(p.Hash) != HashSize || p.summaryJSON == nil {
		return 0, fmt.Errorf("append leaf %d: not made by PrepareLeaf", t.rng.End())
	}
	idx := t.rng.End()
	if err := t.rng.Append(p.Hash, t.visit); err != nil {
		return 0, fmt.Errorf("append leaf %d: %w", idx, err)
	}
	if t.err != nil {
		return 0, t.err
	}
	t.bundle = binary.BigEndian.AppendUint16(t.bundle, uint16(len(leaf)))
	t.bundle = append(t.bundle, leaf...)
	if idx%TileWidth == TileWidth-1 {
		// Complete: this batch's part of it is its last segment.
		t.setErr(t.b.Set(segmentKey(idx/TileWidth, t.segFirst), t.bundle[t.segOff:], nil))
		t.bundle, t.segFirst, t.segOff = nil, 0, 0
	}
	t.setErr(t.b.Set(strKey(prefixReceipt, sum.ReceiptID), encodeU64(idx), nil))
	t.setErr(t.b.Set(u64Key(prefixSummary, idx), p.summaryJSON, nil))
	t.setErr(t.b.Set(capIndexKey(sum.CapabilityID, idx), nil, nil))
	t.setErr(t.b.Set(serverIndexKey(sum.ToolServer, idx), nil, nil))
	t.setErr(t.b.Set(toolIndexKey(sum.ToolServer, sum.ToolName, idx), nil, nil))
	for _, p := range sum.Principals {
		t.setErr(t.b.Set(ownerIndexKey(p, idx), nil, nil))
	}
	return idx, t.err
}

// visit receives every new perfect node; nodes on tree levels that are
// multiples of 8 are the tile hashes.
func (t *Txn) visit(id compact.NodeID, hash []byte) {
	if id.Level%TileHeight != 0 {
		return
	}
	tl := id.Level / TileHeight
	slot := int(id.Index % TileWidth)
	if slot == 0 {
		t.edge[tl] = make([]byte, 0, TileWidth*HashSize)
	}
	if len(t.edge[tl]) != slot*HashSize {
		t.setErr(fmt.Errorf("tile %d/%d: node %d arrives with %d hashes stored", tl, id.Index/TileWidth, slot, len(t.edge[tl])/HashSize))
		return
	}
	t.edge[tl] = append(t.edge[tl], hash...)
	if slot == TileWidth-1 {
		t.setErr(t.b.Set(tileKey(tl, id.Index/TileWidth), t.edge[tl], nil))
		delete(t.dirty, tl)
		return
	}
	t.dirty[tl] = true
}

// CheckpointFunc signs the tree head a batch produced. It returns the signed
// C2SP checkpoint note and, for a non-empty tree, the JSON of a
// chio.checkpoint_statement.v1 numbered seq covering leaves [from, to).
type CheckpointFunc func(from, to uint64, root []byte, seq uint64) (note, statement []byte, err error)

// Commit makes the batch durable with one synced Pebble commit. When the tree
// grew (or no checkpoint exists yet) sign is called and its checkpoint is
// written in the same batch, so a size is never checkpointed twice.
func (t *Txn) Commit(sign CheckpointFunc) error {
	defer t.Discard()
	if t.err != nil {
		return fmt.Errorf("commit: %w", t.err)
	}
	if err := t.s.Err(); err != nil {
		return fmt.Errorf("commit batch at size %d: %w", t.rng.End(), err) // refused before Pebble meets ENOSPC
	}
	root, err := t.s.rootOf(t.rng)
	if err != nil {
		return err
	}
	size := t.rng.End()
	t.state.Size, t.state.Root = size, root
	var note []byte
	if size > t.start || t.s.latest == nil || t.resign {
		seq := t.state.CheckpointSeq
		if size > 0 {
			seq++
		}
		var stmt []byte
		if note, stmt, err = sign(t.start, size, root, seq); err != nil {
			return fmt.Errorf("commit: sign checkpoint for size %d: %w", size, err)
		}
		t.setErr(t.b.Set(checkpointKey(size), note, nil))
		if stmt != nil {
			t.state.CheckpointSeq = seq
			t.setErr(t.b.Set(u64Key(prefixStatement, seq), stmt, nil))
		}
	}
	if len(t.bundle) > t.segOff {
		// The incomplete right edge's new leaves: one segment, never
		// rewritten; the next batch's leaves go in a segment of their own.
		t.setErr(t.b.Set(segmentKey(size/TileWidth, t.segFirst), t.bundle[t.segOff:], nil))
	}
	for tl := range t.dirty {
		idx := (size >> (TileHeight * tl)) / TileWidth
		t.setErr(t.b.Set(tileKey(tl, idx), t.edge[tl], nil))
	}
	stateJSON, err := json.Marshal(t.state)
	if err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	t.setErr(t.b.Set([]byte{prefixState}, stateJSON, nil))
	if t.err != nil {
		return fmt.Errorf("commit: %w", t.err)
	}
	if err := t.s.commitBatch(t.b); err != nil {
		return fmt.Errorf("commit batch at size %d: %w", size, err)
	}
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.s.state, t.s.rng, t.s.bundle = t.state, t.rng, t.bundle
	t.s.edge = maps.Clone(t.edge)
	for l := range t.s.edge {
		if PartialTileWidth(l, (size>>(TileHeight*l))/TileWidth, size) == 0 {
			delete(t.s.edge, l) // completed: the next node starts a new tile
		}
	}
	if note != nil {
		t.s.latest = note
	}
	return nil
}

func (t *Txn) setErr(err error) {
	if err != nil && t.err == nil {
		t.err = err
	}
}

func capIndexKey(capID string, idx uint64) []byte {
	k := append([]byte{prefixByCap}, capID...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, idx)
}

func ownerIndexKey(principal string, idx uint64) []byte {
	k := append([]byte{prefixByOwner}, principal...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, idx)
}

func serverIndexKey(server string, idx uint64) []byte {
	k := append([]byte{prefixByServer}, server...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, idx)
}

func toolIndexKey(server, tool string, idx uint64) []byte {
	k := append([]byte{prefixByTool}, server...)
	k = append(k, 0)
	k = append(k, tool...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, idx)
}
