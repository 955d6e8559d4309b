package authtest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OP is zitadel's example OpenID provider over TLS (httptest's
// certificate), with one client registered, whose access tokens are JWTs a
// partner can verify offline. The client holds client credentials, and may
// also take the authorization-code grant with PKCE for the example's test
// user, redirecting to RedirectURL; a token got that way is for the
// resource the authorization request named (RFC 8707), as an authorization
// server that knows its resources issues it. The provider counts the
// discovery and token requests it gets, and records the scopes each
// client-credentials token request asked for.
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
	// RedirectURL is the client's registered redirect URI. Nothing listens
	// there: LogIn reads the code off the redirect.
	RedirectURL string

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
		case "/authorize":
			// The example storage drops RFC 8707's resource; keep it by
			// the request's state, for the token's audience.
			if err := r.ParseForm(); err == nil && r.Form.Get("resource") != "" {
				o.store.resourceFor(r.Form.Get("state"), r.Form.Get("resource"))
			}
		}
		(*handler.Load()).ServeHTTP(w, r)
	}))
	o.Server.StartTLS()
	t.Cleanup(o.Server.Close)
	o.Issuer = o.Server.URL
	o.TokenURL = o.Issuer + "/oauth/token"
	o.RedirectURL = "http://127.0.0.1/callback"
	users := storage.NewUserStore(o.Issuer)
	o.store = &ccStorage{
		Storage:   storage.NewStorageWithClients(users, map[string]*storage.Client{}),
		users:     users,
		client:    ccClient{storage.WebClient(clientID, clientSecret, o.RedirectURL)},
		secret:    clientSecret,
		byState:   map[string]string{},
		resources: map[string]string{},
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:      sha256.Sum256([]byte("chio authtest provider")),
		AuthMethodPost: true,
		CodeMethodS256: true,
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

// ccStorage registers the client on top of the example storage, whose
// built-in ones issue opaque tokens a partner could not verify; it records
// the scopes each client-credentials request asked for, and gives a code
// flow's token the audience of the resource its request named.
type ccStorage struct {
	*storage.Storage
	client op.Client
	secret string
	users  storage.UserStore
	mu     sync.Mutex
	scopes [][]string
	// byState is the resource each authorization request named, by its
	// state until the request is stored, then by its id in resources.
	byState, resources map[string]string
}

func (s *ccStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if id == s.client.GetID() {
		return s.client, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

func (s *ccStorage) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	if id == s.client.GetID() {
		if secret != s.secret {
			return errors.New("wrong client secret")
		}
		return nil
	}
	return s.Storage.AuthorizeClientIDSecret(ctx, id, secret)
}

func (s *ccStorage) resourceFor(state, resource string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byState[state] = resource
}

func (s *ccStorage) CreateAuthRequest(ctx context.Context, req *zoidc.AuthRequest, userID string) (op.AuthRequest, error) {
	ar, err := s.Storage.CreateAuthRequest(ctx, req, userID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if res, ok := s.byState[req.State]; ok {
		delete(s.byState, req.State)
		s.resources[ar.GetID()] = res
	}
	return s.forResource(ar), nil
}

func (s *ccStorage) AuthRequestByID(ctx context.Context, id string) (op.AuthRequest, error) {
	ar, err := s.Storage.AuthRequestByID(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forResource(ar), nil
}

func (s *ccStorage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	ar, err := s.Storage.AuthRequestByCode(ctx, code)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forResource(ar), nil
}

// forResource gives ar its resource's audience, if it named one; s.mu is
// held.
func (s *ccStorage) forResource(ar op.AuthRequest) op.AuthRequest {
	if res, ok := s.resources[ar.GetID()]; ok {
		return resourceRequest{AuthRequest: ar, aud: []string{res}}
	}
	return ar
}

// resourceRequest is an authorization request whose tokens are for its
// resource.
type resourceRequest struct {
	op.AuthRequest
	aud []string
}

func (r resourceRequest) GetAudience() []string { return r.aud }

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
// and code grants and JWT access tokens so the partner can verify them
// offline.
type ccClient struct{ *storage.Client }

func (ccClient) GrantTypes() []zoidc.GrantType {
	return []zoidc.GrantType{zoidc.GrantTypeClientCredentials, zoidc.GrantTypeCode}
}

func (ccClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

// CAFile writes the provider's certificate to a file in a temporary
// directory, for a command's --oidc-ca, and returns its path.
func (o *OP) CAFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "op-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: o.Server.Certificate().Raw}), 0o600); err != nil {
		t.Fatalf("write the provider's certificate: %v", err)
	}
	return path
}

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

// LogIn is an authorization-code fetcher for the MCP SDK's OAuth client:
// it plays the browser, opening the authorization URL, logging the
// example's test user in at the provider, and reading the code, state and
// issuer off the redirect to RedirectURL.
func (o *OP) LogIn(t testing.TB) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		browser := o.HTTPClient()
		browser.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		redirect := func(u string) (*url.URL, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return nil, err
			}
			resp, err := browser.Do(req)
			if err != nil {
				return nil, err
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
				return nil, fmt.Errorf("GET %s: %s %s", u, resp.Status, body)
			}
			return resp.Location()
		}
		login, err := redirect(args.URL)
		if err != nil {
			return nil, fmt.Errorf("authorize: %w", err)
		}
		id := login.Query().Get("authRequestID")
		user := o.store.userStoreUser()
		if err := o.store.CheckUsernamePassword(user, "verysecure", id); err != nil {
			return nil, fmt.Errorf("log in: %w", err)
		}
		back, err := redirect(o.Issuer + "/authorize/callback?id=" + url.QueryEscape(id))
		if err != nil {
			return nil, fmt.Errorf("authorize callback: %w", err)
		}
		q := back.Query()
		if e := q.Get("error"); e != "" {
			return nil, fmt.Errorf("authorization refused: %s: %s", e, q.Get("error_description"))
		}
		return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
	}
}

// TestUserID is the subject of the tokens LogIn's user gets.
const TestUserID = "id1"

func (s *ccStorage) userStoreUser() string {
	return s.users.GetUserByID(TestUserID).Username
}
