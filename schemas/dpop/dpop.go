// Package dpop binds a capability token to its holder: proof of possession
// of the token's subject key, so that a token is honoured only for the key
// it was granted to and a rebuilt ancestor of a delegated token is worth
// nothing to whoever rebuilt it.
//
// Two proof forms exist, each signed by the subject key:
//
//   - RFC 9449 DPoP for HTTP (and gRPC metadata): a compact JWS with typ
//     "dpop+jwt", alg EdDSA and the subject key as its jwk header, whose
//     claims bind the request (htm, htu), the token (ath), a time (iat)
//     and a one-time id (jti). It travels as "Authorization: DPoP <token>"
//     with a "DPoP: <proof>" header.
//   - chio.dpop_proof.v1 (ToolProof) where the caller names the tool call
//     itself: the stdio profiles, ACP, MCP's _meta. It binds the capability
//     id, the tool and the SHA-256 of the canonical arguments.
//
// Checks here are stateless. That a proof is used once (its jti or nonce
// within its lifetime) needs state shared by every replica, which the
// caller supplies (internal/dpopreplay).
package dpop

import (
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chio-ledger/chio/schemas/strictjson"
	"github.com/go-jose/go-jose/v4"
)

// Binding methods: how a caller proved who it is, as receipts record it.
const (
	// MethodBearer: the token alone (possession of the token text).
	MethodBearer = "bearer"
	// MethodDPoP: an RFC 9449 proof by the token's subject key.
	MethodDPoP = "dpop"
	// MethodToolProof: a chio.dpop_proof.v1 by the token's subject key.
	MethodToolProof = "chio_dpop_v1"
)

const (
	// ProofType is the typ header of an RFC 9449 proof.
	ProofType = "dpop+jwt"
	// ToolProofSchema is the schema of a chio.dpop_proof.v1.
	ToolProofSchema = "chio.dpop_proof.v1"
	// DefaultLifetime is how long after its iat a proof is accepted.
	DefaultLifetime = 60 * time.Second
	// DefaultSkew is how far ahead of the verifier's clock an iat may be.
	DefaultSkew = 5 * time.Second
	// MaxProofBytes bounds a proof's text: a few hundred bytes in practice.
	MaxProofBytes = 4 << 10
	// maxIDBytes bounds a jti or nonce.
	maxIDBytes = 256
)

// Check names a failed check; every refusal says which one failed.
type Check string

// The checks a proof can fail.
const (
	CheckMissing   Check = "missing_proof"     // the token needs a proof and none came
	CheckMalformed Check = "malformed"         // not a proof of the right form
	CheckKey       Check = "wrong_key"         // signed by a key other than the token's subject
	CheckMethod    Check = "wrong_method"      // htm is not the request's method
	CheckURL       Check = "wrong_url"         // htu is not the request's URL
	CheckToken     Check = "wrong_token"       // ath is not the hash of the presented token
	CheckCall      Check = "wrong_call"        // a tool proof for another capability, tool or arguments
	CheckStale     Check = "stale"             // older than its lifetime
	CheckFuture    Check = "future"            // issued ahead of the clock by more than the skew
	CheckReplayed  Check = "replayed"          // its jti or nonce was used before
	CheckState     Check = "state_unavailable" // the replay state cannot be reached (fail closed)
)

// Error is a refused proof.
type Error struct {
	Check Check
	Msg   string
}

func (e *Error) Error() string { return "dpop " + string(e.Check) + ": " + e.Msg }

// CheckOf is the check named by an Error's text ("dpop <check>: ..."),
// as a deny reason carries it; "" for any other text.
func CheckOf(reason string) Check {
	rest, ok := strings.CutPrefix(reason, "dpop ")
	if !ok {
		return ""
	}
	c, _, ok := strings.Cut(rest, ":")
	if !ok {
		return ""
	}
	return Check(c)
}

func fail(c Check, format string, args ...any) *Error {
	return &Error{Check: c, Msg: fmt.Sprintf(format, args...)}
}

// Claims are an RFC 9449 proof's claims.
type Claims struct {
	JTI   string `json:"jti"`
	HTM   string `json:"htm"`
	HTU   string `json:"htu"`
	IAT   int64  `json:"iat"`
	ATH   string `json:"ath,omitempty"`
	Nonce string `json:"nonce,omitempty"`
}

