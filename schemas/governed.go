package schemas

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// GovernedIntent is what a caller declares it is doing with a call (wire
// reference §5.1): which tool, for what purpose, within what amount, and,
// for a call relayed on behalf of another agent, the call chain it extends.
// The edge validates it fail closed and carries it in the decision event;
// the ledger signs it into metadata.governed_transaction.
type GovernedIntent struct {
	ID             string          `json:"id"`
	ServerID       string          `json:"server_id"`
	ToolName       string          `json:"tool_name"`
	Purpose        string          `json:"purpose"`
	MaxAmount      *MonetaryAmount `json:"max_amount,omitempty"`
	Commerce       *Commerce       `json:"commerce,omitempty"`
	MeteredBilling *MeteredBilling `json:"metered_billing,omitempty"`
	CallChain      *CallChain      `json:"call_chain,omitempty"`
	// Context is structured caller context, carried as asserted.
	Context json.RawMessage `json:"context,omitempty"`
}

// Commerce names the seller and the payment token of a purchase.
type Commerce struct {
	Seller               string `json:"seller"`
	SharedPaymentTokenID string `json:"shared_payment_token_id"`
}

// Settlement modes of metered billing.
const (
	SettlementMustPrepay      = "must_prepay"
	SettlementHoldCapture     = "hold_capture"
	SettlementAllowThenSettle = "allow_then_settle"
	maxIntentName             = 256
	maxIntentPurpose          = 1024
)

// MeteredBilling is a metered call's quote and ceiling.
type MeteredBilling struct {
	SettlementMode string       `json:"settlement_mode"`
	Quote          BillingQuote `json:"quote"`
	MaxBilledUnits uint64       `json:"max_billed_units"`
}

// BillingQuote is a provider's quote for a metered call.
type BillingQuote struct {
	QuoteID     string         `json:"quote_id"`
	Provider    string         `json:"provider"`
	BillingUnit string         `json:"billing_unit"`
	QuotedUnits uint64         `json:"quoted_units"`
	QuotedCost  MonetaryAmount `json:"quoted_cost"`
	IssuedAt    uint64         `json:"issued_at"`
	ExpiresAt   *uint64        `json:"expires_at,omitempty"`
}

// CallChain places a call in a chain of delegated calls: the call it was
// made on behalf of (parent), the subject that started the chain (origin)
// and the one that delegated to the caller (delegator).
type CallChain struct {
	ChainID          string `json:"chain_id"`
	ParentRequestID  string `json:"parent_request_id"`
	ParentReceiptID  string `json:"parent_receipt_id,omitempty"`
	OriginSubject    string `json:"origin_subject"`
	DelegatorSubject string `json:"delegator_subject"`
}

// MaxIntentBytes bounds an intent's canonical size. It is charged against
// the decision's MaxMetadataBytes, because it is signed into the receipt's
// metadata.
const MaxIntentBytes = 4 << 10

// ErrIntentShape means an intent is not a JSON object of the documented
// fields: bad input, refused before the kernel.
var ErrIntentShape = errors.New("governed_intent is malformed")

// DecodeGovernedIntent decodes an intent strictly (the strict reader,
// names matched exactly, unknown fields refused) and bounds its size.
func DecodeGovernedIntent(raw []byte) (*GovernedIntent, error) {
	// Exact names: {"PURPOSE":…} would fill Purpose for the kernel while
	// the receipt's copy of the caller's metadata says otherwise.
	var g GovernedIntent
	if err := strictjson.UnmarshalExactKnown(raw, &g); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIntentShape, err)
	}
	canon, err := CanonicalizeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIntentShape, err)
	}
	if len(canon) > MaxIntentBytes {
		return nil, fmt.Errorf("%w: %d bytes in canonical form, at most %d", ErrIntentShape, len(canon), MaxIntentBytes)
	}
	return &g, nil
}

