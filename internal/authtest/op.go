package authtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/chio-ledger/chio/internal/devop"
)

// OP is the development provider (package devop: zitadel's example, one
// client with JWT access tokens, client credentials and the code grant)
// over TLS (httptest's certificate). It counts the discovery and token
// requests it gets.
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

	provider    *devop.Provider
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
	o.RedirectURL = "http://127.0.0.1/callback"
	provider, err := devop.New(o.Issuer, clientID, clientSecret, o.RedirectURL, false)
	if err != nil {
		t.Fatalf("start OpenID provider: %v", err)
	}
	o.provider = provider
	var h http.Handler = provider
	handler.Store(&h)
	return o
}

// Discoveries is how many discovery documents the provider has served.
func (o *OP) Discoveries() int32 { return o.discoveries.Load() }

// Tokens is how many token requests the provider has had, granted or not.
func (o *OP) Tokens() int32 { return o.tokens.Load() }

// RequestedScopes is the scopes of each granted token request, in order.
func (o *OP) RequestedScopes() [][]string { return o.provider.RequestedScopes() }

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
		if err := o.provider.LogIn(id); err != nil {
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
const TestUserID = devop.TestUserID
