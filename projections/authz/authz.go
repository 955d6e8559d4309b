// Package authz builds the authorization-context report
// (chio.oauth.authorization-context-report.v1, wire reference §5.3) from
// signed receipts and capability lineage. It is pure: the caller supplies
// the receipts and a lineage lookup, and Build does no other I/O.
//
// Which receipts become rows:
//   - receipts may yield a superset of the matching receipts (the caller's
//     index narrows by capability, or not at all); Build applies every
//     Filter field itself. An iteration error is returned, wrapped.
//   - A receipt is governed when its metadata has governed_transaction.
//     Only governed receipts the kernel authorized become rows: verdict
//     allow, cancelled or incomplete, or deny by guard "tool_server" (the
//     tool failed after the kernel allowed it). Kernel denials authorized
//     nothing and are skipped, as are receipts that are not governed.
//   - Rows follow input order, at most the clamped Filter.Limit of them.
//     The summary counts every matching authorized governed receipt, not
//     only the rows returned.
//
// The report is all or nothing. Every matching authorized governed
// receipt, within the limit or beyond it, must project truthfully, or
// Build returns an *UnprojectableError and no report: the receipt's
// signature was not verified; governed_transaction or attribution is
// missing or malformed (decoded strictly, unknown fields refused);
// governed_transaction names another tool than the receipt; the
// capability has no lineage record; the grant cannot be resolved (grants
// omitted from the record, grant_index out of range, or a grant for
// another tool); attribution's subject, issuer or delegation depth differ
// from the lineage record's; the grant requires DPoP, which this profile
// cannot represent; or the call chain's evidence class is unknown.
//
// A call chain's evidence class is shown as signed and never upgraded;
// delegatedCallChainBound is true only for observed or verified chains.
// Approval, runtime assurance and DPoP binding are not supported, so their
// counters stay 0 and their row fields false.
package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"

	"github.com/chio-ledger/chio/schemas"
)

// Filter selects receipts; zero values mean "any". Since/Until are Unix
// seconds, inclusive.
type Filter struct {
	CapabilityID, ToolServer, ToolName string
	Since, Until                       uint64
	Limit                              int
}

// Input is one stored receipt: the signed receipt and whether the
// projection verified its signature against the trusted kernel key.
type Input struct {
	Receipt  *schemas.Receipt
	Verified bool
}

// LineageFunc returns a capability's lineage record; ok=false if the
// projection has none.
type LineageFunc func(capabilityID string) (rec *schemas.CapabilityLineage, ok bool, err error)

// UnprojectableError names the receipt a report could not project
// truthfully.
type UnprojectableError struct {
	ReceiptID, Reason string
}

func (e *UnprojectableError) Error() string { return "receipt " + e.ReceiptID + ": " + e.Reason }

// Row limits. Validating user input is the HTTP layer's job; Build only
// clamps.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// toolFailureGuard is the guard the ledger names on the deny receipt of an
// allowed call whose tool failed (ledger bodyFromOutcome): the kernel
// authorized that call.
const toolFailureGuard = "tool_server"

// Build projects the receipts matching f into a report. lineage resolves
// each capability at most once per call; a nil lineage has no records, so
// any governed receipt fails closed.
func Build(f Filter, receipts iter.Seq2[Input, error], lineage LineageFunc) (*schemas.AuthorizationContextReport, error) {
	return BuildGoverned(f, func(yield func(*Governed, error) bool) {
		for in, err := range receipts {
			if err != nil {
				yield(nil, err)
				return
			}
			g, err := Examine(in)
			if err != nil {
				yield(nil, err)
				return
			}
			if g != nil && !yield(g, nil) {
				return
			}
		}
	}, lineage)
}

// Governed is what a report needs of one governed receipt: everything that
// depends on the signed receipt alone, decided once (a projection stores it
// when the receipt arrives, so a report decodes no receipt). What depends on
// the capability lineage is decided by BuildGoverned, since lineage may
// arrive after the receipt.
type Governed struct {
	ReceiptID    string `json:"receipt_id"`
	Timestamp    uint64 `json:"timestamp"`
	CapabilityID string `json:"capability_id"`
	ToolServer   string `json:"tool_server"`
	ToolName     string `json:"tool_name"`
	// Authorized: the kernel allowed the call, whatever its outcome.
	Authorized bool `json:"authorized"`
	// Unprojectable says why no report may include this receipt, whatever
	// lineage exists; Tx and Attr are then unset.
	Unprojectable string                       `json:"unprojectable,omitempty"`
	Tx            *schemas.GovernedTransaction `json:"tx,omitempty"`
	Attr          *schemas.Attribution         `json:"attr,omitempty"`
	// Bound: the call chain's evidence is observed or verified.
	Bound bool `json:"bound,omitempty"`
}

