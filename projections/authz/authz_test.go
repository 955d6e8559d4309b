package authz

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var (
	kernelKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	subjectKey = pub(2)
	issuerKey  = pub(3)
	params     = json.RawMessage(`{"sku":"paper-a4","qty":2}`)
)

func pub(seed byte) string {
	k := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey))
}

func ptr[T any](v T) *T { return &v }

// plainIntent is the smallest valid intent for a call to server/tool.
func plainIntent(server, tool string) *schemas.GovernedIntent {
	return &schemas.GovernedIntent{ID: "intent-" + tool, ServerID: server, ToolName: tool, Purpose: "restock paper"}
}

// fullIntent has every optional block a report projects.
func fullIntent() *schemas.GovernedIntent {
	g := plainIntent("shop", "buy")
	g.MaxAmount = &schemas.MonetaryAmount{Units: 5000, Currency: "USD"}
	g.Commerce = &schemas.Commerce{Seller: "acme", SharedPaymentTokenID: "spt-1"}
	g.MeteredBilling = &schemas.MeteredBilling{
		SettlementMode: schemas.SettlementHoldCapture, MaxBilledUnits: 5,
		Quote: schemas.BillingQuote{QuoteID: "q-1", Provider: "meterco", BillingUnit: "call", QuotedUnits: 3,
			QuotedCost: schemas.MonetaryAmount{Units: 30, Currency: "USD"}, IssuedAt: 1760000000},
	}
	g.CallChain = &schemas.CallChain{ChainID: "chain-1", ParentRequestID: "req-0", ParentReceiptID: "r-parent",
		OriginSubject: "origin", DelegatorSubject: "delegator"}
	return g
}

// fixture is a receipt before signing; options edit it.
type fixture struct {
	body schemas.ReceiptBody
	meta map[string]any // nil: no metadata
}

type option func(t testing.TB, f *fixture)

// receipt signs a governed allow receipt of cap-1 for shop/buy, edited by
// opts.
func receipt(t testing.TB, id string, ts uint64, opts ...option) *schemas.Receipt {
	t.Helper()
	ph, err := schemas.ParameterHash(params)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{
		body: schemas.ReceiptBody{ID: id, Timestamp: ts, CapabilityID: "cap-1", ToolServer: "shop", ToolName: "buy",
			Action:   schemas.ToolCallAction{Parameters: params, ParameterHash: ph},
			Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, ContentHash: schemas.EmptyContentHash,
			PolicyHash: schemas.SHA256Hex([]byte("policy")), TrustLevel: schemas.TrustMediated},
		meta: map[string]any{
			"attribution": map[string]any{"subject_key": subjectKey, "issuer_key": issuerKey, "delegation_depth": 0, "grant_index": 0,
				"binding": map[string]any{"method": "bearer"}},
		},
	}
	withIntent(plainIntent("shop", "buy"), schemas.EvidenceAsserted)(t, f)
	for _, o := range opts {
		o(t, f)
	}
	if f.meta != nil {
		if f.body.Metadata, err = json.Marshal(f.meta); err != nil {
			t.Fatal(err)
		}
	}
	r, err := schemas.SignReceipt(kernelKey, f.body)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(); err != nil {
		t.Fatal(err)
	}
	return r
}

func withIntent(g *schemas.GovernedIntent, class string) option {
	return func(t testing.TB, f *fixture) {
		tx, err := g.Transaction(class)
		if err != nil {
			t.Fatal(err)
		}
		f.meta["governed_transaction"] = tx
	}
}

// subjectJKT is the RFC 7638 thumbprint of subjectKey.
var subjectJKT = dpop.Thumbprint(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, ed25519.SeedSize)).Public().(ed25519.PublicKey))

// bound sets metadata.attribution.binding: method with the subject's jkt
// for a proof, bearer alone, or none ("": the binding is removed, as on a
// receipt signed before bindings were recorded).
func bound(method string) option {
	return editMeta("attribution", func(m map[string]any) {
		switch method {
		case "":
			delete(m, "binding")
		case dpop.MethodBearer:
			m["binding"] = map[string]any{"method": method}
		default:
			m["binding"] = map[string]any{"method": method, "jkt": subjectJKT}
		}
	})
}

func notGoverned() option {
	return func(_ testing.TB, f *fixture) { delete(f.meta, "governed_transaction") }
}

