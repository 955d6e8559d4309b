package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// pending is what the log remembers about a call that has no receipt yet:
// an allow decision waiting for its outcome, or (rarely) an outcome whose
// decision has not been folded yet.
type pending struct {
	Decision *schemas.DecisionEvent `json:"decision,omitempty"`
	Outcome  *schemas.OutcomeEvent  `json:"outcome,omitempty"`
	// ChainEvidence is the evidence class the decision's call chain got
	// when the decision was folded, for the receipt its outcome completes.
	ChainEvidence string `json:"chain_evidence,omitempty"`
}

// folder turns events, in stream order, into receipt bodies. It is a pure
// function of the events and the log's indexes, so a replay of the stream
// folds to the same receipts in the same order.
type folder struct {
	tx       *logstore.Txn
	produced map[string]bool // receipt ids produced earlier in this batch
	// principals are the authority-path principals of the receipts
	// produced in this batch (schemas.LineagePrincipals of their decision).
	principals map[string][]string
	marked     map[string]bool // event ids marked earlier in this batch
	next       uint64          // leaf index of the next receipt produced
	log        *slog.Logger
	// changes are this batch's pending records, nil meaning deleted; they
	// go into the pendingCache once the batch commits.
	changes map[string]*pending
	// newPending lists allow decisions that started waiting in this batch.
	newPending []*schemas.DecisionEvent
	// edgeVerified: decisions were folded only if a certified edge signed
	// them and they name it, so receipts name it (metadata.edge).
	edgeVerified bool
	edgeRefs     map[schemas.EdgeRef]json.RawMessage // edgeRef's encodings
}

// decoded is one event after parsing, validation and the lookups of
// committed log state it needs. None of that depends on the other events of
// the batch, so it runs in parallel; the fold then only has to combine it
// with what earlier events of the same batch did.
type decoded struct {
	decision *schemas.DecisionEvent
	outcome  *schemas.OutcomeEvent
	timeout  *schemas.TimeoutEvent

	eventID, receiptID string
	seen               bool     // event id in the committed dedup index
	hasReceipt         bool     // receipt id in the committed log
	pending            *pending // committed pending record, if any
	// parent is the committed pending record of the call a decision's
	// call chain names as its parent, if any.
	parent *pending

	// openRecord is the pending record an allow decision leaves while its
	// call is open; it is stored as {"decision": raw}, raw being the
	// event's own bytes (valid JSON of the same event, just decoded), so
	// the sequential fold encodes nothing. raw is a sub-slice of the
	// stream message: the batch copies it once when the record is put, and
	// nothing holds it after the batch.
	openRecord *pending
	raw        []byte
}

// lookup fills in the committed state of the event's ids. The Txn is open,
// so nothing commits while it runs. Almost every lookup is for a key that
// does not exist yet, and those cost the most, so it skips the ones the
// log's own rules already answer:
//   - a receipt is only ever produced with its decision event marked seen,
//     so an unseen decision event has no receipt;
//   - folding the outcome or the timeout of a call deletes its pending
//     decision, so while the decision is pending neither has been seen and
//     the call has no receipt.
//
// With those, an allowed call's outcome usually needs no read at all (its
// pending decision is in the cache) and its decision needs two.
func (d *decoded) lookup(store *logstore.Lookup, cache *pendingCache) error {
	var err error
	if id := parentReceiptID(d.decision); id != "" {
		if d.parent, err = pendingRecord(store, cache, id); err != nil {
			return err
		}
	}
	if d.decision == nil {
		if d.pending, err = pendingRecord(store, cache, d.receiptID); err != nil {
			return err
		}
		if d.pending != nil && d.pending.Decision != nil {
			return nil // open call: event unseen, no receipt
		}
	}
	if d.seen, err = store.EventSeen(d.eventID); err != nil || d.seen {
		return err
	}
	if d.decision != nil {
		d.pending, err = pendingRecord(store, cache, d.receiptID) // a stray outcome may be held
		return err
	}
	d.hasReceipt, err = store.HasReceipt(d.receiptID)
	return err
}

// pendingRecord returns the committed pending record of a receipt id, or nil.
func pendingRecord(store *logstore.Lookup, cache *pendingCache, receiptID string) (*pending, error) {
	if p, ok := cache.get(receiptID); ok {
		return p, nil
	}
	raw, err := store.Pending(receiptID)
	if errors.Is(err, logstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := new(pending)
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("decode pending record of %s: %w", receiptID, err)
	}
	return p, nil
}

