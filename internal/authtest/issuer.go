package authtest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer is an identity provider of the test's own, for the tokens a real
// provider would not issue (expired, for another audience, DPoP-bound,
// signed wrong): an HTTP server on loopback serving a discovery document
// and a JWKS with one RSA key, counting the JWKS fetches, and signing
// whatever claims the test asks for.
type Issuer struct {
	// URL is the issuer (the server's URL).
	URL     string
	srv     *httptest.Server
	mu      sync.Mutex // guards the key the JWKS serves
	key     *rsa.PrivateKey
	kid     string
	fetches atomic.Int32
}

// StartIssuer starts an Issuer with key id "k1"; it stops when the test
// ends.
func StartIssuer(t testing.TB) *Issuer {
	t.Helper()
	is := &Issuer{kid: "k1", key: rsaKey(t)}
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]string{"issuer": is.URL, "jwks_uri": is.URL + "/jwks"})
		case "/jwks":
			is.fetches.Add(1)
			is.mu.Lock()
			set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &is.key.PublicKey, KeyID: is.kid, Algorithm: "RS256", Use: "sig"}}}
			is.mu.Unlock()
			_ = json.NewEncoder(w).Encode(set)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(is.srv.Close)
	is.URL = is.srv.URL
	return is
}

func rsaKey(t testing.TB) *rsa.PrivateKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Fetches is how many times the JWKS was fetched.
func (is *Issuer) Fetches() int32 { return is.fetches.Load() }

// Key is the signing key the JWKS serves now, and its key id.
func (is *Issuer) Key() (*rsa.PrivateKey, string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.key, is.kid
}

// Rotate makes the provider serve only a new key, under kid.
func (is *Issuer) Rotate(t testing.TB, kid string) {
	k := rsaKey(t)
	is.mu.Lock()
	is.key, is.kid = k, kid
	is.mu.Unlock()
}

// Sign signs claims as an RFC 9068 access token (typ at+jwt) with the
// provider's current key.
func (is *Issuer) Sign(t testing.TB, claims any) string {
	t.Helper()
	k, kid := is.Key()
	return SignJWT(t, jose.RS256, k, kid, claims)
}

// SignJWT signs claims with alg and key, kid in the header ("" for none).
func SignJWT(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("at+jwt")
	if kid != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