func onCall(capID, server, tool string) option {
	return func(t testing.TB, f *fixture) {
		f.body.CapabilityID, f.body.ToolServer, f.body.ToolName = capID, server, tool
		withIntent(plainIntent(server, tool), schemas.EvidenceAsserted)(t, f)
	}
}

func decided(d schemas.Decision) option {
	return func(_ testing.TB, f *fixture) { f.body.Decision = d }
}

// setMeta sets a metadata key to raw JSON.
func setMeta(key, raw string) option {
	return func(_ testing.TB, f *fixture) { f.meta[key] = json.RawMessage(raw) }
}

// editMeta edits a metadata block as a generic JSON object.
func editMeta(key string, edit func(m map[string]any)) option {
	return func(t testing.TB, f *fixture) {
		raw, err := json.Marshal(f.meta[key])
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		f.meta[key] = m
	}
}

func lineageRecords() map[string]*schemas.CapabilityLineage {
	invoke := []schemas.Operation{schemas.OpInvoke}
	return map[string]*schemas.CapabilityLineage{
		"cap-1": {CapabilityID: "cap-1", SubjectKey: subjectKey, IssuerKey: issuerKey, IssuedAt: 1, ExpiresAt: 1 << 40,
			ScopeHash: strings.Repeat("0", 64), Grants: []schemas.ToolGrant{
				{ServerID: "shop", ToolName: "buy", Operations: invoke},
				{ServerID: "shop", ToolName: "*", Operations: invoke},
				{ServerID: "files", ToolName: "read", Operations: invoke},
			}},
		"cap-2": {CapabilityID: "cap-2", SubjectKey: subjectKey, IssuerKey: issuerKey, IssuedAt: 1, ExpiresAt: 1 << 40,
			ScopeHash: strings.Repeat("0", 64), Grants: []schemas.ToolGrant{{ServerID: "files", ToolName: "read", Operations: invoke}}},
	}
}

func lineageOf(m map[string]*schemas.CapabilityLineage) LineageFunc {
	return func(id string) (*schemas.CapabilityLineage, bool, error) {
		r, ok := m[id]
		return r, ok, nil
	}
}

func verified(rs ...*schemas.Receipt) iter.Seq2[Input, error] {
	return func(yield func(Input, error) bool) {
		for _, r := range rs {
			if !yield(Input{Receipt: r, Verified: true}, nil) {
				return
			}
		}
	}
}

func rowIDs(rep *schemas.AuthorizationContextReport) []string {
	ids := []string{}
	for _, r := range rep.Receipts {
		ids = append(ids, r.ReceiptID)
	}
	return ids
}

