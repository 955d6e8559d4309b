package projections

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/leafset"
	"github.com/chio-ledger/chio/projections/authz"
	"github.com/chio-ledger/chio/schemas"
)

// streamMsg is one stream message to fold, however it was read (a durable
// consumer, a direct get filling a gap, an ordered consumer in Rebuild).
type streamMsg struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
	stored  time.Time // when the stream stored it
}

// rawStreamMsg is a message read by a get. A direct get's subject and
// time come from headers the server appends after the message's own, so
// they are read from the last values: a publisher's header of the same
// name cannot move a message to another subject or time.
func rawStreamMsg(seq uint64, raw *jetstream.RawStreamMsg) streamMsg {
	m := streamMsg{seq: seq, subject: raw.Subject, header: raw.Header, data: raw.Data, stored: raw.Time}
	if subject := schemas.ServerHeader(raw.Header, "Nats-Subject"); subject != "" {
		m.subject, m.stored = subject, schemas.StoredTime(raw.Header)
	}
	return m
}

// txn is one fold batch: an indexed Pebble batch, whose reads see its own
// writes, plus the tasks it has touched, written back once at commit. The
// batch carries the stream position, so state and position become durable
// together.
type txn struct {
	b     *pebble.Batch
	tasks map[string]*taskState
	err   error
}

func (s *store) begin() *txn { return &txn{b: s.db.NewIndexedBatch(), tasks: map[string]*taskState{}} }

func (t *txn) get(key []byte) ([]byte, error) { return getFrom(t.b, key) }

func (t *txn) has(key []byte) (bool, error) {
	_, err := t.get(key)
	if errors.Is(err, errNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (t *txn) set(key, value []byte) {
	if t.err == nil {
		if err := t.b.Set(key, value, nil); err != nil {
			t.err = fmt.Errorf("write %q: %w", key[:1], err)
		}
	}
}

// add adds n to the u64 counter under key (absent: 0).
func (t *txn) add(key []byte, n uint64) {
	v, err := t.get(key)
	var cur uint64
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		t.fail(err)
		return
	default:
		if cur, err = decodeU64(v); err != nil {
			t.fail(fmt.Errorf("counter %q: %w", key[:1], err))
			return
		}
	}
	t.set(key, encodeU64(cur+n))
}

func (t *txn) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

// task returns the task as this batch sees it.
func (t *txn) task(id string) (*taskState, error) {
	if ts, ok := t.tasks[id]; ok {
		return ts, nil
	}
	ts := &taskState{id: id}
	raw, err := t.get(append([]byte{prefixTask}, id...))
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		return nil, err
	default:
		ts.head = new(taskHead)
		if err := json.Unmarshal(raw, ts.head); err != nil {
			return nil, fmt.Errorf("task %s: decode stored head: %w", id, err)
		}
		ts.indexed = ts.head.State
	}
	t.tasks[id] = ts
	return ts, nil
}

// commit writes the touched tasks and the stream position and commits the
// batch (unsynced: see below).
func (t *txn) commit(stream string, pos uint64) error {
	defer t.b.Close()
	for _, ts := range t.tasks {
		ts.flush(t)
	}
	t.set(positionKey(stream), encodeU64(pos))
	if t.err != nil {
		return t.err
	}
	// Not synced: the projections are derived state, and a batch carries
	// its stream position with it, so a commit lost in a machine crash is
	// folded again from the stream on the next start (the consumer is
	// recreated at the stored position). The fsync it would cost competes
	// with the streams' on the same disk, on every call's path.
	if err := t.b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("commit %s batch at stream sequence %d: %w", stream, pos, err)
	}
	return nil
}

func (t *txn) discard() { _ = t.b.Close() }

// fold is one stream's fold. prepare decodes and checks a message and may
// run on any goroutine (it reads nothing stored); apply folds a prepared
// message into the batch, in stream order. apply returns an error only
// when the store fails: a message the rules refuse is logged and skipped.
type fold interface {
	stream() string
	prepare(m *streamMsg) any
	apply(tx *txn, m *streamMsg, prepared any) error
}

