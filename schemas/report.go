package schemas

import "encoding/json"

// AuthorizationContextReportSchema is the value of the authorization-context
// report's "schema" field.
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
	// Groups, when the report is grouped by identity, summarizes each
	// caller's matching receipts, callers in order of first receipt.
	Groups []AuthorizationGroup `json:"groups,omitempty"`
}

// AuthorizationIdentity is who an access-token caller was, as its
// identity provider said (a receipt's metadata.attribution.identity).
type AuthorizationIdentity struct {
	Issuer   string `json:"issuer"`
	Subject  string `json:"subject"`
	ClientID string `json:"clientId,omitempty"`
}

// AuthorizationGroup is one caller's receipts in a report grouped by
// identity: an identity provider's subject (Identity set; its keys are
// the names the kernel gives it), or a capability's subject key under one
// issuer key.
type AuthorizationGroup struct {
	Identity   *AuthorizationIdentity `json:"identity,omitempty"`
	SubjectKey string                 `json:"subjectKey"`
	IssuerKey  string                 `json:"issuerKey"`
	Summary    AuthorizationSummary   `json:"summary"`
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
// SenderBoundReceipts counts the rows honoured on a proof of possession of
// the subject key (any ProofType); DPoPBoundReceipts those whose proof is
// a DPoP proof in either form, RFC 9449 (dpop) or chio.dpop_proof.v1
// (chio_dpop_v1, Chio's DPoP profile). Today every proof of possession is one
// of the two, so the counters are equal; a row's ProofType tells the forms
// apart.
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
	// Identity is set for a caller that presented an identity
	// provider's access token.
	Identity *AuthorizationIdentity `json:"identity,omitempty"`
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

// Proof types and schemas of a sender constraint: how the caller proved
// possession of the capability's subject key, as the receipt's
// metadata.attribution.binding records it (its method, schemas/dpop's
// MethodDPoP and MethodToolProof).
const (
	// ProofTypeDPoP: an RFC 9449 proof of the HTTP request.
	ProofTypeDPoP = "dpop"
	// ProofTypeToolProof: a chio.dpop_proof.v1 bound to the tool call.
	ProofTypeToolProof = "chio_dpop_v1"
	// ProofSchemaDPoP is an RFC 9449 proof's form: the JWS typ it must
	// carry ("dpop+jwt"), which names the proof format as the schema id
	// names a tool proof's.
	ProofSchemaDPoP = "dpop+jwt"
	// ProofSchemaToolProof is a tool proof's schema id.
	ProofSchemaToolProof = "chio.dpop_proof.v1"
)

// SenderConstraint is how the call's sender was bound: the capability's
// subject and issuer from the receipt's attribution, the grant that
// matched, and the proof of possession of the subject key the call was
// honoured on, if any (metadata.attribution.binding).
type SenderConstraint struct {
	SubjectKey        string `json:"subjectKey"`
	SubjectKeySource  string `json:"subjectKeySource"`
	IssuerKey         string `json:"issuerKey"`
	IssuerKeySource   string `json:"issuerKeySource"`
	MatchedGrantIndex int    `json:"matchedGrantIndex"`
	// ProofRequired: the call was honoured on a proof of possession of
	// the subject key (ProofType says which). The kernel requires one of
	// a capability that can delegate, of one with a dpop_required grant,
	// and of every capability under --require-dpop; a proof presented
	// otherwise must verify all the same, so the call is bound to the
	// key either way.
	ProofRequired bool `json:"proofRequired"`
	// ProofType is ProofTypeDPoP or ProofTypeToolProof when ProofRequired.
	ProofType string `json:"proofType,omitempty"`
	// ProofSchema is ProofSchemaDPoP or ProofSchemaToolProof, with ProofType.
	ProofSchema string `json:"proofSchema,omitempty"`
	// ProofKeyThumbprint is the proving key's RFC 7638 SHA-256 thumbprint
	// (RFC 9449's jkt), base64url, with ProofType: the thumbprint of
	// SubjectKey, which the report checks.
	ProofKeyThumbprint    string `json:"proofKeyThumbprint,omitempty"`
	RuntimeAssuranceBound bool   `json:"runtimeAssuranceBound"`
	// DelegatedCallChainBound is true only for a call chain the log
	// observed or a signed statement verified; an asserted chain binds
	// nothing.
	DelegatedCallChainBound bool `json:"delegatedCallChainBound"`
}
