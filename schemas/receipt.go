package schemas

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Verdict tags a receipt Decision.
type Verdict string

// The four receipt verdicts of chio.receipt.v1.
const (
	VerdictAllow      Verdict = "allow"
	VerdictDeny       Verdict = "deny"
	VerdictCancelled  Verdict = "cancelled"
	VerdictIncomplete Verdict = "incomplete"
)

// Decision is the receipt's decision, internally tagged by verdict:
// {"verdict":"allow"}, {"verdict":"deny","reason","guard"},
// {"verdict":"cancelled","reason"}, {"verdict":"incomplete","reason"}.
type Decision struct {
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason,omitempty"`
	Guard   string  `json:"guard,omitempty"`
}

// Validate checks that the fields present are exactly those the verdict takes.
func (d Decision) Validate() error {
	switch d.Verdict {
	case VerdictAllow:
		if d.Reason != "" || d.Guard != "" {
			return errors.New("decision: allow takes no reason or guard")
		}
	case VerdictDeny:
		if d.Reason == "" || d.Guard == "" {
			return errors.New("decision: deny needs a reason and a guard")
		}
	case VerdictCancelled, VerdictIncomplete:
		if d.Reason == "" {
			return fmt.Errorf("decision: %s needs a reason", d.Verdict)
		}
		if d.Guard != "" {
			return fmt.Errorf("decision: %s takes no guard", d.Verdict)
		}
	default:
		return fmt.Errorf("decision: unknown verdict %q", d.Verdict)
	}
	return nil
}

// ToolCallAction is the receipt's action: the call's parameters and the
// SHA-256 hex of their JCS.
type ToolCallAction struct {
	Parameters    json.RawMessage `json:"parameters"`
	ParameterHash string          `json:"parameter_hash"`
}

// GuardEvidence records one guard's verdict (true = passed).
type GuardEvidence struct {
	GuardName string `json:"guard_name"`
	Verdict   bool   `json:"verdict"`
	Details   string `json:"details,omitempty"`
}

// TrustLevel of a receipt.
type TrustLevel string

// Trust levels; the zero value is read as mediated.
const (
	TrustMediated TrustLevel = "mediated"
	TrustVerified TrustLevel = "verified"
	TrustAdvisory TrustLevel = "advisory"
)