// Proof is an RFC 9449 proof whose form and signature checked out.
type Proof struct {
	Claims
	// Key signed the proof (its jwk header).
	Key ed25519.PublicKey
	// Thumbprint is the key's RFC 7638 SHA-256 thumbprint, base64url.
	Thumbprint string
}

// Parse checks an RFC 9449 proof's form and its signature by its own jwk:
// compact JWS, typ dpop+jwt, alg EdDSA, a public Ed25519 jwk, and claims
// jti, htm, htu and iat present. Whether it fits a request is Verify's.
func Parse(s string) (*Proof, error) {
	if len(s) > MaxProofBytes {
		return nil, fail(CheckMalformed, "proof is %d bytes, over %d", len(s), MaxProofBytes)
	}
	if strings.Count(s, ".") != 2 {
		return nil, fail(CheckMalformed, "not a compact JWS")
	}
	jws, err := jose.ParseSignedCompact(s, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, fail(CheckMalformed, "%v", strings.TrimPrefix(err.Error(), "go-jose/go-jose: "))
	}
	if len(jws.Signatures) != 1 {
		return nil, fail(CheckMalformed, "want one signature")
	}
	h := jws.Signatures[0].Protected
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != ProofType {
		return nil, fail(CheckMalformed, "typ is %q, not %q", typ, ProofType)
	}
	if h.Algorithm != string(jose.EdDSA) {
		return nil, fail(CheckMalformed, "alg is %q, not EdDSA", h.Algorithm)
	}
	if h.JSONWebKey == nil {
		return nil, fail(CheckMalformed, "no jwk header")
	}
	pub, ok := h.JSONWebKey.Key.(ed25519.PublicKey)
	if !ok || !h.JSONWebKey.IsPublic() {
		return nil, fail(CheckMalformed, "jwk is not a public Ed25519 key")
	}
	payload, err := jws.Verify(pub)
	if err != nil {
		return nil, fail(CheckMalformed, "signature does not verify by its jwk")
	}
	var c Claims
	if err := strictJSON(payload, &c, claimNames, false); err != nil {
		return nil, fail(CheckMalformed, "claims: %v", err)
	}
	switch {
	case c.JTI == "" || len(c.JTI) > maxIDBytes:
		return nil, fail(CheckMalformed, "jti must be 1 to %d bytes", maxIDBytes)
	case c.HTM == "":
		return nil, fail(CheckMalformed, "htm is missing")
	case c.HTU == "":
		return nil, fail(CheckMalformed, "htu is missing")
	case c.IAT <= 0:
		return nil, fail(CheckMalformed, "iat is missing")
	case len(c.Nonce) > maxIDBytes:
		return nil, fail(CheckMalformed, "nonce over %d bytes", maxIDBytes)
	}
	return &Proof{Claims: c, Key: pub, Thumbprint: Thumbprint(pub)}, nil
}

// strictJSON decodes one JSON object into v with the strict reader
// (no repeated or case-variant member anywhere: which copy counts would
// depend on the reader). encoding/json also matches a member that differs
// from one of v's only in case ("JTI" instead of "jti"), so that is
// refused too. Unknown members are allowed unless closed (RFC 9449 lets a
// proof carry more claims; a tool proof is closed, its signature covering
// only its own).
func strictJSON(b []byte, v any, known []string, closed bool) error {
	var m map[string]json.RawMessage
	if err := strictjson.Unmarshal(b, &m); err != nil {
		return err
	}
	for k := range m {
		exact := false
		for _, name := range known {
			if k == name {
				exact = true
				break
			}
			if strings.EqualFold(k, name) {
				return fmt.Errorf("member %q is %q in another case", clip(k), name)
			}
		}
		if !exact && closed {
			return fmt.Errorf("unknown member %q", clip(k))
		}
	}
	return json.Unmarshal(b, v)
}

// claimNames are the claims Claims reads.
var claimNames = []string{"jti", "htm", "htu", "iat", "ath", "nonce"}

// Expect is what a proof must match.
type Expect struct {
	// Subject is the token's subject key (schemas.EncodePublicKey form).
	Subject string
	// Thumbprint, for a token bound by its cnf.jkt (an access token)
	// rather than by a subject key, is the RFC 7638 thumbprint the
	// proof's key must have; Subject is then empty.
	Thumbprint string
	// Token is the token text as presented: ath is its SHA-256.
	Token string
	// TokenRequest, set for a proof sent to a token endpoint (RFC 9449
	// section 5), which has no access token yet: the proof must then have
	// no ath, and Token is not read.
	TokenRequest bool
	// Method and URL are the request as this server received it.
	Method, URL string
	// Now, Lifetime and Skew decide freshness (defaults: time.Now,
	// DefaultLifetime, DefaultSkew).
	Now      time.Time
	Lifetime time.Duration
	Skew     time.Duration
}