// Examine decides what a report can take from one receipt. It returns nil
// for a receipt that is not governed (no metadata.governed_transaction).
func Examine(in Input) (*Governed, error) {
	r := in.Receipt
	if r == nil {
		return nil, errors.New("authorization context: the receipt source yielded no receipt")
	}
	g := &Governed{ReceiptID: r.ID, Timestamp: r.Timestamp, CapabilityID: r.CapabilityID, ToolServer: r.ToolServer,
		ToolName: r.ToolName, Authorized: authorized(r.Decision)}
	fail := func(format string, args ...any) (*Governed, error) {
		g.Unprojectable = fmt.Sprintf(format, args...)
		return g, nil
	}
	if len(r.Metadata) == 0 {
		return nil, nil
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(r.Metadata, &meta); err != nil {
		if json.Valid(r.Metadata) {
			return nil, nil // valid JSON but not an object: no governed_transaction
		}
		// Unreadable metadata may hide a governed_transaction.
		return fail("metadata is not valid JSON")
	}
	rawTx, governed := meta["governed_transaction"]
	if !governed {
		return nil, nil
	}
	if !in.Verified {
		return fail("signature not verified against the trusted kernel key")
	}
	tx, err := decodeTransaction(rawTx)
	if err != nil {
		return fail("metadata.governed_transaction: %v", err)
	}
	if tx.ServerID != r.ToolServer || tx.ToolName != r.ToolName {
		return fail("governed_transaction names %s/%s but the receipt is for %s/%s", tx.ServerID, tx.ToolName, r.ToolServer, r.ToolName)
	}
	attr, err := decodeAttribution(meta["attribution"])
	if err != nil {
		return fail("metadata.attribution: %v", err)
	}
	if c := tx.CallChain; c != nil {
		switch c.EvidenceClass {
		case schemas.EvidenceObserved, schemas.EvidenceVerified:
			g.Bound = true
		case schemas.EvidenceAsserted:
		default:
			return fail("call chain evidenceClass %q is not asserted, observed or verified", c.EvidenceClass)
		}
	}
	g.Tx, g.Attr = tx, attr
	return g, nil
}

// BuildGoverned is Build over receipts already examined; receipts that are
// not governed are simply absent.
func BuildGoverned(f Filter, receipts iter.Seq2[*Governed, error], lineage LineageFunc) (*schemas.AuthorizationContextReport, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	rep := &schemas.AuthorizationContextReport{
		Schema:   schemas.AuthorizationContextReportSchema,
		Profile:  schemas.DefaultAuthorizationProfile(),
		Receipts: []schemas.AuthorizationContextRow{},
	}
	b := builder{lineage: lineage, cache: map[string]*schemas.CapabilityLineage{}}
	for g, err := range receipts {
		if err != nil {
			return nil, fmt.Errorf("authorization context: reading receipts: %w", err)
		}
		if g == nil {
			return nil, errors.New("authorization context: the receipt source yielded no receipt")
		}
		if !f.matches(g) || !g.Authorized {
			continue
		}
		p, err := b.project(g)
		if err != nil {
			return nil, err
		}
		p.count(&rep.Summary)
		if len(rep.Receipts) < limit {
			rep.Receipts = append(rep.Receipts, p.row())
		}
	}
	return rep, nil
}

func (f *Filter) matches(g *Governed) bool {
	if g.Unprojectable != "" && g.CapabilityID == "" {
		return true // unreadable: it might match any filter, so it fails them all
	}
	return (f.CapabilityID == "" || g.CapabilityID == f.CapabilityID) &&
		(f.ToolServer == "" || g.ToolServer == f.ToolServer) &&
		(f.ToolName == "" || g.ToolName == f.ToolName) &&
		(f.Since == 0 || g.Timestamp >= f.Since) &&
		(f.Until == 0 || g.Timestamp <= f.Until)
}

// authorized reports whether the kernel allowed the call, whatever its
// outcome.
func authorized(d schemas.Decision) bool {
	switch d.Verdict {
	case schemas.VerdictAllow, schemas.VerdictCancelled, schemas.VerdictIncomplete:
		return true
	case schemas.VerdictDeny:
		return d.Guard == toolFailureGuard
	}
	return false
}

type builder struct {
	lineage LineageFunc
	cache   map[string]*schemas.CapabilityLineage // nil value: no record
}

// projection is a receipt checked for projectability; the row is built
// from it only when it is within the limit.
type projection struct {
	g     *Governed
	tx    *schemas.GovernedTransaction
	attr  *schemas.Attribution
	grant *schemas.ToolGrant
	bound bool // delegatedCallChainBound
}

// project joins one matching authorized governed receipt with its
// capability's lineage, or says why it cannot be projected.
func (b *builder) project(g *Governed) (*projection, error) {
	fail := func(format string, args ...any) (*projection, error) {
		return nil, &UnprojectableError{ReceiptID: g.ReceiptID, Reason: fmt.Sprintf(format, args...)}
	}
	if g.Unprojectable != "" {
		return fail("%s", g.Unprojectable)
	}
	if g.Tx == nil || g.Attr == nil {
		return fail("examined without its governed_transaction or attribution")
	}
	tx, attr := g.Tx, g.Attr
	rec, err := b.lookup(g.CapabilityID)
	if err != nil {
		return nil, fmt.Errorf("authorization context: lineage of capability %s: %w", g.CapabilityID, err)
	}
	if rec == nil {
		return fail("no capability lineage record for %s", g.CapabilityID)
	}
	if rec.SubjectKey != attr.SubjectKey || rec.IssuerKey != attr.IssuerKey {
		return fail("inconsistent subject: attribution names subject %s issued by %s, the lineage of %s names subject %s issued by %s",
			attr.SubjectKey, attr.IssuerKey, g.CapabilityID, rec.SubjectKey, rec.IssuerKey)
	}
	if rec.DelegationDepth != attr.DelegationDepth {
		return fail("attribution delegation_depth %d differs from the lineage's %d", attr.DelegationDepth, rec.DelegationDepth)
	}
	switch {
	case rec.GrantsOmitted:
		return fail("unresolved grant: the lineage of %s omits its grants", g.CapabilityID)
	case attr.GrantIndex < 0 || attr.GrantIndex >= len(rec.Grants):
		return fail("unresolved grant: grant_index %d, capability %s has %d grants", attr.GrantIndex, g.CapabilityID, len(rec.Grants))
	}
	gr := &rec.Grants[attr.GrantIndex]
	if gr.ServerID != g.ToolServer || (gr.ToolName != "*" && gr.ToolName != g.ToolName) {
		return fail("unresolved grant: grant %d covers %s/%s, not %s/%s", attr.GrantIndex, gr.ServerID, gr.ToolName, g.ToolServer, g.ToolName)
	}
	if gr.DPoPRequired != nil && *gr.DPoPRequired {
		return fail("grant %d requires a DPoP binding, which this profile cannot represent", attr.GrantIndex)
	}
	return &projection{g: g, tx: tx, attr: attr, grant: gr, bound: g.Bound}, nil
}

// lookup resolves a capability's lineage once per Build: many receipts
// share a capability.
func (b *builder) lookup(id string) (*schemas.CapabilityLineage, error) {
	if rec, ok := b.cache[id]; ok {
		return rec, nil
	}
	var rec *schemas.CapabilityLineage
	if b.lineage != nil {
		r, ok, err := b.lineage(id)
		if err != nil {
			return nil, err
		}
		// A record for another capability is no record for this one.
		if ok && r != nil && r.CapabilityID == id {
			rec = r
		}
	}
	b.cache[id] = rec
	return rec, nil
}

var errNull = errors.New("is null")

func decodeTransaction(raw json.RawMessage) (*schemas.GovernedTransaction, error) {
	if string(raw) == "null" {
		return nil, errNull
	}
	var tx schemas.GovernedTransaction
	if err := schemas.DecodeStrict(raw, &tx); err != nil {
		return nil, err
	}
	for _, f := range []struct{ name, v string }{
		{"intent_id", tx.IntentID}, {"intent_hash", tx.IntentHash}, {"purpose", tx.Purpose},
		{"server_id", tx.ServerID}, {"tool_name", tx.ToolName},
	} {
		if f.v == "" {
			return nil, fmt.Errorf("%s is missing", f.name)
		}
	}
	if c := tx.CallChain; c != nil && (c.ChainID == "" || c.ParentRequestID == "" || c.OriginSubject == "" || c.DelegatorSubject == "") {
		return nil, errors.New("call_chain needs chainId, parentRequestId, originSubject and delegatorSubject")
	}
	return &tx, nil
}

// attributionWire has pointer fields so a missing key is refused rather
// than read as 0 (grant 0, depth 0).
type attributionWire struct {
	SubjectKey      *string `json:"subject_key"`
	IssuerKey       *string `json:"issuer_key"`
	DelegationDepth *int    `json:"delegation_depth"`
	GrantIndex      *int    `json:"grant_index"`
}

func decodeAttribution(raw json.RawMessage) (*schemas.Attribution, error) {
	if raw == nil {
		return nil, errors.New("is missing")
	}
	if string(raw) == "null" {
		return nil, errNull
	}
	var w attributionWire
	if err := schemas.DecodeStrict(raw, &w); err != nil {
		return nil, err
	}
	if w.SubjectKey == nil || *w.SubjectKey == "" || w.IssuerKey == nil || *w.IssuerKey == "" || w.DelegationDepth == nil || w.GrantIndex == nil {
		return nil, errors.New("needs subject_key, issuer_key, delegation_depth and grant_index")
	}
	return &schemas.Attribution{SubjectKey: *w.SubjectKey, IssuerKey: *w.IssuerKey, DelegationDepth: *w.DelegationDepth, GrantIndex: *w.GrantIndex}, nil
}

// count adds the projection to the summary. Approval, runtime assurance
// and DPoP are not supported (a DPoP grant fails closed), so their
// counters stay 0.
func (p *projection) count(s *schemas.AuthorizationSummary) {
	s.MatchingReceipts++
	s.SenderBoundReceipts++ // every row is bound to its attributed subject
	if p.tx.Commerce != nil {
		s.CommerceReceipts++
	}
	if p.tx.MeteredBilling != nil {
		s.MeteredBillingReceipts++
	}
	if p.tx.CallChain != nil {
		s.CallChainReceipts++
	}
	if p.tx.MaxAmount != nil {
		s.MaxAmountReceipts++
	}
	if p.bound {
		s.DelegatedSenderBoundReceipts++
	}
}

func (p *projection) row() schemas.AuthorizationContextRow {
	tx := p.tx
	details := make([]schemas.AuthorizationDetail, 1, 3)
	details[0] = schemas.AuthorizationDetail{
		Type: schemas.AuthorizationDetailTool, Locations: []string{tx.ServerID}, Actions: []string{tx.ToolName},
		Purpose: tx.Purpose, MaxAmount: tx.MaxAmount,
	}
	if c := tx.Commerce; c != nil {
		details = append(details, schemas.AuthorizationDetail{
			Type: schemas.AuthorizationDetailCommerce, MaxAmount: tx.MaxAmount,
			Commerce: &schemas.AuthorizationCommerce{Seller: c.Seller, SharedPaymentTokenID: c.SharedPaymentTokenID},
		})
	}
	if m := tx.MeteredBilling; m != nil {
		q := m.Quote
		details = append(details, schemas.AuthorizationDetail{
			Type: schemas.AuthorizationDetailMeteredBilling,
			MeteredBilling: &schemas.AuthorizationMeteredBilling{
				SettlementMode: m.SettlementMode, Provider: q.Provider, QuoteID: q.QuoteID, BillingUnit: q.BillingUnit,
				QuotedUnits: q.QuotedUnits, QuotedCost: q.QuotedCost, MaxBilledUnits: m.MaxBilledUnits,
			},
		})
	}
	ctx := schemas.TransactionContext{IntentID: tx.IntentID, IntentHash: tx.IntentHash}
	if c := tx.CallChain; c != nil {
		ctx.CallChain = &schemas.AuthorizationCallChain{
			ChainID: c.ChainID, ParentRequestID: c.ParentRequestID, ParentReceiptID: c.ParentReceiptID,
			OriginSubject: c.OriginSubject, DelegatorSubject: c.DelegatorSubject,
			EvidenceClass: c.EvidenceClass, EvidenceSources: append([]string{}, c.EvidenceSources...),
		}
	}
	return schemas.AuthorizationContextRow{
		ReceiptID: p.g.ReceiptID, Timestamp: p.g.Timestamp, CapabilityID: p.g.CapabilityID,
		AuthorizationDetails: details, TransactionContext: ctx,
		SenderConstraint: schemas.SenderConstraint{
			SubjectKey: p.attr.SubjectKey, SubjectKeySource: schemas.KeySourceReceiptAttribution,
			IssuerKey: p.attr.IssuerKey, IssuerKeySource: schemas.KeySourceReceiptAttribution,
			MatchedGrantIndex: p.attr.GrantIndex, ProofRequired: p.grant.DPoPRequired != nil && *p.grant.DPoPRequired,
			DelegatedCallChainBound: p.bound,
		},
	}
}
