package schemas

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Key and signature encodings of the wire contract (§1.4): bare lowercase hex
// for Ed25519, p256:/p384: prefixes for ECDSA.
var (
	publicKeyPattern = regexp.MustCompile(`^([0-9a-f]{64}|p256:[0-9a-f]{130}|p384:[0-9a-f]{194})$`)
	signaturePattern = regexp.MustCompile(`^([0-9a-f]{128}|p256:[0-9a-f]+|p384:[0-9a-f]+)$`)
)

// ErrUnsupportedAlgorithm is returned for well-formed ECDSA keys or
// signatures: this implementation signs and verifies Ed25519 only, and
// fails closed on anything else.
var ErrUnsupportedAlgorithm = errors.New("unsupported signature algorithm (only ed25519 is implemented)")

// EncodePublicKey is the wire form of an Ed25519 public key: 64 lowercase hex.
func EncodePublicKey(pub ed25519.PublicKey) string { return hex.EncodeToString(pub) }

// ParsePublicKey decodes a wire-form public key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	if !publicKeyPattern.MatchString(s) {
		return nil, fmt.Errorf("public key %q: not lowercase hex ed25519 (64 hex) or p256:/p384:", abbreviate(s))
	}
	if strings.HasPrefix(s, "p256:") || strings.HasPrefix(s, "p384:") {
		return nil, fmt.Errorf("public key: %w", ErrUnsupportedAlgorithm)
	}
	b, _ := hex.DecodeString(s) // pattern guarantees valid hex
	return ed25519.PublicKey(b), nil
}

// ParseSignature decodes a wire-form Ed25519 signature.
func ParseSignature(s string) ([]byte, error) {
	if !signaturePattern.MatchString(s) {
		return nil, fmt.Errorf("signature: not lowercase hex ed25519 (128 hex) or p256:/p384:")
	}
	if strings.HasPrefix(s, "p256:") || strings.HasPrefix(s, "p384:") {
		return nil, fmt.Errorf("signature: %w", ErrUnsupportedAlgorithm)
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
