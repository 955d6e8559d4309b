package schemas

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
)

// SignedManifestSchema is the value of a signed manifest's "schema" field.
//
// A chio.signed_manifest.v1 document wraps a chio.manifest.v1 manifest as
// the deployment derived it (from an OpenAPI spec, an MCP server's
// tools/list, an A2A partner's card, a worker, a built-in server):
//
//	{"schema":"chio.signed_manifest.v1","manifest":{…},
//	 "manifest_hash":"<sha-256 hex of the JCS of manifest>",
//	 "signer_key":"<ed25519 public key, 64 hex>","signature":"<128 hex>"}
//
// manifest_hash identifies the manifest; receipts name it
// (metadata.manifest.hash). The signature is Ed25519 over the JCS of
// {"manifest_hash","schema","signer_key"}: the schema string separates it
// from every other Chio signature, and the hash binds the manifest. An
// unsigned document (no key configured) carries the hash only.
const SignedManifestSchema = "chio.signed_manifest.v1"

// SignedManifest is a chio.signed_manifest.v1 document. Manifest is kept
// as JSON so that verification hashes exactly what was published.
type SignedManifest struct {
	Schema       string          `json:"schema"`
	Manifest     json.RawMessage `json:"manifest"`
	ManifestHash string          `json:"manifest_hash"`
	SignerKey    string          `json:"signer_key,omitempty"`
	Signature    string          `json:"signature,omitempty"`
}

// signedManifestBody is what a manifest signature covers.
type signedManifestBody struct {
	Schema       string `json:"schema"`
	ManifestHash string `json:"manifest_hash"`
	SignerKey    string `json:"signer_key"`
}

// ManifestHash is the SHA-256 hex of the JCS of a manifest.
func ManifestHash(raw json.RawMessage) (string, error) {
	c, err := CanonicalizeJSON(raw)
	if err != nil {
		return "", fmt.Errorf("manifest hash: %w", err)
	}
	return SHA256Hex(c), nil
}

// SignManifest wraps m with its hash and, when priv is not nil, its
// signature by priv.
func SignManifest(priv ed25519.PrivateKey, m *ToolManifest) (*SignedManifest, error) {
	if m == nil {
		return nil, errors.New("sign manifest: manifest is nil")
	}
	raw, err := Canonical(m)
	if err != nil {
		return nil, fmt.Errorf("sign manifest %s: %w", m.ServerID, err)
	}
	s := &SignedManifest{Schema: SignedManifestSchema, Manifest: raw, ManifestHash: SHA256Hex(raw)}
	if priv == nil {
		return s, nil
	}
	s.SignerKey = EncodePublicKey(priv.Public().(ed25519.PublicKey))
	if s.Signature, err = SignCanonical(priv, s.body()); err != nil {
		return nil, fmt.Errorf("sign manifest %s: %w", m.ServerID, err)
	}
	return s, nil
}

func (s *SignedManifest) body() signedManifestBody {
	return signedManifestBody{Schema: s.Schema, ManifestHash: s.ManifestHash, SignerKey: s.SignerKey}
}

// ParseSignedManifest decodes a chio.signed_manifest.v1 document; unknown
// fields are refused. It does not verify it (Verify does).
func ParseSignedManifest(raw []byte) (*SignedManifest, error) {
	var s SignedManifest
	if err := DecodeStrict(raw, &s); err != nil {
		return nil, fmt.Errorf("signed manifest: %w", err)
	}
	return &s, nil
}

// Errors of SignedManifest.Verify, one per check, so a caller can say
// which failed.
var (
	ErrManifestSchema    = errors.New("signed manifest: schema is not " + SignedManifestSchema + ", or its manifest is not " + ManifestSchema)
	ErrManifestHash      = errors.New("signed manifest: manifest_hash is not the SHA-256 of the manifest's JCS")
	ErrManifestUnsigned  = errors.New("signed manifest: no signature")
	ErrManifestSigner    = errors.New("signed manifest: signer_key is not the expected key")
	ErrManifestSignature = errors.New("signed manifest: signature does not verify")
)

// Verify checks, in order, the document's schema and its manifest's, the
// manifest hash, that publicKey (wire form) signed it, and the signature.
func (s *SignedManifest) Verify(publicKey string) error {
	if s.Schema != SignedManifestSchema {
		return ErrManifestSchema
	}
	var m ToolManifest
	// A manifest may list no tools (an upstream withdrew them all), so
	// only its schema and fields are checked, not Validate's "no tools".
	if err := DecodeStrict(s.Manifest, &m); err != nil || m.Schema != ManifestSchema || !ValidName(m.ServerID) {
		return ErrManifestSchema
	}
	h, err := ManifestHash(s.Manifest)
	if err != nil || h != s.ManifestHash {
		return ErrManifestHash
	}
	if s.Signature == "" {
		return ErrManifestUnsigned
	}
	if _, err := ParsePublicKey(publicKey); err != nil {
		return fmt.Errorf("signed manifest: expected key: %w", err)
	}
	if s.SignerKey != publicKey {
		return ErrManifestSigner
	}
	if err := VerifyCanonical(s.SignerKey, s.Signature, s.body()); err != nil {
		return fmt.Errorf("%w: %v", ErrManifestSignature, err)
	}
	return nil
}
