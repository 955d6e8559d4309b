package schemas

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// An edge credential (chio.edge_credential.v1) is the operator's statement
// that an edge key may decide calls: the issuer key (the one capabilities
// are issued with) signs the edge id, the edge's Ed25519 public key and a
// validity window. An edge signs every message it writes to the event
// stream with its key and sends the credential with it; the ledger folds a
// message into receipts only if the signature verifies under a credential
// a trusted issuer signed, valid when the stream stored the message and
// not revoked by then (its id is revoked in CHIO_REVOCATIONS like a
// capability's). A NATS credential alone, used outside an edge, can then
// mint no receipt.

// EdgeCredentialSchema is the schema of an edge credential.
const EdgeCredentialSchema = "chio.edge_credential.v1"

// EdgeCredentialBody is what the issuer signs.
type EdgeCredentialBody struct {
	Schema    string `json:"schema"`
	ID        string `json:"id"`
	EdgeID    string `json:"edge_id"`
	PublicKey string `json:"public_key"`
	Issuer    string `json:"issuer"`
	IssuedAt  uint64 `json:"issued_at"`
	ExpiresAt uint64 `json:"expires_at"`
}

// EdgeCredential is a signed edge credential.
type EdgeCredential struct {
	EdgeCredentialBody
	Signature string `json:"signature"`
}

// IssueEdgeCredential signs body with the issuer key (its Issuer and
// Schema are set from it).
func IssueEdgeCredential(issuer ed25519.PrivateKey, body EdgeCredentialBody) (*EdgeCredential, error) {
	body.Schema, body.Issuer = EdgeCredentialSchema, EncodePublicKey(issuer.Public().(ed25519.PublicKey))
	if err := body.validate(); err != nil {
		return nil, err
	}
	sig, err := SignCanonical(issuer, body)
	if err != nil {
		return nil, fmt.Errorf("edge credential: %w", err)
	}
	return &EdgeCredential{EdgeCredentialBody: body, Signature: sig}, nil
}

func (b *EdgeCredentialBody) validate() error {
	switch {
	case b.Schema != EdgeCredentialSchema:
		return fmt.Errorf("edge credential: schema is not %s", EdgeCredentialSchema)
	case !ValidID(b.ID):
		return fmt.Errorf("edge credential: %q is not an id", b.ID)
	case !ValidName(b.EdgeID):
		return fmt.Errorf("edge credential: %q is not an edge id", b.EdgeID)
	case b.ExpiresAt <= b.IssuedAt:
		return errors.New("edge credential: expires_at must be after issued_at")
	}
	if _, err := ParsePublicKey(b.PublicKey); err != nil {
		return fmt.Errorf("edge credential: public_key: %w", err)
	}
	if _, err := ParsePublicKey(b.Issuer); err != nil {
		return fmt.Errorf("edge credential: issuer: %w", err)
	}
	return nil
}