func (e *Expect) window() (now time.Time, life, skew time.Duration) {
	now, life, skew = e.Now, e.Lifetime, e.Skew
	if now.IsZero() {
		now = time.Now()
	}
	if life <= 0 {
		life = DefaultLifetime
	}
	if skew <= 0 {
		skew = DefaultSkew
	}
	return now, life, skew
}

// Verify checks that the proof fits the request: key, method, URL, token
// and time, in that order. The jti's single use is the caller's to check.
func (p *Proof) Verify(e Expect) error {
	if e.Thumbprint != "" {
		if e.Subject != "" || p.Thumbprint != e.Thumbprint {
			return fail(CheckKey, "signed by the key of thumbprint %s, not the one the token is bound to (%s)", clip(p.Thumbprint), clip(e.Thumbprint))
		}
	} else if err := checkKey(p.Key, e.Subject); err != nil {
		return err
	}
	if p.HTM != e.Method {
		return fail(CheckMethod, "proof is for method %s, the request is %s", clip(p.HTM), e.Method)
	}
	if !SameURL(p.HTU, e.URL) {
		return fail(CheckURL, "proof is for %s, the request is %s", clip(p.HTU), e.URL)
	}
	switch {
	case e.TokenRequest:
		if p.ATH != "" {
			return fail(CheckToken, "a proof for a token request has no ath: there is no access token yet")
		}
	case p.ATH == "":
		return fail(CheckToken, "ath (the token's hash) is missing")
	case p.ATH != TokenHash(e.Token):
		return fail(CheckToken, "ath is not the hash of the presented token")
	}
	now, life, skew := e.window()
	return fresh(time.Unix(p.IAT, 0), now, life, skew)
}

func fresh(iat, now time.Time, life, skew time.Duration) error {
	if iat.After(now.Add(skew)) {
		return fail(CheckFuture, "issued at %d, ahead of this server's clock (%d) by more than %s", iat.Unix(), now.Unix(), skew)
	}
	if iat.Add(life).Before(now.Add(-skew)) {
		return fail(CheckStale, "issued at %d, older than its %s lifetime (now %d)", iat.Unix(), life, now.Unix())
	}
	return nil
}

func checkKey(key ed25519.PublicKey, subject string) error {
	if subject == "" || fmt.Sprintf("%x", []byte(key)) != subject {
		return fail(CheckKey, "signed by key %s, not by the token's subject %s", clip(fmt.Sprintf("%x", []byte(key))), clip(subject))
	}
	return nil
}

// ReplayKey is the one-time key of a proof for the replay state: its
// signer's thumbprint and its jti, hashed to a fixed, safe form.
func (p *Proof) ReplayKey() string { return replayKey(p.Thumbprint, p.JTI) }

func replayKey(thumbprint, id string) string {
	sum := sha256.Sum256([]byte(thumbprint + "\x00" + id))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// TokenHash is ath: base64url(SHA-256(token)).
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Thumbprint is the RFC 7638 SHA-256 thumbprint of an Ed25519 key (its
// OKP JWK), base64url: the "jkt" of RFC 9449.
func Thumbprint(pub ed25519.PublicKey) string {
	jwk := jose.JSONWebKey{Key: pub}
	sum, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		// Only an invalid key type fails, and pub is an Ed25519 key.
		panic("dpop: thumbprint of an ed25519 key: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(sum)
}

// SameURL compares two htu values as RFC 9449 §4.3 asks: without query
// and fragment, scheme and host case-insensitively, default ports
// dropped.
func SameURL(a, b string) bool {
	na, ok1 := normalURL(a)
	nb, ok2 := normalURL(b)
	return ok1 && ok2 && na == nb
}

func normalURL(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil {
		return "", false
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if (scheme == "https" && strings.HasSuffix(host, ":443")) || (scheme == "http" && strings.HasSuffix(host, ":80")) {
		host = host[:strings.LastIndexByte(host, ':')]
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return scheme + "://" + host + path, true
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
