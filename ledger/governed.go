package ledger

import (
	"bytes"
	"encoding/json"

	"github.com/chio-ledger/chio/schemas"
)

// parentReceiptID is the receipt id of the call a decision's call chain
// names as its parent, or "".
func parentReceiptID(e *schemas.DecisionEvent) string {
	if e == nil || e.GovernedIntent == nil || e.GovernedIntent.CallChain == nil {
		return ""
	}
	return e.GovernedIntent.CallChain.ParentReceiptID
}

func chainClass(p *pending) string {
	if p.ChainEvidence == "" {
		return schemas.EvidenceAsserted
	}
	return p.ChainEvidence
}

// chainEvidence decides the evidence class of an allowed decision's call
// chain from what the log itself holds, at this point of the stream. The
// chain is observed only when all of these hold:
//   - its parent is a call the log has open: allowed, with no outcome or
//     timeout yet, so the relayed call happened within the parent call;
//   - the parent's request id is the one the chain names;
//   - the parent was made by the delegator the chain names, and the
//     caller's own capability was delegated by that subject;
//   - the parent's chain (if any) has the same chain id and origin and
//     was itself observed; a parent without a chain is the origin's call.
//
// Anything less stays asserted. The answer depends only on the events
// before this one in the stream, so a rebuild reproduces it.
func (f *folder) chainEvidence(d *decoded) string {
	e := d.decision
	id := parentReceiptID(e)
	if id == "" || e.Decision.Verdict != schemas.VerdictAllow {
		return schemas.EvidenceAsserted
	}
	c := e.GovernedIntent.CallChain
	parent := d.parent
	if p, ok := f.changes[id]; ok {
		parent = p
	}
	if parent == nil || parent.Decision == nil || parent.Outcome != nil {
		return schemas.EvidenceAsserted
	}
	pd := parent.Decision
	if pd.TenantID != e.TenantID {
		return schemas.EvidenceAsserted
	}
	if pd.RequestID == "" || pd.RequestID != c.ParentRequestID || subjectOf(pd) != c.DelegatorSubject {
		return schemas.EvidenceAsserted
	}
	if !delegatedBy(e.CapabilityLineage, c.DelegatorSubject) {
		return schemas.EvidenceAsserted
	}
	if pc := pd.GovernedIntent; pc != nil && pc.CallChain != nil {
		if pc.CallChain.ChainID != c.ChainID || pc.CallChain.OriginSubject != c.OriginSubject || chainClass(parent) != schemas.EvidenceObserved {
			return schemas.EvidenceAsserted
		}
	} else if c.OriginSubject != c.DelegatorSubject {
		return schemas.EvidenceAsserted
	}
	return schemas.EvidenceObserved
}

// subjectOf is the subject of the capability a decision exercised.
func subjectOf(e *schemas.DecisionEvent) string {
	if n := len(e.CapabilityLineage); n > 0 {
		return e.CapabilityLineage[n-1].SubjectKey
	}
	return ""
}

// delegatedBy reports whether subject holds one of the capabilities the
// presented one was delegated from.
func delegatedBy(lineage []schemas.CapabilityLineage, subject string) bool {
	for i := 0; i+1 < len(lineage); i++ {
		if lineage[i].SubjectKey == subject {
			return true
		}
	}
	return false
}

// governedKey is the metadata key the ledger owns.
const governedKey = "governed_transaction"

// governedMetadata is the decision's metadata with the signed
// governed_transaction block built from its intent, if it has one. The
// ledger owns that key: a value an edge put there is dropped, so only an
// intent the kernel saw can produce the block a report trusts.
func governedMetadata(e *schemas.DecisionEvent, class string) json.RawMessage {
	if e.GovernedIntent == nil && !mayHoldGovernedKey(e.Metadata) {
		return e.Metadata
	}
	m := map[string]any{}
	if len(e.Metadata) > 0 {
		var raw map[string]json.RawMessage
		if json.Unmarshal(e.Metadata, &raw) == nil {
			for k, v := range raw {
				m[k] = v
			}
		}
	}
	delete(m, governedKey)
	if e.GovernedIntent != nil {
		tx, err := e.GovernedIntent.Transaction(class)
		if err != nil {
			return e.Metadata // validation canonicalized the intent, so this does not happen
		}
		m[governedKey] = tx
	}
	if len(m) == 0 {
		return nil
	}
	out, err := json.Marshal(m)
	if err != nil {
		return e.Metadata
	}
	return out
}

// mayHoldGovernedKey is a cheap test that metadata cannot hold the
// governed_transaction key: neither its name nor any escape (which could
// spell it) occurs in the text.
func mayHoldGovernedKey(m json.RawMessage) bool {
	return bytes.Contains(m, []byte("governed")) || bytes.Contains(m, []byte(`\u`))
}