// decode parses and validates one event. Malformed events and unknown
// subjects are logged and come back empty: they are facts in the stream,
// skipped identically on every replay.
func decode(log *slog.Logger, e *event) decoded {
	var d decoded
	var v validator
	if e.refused {
		return decoded{} // quarantined: no certified edge signed it
	}
	switch e.subject {
	case schemas.SubjectDecision:
		d.decision = new(schemas.DecisionEvent)
		v = d.decision
	case schemas.SubjectOutcome:
		d.outcome = new(schemas.OutcomeEvent)
		v = d.outcome
	case schemas.SubjectTimeout:
		d.timeout = new(schemas.TimeoutEvent)
		v = d.timeout
	default:
		log.Warn("skipping event on an unknown subject", "subject", e.subject, "stream_seq", e.seq)
		return decoded{}
	}
	err := json.Unmarshal(e.data, v)
	if err == nil {
		err = v.Validate()
	}
	if err != nil {
		log.Warn("skipping malformed event", "subject", e.subject, "stream_seq", e.seq, "err", err)
		return decoded{}
	}
	if d.decision != nil && e.checkEdge && !claimsSigner(d.decision, e.signer) {
		log.Warn("skipping a decision that names another edge than its signer", "stream_seq", e.seq, "receipt_id", d.decision.ReceiptID,
			"edge_id", d.decision.EdgeID, "signer", e.signer.EdgeID, "err", schemas.ErrEdgeClaim)
		return decoded{}
	}
	switch {
	case d.decision != nil:
		d.eventID, d.receiptID = d.decision.EventID, d.decision.ReceiptID
		if d.decision.Decision.Verdict == schemas.VerdictAllow {
			// The record is {"decision": <the event as it came>}: the
			// bytes decoded just now are valid JSON of the same event, so
			// nothing is encoded again.
			d.openRecord, d.raw = &pending{Decision: d.decision}, e.data
		}
	case d.outcome != nil:
		d.eventID, d.receiptID = d.outcome.EventID, d.outcome.ReceiptID
	default:
		d.eventID, d.receiptID = d.timeout.EventID, d.timeout.ReceiptID
	}
	return d
}

// fold applies one decoded event. It returns the receipt body the event
// completes, or nil; only an encoding error of a pending record is returned.
func (f *folder) fold(d *decoded) (*schemas.ReceiptBody, error) {
	switch {
	case d.decision != nil:
		return f.decision(d)
	case d.outcome != nil:
		return f.outcome(d)
	case d.timeout != nil:
		return f.timeout(d)
	}
	return nil, nil
}

type validator interface{ Validate() error }

// first marks an event id as folded and reports whether it was new, and
// whether its receipt already exists: this batch's own writes first, then
// the committed state looked up for the event.
func (f *folder) first(d *decoded) (isNew, hasReceipt bool) {
	if d.seen || f.marked[d.eventID] {
		return false, false
	}
	f.marked[d.eventID] = true
	f.tx.MarkEvent(d.eventID)
	return true, d.hasReceipt || f.produced[d.receiptID]
}

func (f *folder) pendingOf(d *decoded) *pending {
	if p, ok := f.changes[d.receiptID]; ok {
		return p
	}
	return d.pending
}

// The open-call record around an allow decision's own bytes.
const (
	openRecordPrefix = `{"decision":`
	openRecordSuffix = `}`
)

// putPending encodes and stores p.
func (f *folder) putPending(receiptID string, p *pending) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode pending record of %s: %w", receiptID, err)
	}
	f.tx.PutPending(receiptID, raw)
	f.changes[receiptID] = p
	return nil
}

func (f *folder) deletePending(receiptID string) {
	f.tx.DeletePending(receiptID)
	f.changes[receiptID] = nil
}

// produce records that b becomes the next leaf, and points the dedup
// entries of the event that completed it and of its decision at that leaf.
func (f *folder) produce(b *schemas.ReceiptBody, completing string, decision *schemas.DecisionEvent) *schemas.ReceiptBody {
	if f.edgeVerified && decision.EdgeKey != "" {
		// The decision was folded only if it names its signer.
		b.Metadata = withMetadataRaw(b.Metadata, edgeKey, f.edgeRef(schemas.EdgeRef{EdgeID: decision.EdgeID, Key: decision.EdgeKey, CredentialID: decision.EdgeCredentialID}))
	}
	f.produced[b.ID] = true
	if p := schemas.LineagePrincipals(decision.CapabilityLineage); p != nil {
		f.principals[b.ID] = p
	}
	idx := f.next
	f.next++
	f.tx.LinkEvent(completing, idx)
	if decision := schemas.DecisionEventID(b.ID); decision != completing {
		f.tx.LinkEvent(decision, idx)
	}
	return b
}