// foldBatch folds msgs (in stream order, above the stored position) into
// one batch and commits it with the position of the last one.
func foldBatch(s *store, f fold, msgs []streamMsg) error {
	if len(msgs) == 0 {
		return nil
	}
	prepared := make([]any, len(msgs))
	parallel(len(msgs), func(i int) { prepared[i] = f.prepare(&msgs[i]) })
	tx := s.begin()
	for i := range msgs {
		if err := f.apply(tx, &msgs[i], prepared[i]); err != nil {
			tx.discard()
			return fmt.Errorf("fold %s stream sequence %d: %w", f.stream(), msgs[i].seq, err)
		}
	}
	return tx.commit(f.stream(), msgs[len(msgs)-1].seq)
}

// parallel runs f(0..n-1) on up to GOMAXPROCS goroutines; small batches
// run inline, where goroutines would cost more than they save.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), (n+31)/32)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// taskFold folds CHIO_TASKS commits into task state. With trust, only
// the commits a certified edge signed (schemas.EdgeVerifier
// .CheckTaskCommit), each where it was written to follow.
type taskFold struct {
	log     *slog.Logger
	trust   *schemas.EdgeVerifier
	refused prometheus.Counter
}

func (taskFold) stream() string { return schemas.TasksStream }

type preparedCommit struct {
	id     string
	commit schemas.TaskCommit
	// prev is the sequence the commit was signed to follow, -1 when not
	// checked; refused is a commit no certified edge signed, or one that
	// does not decode: it is not folded but still moves its task's
	// LastSeq.
	prev    int64
	refused bool
}

func (f taskFold) prepare(m *streamMsg) any {
	id, ok := taskIDFromSubject(m.subject)
	if !ok {
		f.log.Warn("skipping a task commit on a subject that names no valid task id", "subject", m.subject, "stream_seq", m.seq)
		return nil
	}
	p := &preparedCommit{id: id, prev: -1}
	if f.trust != nil {
		prev, err := f.trust.CheckTaskCommit(m.subject, m.header, m.data, m.stored)
		if err != nil {
			f.log.Warn("skipping a task commit no certified edge signed", "task", id, "stream_seq", m.seq, "reason", err)
			f.refused.Inc()
			p.refused = true
			return p
		}
		p.prev = int64(prev)
	}
	if err := json.Unmarshal(m.data, &p.commit); err != nil {
		f.log.Warn("skipping undecodable task commit", "task", id, "stream_seq", m.seq, "err", err)
		p.refused = true
	}
	return p
}

func (f taskFold) apply(tx *txn, m *streamMsg, prepared any) error {
	p, _ := prepared.(*preparedCommit)
	if p == nil {
		return nil
	}
	t, err := tx.task(p.id)
	if err != nil {
		return err
	}
	// Every commit on the subject, folded or not, is the one the next
	// signed commit follows (as the edge's own reads count them).
	defer func() {
		if t.head != nil && t.head.LastSeq < m.seq {
			t.head.LastSeq, t.dirty = m.seq, true
		}
	}()
	if t.head != nil {
		last := t.head.LastSeq
		if !p.refused && p.prev >= 0 && last > 0 && uint64(p.prev) != last {
			f.log.Warn("skipping a task commit replayed onto another position", "task", p.id, "stream_seq", m.seq, "signed_prev", p.prev, "prev", last)
			f.refused.Inc()
			return nil
		}
	} else if !p.refused && p.prev > 0 {
		f.log.Warn("skipping a task commit that follows another on a task not created", "task", p.id, "stream_seq", m.seq, "signed_prev", p.prev)
		f.refused.Inc()
		return nil
	}
	if p.refused {
		return nil
	}
	rec := timelineRecord{Replica: m.header.Get(schemas.HeaderReplica)}
	applied := false
	for i := range p.commit.Events {
		e := &p.commit.Events[i]
		eff, err := t.apply(tx, e, m.seq)
		if err != nil {
			// As the edge does when it reads: a refused event is skipped,
			// so even a stray writer cannot revive a terminal task.
			f.log.Debug("skipping refused task event", "task", p.id, "stream_seq", m.seq, "err", err)
			if !leaseEventOf(e, t.fold) {
				continue
			}
		}
		applied = true
		rec.note(e, eff, t.fold)
	}
	if applied {
		rec.write(tx, p.id, m.seq, t.fold)
	}
	return tx.err
}

