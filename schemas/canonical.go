package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/gowebpki/jcs"
)

// Canonical returns the RFC 8785 (JCS) canonical JSON of v. Every signed
// artifact is signed over these bytes, never over ad hoc concatenations.
func Canonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("canonical json: marshal: %w", err)
	}
	return CanonicalizeJSON(raw)
}

// CanonicalizeJSON rewrites JSON text into its RFC 8785 form.
func CanonicalizeJSON(raw []byte) ([]byte, error) {
	if alreadyCanonical(raw) {
		return slices.Clone(raw), nil
	}
	return transformJCS(raw)
}

// canonicalize is CanonicalizeJSON that may return raw itself, for callers
// that only read the result.
func canonicalize(raw []byte) ([]byte, error) {
	if alreadyCanonical(raw) {
		return raw, nil
	}
	return transformJCS(raw)
}

func transformJCS(raw []byte) ([]byte, error) {
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return out, nil
}

// SHA256Hex is the lowercase hex SHA-256 of b, the form every Chio hash field uses.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ParameterHash is action.parameter_hash: SHA-256 hex of the JCS of the parameters.
func ParameterHash(parameters json.RawMessage) (string, error) {
	if len(parameters) == 0 {
		parameters = json.RawMessage("null")
	}
	c, err := canonicalize(parameters)
	if err != nil {
		return "", fmt.Errorf("parameter hash: %w", err)
	}
	return SHA256Hex(c), nil
}

// EmptyContentHash is content_hash for a call that produced no output: the
// SHA-256 of the JCS of the literal null (§1.5 of the wire reference).
const EmptyContentHash = "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
