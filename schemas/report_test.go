package schemas

import (
	"encoding/json"
	"strings"
	"testing"
)

// sampleJKT is a well-formed RFC 7638 thumbprint (43 base64url characters).
const sampleJKT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"

func sampleReport() AuthorizationContextReport {
	amount := &MonetaryAmount{Units: 5000, Currency: "USD"}
	return AuthorizationContextReport{
		Schema:  AuthorizationContextReportSchema,
		Profile: DefaultAuthorizationProfile(),
		Summary: AuthorizationSummary{MatchingReceipts: 1, CommerceReceipts: 1, MeteredBillingReceipts: 1,
			CallChainReceipts: 1, MaxAmountReceipts: 1, SenderBoundReceipts: 1, DPoPBoundReceipts: 1, DelegatedSenderBoundReceipts: 1},
		Receipts: []AuthorizationContextRow{{
			ReceiptID: "0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f", Timestamp: 1760000000, CapabilityID: "cap-123",
			AuthorizationDetails: []AuthorizationDetail{
				{Type: AuthorizationDetailTool, Locations: []string{"shop"}, Actions: []string{"buy"}, Purpose: "restock", MaxAmount: amount},
				{Type: AuthorizationDetailCommerce, MaxAmount: amount, Commerce: &AuthorizationCommerce{Seller: "acme", SharedPaymentTokenID: "spt-1"}},
				{Type: AuthorizationDetailMeteredBilling, MeteredBilling: &AuthorizationMeteredBilling{
					SettlementMode: SettlementHoldCapture, Provider: "meter", QuoteID: "q-1", BillingUnit: "call",
					QuotedUnits: 3, QuotedCost: MonetaryAmount{Units: 30, Currency: "USD"}, MaxBilledUnits: 5}},
			},
			TransactionContext: TransactionContext{IntentID: "intent-1", IntentHash: strings.Repeat("ab", 32),
				CallChain: &AuthorizationCallChain{ChainID: "chain-1", ParentRequestID: "req-0", ParentReceiptID: "r-0",
					OriginSubject: "origin", DelegatorSubject: "delegator", EvidenceClass: EvidenceObserved,
					EvidenceSources: []string{SourceGovernedIntent, SourceLocalLineage}}},
			SenderConstraint: SenderConstraint{SubjectKey: strings.Repeat("1", 64), SubjectKeySource: KeySourceReceiptAttribution,
				IssuerKey: strings.Repeat("2", 64), IssuerKeySource: KeySourceReceiptAttribution, DelegatedCallChainBound: true,
				ProofRequired: true, ProofType: ProofTypeDPoP, ProofSchema: ProofSchemaDPoP, ProofKeyThumbprint: sampleJKT},
		}},
	}
}

func TestAuthorizationReportMatchesSchema(t *testing.T) {
	s := compileSchema(t, "authorization-context-report.v1.schema.json")
	empty := sampleReport()
	empty.Receipts, empty.Summary = nil, AuthorizationSummary{}
	toolProof := sampleReport()
	sc := &toolProof.Receipts[0].SenderConstraint
	sc.ProofType, sc.ProofSchema = ProofTypeToolProof, ProofSchemaToolProof
	bearer := sampleReport()
	bearer.Summary.SenderBoundReceipts, bearer.Summary.DPoPBoundReceipts = 0, 0
	sc = &bearer.Receipts[0].SenderConstraint
	sc.ProofRequired, sc.ProofType, sc.ProofSchema, sc.ProofKeyThumbprint = false, "", "", ""
	grouped := sampleReport()
	id := &AuthorizationIdentity{Issuer: "https://login.example.com", Subject: "agent-7", ClientID: "agent-7"}
	grouped.Receipts[0].Identity = id
	grouped.Groups = []AuthorizationGroup{{Identity: &AuthorizationIdentity{Issuer: id.Issuer, Subject: id.Subject},
		SubjectKey: strings.Repeat("1", 64), IssuerKey: strings.Repeat("2", 64), Summary: grouped.Summary}}
	cases := []struct {
		name string
		r    AuthorizationContextReport
		want []string // substrings the JSON must contain
	}{
		{"grouped by identity", grouped, []string{`"identity":{"issuer":"https://login.example.com","subject":"agent-7","clientId":"agent-7"}`,
			`"groups":[{"identity":{"issuer":"https://login.example.com","subject":"agent-7"},"subjectKey":"`}},
		{"full", sampleReport(), []string{`"receiptId":"0190f3c2`, `"sharedPaymentTokenId":"spt-1"`, `"quoteId":"q-1"`,
			`"evidenceClass":"observed"`, `"subjectKeySource":"receipt_attribution"`, `"dpopBoundReceipts":1`, `"senderBoundReceipts":1`,
			`"proofRequired":true,"proofType":"dpop","proofSchema":"dpop+jwt","proofKeyThumbprint":"` + sampleJKT + `"`,
			`"selectivelyDisclosableClaims":["purpose","maxAmount","commerce","meteredBilling","callChain"]`}},
		{"tool proof", toolProof, []string{`"proofType":"chio_dpop_v1","proofSchema":"chio.dpop_proof.v1"`}},
		{"bearer", bearer, []string{`"proofRequired":false,"runtimeAssuranceBound":false`, `"dpopBoundReceipts":0`}},
		{"empty", empty, []string{`"receipts":[]`, `"matchingReceipts":0`, `"unsupportedShapesFailClosed":true`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, err := json.Marshal(c.r)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateJSON(s, raw); err != nil {
				t.Fatalf("schema rejects a Go-built report: %v\n%s", err, raw)
			}
			for _, w := range c.want {
				if !strings.Contains(string(raw), w) {
					t.Errorf("missing %s in\n%s", w, raw)
				}
			}
			if strings.Contains(string(raw), "null") {
				t.Errorf("report JSON contains null: %s", raw)
			}
			var back AuthorizationContextReport
			if err := DecodeStrict(raw, &back); err != nil {
				t.Fatalf("strict decode of the report: %v", err)
			}
		})
	}
}