// lineageFold folds the capability lineage carried by decision events.
type lineageFold struct{ log *slog.Logger }

func (lineageFold) stream() string { return schemas.EventsStream }

func (f lineageFold) prepare(m *streamMsg) any {
	if m.subject == schemas.SubjectEnvelope && !strings.Contains(m.header.Get(schemas.HeaderEventKinds), schemas.SubjectDecision) {
		return nil // routed on the header alone: no decision inside
	}
	events, err := schemas.UnpackEvents(m.subject, m.data)
	if err != nil {
		f.log.Warn("skipping malformed envelope", "stream_seq", m.seq, "err", err)
		return nil
	}
	p := &preparedLineage{}
	for _, e := range events {
		if e.Subject != schemas.SubjectDecision {
			continue // outcomes and timeouts carry no lineage
		}
		var d schemas.DecisionEvent
		err := json.Unmarshal(e.Data, &d)
		if err == nil {
			err = d.Validate()
		}
		if err != nil {
			f.log.Warn("skipping malformed decision event", "stream_seq", m.seq, "err", err)
			continue
		}
		recs := make([][]byte, len(d.CapabilityLineage))
		for i := range d.CapabilityLineage {
			if recs[i], err = json.Marshal(&d.CapabilityLineage[i]); err != nil {
				break
			}
		}
		if err != nil {
			f.log.Warn("skipping a decision event whose lineage does not encode", "stream_seq", m.seq, "err", err)
			continue
		}
		// The authority path of every prefix of the chain: what lets a
		// reader's principal be matched against a task owner's ancestors.
		principals := schemas.LineagePrincipals(d.CapabilityLineage)
		anc := make([]ancestry, len(principals))
		for i, pr := range principals {
			if anc[i].raw, err = json.Marshal(principals[:i+1]); err != nil {
				break
			}
			anc[i].principal = pr
		}
		if err != nil {
			f.log.Warn("skipping a decision event whose principals do not encode", "stream_seq", m.seq, "err", err)
			continue
		}
		p.recs, p.raw = append(p.recs, d.CapabilityLineage...), append(p.raw, recs...)
		p.ancestry = append(p.ancestry, anc...)
	}
	if len(p.recs) == 0 {
		return nil
	}
	return p
}

type preparedLineage struct {
	recs []schemas.CapabilityLineage
	raw  [][]byte
	// ancestry is, for each prefix of each chain, its principal and the
	// principals of its prefixes, encoded.
	ancestry []ancestry
}

// ancestry is one principal and its stored ancestry record.
type ancestry struct {
	principal string
	raw       []byte
}

func (f lineageFold) apply(tx *txn, m *streamMsg, prepared any) error {
	p, _ := prepared.(*preparedLineage)
	if p == nil {
		return nil
	}
	for i, rec := range p.recs {
		key := append([]byte{prefixLineage}, rec.CapabilityID...)
		old, err := tx.get(key)
		switch {
		case errors.Is(err, errNotFound):
		case err != nil:
			return err
		default:
			// A record is a fact of a signed token: the first one stands,
			// except that one stored without its grants (they were left
			// out of a long chain's event) gains them from a later event
			// of the same scope. Both are decided by stream order alone.
			var prev schemas.CapabilityLineage
			if json.Unmarshal(old, &prev) != nil || !prev.GrantsOmitted || rec.GrantsOmitted || rec.ScopeHash != prev.ScopeHash {
				continue
			}
		}
		tx.set(key, p.raw[i])
	}
	for _, a := range p.ancestry {
		// A principal names its path, so its ancestry never changes: the
		// first record stands and a repeat costs no write.
		key := ancestryKey(a.principal)
		seen, err := tx.has(key)
		if err != nil {
			return err
		}
		if !seen {
			tx.set(key, a.raw)
		}
	}
	return tx.err
}

func ancestryKey(principal string) []byte { return append([]byte{prefixAncestry}, principal...) }

// receiptFold folds the signed receipts the ledger publishes.
type receiptFold struct {
	log       *slog.Logger
	kernelKey string // trusted kernel key, wire form
	// signedHere is WithTrustedLeaves' function, nil without it.
	signedHere func(leafHash [32]byte) bool
	// checked counts receipts by how their signature was settled.
	checked *prometheus.CounterVec
}