func TestBuildProjectsEveryField(t *testing.T) {
	g := fullIntent()
	r := receipt(t, "r-1", 1760000100, withIntent(g, schemas.EvidenceObserved),
		editMeta("attribution", func(m map[string]any) { m["grant_index"] = 1 }), bound(dpop.MethodDPoP),
		setMeta("financial", `{"cost_charged":30}`)) // other metadata is ignored
	rep, err := Build(Filter{}, verified(r), lineageOf(lineageRecords()))
	if err != nil {
		t.Fatal(err)
	}
	hash, err := g.Hash()
	if err != nil {
		t.Fatal(err)
	}
	amount := &schemas.MonetaryAmount{Units: 5000, Currency: "USD"}
	want := schemas.AuthorizationContextRow{
		ReceiptID: "r-1", Timestamp: 1760000100, CapabilityID: "cap-1",
		AuthorizationDetails: []schemas.AuthorizationDetail{
			{Type: schemas.AuthorizationDetailTool, Locations: []string{"shop"}, Actions: []string{"buy"}, Purpose: "restock paper", MaxAmount: amount},
			{Type: schemas.AuthorizationDetailCommerce, MaxAmount: amount,
				Commerce: &schemas.AuthorizationCommerce{Seller: "acme", SharedPaymentTokenID: "spt-1"}},
			{Type: schemas.AuthorizationDetailMeteredBilling, MeteredBilling: &schemas.AuthorizationMeteredBilling{
				SettlementMode: schemas.SettlementHoldCapture, Provider: "meterco", QuoteID: "q-1", BillingUnit: "call",
				QuotedUnits: 3, QuotedCost: schemas.MonetaryAmount{Units: 30, Currency: "USD"}, MaxBilledUnits: 5}},
		},
		TransactionContext: schemas.TransactionContext{IntentID: "intent-buy", IntentHash: hash,
			CallChain: &schemas.AuthorizationCallChain{ChainID: "chain-1", ParentRequestID: "req-0", ParentReceiptID: "r-parent",
				OriginSubject: "origin", DelegatorSubject: "delegator", EvidenceClass: schemas.EvidenceObserved,
				EvidenceSources: []string{schemas.SourceGovernedIntent, schemas.SourceLocalLineage}}},
		SenderConstraint: schemas.SenderConstraint{SubjectKey: subjectKey, SubjectKeySource: "receipt_attribution",
			IssuerKey: issuerKey, IssuerKeySource: "receipt_attribution", MatchedGrantIndex: 1,
			ProofRequired: true, ProofType: "dpop", ProofSchema: "dpop+jwt", ProofKeyThumbprint: subjectJKT,
			DelegatedCallChainBound: true},
	}
	if len(rep.Receipts) != 1 || !reflect.DeepEqual(rep.Receipts[0], want) {
		t.Fatalf("rows:\n got %+v\nwant %+v", rep.Receipts, want)
	}
	wantSummary := schemas.AuthorizationSummary{MatchingReceipts: 1, CommerceReceipts: 1, MeteredBillingReceipts: 1,
		CallChainReceipts: 1, MaxAmountReceipts: 1, SenderBoundReceipts: 1, DPoPBoundReceipts: 1, DelegatedSenderBoundReceipts: 1}
	if rep.Summary != wantSummary {
		t.Errorf("summary:\n got %+v\nwant %+v", rep.Summary, wantSummary)
	}
	if rep.Schema != schemas.AuthorizationContextReportSchema || !reflect.DeepEqual(rep.Profile, schemas.DefaultAuthorizationProfile()) {
		t.Errorf("schema %q, profile %+v", rep.Schema, rep.Profile)
	}
	raw, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"type":"chio_governed_tool","locations":["shop"],"actions":["buy"]`, `"sharedPaymentTokenId":"spt-1"`,
		`"proofRequired":true,"proofType":"dpop","proofSchema":"dpop+jwt","proofKeyThumbprint":"` + subjectJKT + `"`, `"matchedGrantIndex":1`} {
		if !strings.Contains(string(raw), s) {
			t.Errorf("JSON lacks %s:\n%s", s, raw)
		}
	}
}

// A plain intent by a bearer token projects to one tool detail, no call
// chain, no proof, and a summary that counts only the match.
func TestBuildPlainIntent(t *testing.T) {
	rep, err := Build(Filter{}, verified(receipt(t, "r-1", 10)), lineageOf(lineageRecords()))
	if err != nil {
		t.Fatal(err)
	}
	row := rep.Receipts[0]
	if len(row.AuthorizationDetails) != 1 || row.AuthorizationDetails[0].MaxAmount != nil || row.TransactionContext.CallChain != nil ||
		row.SenderConstraint.ProofRequired || row.SenderConstraint.ProofType != "" {
		t.Errorf("row %+v", row)
	}
	if want := (schemas.AuthorizationSummary{MatchingReceipts: 1}); rep.Summary != want {
		t.Errorf("summary %+v, want %+v", rep.Summary, want)
	}
}

func TestBuildFilters(t *testing.T) {
	rs := []*schemas.Receipt{
		receipt(t, "a", 100),
		receipt(t, "b", 200, onCall("cap-1", "shop", "sell"), editMeta("attribution", func(m map[string]any) { m["grant_index"] = 1 })),
		receipt(t, "c", 300, onCall("cap-2", "files", "read")),
		receipt(t, "d", 400, onCall("cap-1", "files", "read"), editMeta("attribution", func(m map[string]any) { m["grant_index"] = 2 })),
	}
	cases := []struct {
		name string
		f    Filter
		want []string
	}{
		{"any", Filter{}, []string{"a", "b", "c", "d"}},
		{"capability", Filter{CapabilityID: "cap-2"}, []string{"c"}},
		{"tool server", Filter{ToolServer: "shop"}, []string{"a", "b"}},
		{"tool name", Filter{ToolName: "read"}, []string{"c", "d"}},
		{"server and name", Filter{ToolServer: "files", ToolName: "read", CapabilityID: "cap-1"}, []string{"d"}},
		{"since inclusive", Filter{Since: 200}, []string{"b", "c", "d"}},
		{"until inclusive", Filter{Until: 200}, []string{"a", "b"}},
		{"window", Filter{Since: 200, Until: 300}, []string{"b", "c"}},
		{"none", Filter{CapabilityID: "cap-9"}, []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Build(c.f, verified(rs...), lineageOf(lineageRecords()))
			if err != nil {
				t.Fatal(err)
			}
			if got := rowIDs(rep); !reflect.DeepEqual(got, c.want) {
				t.Errorf("rows %v, want %v", got, c.want)
			}
			if rep.Summary.MatchingReceipts != len(c.want) {
				t.Errorf("matchingReceipts %d, want %d", rep.Summary.MatchingReceipts, len(c.want))
			}
		})
	}
}

func TestBuildLimitClampsRowsNotSummary(t *testing.T) {
	const n = 250
	rs := make([]*schemas.Receipt, n)
	for i := range rs {
		rs[i] = receipt(t, fmt.Sprintf("r-%03d", i), uint64(i+1), bound(dpop.MethodToolProof))
	}
	cases := []struct{ limit, rows int }{
		{0, DefaultLimit}, {-5, DefaultLimit}, {1, 1}, {10, 10}, {MaxLimit, MaxLimit}, {MaxLimit + 1, MaxLimit}, {1 << 30, MaxLimit},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.limit), func(t *testing.T) {
			rep, err := Build(Filter{Limit: c.limit}, verified(rs...), lineageOf(lineageRecords()))
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Receipts) != c.rows {
				t.Fatalf("%d rows, want %d", len(rep.Receipts), c.rows)
			}
			for i, row := range rep.Receipts { // input order
				if row.ReceiptID != rs[i].ID {
					t.Fatalf("row %d is %s, want %s", i, row.ReceiptID, rs[i].ID)
				}
			}
			if rep.Summary.MatchingReceipts != n || rep.Summary.SenderBoundReceipts != n || rep.Summary.DPoPBoundReceipts != n {
				t.Errorf("summary %+v counts fewer than %d", rep.Summary, n)
			}
		})
	}
}

// Only calls the kernel authorized are rows; a kernel denial is skipped
// even when its metadata could not be projected.
func TestBuildSkipsKernelDenialsAndUngoverned(t *testing.T) {
	rs := []*schemas.Receipt{
		receipt(t, "allow", 1),
		receipt(t, "denied-by-grant", 2, decided(schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "no grant", Guard: "grant"})),
		receipt(t, "denied-by-guard", 3, decided(schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "path", Guard: "ForbiddenPathGuard"}),
			setMeta("attribution", `null`)),
		receipt(t, "tool-failed", 4, decided(schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "tool error", Guard: "tool_server"})),
		receipt(t, "cancelled", 5, decided(schemas.Decision{Verdict: schemas.VerdictCancelled, Reason: "client cancelled"})),
		receipt(t, "incomplete", 6, decided(schemas.Decision{Verdict: schemas.VerdictIncomplete, Reason: "no outcome"})),
		receipt(t, "ungoverned", 7, notGoverned()),
		receipt(t, "no-metadata", 8, func(_ testing.TB, f *fixture) { f.meta = nil }),
		receipt(t, "array-metadata", 9, func(_ testing.TB, f *fixture) { f.meta = nil; f.body.Metadata = json.RawMessage(`[1]`) }),
	}
	// Unverified receipts that are not governed are not the report's concern.
	seq := func(yield func(Input, error) bool) {
		for _, r := range rs {
			v := r.ID != "ungoverned" && r.ID != "denied-by-grant"
			if !yield(Input{Receipt: r, Verified: v}, nil) {
				return
			}
		}
	}
	rep, err := Build(Filter{}, seq, lineageOf(lineageRecords()))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"allow", "tool-failed", "cancelled", "incomplete"}
	if got := rowIDs(rep); !reflect.DeepEqual(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
	if rep.Summary.MatchingReceipts != len(want) {
		t.Errorf("matchingReceipts %d, want %d", rep.Summary.MatchingReceipts, len(want))
	}
}

func TestBuildFailsClosed(t *testing.T) {
	type lineageEdit func(m map[string]*schemas.CapabilityLineage)
	cases := []struct {
		name       string
		opts       []option
		lineage    lineageEdit
		unverified bool
		post       func(r *schemas.Receipt) // after signing
		reason     string
	}{
		{name: "not verified", unverified: true, reason: "not verified"},
		{name: "metadata not JSON", unverified: true, post: func(r *schemas.Receipt) { r.Metadata = json.RawMessage(`{"governed_transaction":`) },
			reason: "metadata is not valid JSON"},
		{name: "transaction null", opts: []option{setMeta("governed_transaction", `null`)}, reason: "governed_transaction: is null"},
		{name: "transaction not an object", opts: []option{setMeta("governed_transaction", `"x"`)}, reason: "governed_transaction"},
		{name: "transaction unknown field", opts: []option{editMeta("governed_transaction", func(m map[string]any) { m["approval"] = true })},
			reason: "unknown field"},
		{name: "transaction without intent_hash", opts: []option{editMeta("governed_transaction", func(m map[string]any) { delete(m, "intent_hash") })},
			reason: "intent_hash is missing"},
		{name: "call chain without chainId", opts: []option{withIntent(fullIntent(), schemas.EvidenceObserved),
			editMeta("governed_transaction", func(m map[string]any) { delete(m["call_chain"].(map[string]any), "chainId") })},
			reason: "call_chain needs chainId"},
		{name: "attribution missing", opts: []option{func(_ testing.TB, f *fixture) { delete(f.meta, "attribution") }}, reason: "attribution: is missing"},
		{name: "attribution null", opts: []option{setMeta("attribution", `null`)}, reason: "attribution: is null"},
		{name: "attribution unknown field", opts: []option{editMeta("attribution", func(m map[string]any) { m["tenant"] = "t" })},
			reason: "unknown field"},
		{name: "attribution without grant_index", opts: []option{editMeta("attribution", func(m map[string]any) { delete(m, "grant_index") })},
			reason: "needs subject_key, issuer_key, delegation_depth and grant_index"},
		{name: "server differs", opts: []option{withIntent(plainIntent("bank", "buy"), schemas.EvidenceAsserted)},
			reason: "names bank/buy but the receipt is for shop/buy"},
		{name: "tool differs", opts: []option{withIntent(plainIntent("shop", "sell"), schemas.EvidenceAsserted)},
			reason: "names shop/sell but the receipt is for shop/buy"},
		{name: "no lineage record", lineage: func(m map[string]*schemas.CapabilityLineage) { delete(m, "cap-1") },
			reason: "no capability lineage record for cap-1"},
		{name: "lineage record of another capability", lineage: func(m map[string]*schemas.CapabilityLineage) { m["cap-1"] = m["cap-2"] },
			reason: "no capability lineage record for cap-1"},
		{name: "grants omitted", lineage: func(m map[string]*schemas.CapabilityLineage) {
			m["cap-1"].Grants, m["cap-1"].GrantsOmitted = nil, true
		}, reason: "unresolved grant: the lineage of cap-1 omits its grants"},
		{name: "grant index out of range", opts: []option{editMeta("attribution", func(m map[string]any) { m["grant_index"] = 3 })},
			reason: "unresolved grant: grant_index 3"},
		{name: "grant index negative", opts: []option{editMeta("attribution", func(m map[string]any) { m["grant_index"] = -1 })},
			reason: "unresolved grant: grant_index -1"},
		{name: "grant for another tool", opts: []option{editMeta("attribution", func(m map[string]any) { m["grant_index"] = 2 })},
			reason: "unresolved grant: grant 2 covers files/read"},
		{name: "subject differs", opts: []option{editMeta("attribution", func(m map[string]any) { m["subject_key"] = pub(9) })},
			reason: "inconsistent subject"},
		{name: "issuer differs", lineage: func(m map[string]*schemas.CapabilityLineage) { m["cap-1"].IssuerKey = pub(9) },
			reason: "inconsistent subject"},
		{name: "delegation depth differs", opts: []option{editMeta("attribution", func(m map[string]any) { m["delegation_depth"] = 1 })},
			reason: "delegation_depth 1 differs from the lineage's 0"},
		{name: "dpop required, bearer binding", lineage: func(m map[string]*schemas.CapabilityLineage) { m["cap-1"].Grants[0].DPoPRequired = ptr(true) },
			reason: "inconsistent binding: the receipt records a bearer binding, but grant 0 of capability cap-1 requires a DPoP binding"},
		{name: "dpop required on another grant, no binding", opts: []option{bound("")},
			lineage: func(m map[string]*schemas.CapabilityLineage) { m["cap-1"].Grants[2].DPoPRequired = ptr(true) },
			reason:  "grant 2 of capability cap-1 requires a DPoP binding and the receipt records no binding"},
		{name: "can delegate, bearer binding", lineage: func(m map[string]*schemas.CapabilityLineage) {
			m["cap-1"].Grants[2].Operations = append(m["cap-1"].Grants[2].Operations, schemas.OpDelegate)
		}, reason: "inconsistent binding: the receipt records a bearer binding, but capability cap-1 can delegate (grant 2)"},
		{name: "binding method unknown", opts: []option{setMeta("attribution", attribution(`{"method":"mtls","jkt":"`+subjectJKT+`"}`))},
			reason: `binding: method "mtls" is not bearer, dpop or chio_dpop_v1`},
		{name: "binding method missing", opts: []option{setMeta("attribution", attribution(`{"jkt":"`+subjectJKT+`"}`))},
			reason: "binding needs a method"},
		{name: "binding null", opts: []option{setMeta("attribution", attribution(`null`))}, reason: "binding is null"},
		{name: "binding not an object", opts: []option{setMeta("attribution", attribution(`"dpop"`))}, reason: "binding:"},
		{name: "binding unknown field", opts: []option{setMeta("attribution", attribution(`{"method":"bearer","cnf":"x"}`))},
			reason: "unknown field"},
		{name: "dpop without jkt", opts: []option{setMeta("attribution", attribution(`{"method":"dpop"}`))},
			reason: "a dpop binding without the proving key's jkt"},
		{name: "tool proof with an empty jkt", opts: []option{setMeta("attribution", attribution(`{"method":"chio_dpop_v1","jkt":""}`))},
			reason: "binding has an empty jkt"},
		{name: "jkt of another key", opts: []option{setMeta("attribution",
			attribution(`{"method":"dpop","jkt":"`+dpop.Thumbprint(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)).Public().(ed25519.PublicKey))+`"}`))},
			reason: "is not the thumbprint of the attributed subject key"},
		{name: "bearer with a jkt", opts: []option{setMeta("attribution", attribution(`{"method":"bearer","jkt":"`+subjectJKT+`"}`))},
			reason: "a bearer binding names no key"},
		{name: "unknown evidence class", opts: []option{withIntent(fullIntent(), "trusted")}, reason: `evidenceClass "trusted"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good := receipt(t, "good", 1)
			bad := receipt(t, "bad", 2, c.opts...)
			if c.post != nil {
				c.post(bad)
			}
			lin := lineageRecords()
			if c.lineage != nil {
				c.lineage(lin)
			}
			// The bad receipt is beyond the limit: it must fail the report anyway.
			seq := func(yield func(Input, error) bool) {
				_ = yield(Input{Receipt: good, Verified: true}, nil) && yield(Input{Receipt: bad, Verified: !c.unverified}, nil)
			}
			if c.lineage != nil { // a lineage edit also breaks "good": test "bad" alone
				seq = func(yield func(Input, error) bool) { yield(Input{Receipt: bad, Verified: !c.unverified}, nil) }
			}
			rep, err := Build(Filter{Limit: 1}, seq, lineageOf(lin))
			var ue *UnprojectableError
			if !errors.As(err, &ue) {
				t.Fatalf("want *UnprojectableError, got report %v, error %v", rep, err)
			}
			if rep != nil || ue.ReceiptID != "bad" || !strings.Contains(ue.Reason, c.reason) {
				t.Errorf("receipt %q, reason %q; want bad, %q", ue.ReceiptID, ue.Reason, c.reason)
			}
			if !strings.HasPrefix(err.Error(), "receipt bad: ") {
				t.Errorf("error text %q", err)
			}
		})
	}
}

