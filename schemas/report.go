package schemas

import "encoding/json"

// AuthorizationContextReportSchema is the value of the authorization-context
// report's "schema" field (wire reference §5.3).
const AuthorizationContextReportSchema = "chio.oauth.authorization-context-report.v1"

// Identifiers of the authorization profile a report is projected under.
const (
	AuthorizationProfileSchema = "chio.oauth.authorization-profile.v1"
	AuthorizationProfileID     = "chio-governed-rar-v1"
	// AuthoritativeSourceGovernedReceipts: rows come from signed governed
	// receipts joined with capability lineage, never from a separately
	// editable authorization document.
	AuthoritativeSourceGovernedReceipts = "governed_receipt_projection"
	// GovernedAuthSource is the signed receipt metadata key rows derive from.
	GovernedAuthSource = "metadata.governed_transaction"
	// SubjectBindingCapabilitySubject: the sender is bound to the subject
	// of the capability the call exercised.
	SubjectBindingCapabilitySubject = "capability_subject"
	// KeySourceReceiptAttribution: a sender constraint's keys come from the
	// signed metadata.attribution of the receipt.
	KeySourceReceiptAttribution = "receipt_attribution"
)

// RFC 9396 authorization_details types of a report row.
const (
	AuthorizationDetailTool           = "chio_governed_tool"
	AuthorizationDetailCommerce       = "chio_governed_commerce"
	AuthorizationDetailMeteredBilling = "chio_governed_metered_billing"
)

// AuthorizationContextReport answers GET /v1/reports/authorization-context:
// what each matching governed call was authorized to do, by whom, and how
// the sender was bound. It is all or nothing: a row that cannot be
// projected truthfully fails the whole report.
type AuthorizationContextReport struct {
	Schema  string               `json:"schema"`
	Profile AuthorizationProfile `json:"profile"`
	Summary AuthorizationSummary `json:"summary"`
	// Receipts is at most the requested number of rows; Summary counts
	// every matching receipt.
	Receipts []AuthorizationContextRow `json:"receipts"`
}

// MarshalJSON writes receipts as [] when there are none: clients index
// into the array and must not see null.
func (r AuthorizationContextReport) MarshalJSON() ([]byte, error) {
	type plain AuthorizationContextReport // drops this method, avoiding recursion
	if r.Receipts == nil {
		r.Receipts = []AuthorizationContextRow{}
	}
	return json.Marshal(plain(r))
}

// AuthorizationProfile describes how rows are derived, so a consumer can
// tell which claims it may rely on.
type AuthorizationProfile struct {
	Schema                      string                  `json:"schema"`
	ID                          string                  `json:"id"`
	AuthoritativeSource         string                  `json:"authoritativeSource"`
	UnsupportedShapesFailClosed bool                    `json:"unsupportedShapesFailClosed"`
	PortableIdentityBinding     PortableIdentityBinding `json:"portableIdentityBinding"`
	GovernedAuthBinding         GovernedAuthBinding     `json:"governedAuthBinding"`
	PortableClaimCatalog        PortableClaimCatalog    `json:"portableClaimCatalog"`
	SenderConstraints           SenderConstraintProfile `json:"senderConstraints"`
}

// PortableIdentityBinding names the token claims a portable identity maps to.
type PortableIdentityBinding struct {
	PortableSubjectClaim      string `json:"portableSubjectClaim"`
	ChioIssuerProvenanceClaim string `json:"chioIssuerProvenanceClaim"`
}

// GovernedAuthBinding names where the authorization details come from.
type GovernedAuthBinding struct {
	AuthoritativeSource string `json:"authoritativeSource"`
}

// PortableClaimCatalog lists the claims a holder may disclose selectively.
type PortableClaimCatalog struct {
	SelectivelyDisclosableClaims []string `json:"selectivelyDisclosableClaims"`
}

// SenderConstraintProfile says what a row's sender constraint binds to.
type SenderConstraintProfile struct {
	SubjectBinding string `json:"subjectBinding"`
}

// DefaultAuthorizationProfile is the profile this implementation projects
// under. The disclosable claims are the optional parts of a governed
// transaction: what the call was for and its commercial and delegation
// context, not the identity and tool binding every row must carry.
func DefaultAuthorizationProfile() AuthorizationProfile {
	return AuthorizationProfile{
		Schema:                      AuthorizationProfileSchema,
		ID:                          AuthorizationProfileID,
		AuthoritativeSource:         AuthoritativeSourceGovernedReceipts,
		UnsupportedShapesFailClosed: true,
		PortableIdentityBinding:     PortableIdentityBinding{PortableSubjectClaim: "sub", ChioIssuerProvenanceClaim: "chio_issuer_dids"},
		GovernedAuthBinding:         GovernedAuthBinding{AuthoritativeSource: GovernedAuthSource},
		PortableClaimCatalog: PortableClaimCatalog{
			SelectivelyDisclosableClaims: []string{"purpose", "maxAmount", "commerce", "meteredBilling", "callChain"},
		},
		SenderConstraints: SenderConstraintProfile{SubjectBinding: SubjectBindingCapabilitySubject},
	}
}

