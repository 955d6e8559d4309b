package dpoptest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/chio-ledger/chio/schemas/dpop"
)

// Signer is a dpop.Signer for token held by key, its subject.
func Signer(t testing.TB, key ed25519.PrivateKey, token string, opts ...dpop.SignerOption) *dpop.Signer {
	t.Helper()
	s, err := dpop.NewSigner(key, token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Proof is a fresh RFC 9449 proof by s for a request method url.
func Proof(t testing.TB, s *dpop.Signer, method, url string) string {
	t.Helper()
	p, err := s.Proof(method, url)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ForgedProof is a well-formed RFC 9449 proof for token, a request method
// url, signed by key whatever the token's subject (a dpop.Signer refuses a
// key that is not the subject's): what a helper makes for the parent token
// it rebuilt. Its jti is fresh and its iat now.
func ForgedProof(t testing.TB, key ed25519.PrivateKey, token, method, url string) string {
	t.Helper()
	return SignClaims(t, key, dpop.Claims{HTM: method, HTU: url, ATH: dpop.TokenHash(token)})
}

// SignClaims is a well-formed RFC 9449 proof of claims signed by key (typ
// dpop+jwt, alg EdDSA, key's public jwk), for proofs whose claims do not
// fit the request. An empty jti is given a fresh one, a zero iat now.
func SignClaims(t testing.TB, key ed25519.PrivateKey, claims dpop.Claims) string {
	t.Helper()
	return signJOSE(t, jose.SigningKey{Algorithm: jose.EdDSA, Key: key}, claims)
}

// ES256Proof is ForgedProof signed ES256 by a fresh P-256 key (its jwk
// embedded): well-formed but for its algorithm, which dpop refuses.
func ES256Proof(t testing.TB, token, method, url string) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signJOSE(t, jose.SigningKey{Algorithm: jose.ES256, Key: k}, dpop.Claims{HTM: method, HTU: url, ATH: dpop.TokenHash(token)})
}

func signJOSE(t testing.TB, key jose.SigningKey, claims dpop.Claims) string {
	t.Helper()
	if claims.JTI == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		claims.JTI = base64.RawURLEncoding.EncodeToString(b[:])
	}
	if claims.IAT == 0 {
		claims.IAT = time.Now().Unix()
	}
	s, err := jose.NewSigner(key, (&jose.SignerOptions{EmbedJWK: true}).WithType(dpop.ProofType))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// JWS is a compact JWS made by hand: header and claims as JSON, signed
// with sign over the signing input. It makes the proofs a JOSE library
// will not (a private jwk, alg none, a typ or signature of choice).
// An ed25519.PrivateKey's sign is
//
//	func(b []byte) []byte { return ed25519.Sign(key, b) }
func JWS(t testing.TB, header map[string]any, claims any, sign func([]byte) []byte) string {
	t.Helper()
	hb, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	in := b64(hb) + "." + b64(cb)
	return in + "." + b64(sign([]byte(in)))
}

// WrongForm is one presentation wrong in form: the request names its
// token but no usable proof, so the kernel refuses it with Check.
type WrongForm struct {
	Name   string
	Header func() http.Header
	Check  dpop.Check
}

// WrongForms are the presentations every HTTP surface must refuse, with a
// deny receipt, for the delegating token agent (and the leaf token
// helper); proof makes a fresh, valid proof for the request.
func WrongForms(agent, helper string, proof func() string) []WrongForm {
	return []WrongForm{
		{"DPoP scheme without a proof", func() http.Header { return http.Header{"Authorization": {"DPoP " + agent}} }, dpop.CheckMissing},
		{"two proofs", func() http.Header {
			return http.Header{"Authorization": {"DPoP " + agent}, "Dpop": {proof(), proof()}}
		}, dpop.CheckMalformed},
		{"a proof beside Bearer", func() http.Header {
			return http.Header{"Authorization": {"Bearer " + agent}, "Dpop": {proof()}}
		}, dpop.CheckMalformed},
		{"a proof beside X-Chio-Capability", func() http.Header {
			return http.Header{"X-Chio-Capability": {agent}, "Dpop": {proof()}}
		}, dpop.CheckMalformed},
		{"a leaf token's proof beside Bearer", func() http.Header {
			return http.Header{"Authorization": {"Bearer " + helper}, "Dpop": {proof()}}
		}, dpop.CheckMalformed},
	}
}