// ParseEdgeCredential decodes a credential with the strict reader: one
// bounded document, each member once, names exact (no case variants), no
// unknown members. It does not verify the signature (Verify does).
func ParseEdgeCredential(raw []byte) (*EdgeCredential, error) {
	var c EdgeCredential
	if err := strictjson.UnmarshalExactKnown(raw, &c); err != nil {
		return nil, fmt.Errorf("edge credential: %w", err)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Errors of an edge's signature on a stream message, one per check; the
// ledger's quarantine names them.
var (
	ErrEdgeUnsigned   = errors.New("no edge signature")
	ErrEdgeCredential = errors.New("edge credential does not parse")
	ErrEdgeIssuer     = errors.New("edge credential not issued by a trusted issuer")
	ErrEdgeExpired    = errors.New("edge credential not valid when the message was stored")
	ErrEdgeRevoked    = errors.New("edge credential revoked")
	ErrEdgeSignature  = errors.New("edge signature does not verify")
	ErrEdgeClaim      = errors.New("decision names another edge than the one that signed it")
)

// Verify checks the issuer's signature and that trusted accepts the issuer.
func (c *EdgeCredential) Verify(trusted func(issuer string) bool) error {
	if !trusted(c.Issuer) {
		return ErrEdgeIssuer
	}
	if err := VerifyCanonical(c.Issuer, c.Signature, c.EdgeCredentialBody); err != nil {
		return ErrEdgeIssuer
	}
	return nil
}

// Headers of an edge-signed stream message.
const (
	// HeaderEdgeCredential carries the signer's credential: base64url
	// (no padding) of its canonical JSON.
	HeaderEdgeCredential = "Chio-Edge-Credential"
	// HeaderEdgeSignature carries the edge key's Ed25519 signature of
	// EdgeSigningInput, base64url (no padding).
	HeaderEdgeSignature = "Chio-Edge-Signature"
)

// EdgeSigningInput is what an edge signs of a message: a domain tag, the
// subject and the SHA-256 of the body, so a signature binds both and
// cannot be taken for any other Chio signature.
func EdgeSigningInput(subject string, data []byte) []byte {
	h := sha256.Sum256(data)
	return fmt.Appendf(nil, "chio.edge_event.v1\n%s\n%x", subject, h)
}

// EdgeSigner signs an edge's stream messages.
type EdgeSigner struct {
	cred   *EdgeCredential
	header string
	key    ed25519.PrivateKey
}

// NewEdgeSigner pairs a credential with its key, refusing a key that is
// not the credential's.
func NewEdgeSigner(cred *EdgeCredential, key ed25519.PrivateKey) (*EdgeSigner, error) {
	if cred.PublicKey != EncodePublicKey(key.Public().(ed25519.PublicKey)) {
		return nil, errors.New("edge key is not the one its credential names")
	}
	raw, err := Canonical(cred)
	if err != nil {
		return nil, fmt.Errorf("edge credential: %w", err)
	}
	return &EdgeSigner{cred: cred, header: base64.RawURLEncoding.EncodeToString(raw), key: key}, nil
}

// Credential is the signer's credential.
func (s *EdgeSigner) Credential() *EdgeCredential { return s.cred }

// Sign returns the two header values of a message on subject with data.
func (s *EdgeSigner) Sign(subject string, data []byte) (credential, signature string) {
	return s.header, base64.RawURLEncoding.EncodeToString(ed25519.Sign(s.key, EdgeSigningInput(subject, data)))
}

// ParseEdgeHeader decodes a credential header (not verified).
func ParseEdgeHeader(credential string) (*EdgeCredential, error) {
	raw, err := base64.RawURLEncoding.DecodeString(credential)
	if err != nil {
		return nil, ErrEdgeCredential
	}
	c, err := ParseEdgeCredential(raw)
	if err != nil {
		return nil, ErrEdgeCredential
	}
	return c, nil
}

// VerifyEdgeMessage checks a message's edge signature against an already
// verified credential, valid at storedAt (unix seconds).
func VerifyEdgeMessage(c *EdgeCredential, signature, subject string, data []byte, storedAt uint64) error {
	return verifyEdgeInput(c, signature, EdgeSigningInput(subject, data), storedAt)
}

func verifyEdgeInput(c *EdgeCredential, signature string, input []byte, storedAt uint64) error {
	if storedAt < c.IssuedAt || storedAt >= c.ExpiresAt {
		return ErrEdgeExpired
	}
	sig, err := base64.RawURLEncoding.DecodeString(signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return ErrEdgeSignature
	}
	pub, err := ParsePublicKey(c.PublicKey)
	if err != nil {
		return ErrEdgeCredential
	}
	if !ed25519.Verify(pub, input, sig) {
		return ErrEdgeSignature
	}
	return nil
}

// EdgeRef names, in a receipt's metadata ("edge"), the edge that decided
// the call: its id, the key that signed the decision, and that key's
// credential. Its fields are in JCS key order, so its JSON is already
// canonical.
type EdgeRef struct {
	CredentialID string `json:"credential_id"`
	EdgeID       string `json:"edge_id"`
	Key          string `json:"key"`
}
