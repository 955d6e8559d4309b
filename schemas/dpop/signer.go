package dpop

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/chio-ledger/chio/schemas"
)

// Signer makes proofs for one token with its subject's private key.
// It is safe for concurrent use.
type Signer struct {
	key    ed25519.PrivateKey
	token  string
	subj   string
	capID  string
	signer jose.Signer
	now    func() time.Time
}

// SignerOption configures a Signer.
type SignerOption func(*Signer)

// WithClock sets the clock proofs are stamped with (tests).
func WithClock(now func() time.Time) SignerOption { return func(s *Signer) { s.now = now } }

// NewSigner returns a signer for token (header or JSON form) held by key.
// The key must be the token's subject: a proof by any other key is
// refused, so a mismatch is an error here rather than at every call.
func NewSigner(key ed25519.PrivateKey, token string, opts ...SignerOption) (*Signer, error) {
	raw, err := schemas.DecodeCapabilityText(token)
	if err != nil {
		return nil, fmt.Errorf("dpop signer: %w", err)
	}
	tok, err := schemas.ParseCapability(raw)
	if err != nil {
		return nil, fmt.Errorf("dpop signer: %w", err)
	}
	subj := schemas.EncodePublicKey(key.Public().(ed25519.PublicKey))
	if tok.Subject != subj {
		return nil, errors.New("dpop signer: the key is not the token's subject")
	}
	js, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key},
		(&jose.SignerOptions{EmbedJWK: true}).WithType(ProofType))
	if err != nil {
		return nil, fmt.Errorf("dpop signer: %w", err)
	}
	s := &Signer{key: key, token: token, subj: subj, capID: tok.ID, signer: js, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Token is the token text the signer presents.
func (s *Signer) Token() string { return s.token }

// Proof is an RFC 9449 proof for one request.
func (s *Signer) Proof(method, url string) (string, error) {
	c := Claims{JTI: randomID(), HTM: method, HTU: url, IAT: s.now().Unix(), ATH: TokenHash(s.token)}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	jws, err := s.signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("dpop proof: %w", err)
	}
	return jws.CompactSerialize()
}

// TokenRequestProof is a fresh proof by key for a POST to the token
// endpoint url (RFC 9449 section 5): it names no token (no ath), since the
// request asks for one to be bound to key.
func TokenRequestProof(key ed25519.PrivateKey, url string) (string, error) {
	js, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key},
		(&jose.SignerOptions{EmbedJWK: true}).WithType(ProofType))
	if err != nil {
		return "", fmt.Errorf("dpop proof: %w", err)
	}
	payload, err := json.Marshal(Claims{JTI: randomID(), HTM: http.MethodPost, HTU: url, IAT: time.Now().Unix()})
	if err != nil {
		return "", err
	}
	jws, err := js.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("dpop proof: %w", err)
	}
	return jws.CompactSerialize()
}

// Authorize sets Authorization: DPoP <token> and a fresh DPoP proof on h
// for a request method url.
func (s *Signer) Authorize(h http.Header, method, url string) error {
	p, err := s.Proof(method, url)
	if err != nil {
		return err
	}
	h.Set("Authorization", "DPoP "+s.token)
	h.Set(Header, p)
	return nil
}

// ToolProof is a chio.dpop_proof.v1 for one tool call.
func (s *Signer) ToolProof(server, tool string, args json.RawMessage) (*ToolProof, error) {
	h, err := ActionHash(args)
	if err != nil {
		return nil, fmt.Errorf("tool proof: arguments: %w", err)
	}
	p := &ToolProof{Schema: ToolProofSchema, CapabilityID: s.capID, ToolServer: server, ToolName: tool,
		ActionHash: h, Nonce: randomID(), IssuedAt: uint64(s.now().Unix()), AgentKey: s.subj}
	sig, err := schemas.SignCanonical(s.key, p.body())
	if err != nil {
		return nil, fmt.Errorf("tool proof: %w", err)
	}
	p.Signature = sig
	return p, nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Transport is an http.RoundTripper that sends every request with the
// signer's token and a fresh proof for that request.
type Transport struct {
	Signer *Signer
	// Base carries the request (http.DefaultTransport when nil).
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper. The request is cloned, never
// changed (as RoundTripper requires).
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	r2 := r.Clone(r.Context())
	r2.Header.Del("X-Chio-Capability")
	host := r.URL.Host
	if r.Host != "" {
		host = r.Host // what the server reads as the request's Host
	}
	if err := t.Signer.Authorize(r2.Header, r.Method, RequestURLOf(r.URL.Scheme, host, r.URL.EscapedPath())); err != nil {
		return nil, err
	}
	return base.RoundTrip(r2)
}

// RequestURLOf is the htu of a request: scheme, host and path, without
// query or fragment.
func RequestURLOf(scheme, host, path string) string {
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host + path
}