func (f *folder) decision(d *decoded) (*schemas.ReceiptBody, error) {
	e := d.decision
	isNew, has := f.first(d)
	if !isNew {
		return nil, nil
	}
	if has {
		f.log.Warn("decision for a receipt id already in the log; skipped", "receipt_id", e.ReceiptID)
		return nil, nil
	}
	p := f.pendingOf(d)
	if e.Decision.Verdict == schemas.VerdictDeny {
		if p != nil { // a stray outcome was held for this id; the deny closes it
			f.deletePending(e.ReceiptID)
		}
		return f.produce(bodyFromDecision(e, schemas.EvidenceAsserted, e.Decision, e.Timestamp, schemas.EmptyContentHash), e.EventID, e), nil
	}
	class := f.chainEvidence(d)
	if p != nil && p.Outcome != nil {
		f.deletePending(e.ReceiptID)
		return f.produce(bodyFromOutcome(e, class, p.Outcome), p.Outcome.EventID, e), nil
	}
	if p != nil && p.Decision != nil {
		f.log.Warn("second decision for a pending receipt id; skipped", "receipt_id", e.ReceiptID)
		return nil, nil
	}
	f.newPending = append(f.newPending, e)
	if class != schemas.EvidenceAsserted {
		return nil, f.putPending(e.ReceiptID, &pending{Decision: e, ChainEvidence: class})
	}
	f.tx.PutPendingParts(e.ReceiptID, []byte(openRecordPrefix), d.raw, []byte(openRecordSuffix))
	f.changes[e.ReceiptID] = d.openRecord
	return nil, nil
}

func (f *folder) outcome(d *decoded) (*schemas.ReceiptBody, error) {
	e := d.outcome
	isNew, has := f.first(d)
	if !isNew {
		return nil, nil
	}
	if has {
		// The call was already closed, normally as incomplete by a timeout
		// event that the stream ordered first. The receipt stands.
		f.log.Warn("outcome after the receipt was signed; skipped", "receipt_id", e.ReceiptID, "outcome", e.Outcome)
		return nil, nil
	}
	p := f.pendingOf(d)
	if p == nil || p.Decision == nil {
		// Edges publish the outcome only after the decision's PubAck, so
		// this is a stray; keep it until (if ever) its decision arrives.
		f.log.Warn("outcome without a decision; held", "receipt_id", e.ReceiptID)
		return nil, f.putPending(e.ReceiptID, &pending{Outcome: e})
	}
	f.deletePending(e.ReceiptID)
	return f.produce(bodyFromOutcome(p.Decision, chainClass(p), e), e.EventID, p.Decision), nil
}

func (f *folder) timeout(d *decoded) (*schemas.ReceiptBody, error) {
	e := d.timeout
	// A timeout counts only against an open call: one that closes nothing
	// (its outcome won the race, or it came before the decision) is not
	// even marked, so whether a later copy closes the call does not depend
	// on where batches were cut, and lookup's "a pending call's timeout is
	// unseen" holds.
	p := f.pendingOf(d)
	if p == nil || p.Decision == nil {
		return nil, nil
	}
	isNew, has := f.first(d)
	if !isNew || has {
		return nil, nil
	}
	f.deletePending(e.ReceiptID)
	dec := schemas.Decision{Verdict: schemas.VerdictIncomplete, Reason: e.Reason}
	return f.produce(bodyFromDecision(p.Decision, chainClass(p), dec, e.Timestamp, schemas.EmptyContentHash), e.EventID, p.Decision), nil
}

// bodyFromDecision builds the unsigned receipt body of a call; the
// parameter hash is filled in when it is signed. class is the evidence
// class of the decision's call chain, if it has one.
func bodyFromDecision(e *schemas.DecisionEvent, class string, d schemas.Decision, ts uint64, contentHash string) *schemas.ReceiptBody {
	trust := e.TrustLevel
	if trust == "" {
		trust = schemas.TrustMediated
	}
	return &schemas.ReceiptBody{
		ID: e.ReceiptID, Timestamp: ts, CapabilityID: e.CapabilityID,
		ToolServer: e.ToolServer, ToolName: e.ToolName,
		Action:      schemas.ToolCallAction{Parameters: e.Parameters},
		Decision:    d,
		ContentHash: contentHash, PolicyHash: e.PolicyHash,
		Evidence: e.Evidence, Metadata: withTraceID(governedMetadata(e, class), e.TraceID),
		TrustLevel: trust, TenantID: e.TenantID,
	}
}

// withTraceID adds the call's trace id to the receipt's metadata as
// "trace_id" (over an edge's key of that name: the event's field is the
// trace). Without one the metadata is returned as it is, so untraced
// receipts keep their bytes.
func withTraceID(meta json.RawMessage, traceID string) json.RawMessage {
	if traceID == "" {
		return meta
	}
	return withMetadataKey(meta, traceIDKey, traceID)
}

