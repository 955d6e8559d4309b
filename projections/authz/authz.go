// Package authz builds the authorization-context report
// (chio.oauth.authorization-context-report.v1) from
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
// from the lineage record's; the binding cannot be represented (below);
// or the call chain's evidence class is unknown.
//
// The sender binding comes from metadata.attribution.binding, which the
// kernel records on every receipt it signs: {"method": "bearer"} for a
// token honoured by possession alone, {"method": "dpop" | "chio_dpop_v1",
// "jkt": thumbprint} for one honoured on an RFC 9449 proof or a
// chio.dpop_proof.v1 by its subject key. A row's senderConstraint then
// has proofRequired true, proofType the method, proofSchema "dpop+jwt"
// (an RFC 9449 proof's typ) or "chio.dpop_proof.v1", and
// proofKeyThumbprint the jkt; the summary counts it in senderBoundReceipts
// and dpopBoundReceipts (schemas.AuthorizationSummary). The report fails
// closed on a binding it cannot represent truthfully: another method, a
// proof without a jkt or with one that is not the thumbprint of the
// attributed subject key (a proof is verified against the subject), a
// bearer binding with a jkt, a bearer binding for a capability the
// kernel honours only with a proof (its lineage shows a grant with
// delegate or dpop_required), and a receipt that records no binding for a
// capability with a dpop_required grant. A receipt that records no binding
// at all was signed before bindings were recorded: it projects as
// unbound (proofRequired false), unless its capability has a
// dpop_required grant, which no kernel of that time honoured truthfully.
//
// A call chain's evidence class is shown as signed and never upgraded;
// delegatedCallChainBound is true only for observed or verified chains.
// Approval and runtime assurance are not supported, so their counters stay
// 0 and their row fields false.
package authz

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Filter selects receipts; zero values mean "any". Since/Until are Unix
// seconds, inclusive.
type Filter struct {
	CapabilityID, ToolServer, ToolName string
	Since, Until                       uint64
	Limit                              int
	// GroupByIdentity adds the report's groups: each caller's summary.
	GroupByIdentity bool
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
	// Binding is metadata.attribution.binding, checked against the
	// attributed subject; nil when the receipt records none (signed
	// before bindings were recorded).
	Binding *Binding `json:"binding,omitempty"`
	// Bound: the call chain's evidence is observed or verified.
	Bound bool `json:"bound,omitempty"`
	// Identity is who an access-token caller was
	// (metadata.attribution.identity); nil for a capability's caller.
	Identity *schemas.AuthorizationIdentity `json:"identity,omitempty"`
}

// Binding is how the caller proved who it is, as the receipt records it
// (metadata.attribution.binding).
type Binding struct {
	// Method is dpop.MethodBearer, dpop.MethodDPoP or dpop.MethodToolProof.
	Method string `json:"method"`
	// JKT is the proving key's RFC 7638 thumbprint, for a proof.
	JKT string `json:"jkt,omitempty"`
}

// Proven reports whether the call was honoured on a proof of possession.
func (b *Binding) Proven() bool {
	return b != nil && (b.Method == dpop.MethodDPoP || b.Method == dpop.MethodToolProof)
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
	attr, binding, ident, err := decodeAttribution(meta["attribution"])
	if err != nil {
		return fail("metadata.attribution: %v", err)
	}
	if err := checkBinding(binding, attr.SubjectKey); err != nil {
		return fail("metadata.attribution.binding: %v", err)
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
	g.Tx, g.Attr, g.Binding, g.Identity = tx, attr, binding, ident
	return g, nil
}

// Unreadable is what a report takes from a stored receipt that cannot be
// decoded whole (schemas.CheckReceiptReadable, or not a receipt at all),
// given its top-level members (schemas.ReadReceiptHead; nil when not even
// those read): never a row, since nothing under its metadata can be
// trusted. It is selected like any receipt, by its capability, tool and
// time, so it fails only the reports whose selection holds it, naming its
// id; a kernel denial is skipped like every denial (it authorized
// nothing, whatever else it records). Without a head, or with a decision
// that does not validate, it is taken as authorized for any capability,
// so every report that might hold it fails closed rather than miss it.
func Unreadable(id string, head *schemas.ReceiptHead, why string) *Governed {
	g := &Governed{ReceiptID: id, Authorized: true, Unprojectable: "the stored receipt is unreadable: " + why}
	if head == nil {
		return g
	}
	g.Timestamp, g.ToolServer, g.ToolName = head.Timestamp, head.ToolServer, head.ToolName
	if schemas.ValidName(head.CapabilityID) {
		g.CapabilityID = head.CapabilityID
	}
	if head.Decision.Validate() == nil {
		g.Authorized = authorized(head.Decision)
	}
	return g
}

// checkBinding refuses a binding the report cannot represent truthfully:
// an unknown method, a proof whose jkt is not the thumbprint of the
// attributed subject key (the key every proof is verified against), a
// bearer binding that names a key.
func checkBinding(b *Binding, subject string) error {
	if b == nil {
		return nil
	}
	switch b.Method {
	case dpop.MethodBearer:
		if b.JKT != "" {
			return errors.New("a bearer binding names no key, this one has a jkt")
		}
		return nil
	case dpop.MethodDPoP, dpop.MethodToolProof:
	default:
		return fmt.Errorf("method %q is not bearer, dpop or chio_dpop_v1", clip(b.Method))
	}
	if b.JKT == "" {
		return fmt.Errorf("a %s binding without the proving key's jkt", b.Method)
	}
	key, err := schemas.ParsePublicKey(subject)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return fmt.Errorf("a %s binding for subject key %s, whose thumbprint this profile cannot compute", b.Method, clip(subject))
	}
	if want := dpop.Thumbprint(ed25519.PublicKey(key)); b.JKT != want {
		return fmt.Errorf("jkt %s is not the thumbprint of the attributed subject key (%s)", clip(b.JKT), want)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
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
	groups := map[string]int{} // caller → its index in rep.Groups
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
		if f.GroupByIdentity {
			key, grp := p.group()
			i, seen := groups[key]
			if !seen {
				i = len(rep.Groups)
				groups[key] = i
				rep.Groups = append(rep.Groups, grp)
			}
			p.count(&rep.Groups[i].Summary)
		}
		if len(rep.Receipts) < limit {
			rep.Receipts = append(rep.Receipts, p.row())
		}
	}
	return rep, nil
}