// signatureCheck settles a parsed receipt's signature, structure and
// parameter hash: nil when a ledger in this process signed exactly these
// bytes (schemas.SignReceiptLeaf validated and hashed them before
// signing), r.Verify() otherwise.
func (f receiptFold) signatureCheck(r *schemas.Receipt, leafHash [32]byte) (signedHere bool, err error) {
	if f.signedHere != nil && f.signedHere(leafHash) {
		return true, nil
	}
	return false, r.Verify()
}

func (receiptFold) stream() string { return schemas.ReceiptsStream }

// Flags of a stored receipt record.
const (
	receiptVerified = 1 << iota // signature, structure and kernel key check out
	receiptParsed               // the bytes parse strictly as a receipt
)

// preparedReceipt is a receipt message checked and ready to index.
type preparedReceipt struct {
	id           string
	leaf         uint64
	capabilityID string // "" when the receipt names no usable capability id
	record       []byte
	// governed is what a report takes from the receipt (authz.Examine),
	// encoded; nil when it is not governed.
	governed []byte
	// stats is what the call counters take from it; nil when it does not
	// count (see callStatOf).
	stats *callStat
}

func (f receiptFold) prepare(m *streamMsg) any {
	var (
		flags  byte
		reason string
		rec    *schemas.Receipt
		r      *schemas.Receipt
		head   *schemas.ReceiptHead // of a receipt no reader can decode whole
	)
	// A receipt nested too deep for readers is not decoded at all: how far
	// encoding/json would get is no rule for what a report may rely on.
	unreadable := schemas.CheckReceiptReadable(m.data)
	err := unreadable
	if err == nil {
		r, err = schemas.ParseReceipt(m.data)
	}
	switch {
	case err == nil:
		flags |= receiptParsed
		rec = r
	case unreadable == nil:
		reason = err.Error()
		// Read what it says anyway, to index it where a report would look
		// for it: the report fails closed on it instead of missing it.
		var loose schemas.Receipt
		if json.Unmarshal(m.data, &loose) == nil {
			rec = &loose
		}
	default:
		reason = err.Error()
		// Its top level still names it, its capability, tool, time and
		// decision: enough to index it and to keep it out of the reports
		// that do not select it (authz.Unreadable).
		if h, herr := schemas.ReadReceiptHead(m.data); herr == nil {
			head = h
			rec = &schemas.Receipt{ReceiptBody: schemas.ReceiptBody{ID: h.ID, CapabilityID: h.CapabilityID}}
		}
	}
	msgID := m.header.Get(jetstream.MsgIDHeader)
	p := &preparedReceipt{leaf: math.MaxUint64}
	switch {
	case rec != nil && schemas.ValidID(rec.ID):
		p.id = rec.ID
	case schemas.ValidID(msgID):
		p.id = msgID
	default:
		// Still kept, under a name no receipt id can have, so the stream
		// position moves on without dropping it silently.
		p.id = "unidentified@" + strconv.FormatUint(m.seq, 10)
	}
	if rec != nil && schemas.ValidName(rec.CapabilityID) && len(rec.CapabilityID) <= maxKeyPart {
		p.capabilityID = rec.CapabilityID
	}
	leaf, lerr := strconv.ParseUint(m.header.Get(schemas.HeaderLeafIndex), 10, 64)
	if lerr == nil {
		p.leaf = leaf
	}
	// Hashed once: the trust check and a verified receipt's record use it.
	leafHash := leafset.LeafHash(m.data)
	if flags&receiptParsed != 0 {
		signedHere, err := f.signatureCheck(r, leafHash)
		switch {
		case err != nil:
			reason = err.Error()
		case r.KernelKey != f.kernelKey:
			reason = fmt.Sprintf("kernel_key %s is not the trusted kernel key", r.KernelKey)
		case lerr != nil:
			reason = "the message carries no valid " + schemas.HeaderLeafIndex + " header"
		default:
			flags |= receiptVerified
		}
		f.checked.WithLabelValues(checkLabel(signedHere, flags)).Inc()
	}
	if unreadable != nil {
		f.log.Warn("receipt unreadable; kept, marked so, and failing only the reports that select it", "receipt", p.id, "stream_seq", m.seq, "reason", reason)
	} else if flags&receiptVerified == 0 {
		f.log.Warn("receipt failed verification; kept as unverified", "receipt", p.id, "stream_seq", m.seq, "reason", reason)
	}
	if msgID != "" && msgID != p.id {
		f.log.Warn("receipt message id differs from the receipt id", "receipt", p.id, "msg_id", msgID, "stream_seq", m.seq)
	}
	if flags&receiptVerified != 0 {
		p.stats = callStatOf(r)
	}
	// A verified receipt's bytes are in the log and in CHIO_RECEIPTS: a
	// third copy here would be read by nothing. Its RFC 6962 leaf hash is
	// kept instead, so whatever reads the log's leaf at the index the
	// (unsigned) header named can check it is this receipt. Bytes that did
	// not verify are kept: no log holds them.
	raw := m.data
	if flags&receiptVerified != 0 {
		raw = leafHash[:]
	}
	p.record = encodeReceiptRecord(flags, reason, raw)
	// Decided here, once, so a report reads a small record per governed
	// receipt instead of parsing every receipt again.
	var g *authz.Governed
	switch {
	case unreadable != nil:
		g = authz.Unreadable(p.id, head, reason)
	case rec != nil:
		g, _ = authz.Examine(authz.Input{Receipt: rec, Verified: flags&receiptVerified != 0}) // rec is not nil
	default:
		g = &authz.Governed{ReceiptID: p.id, Authorized: true, Unprojectable: "the published receipt is not readable: " + reason}
	}
	if g != nil {
		if p.governed, err = json.Marshal(g); err != nil {
			p.governed = nil
			f.log.Error("encode the report facts of a receipt", "receipt", p.id, "err", err)
		}
	}
	return p
}