// Validate checks the intent against the call it comes with, fail closed:
// the kernel denies a call whose intent does not validate. requestID is
// the call's own request id (a chain's parent must be another call).
func (g *GovernedIntent) Validate(requestID, serverID, toolName string) error {
	switch {
	case !validIntentText(g.ID, maxIntentName):
		return errors.New("governed_intent.id must be non-empty text of at most 256 bytes")
	case !validIntentText(g.Purpose, maxIntentPurpose):
		return errors.New("governed_intent.purpose must be non-empty text of at most 1024 bytes")
	case g.ServerID != serverID || g.ToolName != toolName:
		return fmt.Errorf("governed_intent names %s/%s but the call is to %s/%s", g.ServerID, g.ToolName, serverID, toolName)
	}
	if g.MaxAmount != nil {
		if err := checkAmount("governed_intent.max_amount", g.MaxAmount); err != nil {
			return err
		}
	}
	if c := g.Commerce; c != nil && (!validIntentText(c.Seller, maxIntentName) || !validIntentText(c.SharedPaymentTokenID, maxIntentName)) {
		return errors.New("governed_intent.commerce needs a seller and a shared_payment_token_id")
	}
	if m := g.MeteredBilling; m != nil {
		switch m.SettlementMode {
		case SettlementMustPrepay, SettlementHoldCapture, SettlementAllowThenSettle:
		default:
			return fmt.Errorf("governed_intent.metered_billing.settlement_mode %q is not must_prepay, hold_capture or allow_then_settle", m.SettlementMode)
		}
		q := m.Quote
		if !validIntentText(q.QuoteID, maxIntentName) || !validIntentText(q.Provider, maxIntentName) || !validIntentText(q.BillingUnit, maxIntentName) || q.IssuedAt == 0 {
			return errors.New("governed_intent.metered_billing.quote needs quote_id, provider, billing_unit and issued_at")
		}
		if err := checkAmount("governed_intent.metered_billing.quote.quoted_cost", &q.QuotedCost); err != nil {
			return err
		}
		if q.ExpiresAt != nil && *q.ExpiresAt <= q.IssuedAt {
			return errors.New("governed_intent.metered_billing.quote expires before it was issued")
		}
	}
	if c := g.CallChain; c != nil {
		for _, f := range []struct{ name, v string }{
			{"chain_id", c.ChainID}, {"parent_request_id", c.ParentRequestID},
			{"origin_subject", c.OriginSubject}, {"delegator_subject", c.DelegatorSubject},
		} {
			if !validIntentText(f.v, maxIntentName) {
				return fmt.Errorf("governed_intent.call_chain.%s must be non-empty text of at most 256 bytes", f.name)
			}
		}
		if c.ParentReceiptID != "" && !ValidID(c.ParentReceiptID) {
			return errors.New("governed_intent.call_chain.parent_receipt_id is not a valid receipt id")
		}
		if c.ParentRequestID == requestID {
			return errors.New("governed_intent.call_chain.parent_request_id is the call's own request id")
		}
	}
	if len(g.Context) > 0 {
		if err := checkMetadata(g.Context); err != nil {
			return fmt.Errorf("governed_intent.context: %w", err)
		}
	}
	return nil
}

func validIntentText(s string, max int) bool { return len(s) <= max && ValidName(s) }