func TestBadAuthorizationReportsRejectedBySchema(t *testing.T) {
	s := compileSchema(t, "authorization-context-report.v1.schema.json")
	cases := []struct {
		name   string
		mutate func(r *AuthorizationContextReport)
	}{
		{"wrong schema", func(r *AuthorizationContextReport) { r.Schema = "chio.report.v0" }},
		{"profile not fail closed", func(r *AuthorizationContextReport) { r.Profile.UnsupportedShapesFailClosed = false }},
		{"unknown detail type", func(r *AuthorizationContextReport) { r.Receipts[0].AuthorizationDetails[0].Type = "chio_other" }},
		{"no details", func(r *AuthorizationContextReport) { r.Receipts[0].AuthorizationDetails = []AuthorizationDetail{} }},
		{"tool detail without purpose", func(r *AuthorizationContextReport) { r.Receipts[0].AuthorizationDetails[0].Purpose = "" }},
		{"commerce detail with locations", func(r *AuthorizationContextReport) {
			r.Receipts[0].AuthorizationDetails[1].Locations = []string{"shop"}
		}},
		{"unknown evidence class", func(r *AuthorizationContextReport) {
			r.Receipts[0].TransactionContext.CallChain.EvidenceClass = "trusted"
		}},
		{"other key source", func(r *AuthorizationContextReport) { r.Receipts[0].SenderConstraint.SubjectKeySource = "token" }},
		{"negative grant index", func(r *AuthorizationContextReport) { r.Receipts[0].SenderConstraint.MatchedGrantIndex = -1 }},
		{"bad intent hash", func(r *AuthorizationContextReport) { r.Receipts[0].TransactionContext.IntentHash = "abc" }},
		{"negative count", func(r *AuthorizationContextReport) { r.Summary.MatchingReceipts = -1 }},
		{"proof required without its type", func(r *AuthorizationContextReport) {
			sc := &r.Receipts[0].SenderConstraint
			sc.ProofType, sc.ProofSchema, sc.ProofKeyThumbprint = "", "", ""
		}},
		{"proof type without proof required", func(r *AuthorizationContextReport) { r.Receipts[0].SenderConstraint.ProofRequired = false }},
		{"unknown proof type", func(r *AuthorizationContextReport) { r.Receipts[0].SenderConstraint.ProofType = "mtls" }},
		{"dpop with the tool proof schema", func(r *AuthorizationContextReport) {
			r.Receipts[0].SenderConstraint.ProofSchema = ProofSchemaToolProof
		}},
		{"tool proof with the dpop schema", func(r *AuthorizationContextReport) {
			r.Receipts[0].SenderConstraint.ProofType = ProofTypeToolProof
		}},
		{"proof without thumbprint", func(r *AuthorizationContextReport) { r.Receipts[0].SenderConstraint.ProofKeyThumbprint = "" }},
		{"proof without schema", func(r *AuthorizationContextReport) { r.Receipts[0].SenderConstraint.ProofSchema = "" }},
		{"thumbprint not base64url", func(r *AuthorizationContextReport) {
			r.Receipts[0].SenderConstraint.ProofKeyThumbprint = strings.Repeat("+", 43)
		}},
		{"schema without a proof", func(r *AuthorizationContextReport) {
			sc := &r.Receipts[0].SenderConstraint
			sc.ProofRequired, sc.ProofType, sc.ProofKeyThumbprint = false, "", ""
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sampleReport()
			c.mutate(&r)
			raw, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := validateJSON(s, raw); err == nil {
				t.Errorf("schema accepts %s", raw)
			}
		})
	}
}