func (f *Filter) matches(g *Governed) bool {
	if g.Unprojectable != "" && g.CapabilityID == "" {
		// Unreadable past its head: it might match any capability, so it
		// fails every report whose time window holds it (a head without a
		// timestamp, every report).
		return g.Timestamp == 0 || (f.Since == 0 || g.Timestamp >= f.Since) && (f.Until == 0 || g.Timestamp <= f.Until)
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
	if why := needsProof(rec); why != "" && !g.Binding.Proven() {
		switch {
		case g.Binding != nil:
			return fail("inconsistent binding: the receipt records a %s binding, but %s, so the kernel honours it only with a proof of possession",
				g.Binding.Method, why)
		case dpopRequired(rec):
			return fail("%s and the receipt records no binding (a DPoP binding this profile cannot represent)", why)
		}
		// No binding recorded and a capability that can delegate: a
		// receipt signed before bindings were recorded, when such a
		// capability was a bearer token. It projects as unbound.
	}
	return &projection{g: g, tx: tx, attr: attr, grant: gr, bound: g.Bound}, nil
}

// needsProof says why the kernel honours the capability of rec only with a
// proof of possession, from its lineage: a grant with delegate or with
// dpop_required (the kernel's rule, without the operator's
// --require-dpop, which leaves no trace but the binding). "" otherwise.
func needsProof(rec *schemas.CapabilityLineage) string {
	for i, g := range rec.Grants {
		if g.DPoPRequired != nil && *g.DPoPRequired {
			return fmt.Sprintf("grant %d of capability %s requires a DPoP binding", i, rec.CapabilityID)
		}
	}
	for i, g := range rec.Grants {
		if slices.Contains(g.Operations, schemas.OpDelegate) {
			return fmt.Sprintf("capability %s can delegate (grant %d)", rec.CapabilityID, i)
		}
	}
	return ""
}

func dpopRequired(rec *schemas.CapabilityLineage) bool {
	return slices.ContainsFunc(rec.Grants, func(g schemas.ToolGrant) bool { return g.DPoPRequired != nil && *g.DPoPRequired })
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
	SubjectKey      *string         `json:"subject_key"`
	IssuerKey       *string         `json:"issuer_key"`
	DelegationDepth *int            `json:"delegation_depth"`
	GrantIndex      *int            `json:"grant_index"`
	Binding         json.RawMessage `json:"binding"`
	Identity        json.RawMessage `json:"identity"`
}

// identityWire is metadata.attribution.identity, what the kernel records
// of an access-token caller, decoded strictly.
type identityWire struct {
	Issuer   *string         `json:"issuer"`
	Subject  *string         `json:"subject"`
	ClientID string          `json:"client_id"`
	Audience []string        `json:"audience"`
	TokenID  string          `json:"token_id"`
	Rule     *int            `json:"rule"`
	Act      json.RawMessage `json:"act"`
	CnfJKT   string          `json:"cnf_jkt"`
}

// decodeIdentity reads metadata.attribution.identity; nil when absent.
func decodeIdentity(raw json.RawMessage) (*schemas.AuthorizationIdentity, error) {
	if raw == nil {
		return nil, nil
	}
	if string(raw) == "null" {
		return nil, errors.New("identity is null")
	}
	var w identityWire
	if err := schemas.DecodeStrict(raw, &w); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if w.Issuer == nil || *w.Issuer == "" || w.Subject == nil || *w.Subject == "" {
		return nil, errors.New("identity needs an issuer and a subject")
	}
	return &schemas.AuthorizationIdentity{Issuer: *w.Issuer, Subject: *w.Subject, ClientID: w.ClientID}, nil
}

// bindingWire is metadata.attribution.binding, decoded strictly.
type bindingWire struct {
	Method *string `json:"method"`
	JKT    *string `json:"jkt"`
}

// decodeAttribution decodes metadata.attribution and its binding (nil when
// it has none).
func decodeAttribution(raw json.RawMessage) (*schemas.Attribution, *Binding, *schemas.AuthorizationIdentity, error) {
	if raw == nil {
		return nil, nil, nil, errors.New("is missing")
	}
	if string(raw) == "null" {
		return nil, nil, nil, errNull
	}
	var w attributionWire
	if err := schemas.DecodeStrict(raw, &w); err != nil {
		return nil, nil, nil, err
	}
	if w.SubjectKey == nil || *w.SubjectKey == "" || w.IssuerKey == nil || *w.IssuerKey == "" || w.DelegationDepth == nil || w.GrantIndex == nil {
		return nil, nil, nil, errors.New("needs subject_key, issuer_key, delegation_depth and grant_index")
	}
	attr := &schemas.Attribution{SubjectKey: *w.SubjectKey, IssuerKey: *w.IssuerKey, DelegationDepth: *w.DelegationDepth, GrantIndex: *w.GrantIndex}
	id, err := decodeIdentity(w.Identity)
	if err != nil {
		return nil, nil, nil, err
	}
	if w.Binding == nil {
		return attr, nil, id, nil
	}
	if string(w.Binding) == "null" {
		return nil, nil, nil, errors.New("binding is null")
	}
	var bw bindingWire
	if err := schemas.DecodeStrict(w.Binding, &bw); err != nil {
		return nil, nil, nil, fmt.Errorf("binding: %w", err)
	}
	if bw.Method == nil || *bw.Method == "" {
		return nil, nil, nil, errors.New("binding needs a method")
	}
	if bw.JKT != nil && *bw.JKT == "" {
		return nil, nil, nil, errors.New("binding has an empty jkt")
	}
	b := &Binding{Method: *bw.Method}
	if bw.JKT != nil {
		b.JKT = *bw.JKT
	}
	return attr, b, id, nil
}

// count adds the projection to the summary. Approval and runtime
// assurance are not supported, so their counters stay 0. A row honoured on
// a proof of possession counts as sender-bound and as DPoP-bound: both
// proof forms (RFC 9449 and chio.dpop_proof.v1) are DPoP proofs by the
// subject key.
func (p *projection) count(s *schemas.AuthorizationSummary) {
	s.MatchingReceipts++
	if p.g.Binding.Proven() {
		s.SenderBoundReceipts++
		s.DPoPBoundReceipts++
	}
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

// group is the caller of the projected receipt, and the key that tells
// callers apart: an identity provider's subject (every token of it, from
// any client), or a capability's subject key under its issuer key.
func (p *projection) group() (string, schemas.AuthorizationGroup) {
	g := schemas.AuthorizationGroup{SubjectKey: p.attr.SubjectKey, IssuerKey: p.attr.IssuerKey}
	if id := p.g.Identity; id != nil {
		g.Identity = &schemas.AuthorizationIdentity{Issuer: id.Issuer, Subject: id.Subject}
		k, _ := json.Marshal([]string{"identity", id.Issuer, id.Subject})
		return string(k), g
	}
	k, _ := json.Marshal([]string{"key", p.attr.IssuerKey, p.attr.SubjectKey})
	return string(k), g
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
	sc := schemas.SenderConstraint{
		SubjectKey: p.attr.SubjectKey, SubjectKeySource: schemas.KeySourceReceiptAttribution,
		IssuerKey: p.attr.IssuerKey, IssuerKeySource: schemas.KeySourceReceiptAttribution,
		MatchedGrantIndex: p.attr.GrantIndex, DelegatedCallChainBound: p.bound,
	}
	if b := p.g.Binding; b.Proven() {
		sc.ProofRequired, sc.ProofType, sc.ProofKeyThumbprint = true, b.Method, b.JKT
		sc.ProofSchema = schemas.ProofSchemaDPoP
		if b.Method == dpop.MethodToolProof {
			sc.ProofSchema = schemas.ProofSchemaToolProof
		}
	}
	return schemas.AuthorizationContextRow{
		ReceiptID: p.g.ReceiptID, Timestamp: p.g.Timestamp, CapabilityID: p.g.CapabilityID,
		AuthorizationDetails: details, TransactionContext: ctx, SenderConstraint: sc, Identity: p.g.Identity,
	}
}
