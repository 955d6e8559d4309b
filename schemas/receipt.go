package schemas

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/gowebpki/jcs"
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

// SignReceiptLeaf signs body like SignReceipt and returns the log leaf: the
// JCS of the signed receipt (no algorithm hint). It canonicalizes the
// caller-supplied JSON (parameters, metadata) once, fills
// action.parameter_hash when it is empty (and checks it when it is not),
// and assembles the signing input and the leaf from the same canonical
// members: JCS of an object is its members in key order, and every key of
// the receipt sorts either before "signature" (the head) or after it (the
// tail), so the leaf is head + signature + tail.
func SignReceiptLeaf(priv ed25519.PrivateKey, body ReceiptBody) ([]byte, error) {
	body.KernelKey = EncodePublicKey(priv.Public().(ed25519.PublicKey))
	params, err := canonicalize(body.Action.Parameters)
	if err != nil {
		return nil, fmt.Errorf("sign receipt %s: parameters: %w", body.ID, err)
	}
	if ph := SHA256Hex(params); body.Action.ParameterHash == "" {
		body.Action.ParameterHash = ph
	} else if body.Action.ParameterHash != ph {
		return nil, fmt.Errorf("sign receipt %s: action.parameter_hash does not match the parameters", body.ID)
	}
	if err := body.Validate(); err != nil {
		return nil, err
	}
	head, tail, err := body.canonicalMembers(params)
	if err != nil {
		return nil, fmt.Errorf("sign receipt %s: %w", body.ID, err)
	}
	msg := make([]byte, 0, len(head)+len(tail)+3)
	msg = append(append(append(append(msg, '{'), head...), ','), tail...)
	msg = append(msg, '}')
	sig := hex.EncodeToString(ed25519.Sign(priv, msg))
	leaf := make([]byte, 0, len(msg)+len(sig)+16)
	leaf = append(append(leaf, '{'), head...)
	leaf = append(append(append(leaf, `,"signature":"`...), sig...), `",`...)
	leaf = append(append(leaf, tail...), '}')
	return leaf, nil
}

// canonicalMembers returns the JCS members (without braces) of the body's
// keys before and after "signature", given the JCS of the parameters.
func (b *ReceiptBody) canonicalMembers(params []byte) (head, tail []byte, err error) {
	c := canonicalWriter{buf: make([]byte, 0, 512+len(params)+len(b.Metadata))}
	c.raw(`"action":{"parameter_hash":`)
	c.str(b.Action.ParameterHash)
	c.raw(`,"parameters":`)
	c.buf = append(c.buf, params...)
	c.raw(`},"capability_id":`)
	c.str(b.CapabilityID)
	c.raw(`,"content_hash":`)
	c.str(b.ContentHash)
	c.raw(`,"decision":{`) // keys: guard, reason, verdict
	if b.Decision.Guard != "" {
		c.raw(`"guard":`)
		c.str(b.Decision.Guard)
		c.raw(",")
	}
	if b.Decision.Reason != "" {
		c.raw(`"reason":`)
		c.str(b.Decision.Reason)
		c.raw(",")
	}
	c.raw(`"verdict":`)
	c.str(string(b.Decision.Verdict))
	c.raw("}")
	if len(b.Evidence) > 0 {
		c.raw(`,"evidence":[`)
		for i, e := range b.Evidence { // keys: details, guard_name, verdict
			if i > 0 {
				c.raw(",")
			}
			c.raw("{")
			if e.Details != "" {
				c.raw(`"details":`)
				c.str(e.Details)
				c.raw(",")
			}
			c.raw(`"guard_name":`)
			c.str(e.GuardName)
			c.raw(`,"verdict":`)
			c.raw(strconv.FormatBool(e.Verdict))
			c.raw("}")
		}
		c.raw("]")
	}
	c.raw(`,"id":`)
	c.str(b.ID)
	c.raw(`,"kernel_key":`)
	c.str(b.KernelKey)
	if len(b.Metadata) > 0 {
		meta, err := canonicalize(b.Metadata)
		if err != nil {
			return nil, nil, fmt.Errorf("metadata: %w", err)
		}
		c.raw(`,"metadata":`)
		c.buf = append(c.buf, meta...)
	}
	c.raw(`,"policy_hash":`)
	c.str(b.PolicyHash)
	split := len(c.buf)
	if b.TenantID != "" {
		c.raw(`"tenant_id":`)
		c.str(b.TenantID)
		c.raw(",")
	}
	c.raw(`"timestamp":`)
	if b.Timestamp < 1<<53 {
		c.buf = strconv.AppendUint(c.buf, b.Timestamp, 10)
	} else { // beyond 2^53 JCS writes the IEEE double, as JSON.stringify would
		n, err := jcs.NumberToJSON(float64(b.Timestamp))
		c.setErr(err)
		c.raw(n)
	}
	c.raw(`,"tool_name":`)
	c.str(b.ToolName)
	c.raw(`,"tool_server":`)
	c.str(b.ToolServer)
	c.raw(`,"trust_level":`)
	c.str(string(b.TrustLevel))
	if c.err != nil {
		return nil, nil, c.err
	}
	return c.buf[:split], c.buf[split:], nil
}

// canonicalWriter appends JCS text for values of known shape. Strings that
// need no escaping (printable ASCII without '"' or '\\') are copied as
// they are; any other string goes through the JCS library.
type canonicalWriter struct {
	buf []byte
	err error
}

func (c *canonicalWriter) raw(s string) { c.buf = append(c.buf, s...) }

func (c *canonicalWriter) setErr(err error) {
	if err != nil && c.err == nil {
		c.err = err
	}
}

func (c *canonicalWriter) str(s string) {
	for i := 0; i < len(s); i++ {
		if ch := s[i]; ch < 0x20 || ch > 0x7e || ch == '"' || ch == '\\' {
			quoted, err := json.Marshal(s)
			if err == nil {
				quoted, err = CanonicalizeJSON(quoted)
			}
			c.setErr(err)
			c.buf = append(c.buf, quoted...)
			return
		}
	}
	c.buf = append(append(append(c.buf, '"'), s...), '"')
}
