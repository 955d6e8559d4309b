package verify

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/chio-ledger/chio/schemas"
)

// receiptField reports whether name is a member a chio.receipt.v1 may have.
func receiptField(name string) bool {
	return slices.Contains([]string{"action", "algorithm", "capability_id", "content_hash", "decision", "evidence", "id",
		"kernel_key", "metadata", "policy_hash", "signature", "tenant_id", "timestamp", "tool_name", "tool_server", "trust_level"}, name)
}

// verifyUnreadable runs the receipt checks of Verify (receipt, kernel-key,
// receipt-signature, parameter-hash) over a receipt nested too deep for any
// reader to decode whole, without decoding what is deep: the leaf must be
// the JCS of a receipt (schemas.TopMembers checks each member's value and
// gives its canonical form; this checks the object around them), the
// signing input is that leaf without its signature and algorithm members
// (JCS of the body, as the kernel signs it), and the parameter hash is over
// the canonical parameters. The receipt returned holds the parameters and
// metadata as canonical text, never decoded.
func verifyUnreadable(leaf []byte, kernelKey string) (*schemas.Receipt, error) {
	members, err := schemas.TopMembers(leaf)
	if err != nil {
		return nil, &Failure{Check: "receipt", Err: err}
	}
	if err := checkCanonicalObject(leaf, members); err != nil {
		return nil, &Failure{Check: "receipt", Err: err}
	}
	var r schemas.Receipt
	signed := []byte{'{'}
	for _, m := range members {
		var dst any
		switch m.Name {
		case "action":
			if err := decodeAction(m.Canonical, &r.Action); err != nil {
				return nil, &Failure{Check: "receipt", Err: fmt.Errorf("action: %w", err)}
			}
		case "metadata":
			r.Metadata = json.RawMessage(m.Canonical)
		case "algorithm":
			dst = &r.Algorithm
		case "signature":
			dst = &r.Signature
		case "capability_id":
			dst = &r.CapabilityID
		case "content_hash":
			dst = &r.ContentHash
		case "decision":
			dst = &r.Decision
		case "evidence":
			dst = &r.Evidence
		case "id":
			dst = &r.ID
		case "kernel_key":
			dst = &r.KernelKey
		case "policy_hash":
			dst = &r.PolicyHash
		case "tenant_id":
			dst = &r.TenantID
		case "timestamp":
			dst = &r.Timestamp
		case "tool_name":
			dst = &r.ToolName
		case "tool_server":
			dst = &r.ToolServer
		case "trust_level":
			dst = &r.TrustLevel
		}
		if dst != nil {
			if err := schemas.DecodeStrict(m.Canonical, dst); err != nil {
				return nil, &Failure{Check: "receipt", Err: fmt.Errorf("%s: %w", m.Name, err)}
			}
		}
		if m.Name != "signature" && m.Name != "algorithm" {
			if len(signed) > 1 {
				signed = append(signed, ',')
			}
			signed = append(signed, leaf[m.KeyStart:m.ValueEnd]...)
		}
	}
	signed = append(signed, '}')
	if r.TrustLevel == "" {
		r.TrustLevel = schemas.TrustMediated // as ParseReceipt reads a receipt from before the field
	}
	if r.KernelKey != kernelKey {
		return nil, failf("kernel-key", "receipt is signed by %s, not the pinned kernel key", r.KernelKey)
	}
	if err := r.ReceiptBody.Validate(); err != nil {
		return nil, &Failure{Check: "receipt", Err: err}
	}
	pub, err := schemas.ParsePublicKey(r.KernelKey)
	if err != nil {
		return nil, &Failure{Check: "receipt-signature", Err: err}
	}
	sig, err := schemas.ParseSignature(r.Signature)
	if err != nil {
		return nil, &Failure{Check: "receipt-signature", Err: err}
	}
	if !ed25519.Verify(pub, signed, sig) {
		return nil, failf("receipt-signature", "signature does not verify")
	}
	if r.Algorithm != "" && r.Algorithm != "ed25519" {
		return nil, failf("receipt-signature", "algorithm hint %q disagrees with an ed25519 signature", r.Algorithm)
	}
	if schemas.SHA256Hex(r.Action.Parameters) != r.Action.ParameterHash {
		return nil, failf("parameter-hash", "action.parameter_hash does not match the parameters")
	}
	return &r, nil
}

// checkCanonicalObject checks that leaf, split into members, is written as
// JCS writes an object: no space, members in key order (the receipt's
// names are ASCII, so byte order is JCS's UTF-16 order), names and values
// in canonical form, and only the receipt's members.
func checkCanonicalObject(leaf []byte, members []schemas.TopMember) error {
	at := 1
	if len(leaf) == 0 || leaf[0] != '{' {
		return errors.New("not a JSON object")
	}
	for i, m := range members {
		if !receiptField(m.Name) {
			return fmt.Errorf("%q is not a field of %s", clip(m.Name), "chio.receipt.v1")
		}
		if i > 0 && members[i-1].Name >= m.Name {
			return errors.New("the receipt is not in canonical (RFC 8785) form: members out of order")
		}
		name, _ := json.Marshal(m.Name) // a receipt field name needs no escaping
		if m.KeyStart != at || !bytes.Equal(leaf[m.KeyStart:m.ValueStart], append(name, ':')) ||
			!bytes.Equal(leaf[m.ValueStart:m.ValueEnd], m.Canonical) {
			return fmt.Errorf("the receipt is not in canonical (RFC 8785) form at member %q", m.Name)
		}
		at = m.ValueEnd + 1
		if i < len(members)-1 && leaf[m.ValueEnd] != ',' {
			return errors.New("the receipt is not in canonical (RFC 8785) form")
		}
	}
	if at != len(leaf) || leaf[len(leaf)-1] != '}' {
		return errors.New("the receipt is not in canonical (RFC 8785) form")
	}
	return nil
}

// decodeAction reads the canonical action member: its parameter hash, and
// its parameters as canonical text, however deep.
func decodeAction(raw []byte, a *schemas.ToolCallAction) error {
	members, err := schemas.TopMembers(raw)
	if err != nil {
		return err
	}
	for _, m := range members {
		switch m.Name {
		case "parameters":
			a.Parameters = json.RawMessage(m.Canonical)
		case "parameter_hash":
			if err := json.Unmarshal(m.Canonical, &a.ParameterHash); err != nil {
				return fmt.Errorf("parameter_hash: %w", err)
			}
		default:
			return fmt.Errorf("%q is not a field of action", clip(m.Name))
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
