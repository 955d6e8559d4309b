package schemas

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupportedAlgorithm is returned for well-formed ECDSA keys or
// signatures: this implementation signs and verifies Ed25519 only, and
// fails closed on anything else.
var ErrUnsupportedAlgorithm = errors.New("unsupported signature algorithm (only ed25519 is implemented)")

// EncodePublicKey is the wire form of an Ed25519 public key: 64 lowercase hex.
func EncodePublicKey(pub ed25519.PublicKey) string { return hex.EncodeToString(pub) }

// ParsePublicKey decodes a wire-form public key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	// Wire forms (§1.4): 64 hex (Ed25519), p256:<130 hex>, p384:<194 hex>.
	switch {
	case len(s) == 2*ed25519.PublicKeySize && isLowerHex(s):
	case len(s) == 5+130 && strings.HasPrefix(s, "p256:") && isLowerHex(s[5:]),
		len(s) == 5+194 && strings.HasPrefix(s, "p384:") && isLowerHex(s[5:]):
		return nil, fmt.Errorf("public key: %w", ErrUnsupportedAlgorithm)
	default:
		return nil, fmt.Errorf("public key %q: not lowercase hex ed25519 (64 hex) or p256:/p384:", abbreviate(s))
	}
	b, _ := hex.DecodeString(s) // pattern guarantees valid hex
	return ed25519.PublicKey(b), nil
}

// ParseSignature decodes a wire-form Ed25519 signature.
func ParseSignature(s string) ([]byte, error) {
	// Wire forms (§1.4): 128 hex (Ed25519), p256:<DER hex>, p384:<DER hex>.
	switch {
	case len(s) == 2*ed25519.SignatureSize && isLowerHex(s):
	case (strings.HasPrefix(s, "p256:") || strings.HasPrefix(s, "p384:")) && isLowerHex(s[5:]):
		return nil, fmt.Errorf("signature: %w", ErrUnsupportedAlgorithm)
	default:
		return nil, fmt.Errorf("signature: not lowercase hex ed25519 (128 hex) or p256:/p384:")
	}
	b, _ := hex.DecodeString(s)
	return b, nil
}

// EncodePrivateKey is the on-disk form of an Ed25519 private key: the 32-byte
// seed as lowercase hex.
func EncodePrivateKey(priv ed25519.PrivateKey) string { return hex.EncodeToString(priv.Seed()) }

// ParsePrivateKey decodes EncodePrivateKey's output (surrounding white space allowed).
func ParsePrivateKey(s string) (ed25519.PrivateKey, error) {
	seed, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("private key: want %d hex characters of ed25519 seed", 2*ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// SignCanonical signs the JCS bytes of v and returns the wire-form signature.
func SignCanonical(priv ed25519.PrivateKey, v any) (string, error) {
	msg, err := Canonical(v)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(ed25519.Sign(priv, msg)), nil
}

// VerifyCanonical checks a wire-form signature over the JCS bytes of v.
func VerifyCanonical(publicKey, signature string, v any) error {
	pub, err := ParsePublicKey(publicKey)
	if err != nil {
		return err
	}
	sig, err := ParseSignature(signature)
	if err != nil {
		return err
	}
	msg, err := Canonical(v)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, sig) {
		return errors.New("signature does not verify")
	}
	return nil
}

func abbreviate(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}