// AuthorizationSummary counts the matching receipts, not only the rows
// returned. Counters for features a projection does not support stay 0.
type AuthorizationSummary struct {
	MatchingReceipts              int `json:"matchingReceipts"`
	ApprovalReceipts              int `json:"approvalReceipts"`
	ApprovedReceipts              int `json:"approvedReceipts"`
	CommerceReceipts              int `json:"commerceReceipts"`
	MeteredBillingReceipts        int `json:"meteredBillingReceipts"`
	RuntimeAssuranceReceipts      int `json:"runtimeAssuranceReceipts"`
	CallChainReceipts             int `json:"callChainReceipts"`
	MaxAmountReceipts             int `json:"maxAmountReceipts"`
	SenderBoundReceipts           int `json:"senderBoundReceipts"`
	DPoPBoundReceipts             int `json:"dpopBoundReceipts"`
	RuntimeAssuranceBoundReceipts int `json:"runtimeAssuranceBoundReceipts"`
	DelegatedSenderBoundReceipts  int `json:"delegatedSenderBoundReceipts"`
}

// AuthorizationContextRow is one governed receipt's authorization context.
// Timestamp and CapabilityID are not in the reference row; they let an
// operator place the row without fetching the receipt.
type AuthorizationContextRow struct {
	ReceiptID            string                `json:"receiptId"`
	Timestamp            uint64                `json:"timestamp"`
	CapabilityID         string                `json:"capabilityId"`
	AuthorizationDetails []AuthorizationDetail `json:"authorizationDetails"`
	TransactionContext   TransactionContext    `json:"transactionContext"`
	SenderConstraint     SenderConstraint      `json:"senderConstraint"`
}

// AuthorizationDetail is one RFC 9396 authorization_details entry. Which
// fields are set depends on Type: chio_governed_tool sets Locations,
// Actions, Purpose and MaxAmount; chio_governed_commerce sets MaxAmount and
// Commerce; chio_governed_metered_billing sets MeteredBilling.
type AuthorizationDetail struct {
	Type           string                       `json:"type"`
	Locations      []string                     `json:"locations,omitempty"`
	Actions        []string                     `json:"actions,omitempty"`
	Purpose        string                       `json:"purpose,omitempty"`
	MaxAmount      *MonetaryAmount              `json:"maxAmount,omitempty"`
	Commerce       *AuthorizationCommerce       `json:"commerce,omitempty"`
	MeteredBilling *AuthorizationMeteredBilling `json:"meteredBilling,omitempty"`
}

// AuthorizationCommerce is a governed purchase's seller and payment token.
type AuthorizationCommerce struct {
	Seller               string `json:"seller"`
	SharedPaymentTokenID string `json:"sharedPaymentTokenId"`
}

// AuthorizationMeteredBilling is a metered call's quote and ceiling, flattened.
type AuthorizationMeteredBilling struct {
	SettlementMode string         `json:"settlementMode"`
	Provider       string         `json:"provider"`
	QuoteID        string         `json:"quoteId"`
	BillingUnit    string         `json:"billingUnit"`
	QuotedUnits    uint64         `json:"quotedUnits"`
	QuotedCost     MonetaryAmount `json:"quotedCost"`
	MaxBilledUnits uint64         `json:"maxBilledUnits"`
}

// TransactionContext binds a row to the signed intent.
type TransactionContext struct {
	IntentID   string                  `json:"intentId"`
	IntentHash string                  `json:"intentHash"`
	CallChain  *AuthorizationCallChain `json:"callChain,omitempty"`
}

// AuthorizationCallChain is the call chain as signed, with its evidence
// class exactly as the ledger decided it (never upgraded).
type AuthorizationCallChain struct {
	ChainID          string   `json:"chainId"`
	ParentRequestID  string   `json:"parentRequestId"`
	ParentReceiptID  string   `json:"parentReceiptId,omitempty"`
	OriginSubject    string   `json:"originSubject"`
	DelegatorSubject string   `json:"delegatorSubject"`
	EvidenceClass    string   `json:"evidenceClass"`
	EvidenceSources  []string `json:"evidenceSources"`
}

// SenderConstraint is how the call's sender was bound: the capability's
// subject and issuer from the receipt's attribution, and the grant that
// matched.
type SenderConstraint struct {
	SubjectKey            string `json:"subjectKey"`
	SubjectKeySource      string `json:"subjectKeySource"`
	IssuerKey             string `json:"issuerKey"`
	IssuerKeySource       string `json:"issuerKeySource"`
	MatchedGrantIndex     int    `json:"matchedGrantIndex"`
	ProofRequired         bool   `json:"proofRequired"`
	RuntimeAssuranceBound bool   `json:"runtimeAssuranceBound"`
	// DelegatedCallChainBound is true only for a call chain the log
	// observed or a signed statement verified; an asserted chain binds
	// nothing.
	DelegatedCallChainBound bool `json:"delegatedCallChainBound"`
}