// edgeRef is ref's JSON, encoded once a batch for each edge: a batch's
// receipts nearly all name the same few edges.
func (f *folder) edgeRef(ref schemas.EdgeRef) json.RawMessage {
	if raw, ok := f.edgeRefs[ref]; ok {
		return raw
	}
	raw, _ := json.Marshal(ref)
	if f.edgeRefs == nil {
		f.edgeRefs = map[schemas.EdgeRef]json.RawMessage{}
	}
	f.edgeRefs[ref] = raw
	return raw
}

// withMetadataKey sets one key of a receipt's metadata object.
func withMetadataKey(meta json.RawMessage, key string, v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return meta
	}
	return withMetadataRaw(meta, key, raw)
}

// withMetadataRaw sets key (a plain ASCII name) of a receipt's metadata
// object to the JSON value raw.
func withMetadataRaw(meta json.RawMessage, key string, value json.RawMessage) json.RawMessage {
	if len(meta) == 0 {
		meta = json.RawMessage("{}")
	}
	// Metadata is nearly always canonical (the edges write it so), and a
	// splice keeps it so, which spares decoding it here and rewriting it
	// when the receipt is signed.
	if out, ok := schemas.SetCanonicalMember(meta, key, value); ok {
		return out
	}
	m := map[string]json.RawMessage{}
	if json.Unmarshal(meta, &m) != nil {
		return meta // validated as an object when decoded, so this does not happen
	}
	m[key] = value
	raw, err := json.Marshal(m)
	if err != nil {
		return meta
	}
	return raw
}

// edgeKey is the receipt metadata key naming the edge that decided.
const edgeKey = "edge"

// traceIDKey is the receipt metadata key of the call's trace id.
const traceIDKey = "trace_id"

// bodyFromOutcome maps an allowed call's outcome onto the receipt decision:
// completed → allow; failed → deny by the tool server (Chio's rule:
// "tool server error → signed denial receipt"); cancelled → cancelled.
func bodyFromOutcome(d *schemas.DecisionEvent, class string, o *schemas.OutcomeEvent) *schemas.ReceiptBody {
	dec := schemas.Decision{Verdict: schemas.VerdictAllow}
	switch o.Outcome {
	case schemas.OutcomeFailed:
		dec = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: o.Reason, Guard: "tool_server"}
	case schemas.OutcomeCancelled:
		dec = schemas.Decision{Verdict: schemas.VerdictCancelled, Reason: o.Reason}
	case schemas.OutcomeRefused:
		dec = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: o.Reason, Guard: o.Guard}
	}
	b := bodyFromDecision(d, class, dec, o.Timestamp, o.ContentHash)
	if o.Outcome == schemas.OutcomeNotObserved {
		// The ledger's own key, over whatever either event set: an
		// allow whose result nobody reported says so in what is signed.
		b.Metadata = withMetadataKey(b.Metadata, schemas.MetadataOutcomeKey, string(schemas.OutcomeNotObserved))
	}
	b.Metadata = mergeMetadata(b.Metadata, o.Metadata)
	return b
}

// mergeMetadata adds the outcome's metadata keys to the decision's; keys the
// decision set before the tool ran are never overwritten.
func mergeMetadata(decision, outcome json.RawMessage) json.RawMessage {
	if len(outcome) == 0 {
		return decision
	}
	if len(decision) == 0 && !mayHoldGovernedKey(outcome) {
		return outcome
	}
	var d, o map[string]json.RawMessage
	if len(decision) > 0 && json.Unmarshal(decision, &d) != nil || json.Unmarshal(outcome, &o) != nil {
		return decision
	}
	merged := maps.Clone(o)
	delete(merged, governedKey) // only the decision's intent makes that block
	maps.Copy(merged, d)
	if len(merged) == 0 {
		return decision
	}
	raw, err := json.Marshal(merged)
	if err != nil {
		return decision
	}
	return raw
}

// pendingCache keeps the decoded pending records of committed batches, so
// the outcome that usually follows its decision within a batch or two is
// matched without a Pebble read and a second JSON decode. It is only a
// cache: every record is also in the store, and past maxPendingCached new
// records are simply not cached. The ledger's goroutine writes it between
// batches; the parallel lookups of a batch only read it.
type pendingCache struct{ m map[string]*pending }

const maxPendingCached = 1 << 16

func newPendingCache() *pendingCache { return &pendingCache{m: map[string]*pending{}} }

func (c *pendingCache) get(id string) (*pending, bool) {
	p, ok := c.m[id]
	return p, ok
}

// apply merges a committed batch's changes.
func (c *pendingCache) apply(changes map[string]*pending) {
	for id, p := range changes {
		switch {
		case p == nil:
			delete(c.m, id)
		case len(c.m) < maxPendingCached:
			c.m[id] = p
		}
	}
}
