package ledger

import (
	"encoding/json"
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
}

// folder turns events, in stream order, into receipt bodies. It is a pure
// function of the events and the log's indexes, so a replay of the stream
// folds to the same receipts in the same order.
type folder struct {
	tx       *logstore.Txn
	produced map[string]bool // receipt ids produced earlier in this batch
	log      *slog.Logger
	// cache holds decoded pending records of committed batches (see
	// pendingCache); changes is this batch's overlay on it, nil meaning deleted.
	cache   *pendingCache
	changes map[string]*pending
	// newPending lists allow decisions that started waiting in this batch.
	newPending []*schemas.DecisionEvent
}

// decoded is one event after parsing and validation, which need no log
// state and so run in parallel before the sequential fold.
type decoded struct {
	decision *schemas.DecisionEvent
	outcome  *schemas.OutcomeEvent
	timeout  *schemas.TimeoutEvent
}

// decode parses and validates one event. Malformed events and unknown
// subjects are logged and come back empty: they are facts in the stream,
// skipped identically on every replay.
func decode(log *slog.Logger, e *event) decoded {
	var d decoded
	var v validator
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
	return d
}

// fold applies one decoded event. It returns the receipt body the event
// completes, or nil; only storage errors are returned.
func (f *folder) fold(d decoded) (*schemas.ReceiptBody, error) {
	switch {
	case d.decision != nil:
		return f.decision(d.decision)
	case d.outcome != nil:
		return f.outcome(d.outcome)
	case d.timeout != nil:
		return f.timeout(d.timeout)
	}
	return nil, nil
}

type validator interface{ Validate() error }

// first marks an event id as folded and reports whether it was new, and
// whether its receipt already exists.
func (f *folder) first(eventID, receiptID string) (isNew, hasReceipt bool, err error) {
	seen, err := f.tx.EventSeen(eventID)
	if err != nil || seen {
		return false, false, err
	}
	f.tx.MarkEvent(eventID)
	if f.produced[receiptID] {
		return true, true, nil
	}
	has, err := f.tx.HasReceipt(receiptID)
	return true, has, err
}

func (f *folder) pendingOf(receiptID string) (*pending, error) {
	if p, ok := f.changes[receiptID]; ok {
		return p, nil
	}
	if p, ok := f.cache.get(receiptID); ok {
		return p, nil
	}
	raw, ok, err := f.tx.Pending(receiptID)
	if err != nil || !ok {
		return nil, err
	}
	var p pending
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("decode pending record of %s: %w", receiptID, err)
	}
	return &p, nil
}

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

func (f *folder) produce(b *schemas.ReceiptBody) *schemas.ReceiptBody {
	f.produced[b.ID] = true
	return b
}

func (f *folder) decision(e *schemas.DecisionEvent) (*schemas.ReceiptBody, error) {
	isNew, has, err := f.first(e.EventID, e.ReceiptID)
	if err != nil || !isNew {
		return nil, err
	}
	if has {
		f.log.Warn("decision for a receipt id already in the log; skipped", "receipt_id", e.ReceiptID)
		return nil, nil
	}
	if e.Decision.Verdict == schemas.VerdictDeny {
		return f.produce(bodyFromDecision(e, e.Decision, e.Timestamp, schemas.EmptyContentHash)), nil
	}
	p, err := f.pendingOf(e.ReceiptID)
	if err != nil {
		return nil, err
	}
	if p != nil && p.Outcome != nil {
		f.deletePending(e.ReceiptID)
		return f.produce(bodyFromOutcome(e, p.Outcome)), nil
	}
	if p != nil && p.Decision != nil {
		f.log.Warn("second decision for a pending receipt id; skipped", "receipt_id", e.ReceiptID)
		return nil, nil
	}
	f.newPending = append(f.newPending, e)
	return nil, f.putPending(e.ReceiptID, &pending{Decision: e})
}

func (f *folder) outcome(e *schemas.OutcomeEvent) (*schemas.ReceiptBody, error) {
	isNew, has, err := f.first(e.EventID, e.ReceiptID)
	if err != nil || !isNew {
		return nil, err
	}
	if has {
		// The call was already closed, normally as incomplete by a timeout
		// event that the stream ordered first. The receipt stands.
		f.log.Warn("outcome after the receipt was signed; skipped", "receipt_id", e.ReceiptID, "outcome", e.Outcome)
		return nil, nil
	}
	p, err := f.pendingOf(e.ReceiptID)
	if err != nil {
		return nil, err
	}
	if p == nil || p.Decision == nil {
		// Edges publish the outcome only after the decision's PubAck, so
		// this is a stray; keep it until (if ever) its decision arrives.
		f.log.Warn("outcome without a decision; held", "receipt_id", e.ReceiptID)
		return nil, f.putPending(e.ReceiptID, &pending{Outcome: e})
	}
	f.deletePending(e.ReceiptID)
	return f.produce(bodyFromOutcome(p.Decision, e)), nil
}

func (f *folder) timeout(e *schemas.TimeoutEvent) (*schemas.ReceiptBody, error) {
	isNew, has, err := f.first(e.EventID, e.ReceiptID)
	if err != nil || !isNew || has {
		return nil, err // has: the outcome won the race, as it should
	}
	p, err := f.pendingOf(e.ReceiptID)
	if err != nil || p == nil || p.Decision == nil {
		return nil, err
	}
	f.deletePending(e.ReceiptID)
	d := schemas.Decision{Verdict: schemas.VerdictIncomplete, Reason: e.Reason}
	return f.produce(bodyFromDecision(p.Decision, d, e.Timestamp, schemas.EmptyContentHash)), nil
}

// bodyFromDecision builds the unsigned receipt body of a call; the
// parameter hash is filled in when it is signed.
func bodyFromDecision(e *schemas.DecisionEvent, d schemas.Decision, ts uint64, contentHash string) *schemas.ReceiptBody {
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
		Evidence: e.Evidence, Metadata: e.Metadata,
		TrustLevel: trust, TenantID: e.TenantID,
	}
}

// bodyFromOutcome maps an allowed call's outcome onto the receipt decision:
// completed → allow; failed → deny by the tool server (the bridges spec's
// "tool server error → signed denial receipt"); cancelled → cancelled.
func bodyFromOutcome(d *schemas.DecisionEvent, o *schemas.OutcomeEvent) *schemas.ReceiptBody {
	dec := schemas.Decision{Verdict: schemas.VerdictAllow}
	switch o.Outcome {
	case schemas.OutcomeFailed:
		dec = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: o.Reason, Guard: "tool_server"}
	case schemas.OutcomeCancelled:
		dec = schemas.Decision{Verdict: schemas.VerdictCancelled, Reason: o.Reason}
	}
	b := bodyFromDecision(d, dec, o.Timestamp, o.ContentHash)
	b.Metadata = mergeMetadata(d.Metadata, o.Metadata)
	return b
}

// mergeMetadata adds the outcome's metadata keys to the decision's; keys the
// decision set before the tool ran are never overwritten.
func mergeMetadata(decision, outcome json.RawMessage) json.RawMessage {
	if len(outcome) == 0 {
		return decision
	}
	if len(decision) == 0 {
		return outcome
	}
	var d, o map[string]json.RawMessage
	if json.Unmarshal(decision, &d) != nil || json.Unmarshal(outcome, &o) != nil {
		return decision
	}
	merged := maps.Clone(o)
	maps.Copy(merged, d)
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
// records are simply not cached. Only the ledger's goroutine uses it.
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