// ReceiptBody is the signed part of chio.receipt.v1: every field except
// algorithm and signature. Empty evidence and unset metadata and tenant_id
// are omitted, never null, or signatures stop matching other
// implementations.
type ReceiptBody struct {
	ID           string          `json:"id"`
	Timestamp    uint64          `json:"timestamp"`
	CapabilityID string          `json:"capability_id"`
	ToolServer   string          `json:"tool_server"`
	ToolName     string          `json:"tool_name"`
	Action       ToolCallAction  `json:"action"`
	Decision     Decision        `json:"decision"`
	ContentHash  string          `json:"content_hash"`
	PolicyHash   string          `json:"policy_hash"`
	Evidence     []GuardEvidence `json:"evidence,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	TrustLevel   TrustLevel      `json:"trust_level"`
	TenantID     string          `json:"tenant_id,omitempty"`
	KernelKey    string          `json:"kernel_key"`
}

// Receipt is a signed chio.receipt.v1 record.
type Receipt struct {
	ReceiptBody
	Algorithm string `json:"algorithm,omitempty"`
	Signature string `json:"signature"`
}

// isSHA256Hex reports whether s is 64 lowercase hex characters.
func isSHA256Hex(s string) bool { return len(s) == 64 && isLowerHex(s) }

// isLowerHex reports whether s is non-empty lowercase hex.
func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

// MaxEncodedReceipt is the largest canonical receipt the log accepts: C2SP
// entry bundles prefix each entry with a big-endian uint16 length.
const MaxEncodedReceipt = 1<<16 - 1

// Validate checks the body's structure (not its signature).
func (b *ReceiptBody) Validate() error {
	switch {
	case b.ID == "":
		return errors.New("receipt: id is empty")
	case b.CapabilityID == "":
		return errors.New("receipt: capability_id is empty")
	case b.ToolServer == "":
		return errors.New("receipt: tool_server is empty")
	case b.ToolName == "":
		return errors.New("receipt: tool_name is empty")
	case !isSHA256Hex(b.Action.ParameterHash):
		return errors.New("receipt: action.parameter_hash is not 64 lowercase hex")
	case len(b.Action.Parameters) == 0:
		return errors.New("receipt: action.parameters is missing")
	case !isSHA256Hex(b.ContentHash):
		return errors.New("receipt: content_hash is not 64 lowercase hex")
	case b.PolicyHash == "":
		return errors.New("receipt: policy_hash is empty")
	}
	if err := b.Decision.Validate(); err != nil {
		return fmt.Errorf("receipt: %w", err)
	}
	for i, e := range b.Evidence {
		if e.GuardName == "" {
			return fmt.Errorf("receipt: evidence[%d].guard_name is empty", i)
		}
	}
	switch b.TrustLevel {
	case TrustMediated, TrustVerified, TrustAdvisory:
	default:
		return fmt.Errorf("receipt: unknown trust_level %q", b.TrustLevel)
	}
	if bytes.Equal(b.Metadata, []byte("null")) {
		return errors.New("receipt: metadata is null (omit it instead)")
	}
	if _, err := ParsePublicKey(b.KernelKey); err != nil {
		return fmt.Errorf("receipt: kernel_key: %w", err)
	}
	return nil
}

// SigningBytes is the signing input: the JCS of the body.
func (b *ReceiptBody) SigningBytes() ([]byte, error) { return Canonical(b) }

// SignReceipt fills kernel_key and signs body with priv.
func SignReceipt(priv ed25519.PrivateKey, body ReceiptBody) (*Receipt, error) {
	body.KernelKey = EncodePublicKey(priv.Public().(ed25519.PublicKey))
	if err := body.Validate(); err != nil {
		return nil, err
	}
	sig, err := SignCanonical(priv, &body)
	if err != nil {
		return nil, fmt.Errorf("sign receipt %s: %w", body.ID, err)
	}
	return &Receipt{ReceiptBody: body, Signature: sig}, nil
}

// Verify checks the receipt's structure, the algorithm hint, the signature
// against its own kernel_key, and the parameter hash. Pinning kernel_key to a
// trusted key is the caller's job.
func (r *Receipt) Verify() error {
	if err := r.ReceiptBody.Validate(); err != nil {
		return err
	}
	if r.Algorithm != "" && r.Algorithm != "ed25519" {
		return fmt.Errorf("receipt: algorithm %q disagrees with an ed25519 signature", r.Algorithm)
	}
	if err := VerifyCanonical(r.KernelKey, r.Signature, &r.ReceiptBody); err != nil {
		return fmt.Errorf("receipt signature: %w", err)
	}
	ph, err := ParameterHash(r.Action.Parameters)
	if err != nil {
		return err
	}
	if ph != r.Action.ParameterHash {
		return errors.New("receipt: action.parameter_hash does not match the parameters")
	}
	return nil
}

// CanonicalReceipt is the log's leaf encoding: the JCS of the full signed
// receipt, signature included.
func CanonicalReceipt(r *Receipt) ([]byte, error) { return Canonical(r) }

// ParseReceipt decodes a receipt strictly: unknown fields are refused.
func ParseReceipt(raw []byte) (*Receipt, error) {
	var r Receipt
	if err := DecodeStrict(raw, &r); err != nil {
		return nil, fmt.Errorf("parse receipt: %w", err)
	}
	if r.TrustLevel == "" {
		r.TrustLevel = TrustMediated // receipts from before the field existed
	}
	return &r, nil
}

// receiptHead and receiptTail split the signed body at the position of
// "signature" in JCS key order: every key of head sorts before "signature",
// every key of tail after it. JCS of an object is its members sorted by key
// and joined, so the canonical body and the canonical signed receipt are
// both concatenations of JCS(head) and JCS(tail), one JCS pass for both.
type receiptHead struct {
	Action       ToolCallAction  `json:"action"`
	CapabilityID string          `json:"capability_id"`
	ContentHash  string          `json:"content_hash"`
	Decision     Decision        `json:"decision"`
	Evidence     []GuardEvidence `json:"evidence,omitempty"`
	ID           string          `json:"id"`
	KernelKey    string          `json:"kernel_key"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	PolicyHash   string          `json:"policy_hash"`
}

type receiptTail struct {
	TenantID   string     `json:"tenant_id,omitempty"`
	Timestamp  uint64     `json:"timestamp"`
	ToolName   string     `json:"tool_name"`
	ToolServer string     `json:"tool_server"`
	TrustLevel TrustLevel `json:"trust_level"`
}

// SignReceiptLeaf signs body like SignReceipt and returns the log leaf: the
// JCS of the signed receipt (no algorithm hint), built from one
// canonicalization of the body.
func SignReceiptLeaf(priv ed25519.PrivateKey, body ReceiptBody) ([]byte, error) {
	body.KernelKey = EncodePublicKey(priv.Public().(ed25519.PublicKey))
	if err := body.Validate(); err != nil {
		return nil, err
	}
	head, err := Canonical(receiptHead{Action: body.Action, CapabilityID: body.CapabilityID, ContentHash: body.ContentHash,
		Decision: body.Decision, Evidence: body.Evidence, ID: body.ID, KernelKey: body.KernelKey, Metadata: body.Metadata,
		PolicyHash: body.PolicyHash})
	if err != nil {
		return nil, fmt.Errorf("sign receipt %s: %w", body.ID, err)
	}
	tail, err := Canonical(receiptTail{TenantID: body.TenantID, Timestamp: body.Timestamp, ToolName: body.ToolName,
		ToolServer: body.ToolServer, TrustLevel: body.TrustLevel})
	if err != nil {
		return nil, fmt.Errorf("sign receipt %s: %w", body.ID, err)
	}
	// signing input: head members, then tail members
	msg := make([]byte, 0, len(head)+len(tail)+ed25519.SignatureSize*2+16)
	msg = append(append(append(msg, head[:len(head)-1]...), ','), tail[1:]...)
	sig := hex.EncodeToString(ed25519.Sign(priv, msg))
	leaf := make([]byte, 0, len(msg)+len(sig)+16)
	leaf = append(leaf, head[:len(head)-1]...)
	leaf = append(leaf, `,"signature":"`...)
	leaf = append(leaf, sig...)
	leaf = append(leaf, `",`...)
	return append(leaf, tail[1:]...), nil
}
