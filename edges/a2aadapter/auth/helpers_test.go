package auth_test

import (
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
)

// Secrets used across the tests; errors must never contain any of them.
const (
	bearerToken  = "bearer-secret-0001"
	basicUser    = "partner-user"
	basicPass    = "basic-secret-0002"
	apiKeyValue  = "apikey-secret-0003"
	clientID     = "chio-adapter"
	clientSecret = "client-secret-0004"
)

func secrets() []string { return []string{bearerToken, basicPass, apiKeyValue, clientSecret} }

// seen is what one request carried when it reached a partner.
type seen struct {
	path    string
	header  http.Header
	query   url.Values
	cookies []*http.Cookie
	// peerCN is the verified client certificate's common name, if any.
	peerCN string
}

func (s seen) cookie(name string) string {
	for _, c := range s.cookies {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// partner records every request and answers 200, or redirects when a
// redirect target is set for the path.
type partner struct {
	*httptest.Server
	mu        sync.Mutex
	got       []seen
	redirects map[string]string
}

func (p *partner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := seen{path: r.URL.Path, header: r.Header.Clone(), query: r.URL.Query(), cookies: r.Cookies()}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		s.peerCN = r.TLS.VerifiedChains[0][0].Subject.CommonName
	}
	p.mu.Lock()
	p.got = append(p.got, s)
	p.mu.Unlock()
	if to, ok := p.redirects[r.URL.Path]; ok {
		http.Redirect(w, r, to, http.StatusFound)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (p *partner) requests() []seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seen(nil), p.got...)
}

// newPartner starts a partner; start is httptest's Start or StartTLS, after
// optional TLS configuration by the caller.
func newPartner(t *testing.T, useTLS bool, configure func(*httptest.Server)) *partner {
	t.Helper()
	p := &partner{redirects: map[string]string{}}
	p.Server = httptest.NewUnstartedServer(p)
	// Handshake failures are expected in the mTLS tests; keep them quiet.
	p.Config.ErrorLog = log.New(io.Discard, "", 0)
	if configure != nil {
		configure(p.Server)
	}
	if useTLS {
		p.StartTLS()
	} else {
		p.Start()
	}
	t.Cleanup(p.Close)
	return p
}

// httptestRoots trusts the certificate every httptest TLS server presents.
func httptestRoots(t *testing.T) *x509.CertPool {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}

func card(schemes a2a.NamedSecuritySchemes, reqs ...a2a.SecurityRequirements) *a2a.AgentCard {
	return &a2a.AgentCard{
		Name:                 "partner",
		Description:          "test partner agent",
		Version:              "1.0.0",
		SecuritySchemes:      schemes,
		SecurityRequirements: reqs,
	}
}

// get sends one request through the client and fails the test unless the
// partner answered 200.
func get(t *testing.T, c *http.Client, target string) {
	t.Helper()
	resp, err := c.Get(target)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", target, resp.StatusCode)
	}
}

// everything is a full set of credentials, so that a test shows which of
// them a card actually receives.
func everything(roots *x509.CertPool) auth.Credentials {
	return auth.Credentials{
		Bearer:  bearerToken,
		Basic:   &auth.Basic{User: basicUser, Password: basicPass},
		APIKeys: map[string]string{"*": apiKeyValue},
		OAuth2:  &auth.ClientCredentials{ClientID: clientID, ClientSecret: clientSecret},
		TLS:     &auth.TLS{RootCAs: roots},
	}
}

// noSecretIn fails when any configured secret appears in s.
func noSecretIn(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range secrets() {
		if strings.Contains(s, secret) {
			t.Errorf("%s leaks a secret: %s", what, s)
		}
	}
}

// carriesNoCredential fails when a request carries any configured secret.
func carriesNoCredential(t *testing.T, s seen) {
	t.Helper()
	if v := s.header.Get("Authorization"); v != "" {
		t.Errorf("Authorization sent: %q", v)
	}
	noSecretIn(t, "request headers", strings.Join(flatten(s.header), " "))
	noSecretIn(t, "request query", s.query.Encode())
	for _, c := range s.cookies {
		noSecretIn(t, "request cookie", c.Value)
	}
}

func flatten(h http.Header) []string {
	var out []string
	for name, values := range h {
		out = append(out, name+"="+strings.Join(values, ","))
	}
	return out
}