// checkLabel is the check label of a parsed receipt in
// chio_projection_receipts_checked_total.
func checkLabel(signedHere bool, flags byte) string {
	switch {
	case flags&receiptVerified == 0:
		return "unverified"
	case signedHere:
		return "signed_here"
	}
	return "verified"
}

func (f receiptFold) apply(tx *txn, m *streamMsg, prepared any) error {
	p := prepared.(*preparedReceipt)
	idKey := append([]byte{prefixReceiptID}, p.id...)
	seen, err := tx.has(idKey)
	if err != nil {
		return err
	}
	if seen {
		// The ledger republishes a tail it cannot prove the stream holds
		// (after a crash): same receipt, same id. The first one stands.
		f.log.Debug("skipping a receipt already folded", "receipt", p.id, "stream_seq", m.seq)
		return nil
	}
	tx.set(idKey, encodeU64(p.leaf))
	tx.set(receiptLeafKey(p.leaf, p.id), p.record)
	if p.governed != nil {
		tx.set(governedKey(p.leaf, p.id), p.governed)
	}
	if p.capabilityID != "" {
		tx.set(receiptByCapKey(p.capabilityID, p.leaf, p.id), nil)
	} else {
		tx.set(unattributedKey(p.leaf, p.id), nil)
	}
	// After the seen check: a receipt republished counts once.
	p.stats.count(tx)
	return tx.err
}

func receiptLeafKey(leaf uint64, id string) []byte {
	return append(appendU64([]byte{prefixReceiptLeaf}, leaf), id...)
}

func governedKey(leaf uint64, id string) []byte {
	return append(appendU64([]byte{prefixGoverned}, leaf), id...)
}

func receiptByCapKey(capabilityID string, leaf uint64, id string) []byte {
	return append(appendU64(appendStr([]byte{prefixReceiptByCap}, capabilityID), leaf), id...)
}

func unattributedKey(leaf uint64, id string) []byte {
	return append(appendU64([]byte{prefixUnattributed}, leaf), id...)
}

// encodeReceiptRecord lays out a stored receipt: flags, the reason it did
// not verify (u16 length, text) and, for one that did not verify, the
// bytes as published.
func encodeReceiptRecord(flags byte, reason string, raw []byte) []byte {
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	b := make([]byte, 0, 3+len(reason)+len(raw))
	b = append(b, flags)
	b = appendStr(b, reason)
	return append(b, raw...)
}