// attribution is cap-1's attribution with the binding raw JSON.
func attribution(binding string) string {
	return fmt.Sprintf(`{"subject_key":%q,"issuer_key":%q,"delegation_depth":0,"grant_index":0,"binding":%s}`, subjectKey, issuerKey, binding)
}

// TestBuildSenderBinding: each row shows the proof its call was honoured
// on, from the receipt's binding; the summary counts the proven rows; and
// what the lineage requires is checked against what the receipt records.
func TestBuildSenderBinding(t *testing.T) {
	type row struct {
		required            bool
		typ, schema, jkt    string
		sender, dpopCounted bool
	}
	unbound := row{}
	rows := map[string]row{
		dpop.MethodDPoP:      {true, "dpop", "dpop+jwt", subjectJKT, true, true},
		dpop.MethodToolProof: {true, "chio_dpop_v1", "chio.dpop_proof.v1", subjectJKT, true, true},
		dpop.MethodBearer:    unbound,
		"":                   unbound,
	}
	lineages := []struct {
		name string
		edit func(rec *schemas.CapabilityLineage)
		// refused: the binding methods a receipt of this capability
		// cannot truthfully carry.
		refused []string
	}{
		{"leaf capability", func(*schemas.CapabilityLineage) {}, nil},
		{"capability that can delegate", func(rec *schemas.CapabilityLineage) {
			rec.Grants[1].Operations = []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}
		}, []string{dpop.MethodBearer}},
		{"dpop_required grant", func(rec *schemas.CapabilityLineage) { rec.Grants[0].DPoPRequired = ptr(true) },
			[]string{dpop.MethodBearer, ""}},
	}
	methods := []string{dpop.MethodDPoP, dpop.MethodToolProof, dpop.MethodBearer, ""}
	for _, l := range lineages {
		t.Run(l.name, func(t *testing.T) {
			lin := lineageRecords()
			l.edit(lin["cap-1"])
			var rs []*schemas.Receipt
			for i, m := range methods {
				r := receipt(t, fmt.Sprintf("r-%d", i), uint64(i+1), bound(m))
				rep, err := Build(Filter{}, verified(r), lineageOf(lin))
				if slices.Contains(l.refused, m) {
					var ue *UnprojectableError
					if !errors.As(err, &ue) || ue.ReceiptID != r.ID {
						t.Errorf("binding %q: report %+v, error %v; want it refused", m, rep, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("binding %q: %v", m, err)
				}
				rs = append(rs, r)
				want := rows[m]
				sc := rep.Receipts[0].SenderConstraint
				if sc.ProofRequired != want.required || sc.ProofType != want.typ || sc.ProofSchema != want.schema || sc.ProofKeyThumbprint != want.jkt {
					t.Errorf("binding %q: sender constraint %+v, want %+v", m, sc, want)
				}
				if got := rep.Summary; (got.SenderBoundReceipts == 1) != want.sender || (got.DPoPBoundReceipts == 1) != want.dpopCounted {
					t.Errorf("binding %q: summary %+v", m, got)
				}
			}
			// Together: the summary counts the proven rows.
			rep, err := Build(Filter{}, verified(rs...), lineageOf(lin))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Summary.MatchingReceipts != len(rs) || rep.Summary.SenderBoundReceipts != 2 || rep.Summary.DPoPBoundReceipts != 2 {
				t.Errorf("summary %+v", rep.Summary)
			}
		})
	}
}

// The evidence class is shown as signed; only observed and verified chains
// bind the delegated sender.
func TestBuildCallChainEvidence(t *testing.T) {
	cases := []struct {
		class string
		bound bool
	}{
		{schemas.EvidenceAsserted, false},
		{schemas.EvidenceObserved, true},
		{schemas.EvidenceVerified, true},
	}
	for _, c := range cases {
		t.Run(c.class, func(t *testing.T) {
			r := receipt(t, "r-1", 1, withIntent(fullIntent(), c.class))
			rep, err := Build(Filter{}, verified(r), lineageOf(lineageRecords()))
			if err != nil {
				t.Fatal(err)
			}
			row := rep.Receipts[0]
			if got := row.TransactionContext.CallChain.EvidenceClass; got != c.class {
				t.Errorf("evidenceClass %q, want %q", got, c.class)
			}
			if row.SenderConstraint.DelegatedCallChainBound != c.bound {
				t.Errorf("delegatedCallChainBound %v, want %v", row.SenderConstraint.DelegatedCallChainBound, c.bound)
			}
			if want := map[bool]int{true: 1}[c.bound]; rep.Summary.DelegatedSenderBoundReceipts != want || rep.Summary.CallChainReceipts != 1 {
				t.Errorf("summary %+v", rep.Summary)
			}
		})
	}
}

// A delegated capability's attribution matches its own lineage record.
func TestBuildDelegatedCapability(t *testing.T) {
	lin := lineageRecords()
	child := *lin["cap-1"]
	child.CapabilityID, child.ParentCapabilityID, child.DelegationDepth, child.SubjectKey, child.IssuerKey = "cap-3", "cap-1", 1, pub(4), subjectKey
	lin["cap-3"] = &child
	r := receipt(t, "r-1", 1, onCall("cap-3", "shop", "buy"), setMeta("attribution",
		fmt.Sprintf(`{"subject_key":%q,"issuer_key":%q,"delegation_depth":1,"grant_index":0}`, pub(4), subjectKey)))
	rep, err := Build(Filter{}, verified(r), lineageOf(lin))
	if err != nil {
		t.Fatal(err)
	}
	if sc := rep.Receipts[0].SenderConstraint; sc.SubjectKey != pub(4) || sc.IssuerKey != subjectKey {
		t.Errorf("sender constraint %+v", sc)
	}
}

func TestBuildPropagatesErrors(t *testing.T) {
	errRead := errors.New("pebble: closed")
	good := receipt(t, "good", 1)
	cases := []struct {
		name    string
		seq     iter.Seq2[Input, error]
		lineage LineageFunc
		is      error
	}{
		{"iteration", func(yield func(Input, error) bool) {
			_ = yield(Input{Receipt: good, Verified: true}, nil) && yield(Input{}, errRead)
		}, lineageOf(lineageRecords()), errRead},
		{"lineage lookup", verified(good), func(string) (*schemas.CapabilityLineage, bool, error) { return nil, false, errRead }, errRead},
		{"nil receipt", func(yield func(Input, error) bool) { yield(Input{}, nil) }, lineageOf(lineageRecords()), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Build(Filter{}, c.seq, c.lineage)
			if err == nil || rep != nil {
				t.Fatalf("report %v, error %v", rep, err)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v does not wrap %v", err, c.is)
			}
			var ue *UnprojectableError
			if errors.As(err, &ue) {
				t.Errorf("an I/O error is not an unprojectable receipt: %v", err)
			}
		})
	}
}

