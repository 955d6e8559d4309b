package auth

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
)

// Credentials are what the operator configured for one partner. Secrets come
// from files or the environment (the CLI reads them); this package never logs
// them nor puts them in errors.
type Credentials struct {
	// Bearer is sent for HTTP bearer schemes, and for OAuth2 and OpenID
	// Connect schemes when no client credentials apply.
	Bearer string
	// BearerKey, when set, is the subject key of the Bearer capability:
	// each request then proves possession of it (DPoP), which a Chio
	// partner requires of a capability that can delegate.
	BearerKey ed25519.PrivateKey
	// Basic is sent as HTTP Basic, never as a bearer token.
	Basic *Basic
	// APIKeys holds API keys by the card's scheme name; the key "*" applies
	// to any apiKey scheme without a key of its own.
	APIKeys map[string]string
	// OAuth2 is used for the client-credentials grant at the card's declared
	// token URL, or at the token endpoint discovered from an openIdConnectUrl.
	OAuth2 *ClientCredentials
	// TLS carries the roots trusted for the partner and its token endpoints,
	// and the client identity presented for mTLS schemes.
	TLS *TLS
	// Headers, Query and Cookies are adapter-level extras sent on every
	// request, whatever the card requires.
	Headers http.Header
	Query   url.Values
	Cookies []*http.Cookie
}

// Basic is an HTTP Basic identity.
type Basic struct{ User, Password string }

// ClientCredentials configures the OAuth2 client-credentials grant.
type ClientCredentials struct {
	ClientID, ClientSecret string
	// Scopes are requested in addition to those the requirement names.
	Scopes []string
}

// TLS configures trust and client identity.
type TLS struct {
	// RootCAs verifies the partner and token endpoints; nil means the system pool.
	RootCAs *x509.CertPool
	// ClientCert is presented only when the chosen requirement set has an mTLS scheme.
	ClientCert *tls.Certificate
}

// rootCAs is nil-safe so callers need not check for an absent TLS block.
func (t *TLS) rootCAs() *x509.CertPool {
	if t == nil {
		return nil
	}
	return t.RootCAs
}