func checkAmount(what string, m *MonetaryAmount) error {
	if !isCurrency(m.Currency) {
		return fmt.Errorf("%s.currency %q is not three uppercase letters", what, m.Currency)
	}
	if m.Units > 1<<53 {
		return fmt.Errorf("%s.units exceed 2^53", what)
	}
	return nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

// Hash is the intent's intent_hash: SHA-256 hex of its RFC 8785 form. An
// approval or a report binds to the intent through it.
func (g *GovernedIntent) Hash() (string, error) {
	c, err := Canonical(g)
	if err != nil {
		return "", fmt.Errorf("intent hash: %w", err)
	}
	return SHA256Hex(c), nil
}

// Call-chain evidence classes: how much the log
// itself supports a caller's claim to act within a chain. A report never
// shows asserted data as more.
const (
	// EvidenceAsserted: the caller said so; nothing local supports it.
	EvidenceAsserted = "asserted"
	// EvidenceObserved: the log holds the parent call, made by the
	// delegator, with the request id, chain and origin the claim names.
	EvidenceObserved = "observed"
	// EvidenceVerified: a signed lineage statement supports it (not
	// issued by this system yet).
	EvidenceVerified = "verified"
)

// Evidence sources named in a call chain's evidenceSources.
const (
	// SourceGovernedIntent: the chain came with the call's intent.
	SourceGovernedIntent = "governed_intent"
	// SourceLocalLineage: the log observed the parent call.
	SourceLocalLineage = "local_lineage"
)

// GovernedTransaction is metadata.governed_transaction of a receipt (wire
// reference §5.2), built by the ledger from the decision event's intent.
type GovernedTransaction struct {
	IntentID       string                  `json:"intent_id"`
	IntentHash     string                  `json:"intent_hash"`
	Purpose        string                  `json:"purpose"`
	ServerID       string                  `json:"server_id"`
	ToolName       string                  `json:"tool_name"`
	MaxAmount      *MonetaryAmount         `json:"max_amount,omitempty"`
	Commerce       *Commerce               `json:"commerce,omitempty"`
	MeteredBilling *GovernedMeteredBilling `json:"metered_billing,omitempty"`
	CallChain      *GovernedCallChain      `json:"call_chain,omitempty"`
}

// GovernedMeteredBilling is the metered-billing block of a governed
// transaction; its keys are camelCase, as in the reference.
type GovernedMeteredBilling struct {
	SettlementMode string        `json:"settlementMode"`
	Quote          GovernedQuote `json:"quote"`
	MaxBilledUnits uint64        `json:"maxBilledUnits"`
}

// GovernedQuote is a BillingQuote in the block's camelCase.
type GovernedQuote struct {
	QuoteID     string         `json:"quoteId"`
	Provider    string         `json:"provider"`
	BillingUnit string         `json:"billingUnit"`
	QuotedUnits uint64         `json:"quotedUnits"`
	QuotedCost  MonetaryAmount `json:"quotedCost"`
	IssuedAt    uint64         `json:"issuedAt"`
	ExpiresAt   *uint64        `json:"expiresAt,omitempty"`
}

// GovernedCallChain is the call-chain block of a governed transaction:
// the chain as asserted, with the evidence class the ledger found for it.
type GovernedCallChain struct {
	EvidenceClass    string   `json:"evidenceClass"`
	EvidenceSources  []string `json:"evidenceSources"`
	ChainID          string   `json:"chainId"`
	ParentRequestID  string   `json:"parentRequestId"`
	ParentReceiptID  string   `json:"parentReceiptId,omitempty"`
	OriginSubject    string   `json:"originSubject"`
	DelegatorSubject string   `json:"delegatorSubject"`
}

// Transaction is the governed_transaction block of the intent, with the
// call chain (if any) at the given evidence class.
func (g *GovernedIntent) Transaction(evidenceClass string) (*GovernedTransaction, error) {
	h, err := g.Hash()
	if err != nil {
		return nil, err
	}
	t := &GovernedTransaction{
		IntentID: g.ID, IntentHash: h, Purpose: g.Purpose, ServerID: g.ServerID, ToolName: g.ToolName,
		MaxAmount: g.MaxAmount, Commerce: g.Commerce,
	}
	if m := g.MeteredBilling; m != nil {
		q := m.Quote
		t.MeteredBilling = &GovernedMeteredBilling{
			SettlementMode: m.SettlementMode, MaxBilledUnits: m.MaxBilledUnits,
			Quote: GovernedQuote{
				QuoteID: q.QuoteID, Provider: q.Provider, BillingUnit: q.BillingUnit, QuotedUnits: q.QuotedUnits,
				QuotedCost: q.QuotedCost, IssuedAt: q.IssuedAt, ExpiresAt: q.ExpiresAt,
			},
		}
	}
	if c := g.CallChain; c != nil {
		sources := []string{SourceGovernedIntent}
		if evidenceClass == EvidenceObserved {
			sources = append(sources, SourceLocalLineage)
		}
		t.CallChain = &GovernedCallChain{
			EvidenceClass: evidenceClass, EvidenceSources: sources, ChainID: c.ChainID,
			ParentRequestID: c.ParentRequestID, ParentReceiptID: c.ParentReceiptID,
			OriginSubject: c.OriginSubject, DelegatorSubject: c.DelegatorSubject,
		}
	}
	return t, nil
}

// Attribution is metadata.attribution of a receipt:
// whose capability the call exercised and which grant matched.
type Attribution struct {
	SubjectKey      string `json:"subject_key"`
	IssuerKey       string `json:"issuer_key"`
	DelegationDepth int    `json:"delegation_depth"`
	GrantIndex      int    `json:"grant_index"`
	// Binding is how the caller proved it holds the capability; absent
	// on receipts signed before holder binding.
	Binding *HolderBinding `json:"binding,omitempty"`
}

// HolderBinding is metadata.attribution.binding: how the caller was bound
// to the capability it presented.
type HolderBinding struct {
	// Method is "bearer" (the token alone), "dpop" (an RFC 9449 proof by
	// the subject key) or "chio_dpop_v1" (a chio.dpop_proof.v1 by it).
	Method string `json:"method"`
	// JKT is the proving key's RFC 7638 SHA-256 thumbprint, base64url.
	JKT string `json:"jkt,omitempty"`
}

// CapabilityLineage is one capability of a presented token's delegation
// chain as the kernel verified it (the capability_lineage record of wire
// reference §7.1). Decision events carry the chain, root first, so the
// projections can answer lineage queries and join receipts to grants.
type CapabilityLineage struct {
	CapabilityID       string      `json:"capability_id"`
	SubjectKey         string      `json:"subject_key"`
	IssuerKey          string      `json:"issuer_key"`
	IssuedAt           uint64      `json:"issued_at"`
	ExpiresAt          uint64      `json:"expires_at"`
	DelegationDepth    int         `json:"delegation_depth"`
	ParentCapabilityID string      `json:"parent_capability_id,omitempty"`
	ScopeHash          string      `json:"scope_hash"`
	Grants             []ToolGrant `json:"grants,omitempty"`
	// GrantsOmitted is set when the grants were left out to keep the
	// event within its size bound; a report then cannot resolve grants of
	// this capability and fails closed.
	GrantsOmitted bool `json:"grants_omitted,omitempty"`
}

// MaxLineageBytes bounds a decision event's canonical capability_lineage.
const MaxLineageBytes = 16 << 10

func checkLineage(l []CapabilityLineage) error {
	if len(l) > MaxDelegationDepth+1 {
		return fmt.Errorf("capability_lineage has %d entries, at most %d", len(l), MaxDelegationDepth+1)
	}
	for i, c := range l {
		switch {
		case !ValidName(c.CapabilityID) || !ValidName(c.SubjectKey) || !ValidName(c.IssuerKey):
			return fmt.Errorf("capability_lineage[%d] needs capability_id, subject_key and issuer_key", i)
		case c.DelegationDepth != i:
			return fmt.Errorf("capability_lineage[%d] has delegation_depth %d", i, c.DelegationDepth)
		case i == 0 && c.ParentCapabilityID != "":
			return errors.New("capability_lineage[0] is the root and has no parent")
		case i > 0 && c.ParentCapabilityID != l[i-1].CapabilityID:
			return fmt.Errorf("capability_lineage[%d] does not name capability_lineage[%d] as its parent", i, i-1)
		case c.GrantsOmitted && len(c.Grants) > 0:
			return fmt.Errorf("capability_lineage[%d] omits grants but lists some", i)
		}
	}
	return checkCanonical("capability_lineage", mustJSON(l), MaxLineageBytes)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}
