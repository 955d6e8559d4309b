// Package cardsig signs and verifies A2A agent cards (A2A 1.0 §8.4): each
// entry of the card's "signatures" array is a JWS (RFC 7515) in the JSON
// serialization with a detached payload, {"protected","signature"}, whose
// payload is the RFC 8785 (JCS) canonical form of the card without its
// "signatures" member.
//
// Invariants:
//   - Only Ed25519 ("alg":"EdDSA", RFC 8037) is produced or accepted; the
//     alg comes from the protected header, never from the unprotected one,
//     and a header with "crit" is refused (no extension is understood).
//   - The payload is recomputed by the verifier from the card it holds:
//     member order, whitespace and string escapes do not matter, any other
//     change does. A card with duplicate member names is refused outright
//     (JCS refuses it), so what is verified is what a parser reads.
//   - The signer emits the card it is given plus one "signatures" member,
//     last; the rest of the bytes are untouched. It refuses a card that
//     already has one, so a signature never covers another.
//   - The spec's "remove default values" step needs the proto's presence
//     rules, which this package does not guess: it signs and verifies the
//     members exactly as present. Cards encoded by edges/a2a/wire carry no
//     member the step would remove, so both readings agree on them.
//   - A key's kid is its RFC 7638 JWK thumbprint (SHA-256, base64url), so
//     every replica holding the same key names it the same way and signs
//     the same card with the same bytes (Ed25519 is deterministic).
//
// The crypto is crypto/ed25519 and base64url: a general JOSE library would
// add a dependency for the one algorithm and the one serialization used.
package cardsig

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/chio-ledger/chio/schemas"
)

// Alg is the only JWS algorithm used: Ed25519.
const Alg = "EdDSA"

// JWKSPath is where an edge serves its JWKS.
const JWKSPath = "/.well-known/jwks.json"

var b64 = base64.RawURLEncoding

// Signature is one entry of AgentCard.signatures.
type Signature struct {
	Protected string         `json:"protected"`
	Signature string         `json:"signature"`
	Header    map[string]any `json:"header,omitempty"`
}

// Header is the protected header this package writes and reads.
type Header struct {
	Alg  string   `json:"alg"`
	Typ  string   `json:"typ,omitempty"`
	KID  string   `json:"kid"`
	JKU  string   `json:"jku,omitempty"`
	Crit []string `json:"crit,omitempty"`
}

// KeyID is the RFC 7638 thumbprint of an Ed25519 public key.
func KeyID(pub ed25519.PublicKey) string {
	// The required members in lexicographic order, no whitespace.
	sum := sha256.Sum256([]byte(`{"crv":"Ed25519","kty":"OKP","x":"` + b64.EncodeToString(pub) + `"}`))
	return b64.EncodeToString(sum[:])
}

// Signer signs cards with one Ed25519 key.
type Signer struct {
	key ed25519.PrivateKey
	kid string
}

// NewSigner returns a signer for key; its kid is KeyID of the public key.
func NewSigner(key ed25519.PrivateKey) (*Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("cardsig: not an Ed25519 private key")
	}
	return &Signer{key: key, kid: KeyID(key.Public().(ed25519.PublicKey))}, nil
}

// KID is the signer's key id.
func (s *Signer) KID() string { return s.kid }

// JWKS is the JSON Web Key Set publishing the signer's public key.
func (s *Signer) JWKS() []byte {
	b, _ := json.Marshal(JWKS{Keys: []JWK{PublicJWK(s.key.Public().(ed25519.PublicKey))}})
	return b
}

