package authtest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OP is zitadel's example OpenID provider over TLS (httptest's
// certificate), with one client-credentials client registered, whose access
// tokens are JWTs a partner can verify offline. It counts the discovery and
// token requests it gets, and records the scopes each token request asked
// for.
type OP struct {
	// Server serves the provider; its Certificate is the one to trust.
	Server *httptest.Server
	// Issuer is the provider's issuer URL, the server's; its discovery
	// document is at Issuer + "/.well-known/openid-configuration".
	Issuer string
	// TokenURL is the token endpoint.
	TokenURL string
	// ClientID and ClientSecret are the registered client's.
	ClientID, ClientSecret string

	store       *ccStorage
	discoveries atomic.Int32
	tokens      atomic.Int32
}

// StartOP starts the provider with the client clientID, whose secret is
// clientSecret; it stops when the test ends.
func StartOP(t testing.TB, clientID, clientSecret string) *OP {
	t.Helper()
	o := &OP{ClientID: clientID, ClientSecret: clientSecret}
	// The issuer is the server's URL, known only once it listens, so the
	// provider is installed after start; no request arrives before that.
	var handler atomic.Pointer[http.Handler]
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			o.discoveries.Add(1)
		case "/oauth/token":
			o.tokens.Add(1)
		}
		(*handler.Load()).ServeHTTP(w, r)
	}))
	o.Server.StartTLS()
	t.Cleanup(o.Server.Close)
	o.Issuer = o.Server.URL
	o.TokenURL = o.Issuer + "/oauth/token"
	o.store = &ccStorage{
		Storage: storage.NewStorageWithClients(storage.NewUserStore(o.Issuer), map[string]*storage.Client{}),
		client:  ccClient{storage.WebClient(clientID, clientSecret)},
		secret:  clientSecret,
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:      sha256.Sum256([]byte("chio authtest provider")),
		AuthMethodPost: true,
	}, o.store, op.StaticIssuer(o.Issuer))
	if err != nil {
		t.Fatalf("start OpenID provider: %v", err)
	}
	var h http.Handler = provider
	handler.Store(&h)
	return o
}

// Discoveries is how many discovery documents the provider has served.
func (o *OP) Discoveries() int32 { return o.discoveries.Load() }

// Tokens is how many token requests the provider has had, granted or not.
func (o *OP) Tokens() int32 { return o.tokens.Load() }

// RequestedScopes is the scopes of each granted token request, in order.
func (o *OP) RequestedScopes() [][]string { return o.store.requestedScopes() }

// Verifier is how a partner checks the access tokens it receives: the
// provider's signature, issuer, expiry and audience (the client). It
// discovers the provider now.
func (o *OP) Verifier(t testing.TB) *oidc.IDTokenVerifier {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(o.Server.Certificate())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	provider, err := oidc.NewProvider(oidc.ClientContext(t.Context(), hc), o.Issuer)
	if err != nil {
		t.Fatalf("partner: discover the OpenID provider: %v", err)
	}
	return provider.Verifier(&oidc.Config{ClientID: o.ClientID})
}

// Verify checks, as a partner would, that raw is an access token this
// provider signed for the registered client, and fails the test if not.
func (o *OP) Verify(t testing.TB, raw string) *oidc.IDToken {
	t.Helper()
	tok, err := o.Verifier(t).Verify(t.Context(), raw)
	if err != nil {
		t.Fatalf("partner: verify access token: %v", err)
	}
	return tok
}

// ccStorage registers a client-credentials client on top of the example
// storage, whose only built-in one issues opaque tokens a partner could not
// verify; it also records the scopes each token request asked for.
type ccStorage struct {
	*storage.Storage
	client op.Client
	secret string
	mu     sync.Mutex
	scopes [][]string
}

func (s *ccStorage) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	if id != s.client.GetID() || secret != s.secret {
		return nil, errors.New("wrong client id or secret")
	}
	return s.client, nil
}

func (s *ccStorage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	s.mu.Lock()
	s.scopes = append(s.scopes, slices.Clone(scopes))
	s.mu.Unlock()
	return &zoidc.JWTTokenRequest{Subject: id, Audience: []string{id}, Scopes: scopes}, nil
}

func (s *ccStorage) requestedScopes() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.scopes)
}

// ccClient is the example web client, switched to the client-credentials
// grant and JWT access tokens so the partner can verify them offline.
type ccClient struct{ *storage.Client }

func (ccClient) GrantTypes() []zoidc.GrantType {
	return []zoidc.GrantType{zoidc.GrantTypeClientCredentials}
}

func (ccClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

// HTTPClient is a client that trusts the provider's certificate.
func (o *OP) HTTPClient() *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(o.Server.Certificate())
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// AccessToken gets a JWT access token for the registered client, as an
// agent holding client credentials does, with the scopes given.
func (o *OP) AccessToken(t testing.TB, scopes ...string) string {
	t.Helper()
	cc := clientcredentials.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, TokenURL: o.TokenURL, Scopes: scopes,
		AuthStyle: oauth2.AuthStyleInParams}
	tok, err := cc.Token(context.WithValue(t.Context(), oauth2.HTTPClient, o.HTTPClient()))
	if err != nil {
		t.Fatalf("client credentials token: %v", err)
	}
	return tok.AccessToken
}
