package auth_test

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
)

// testOP is zitadel's example OpenID provider over TLS, with one
// client-credentials client registered.
type testOP struct {
	srv         *httptest.Server
	issuer      string
	tokenURL    string
	store       *ccStorage
	discoveries atomic.Int32
	tokens      atomic.Int32
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

func startOP(t *testing.T) *testOP {
	t.Helper()
	o := &testOP{}
	// The issuer is the server's URL, known only once it listens, so the
	// provider is installed after start; no request arrives before that.
	var handler atomic.Pointer[http.Handler]
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			o.discoveries.Add(1)
		case "/oauth/token":
			o.tokens.Add(1)
		}
		(*handler.Load()).ServeHTTP(w, r)
	}))
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	o.issuer = o.srv.URL
	o.tokenURL = o.issuer + "/oauth/token"
	o.store = &ccStorage{
		Storage: storage.NewStorageWithClients(storage.NewUserStore(o.issuer), map[string]*storage.Client{}),
		client:  ccClient{storage.WebClient(clientID, clientSecret)},
		secret:  clientSecret,
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:      sha256.Sum256([]byte("chio auth test")),
		AuthMethodPost: true,
	}, o.store, op.StaticIssuer(o.issuer))
	if err != nil {
		t.Fatalf("start OpenID provider: %v", err)
	}
	var h http.Handler = provider
	handler.Store(&h)
	return o
}

// verify checks that raw is an access token this provider signed for the
// registered client, as a partner would.
func (o *testOP) verify(t *testing.T, roots *x509.CertPool, raw string) *oidc.IDToken {
	t.Helper()
	ctx := oidc.ClientContext(t.Context(), &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}})
	provider, err := oidc.NewProvider(ctx, o.issuer)
	if err != nil {
		t.Fatalf("partner discovery: %v", err)
	}
	tok, err := provider.Verifier(&oidc.Config{ClientID: clientID}).Verify(ctx, raw)
	if err != nil {
		t.Fatalf("partner verify access token: %v", err)
	}
	return tok
}