// Sign returns card (a JSON object without "signatures") with a
// "signatures" member appended holding one signature, whose protected
// header names jku (the URL of the JWKS; empty omits it).
func (s *Signer) Sign(card []byte, jku string) ([]byte, error) {
	card = bytes.TrimSpace(card)
	payload, err := Payload(card)
	if err != nil {
		return nil, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(card, &members); err != nil {
		return nil, fmt.Errorf("cardsig: the card is not a JSON object: %w", err)
	}
	if _, ok := members["signatures"]; ok {
		return nil, errors.New("cardsig: the card is already signed")
	}
	hdr, err := json.Marshal(Header{Alg: Alg, Typ: "JOSE", KID: s.kid, JKU: jku})
	if err != nil {
		return nil, err
	}
	protected := b64.EncodeToString(hdr)
	sig := ed25519.Sign(s.key, signingInput(protected, payload))
	entry, err := json.Marshal([]Signature{{Protected: protected, Signature: b64.EncodeToString(sig)}})
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(card)+len(entry)+16)
	out = append(out, card[:len(card)-1]...) // drop the closing brace
	if len(members) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"signatures":`...)
	out = append(out, entry...)
	return append(out, '}'), nil
}

// Payload is the signed payload of a card: its JCS form without the
// "signatures" member. It fails on anything but a JSON object and on
// duplicate member names.
func Payload(card []byte) ([]byte, error) {
	canon, err := schemas.CanonicalizeJSON(card)
	if err != nil {
		return nil, fmt.Errorf("cardsig: %w", err)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(canon, &members); err != nil || members == nil {
		return nil, errors.New("cardsig: the card is not a JSON object")
	}
	if _, ok := members["signatures"]; !ok {
		return canon, nil
	}
	delete(members, "signatures")
	raw, err := json.Marshal(members)
	if err != nil {
		return nil, err
	}
	return schemas.CanonicalizeJSON(raw)
}

func signingInput(protected string, payload []byte) []byte {
	return []byte(protected + "." + b64.EncodeToString(payload))
}

// JWK is a public Ed25519 JSON Web Key (RFC 8037).
type JWK struct {
	Kty string `json:"kty"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	KID string `json:"kid,omitempty"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
}

// JWKS is a JSON Web Key Set.
type JWKS struct {
	Keys []JWK `json:"keys"`
}

// PublicJWK is pub as a signing JWK, kid its thumbprint.
func PublicJWK(pub ed25519.PublicKey) JWK {
	return JWK{Kty: "OKP", Crv: "Ed25519", X: b64.EncodeToString(pub), KID: KeyID(pub), Use: "sig", Alg: Alg}
}

// Key is a verification key.
type Key struct {
	KID string
	Pub ed25519.PublicKey
}

// ParseJWKS reads the Ed25519 signing keys of a JWKS. Keys of other types
// or uses are skipped; a key without kid is named by its thumbprint. It
// fails when the set is malformed or holds no usable key.
func ParseJWKS(raw []byte) ([]Key, error) {
	var set JWKS
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("cardsig: JWKS: %w", err)
	}
	var out []Key
	for i, k := range set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || (k.Use != "" && k.Use != "sig") || (k.Alg != "" && k.Alg != Alg) {
			continue
		}
		x, err := b64.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("cardsig: JWKS key %d: x is not an Ed25519 public key", i)
		}
		pub := ed25519.PublicKey(x)
		kid := k.KID
		if kid == "" {
			kid = KeyID(pub)
		}
		out = append(out, Key{KID: kid, Pub: pub})
	}
	if len(out) == 0 {
		return nil, errors.New("cardsig: the JWKS has no Ed25519 signing key")
	}
	return out, nil
}

// Verified is the signature that verified.
type Verified struct {
	Index  int // in the card's signatures
	Header Header
}

// ErrUnsigned is returned for a card without signatures.
var ErrUnsigned = errors.New("cardsig: the card has no signatures")

// Signatures returns the card's signatures and their protected headers,
// decoded; an undecodable header fails.
func Signatures(card []byte) ([]Signature, []Header, error) {
	var doc struct {
		Signatures []Signature `json:"signatures"`
	}
	if err := json.Unmarshal(card, &doc); err != nil {
		return nil, nil, fmt.Errorf("cardsig: the card is not a JSON object with a signatures array: %w", err)
	}
	if len(doc.Signatures) == 0 {
		return nil, nil, ErrUnsigned
	}
	hdrs := make([]Header, len(doc.Signatures))
	for i, s := range doc.Signatures {
		raw, err := b64.DecodeString(s.Protected)
		if err != nil {
			return nil, nil, fmt.Errorf("cardsig: signature %d: protected header is not base64url: %w", i, err)
		}
		if err := json.Unmarshal(raw, &hdrs[i]); err != nil {
			return nil, nil, fmt.Errorf("cardsig: signature %d: protected header: %w", i, err)
		}
	}
	return doc.Signatures, hdrs, nil
}

// Verify checks card's signatures against keys and returns the first that
// verifies. A signature counts only when its protected header says EdDSA,
// has no crit, and names (kid) one of keys. The error lists why each
// signature failed.
func Verify(card []byte, keys []Key) (Verified, error) {
	sigs, hdrs, err := Signatures(card)
	if err != nil {
		return Verified{}, err
	}
	payload, err := Payload(card)
	if err != nil {
		return Verified{}, err
	}
	var why []string
	for i, s := range sigs {
		h := hdrs[i]
		fail := func(format string, a ...any) {
			why = append(why, fmt.Sprintf("signature %d: ", i)+fmt.Sprintf(format, a...))
		}
		switch {
		case h.Alg != Alg:
			fail("alg %q is not %s", h.Alg, Alg)
			continue
		case len(h.Crit) > 0:
			fail("critical header parameters %q are not understood", h.Crit)
			continue
		case h.KID == "":
			fail("no kid in the protected header")
			continue
		}
		var pub ed25519.PublicKey
		for _, k := range keys {
			if k.KID == h.KID {
				pub = k.Pub
				break
			}
		}
		if pub == nil {
			fail("unknown kid %q", h.KID)
			continue
		}
		sig, err := b64.DecodeString(s.Signature)
		if err != nil || !ed25519.Verify(pub, signingInput(s.Protected, payload), sig) {
			fail("the signature by %q does not match the card", h.KID)
			continue
		}
		return Verified{Index: i, Header: h}, nil
	}
	return Verified{}, errors.New("cardsig: no signature verifies: " + strings.Join(why, "; "))
}