// A nil lineage function has no records: governed receipts fail closed.
func TestBuildNilLineage(t *testing.T) {
	_, err := Build(Filter{}, verified(receipt(t, "r-1", 1)), nil)
	var ue *UnprojectableError
	if !errors.As(err, &ue) || !strings.Contains(ue.Reason, "no capability lineage record") {
		t.Fatalf("error %v", err)
	}
}

// Lineage is looked up once per capability, however many receipts share it.
func TestBuildLooksUpLineageOncePerCapability(t *testing.T) {
	rs := []*schemas.Receipt{receipt(t, "a", 1), receipt(t, "b", 2), receipt(t, "c", 3, onCall("cap-2", "files", "read")), receipt(t, "d", 4)}
	calls := map[string]int{}
	lin := lineageRecords()
	_, err := Build(Filter{}, verified(rs...), func(id string) (*schemas.CapabilityLineage, bool, error) {
		calls[id]++
		r, ok := lin[id]
		return r, ok, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"cap-1": 1, "cap-2": 1}; !reflect.DeepEqual(calls, want) {
		t.Errorf("lookups %v, want %v", calls, want)
	}
}

func BenchmarkBuild(b *testing.B) {
	const n = 100_000
	lin := lineageRecords()
	for i := range 100 {
		rec := *lin["cap-1"]
		rec.CapabilityID = fmt.Sprintf("cap-b%d", i)
		lin[rec.CapabilityID] = &rec
	}
	// Build trusts Input.Verified, so copies of a few signed receipts with
	// new ids and capabilities stand in for 100,000 distinct ones.
	shapes := []*schemas.Receipt{
		receipt(b, "full", 1, withIntent(fullIntent(), schemas.EvidenceObserved)),
		receipt(b, "plain", 1),
		receipt(b, "ungoverned", 1, notGoverned()),
		receipt(b, "denied", 1, decided(schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "no grant", Guard: "grant"})),
	}
	ins := make([]Input, n)
	for i := range ins {
		r := *shapes[i%len(shapes)]
		r.ID, r.Timestamp, r.CapabilityID = fmt.Sprintf("r-%06d", i), uint64(i+1), fmt.Sprintf("cap-b%d", i%100)
		ins[i] = Input{Receipt: &r, Verified: true}
	}
	seq := func(yield func(Input, error) bool) {
		for _, in := range ins {
			if !yield(in, nil) {
				return
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		rep, err := Build(Filter{ToolServer: "shop"}, seq, lineageOf(lin))
		if err != nil {
			b.Fatal(err)
		}
		if rep.Summary.MatchingReceipts != n/2 {
			b.Fatalf("matchingReceipts %d", rep.Summary.MatchingReceipts)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/receipt")
}
