// Package devop is a development OpenID provider: zitadel's example
// provider with one registered client whose access tokens are JWTs, for
// the tests and the tour (examples/oidc-provider). The client holds client
// credentials, and may also take the authorization-code grant with PKCE
// for the example's test user; a token got that way is for the resource
// the authorization request named (RFC 8707), as an authorization server
// that knows its resources issues it. It is no provider to trust with
// anything: its users, passwords and signing key are the example's.
package devop

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// TestUserID is the subject of the tokens the example's test user gets;
// its password is TestPassword.
const (
	TestUserID   = "id1"
	TestPassword = "verysecure"
)

// Provider is the provider's HTTP handler with its storage.
type Provider struct {
	handler http.Handler
	store   *store
}

// New is a provider at issuer (its URL; http only on loopback with
// insecure) with the client clientID, whose secret is clientSecret and
// whose redirect URI is redirectURL.
func New(issuer, clientID, clientSecret, redirectURL string, insecure bool) (*Provider, error) {
	users := storage.NewUserStore(issuer)
	s := &store{
		Storage:   storage.NewStorageWithClients(users, map[string]*storage.Client{}),
		users:     users,
		client:    client{storage.WebClient(clientID, clientSecret, redirectURL)},
		secret:    clientSecret,
		byState:   map[string]string{},
		resources: map[string]string{},
	}
	var opts []op.Option
	if insecure {
		opts = append(opts, op.WithAllowInsecure())
	}
	p, err := op.NewProvider(&op.Config{
		CryptoKey:      sha256.Sum256([]byte("chio development provider")),
		AuthMethodPost: true,
		CodeMethodS256: true,
	}, s, op.StaticIssuer(issuer), opts...)
	if err != nil {
		return nil, fmt.Errorf("development OpenID provider: %w", err)
	}
	return &Provider{handler: p, store: s}, nil
}

// ServeHTTP serves the provider.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/authorize" {
		// The example storage drops RFC 8707's resource; keep it by the
		// request's state, for the token's audience.
		if err := r.ParseForm(); err == nil && r.Form.Get("resource") != "" {
			p.store.resourceFor(r.Form.Get("state"), r.Form.Get("resource"))
		}
	}
	p.handler.ServeHTTP(w, r)
}

// RequestedScopes is the scopes of each granted client-credentials
// request, in order.
func (p *Provider) RequestedScopes() [][]string { return p.store.requestedScopes() }

// LogIn logs the test user in for the pending authorization request id,
// as the provider's login page would.
func (p *Provider) LogIn(id string) error {
	return p.store.CheckUsernamePassword(p.store.users.GetUserByID(TestUserID).Username, TestPassword, id)
}

// store registers the client on top of the example storage, whose
// built-in ones issue opaque tokens a partner could not verify; it records
// the scopes each client-credentials request asked for, and gives a code
// flow's token the audience of the resource its request named.
type store struct {
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

func (s *store) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if id == s.client.GetID() {
		return s.client, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

func (s *store) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	if id == s.client.GetID() {
		if secret != s.secret {
			return errors.New("wrong client secret")
		}
		return nil
	}
	return s.Storage.AuthorizeClientIDSecret(ctx, id, secret)
}

func (s *store) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	if id != s.client.GetID() || secret != s.secret {
		return nil, errors.New("wrong client id or secret")
	}
	return s.client, nil
}

func (s *store) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	s.mu.Lock()
	s.scopes = append(s.scopes, slices.Clone(scopes))
	s.mu.Unlock()
	return &zoidc.JWTTokenRequest{Subject: id, Audience: []string{id}, Scopes: scopes}, nil
}

func (s *store) requestedScopes() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.scopes)
}

// maxPending bounds the resources kept for authorization requests not
// yet completed.
const maxPending = 1024

func (s *store) resourceFor(state, resource string) {
	if state == "" {
		return // nothing to find the request by: its token keeps the client's audience
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byState) >= maxPending {
		clear(s.byState)
	}
	s.byState[state] = resource
}

func (s *store) DeleteAuthRequest(ctx context.Context, id string) error {
	s.mu.Lock()
	delete(s.resources, id)
	s.mu.Unlock()
	return s.Storage.DeleteAuthRequest(ctx, id)
}

func (s *store) CreateAuthRequest(ctx context.Context, req *zoidc.AuthRequest, userID string) (op.AuthRequest, error) {
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

func (s *store) AuthRequestByID(ctx context.Context, id string) (op.AuthRequest, error) {
	ar, err := s.Storage.AuthRequestByID(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forResource(ar), nil
}

func (s *store) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
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
func (s *store) forResource(ar op.AuthRequest) op.AuthRequest {
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

// client is the example web client, switched to the client-credentials
// and code grants and JWT access tokens so a partner can verify them
// offline.
type client struct{ *storage.Client }

func (client) GrantTypes() []zoidc.GrantType {
	return []zoidc.GrantType{zoidc.GrantTypeClientCredentials, zoidc.GrantTypeCode}
}

func (client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
