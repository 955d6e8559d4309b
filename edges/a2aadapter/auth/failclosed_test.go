package auth_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
	"github.com/chio-ledger/chio/internal/authtest"
)

// TestAuthorizeFailsClosed: every card here demands something the
// credentials cannot meet, so Authorize must refuse, name the scheme and the
// reason, leak no secret, and send nothing to the partner or the provider.
func TestAuthorizeFailsClosed(t *testing.T) {
	roots := httptestRoots(t)
	o := authtest.StartOP(t, clientID, clientSecret)
	p := newPartner(t, true, nil)
	oidcScheme := a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: o.Issuer + "/.well-known/openid-configuration"}
	tests := []struct {
		name string
		card *a2a.AgentCard
		// creds adjusts the full set of credentials.
		creds      func(auth.Credentials) auth.Credentials
		wantScheme string
		wantReason string
	}{
		{
			name:       "unsupported http scheme type",
			card:       card(a2a.NamedSecuritySchemes{"digest": a2a.HTTPAuthSecurityScheme{Scheme: "Digest"}}, a2a.SecurityRequirements{"digest": {}}),
			wantScheme: "digest", wantReason: `http scheme "Digest" is not supported`,
		},
		{
			name:       "scheme not declared in securitySchemes",
			card:       card(a2a.NamedSecuritySchemes{}, a2a.SecurityRequirements{"ghost": {}}),
			wantScheme: "ghost", wantReason: "not declared",
		},
		{
			name: "api key not configured",
			card: card(a2a.NamedSecuritySchemes{"partnerKey": a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationHeader, Name: "X-Key"}}, a2a.SecurityRequirements{"partnerKey": {}}),
			creds: func(c auth.Credentials) auth.Credentials {
				c.APIKeys = map[string]string{"otherScheme": apiKeyValue}
				return c
			},
			wantScheme: "partnerKey", wantReason: "no API key configured",
		},
		{
			name:       "basic not configured",
			card:       card(a2a.NamedSecuritySchemes{"basic": a2a.HTTPAuthSecurityScheme{Scheme: "Basic"}}, a2a.SecurityRequirements{"basic": {}}),
			creds:      func(c auth.Credentials) auth.Credentials { c.Basic = nil; return c },
			wantScheme: "basic", wantReason: "no basic credentials",
		},
		{
			name: "oauth2 authorization code flow without a bearer token",
			card: card(a2a.NamedSecuritySchemes{"oauth": a2a.OAuth2SecurityScheme{Flows: a2a.AuthorizationCodeOAuthFlow{AuthorizationURL: o.Issuer + "/authorize", TokenURL: o.TokenURL}}},
				a2a.SecurityRequirements{"oauth": {}}),
			creds:      func(c auth.Credentials) auth.Credentials { c.Bearer = ""; return c },
			wantScheme: "oauth", wantReason: "flow authorizationCode is not supported",
		},
		{
			name: "http token URL to a non-loopback host",
			card: card(a2a.NamedSecuritySchemes{"oauth": a2a.OAuth2SecurityScheme{Flows: a2a.ClientCredentialsOAuthFlow{TokenURL: "http://idp.example.com/oauth/token"}}},
				a2a.SecurityRequirements{"oauth": {}}),
			// The bearer token must not be used as a fallback either.
			wantScheme: "oauth", wantReason: "must be https",
		},
		{
			name:       "http discovery URL to a non-loopback host",
			card:       card(a2a.NamedSecuritySchemes{"oidc": a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: "http://10.1.2.3/.well-known/openid-configuration"}}, a2a.SecurityRequirements{"oidc": {}}),
			wantScheme: "oidc", wantReason: "must be https",
		},
		{
			name:       "mtls without a client certificate",
			card:       card(a2a.NamedSecuritySchemes{"mtls": a2a.MutualTLSSecurityScheme{}}, a2a.SecurityRequirements{"mtls": {}}),
			wantScheme: "mtls", wantReason: "no client certificate",
		},
		{
			name: "two schemes competing for Authorization",
			card: card(a2a.NamedSecuritySchemes{"basic": a2a.HTTPAuthSecurityScheme{Scheme: "Basic"}, "jwt": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}},
				a2a.SecurityRequirements{"basic": {}, "jwt": {}}),
			wantScheme: "jwt", wantReason: "conflicts with scheme",
		},
		{
			// The OIDC half is satisfiable, but the set as a whole is not,
			// so discovery must not run either.
			name: "satisfiable scheme beside an unsupported one",
			card: card(a2a.NamedSecuritySchemes{"oidc": oidcScheme, "digest": a2a.HTTPAuthSecurityScheme{Scheme: "Digest"}},
				a2a.SecurityRequirements{"oidc": {}, "digest": {}}),
			wantScheme: "digest", wantReason: "not supported",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			creds := everything(roots)
			if tt.creds != nil {
				creds = tt.creds(creds)
			}
			client, names, err := creds.Authorize(t.Context(), tt.card)
			if !errors.Is(err, auth.ErrUnsatisfiable) {
				t.Fatalf("err = %v, want ErrUnsatisfiable", err)
			}
			if client != nil || names != nil {
				t.Errorf("got a client (%v) or names (%q) alongside the refusal", client != nil, names)
			}
			var ue *auth.UnsatisfiableError
			if !errors.As(err, &ue) {
				t.Fatalf("err is %T, want *UnsatisfiableError", err)
			}
			if !slices.ContainsFunc(ue.Failures, func(f auth.Failure) bool {
				return f.Scheme == tt.wantScheme && strings.Contains(f.Err.Error(), tt.wantReason)
			}) {
				t.Errorf("failures %v do not name %q with %q", ue.Failures, tt.wantScheme, tt.wantReason)
			}
			if !strings.Contains(err.Error(), `"`+tt.wantScheme+`"`) {
				t.Errorf("message %q does not name the scheme", err)
			}
			noSecretIn(t, "error", err.Error())
			if n := len(p.requests()); n != 0 {
				t.Errorf("partner saw %d requests, want 0", n)
			}
			if d, tk := o.Discoveries(), o.Tokens(); d+tk != 0 {
				t.Errorf("provider saw %d discoveries and %d token requests, want none", d, tk)
			}
		})
	}
}

// TestAuthorizeFallsBackToNextSet: requirement sets are alternatives, tried
// in order; a set that cannot be met gives way to the next.
func TestAuthorizeFallsBackToNextSet(t *testing.T) {
	roots := httptestRoots(t)
	headerKey := a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationHeader, Name: "X-Partner-Key"}
	tests := []struct {
		name      string
		card      *a2a.AgentCard
		creds     auth.Credentials
		wantNames []string
		check     func(t *testing.T, s seen)
	}{
		{
			name: "oauth2 unconfigured, api key next",
			card: card(a2a.NamedSecuritySchemes{"oauth": a2a.OAuth2SecurityScheme{Flows: a2a.ClientCredentialsOAuthFlow{TokenURL: "https://idp.example/token"}}, "partnerKey": headerKey},
				a2a.SecurityRequirements{"oauth": {"a2a.invoke"}}, a2a.SecurityRequirements{"partnerKey": {}}),
			creds:     auth.Credentials{APIKeys: map[string]string{"partnerKey": apiKeyValue}, TLS: &auth.TLS{RootCAs: roots}},
			wantNames: []string{"partnerKey"},
			check: func(t *testing.T, s seen) {
				if s.header.Get("X-Partner-Key") != apiKeyValue || s.header.Get("Authorization") != "" {
					t.Errorf("want only the API key, got %v", flatten(s.header))
				}
			},
		},
		{
			name: "first set half met, second fully",
			card: card(a2a.NamedSecuritySchemes{"jwt": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}, "mtls": a2a.MutualTLSSecurityScheme{}, "basic": a2a.HTTPAuthSecurityScheme{Scheme: "Basic"}},
				a2a.SecurityRequirements{"jwt": {}, "mtls": {}}, a2a.SecurityRequirements{"basic": {}}),
			creds:     everything(roots),
			wantNames: []string{"basic"},
			check: func(t *testing.T, s seen) {
				if r := (&http.Request{Header: s.header}); !hasBasic(r) {
					t.Errorf("want Basic only, got %v", flatten(s.header))
				}
			},
		},
		{
			name: "openIdConnect discovery fails, basic next",
			card: card(a2a.NamedSecuritySchemes{"oidc": a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: "https://127.0.0.1:1/.well-known/openid-configuration"}, "basic": a2a.HTTPAuthSecurityScheme{Scheme: "Basic"}},
				a2a.SecurityRequirements{"oidc": {}}, a2a.SecurityRequirements{"basic": {}}),
			creds:     everything(roots),
			wantNames: []string{"basic"},
			check: func(t *testing.T, s seen) {
				if r := (&http.Request{Header: s.header}); !hasBasic(r) {
					t.Errorf("want Basic only, got %v", flatten(s.header))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartner(t, true, nil)
			client, names, err := tt.creds.Authorize(t.Context(), tt.card)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if !slices.Equal(names, tt.wantNames) {
				t.Errorf("names = %q, want %q", names, tt.wantNames)
			}
			get(t, client, p.URL+"/a2a")
			tt.check(t, p.requests()[0])
		})
	}
}

func hasBasic(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	return ok && user == basicUser && pass == basicPass
}

// TestAuthorizeSendsNothingUndeclared: a card that requires nothing gets the
// extras and none of the configured credentials.
func TestAuthorizeSendsNothingUndeclared(t *testing.T) {
	roots := httptestRoots(t)
	declared := a2a.NamedSecuritySchemes{"jwt": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}}
	tests := []struct {
		name string
		card *a2a.AgentCard
	}{
		{name: "no requirements", card: card(nil)},
		{name: "schemes declared but not required", card: card(declared)},
		{name: "empty requirement set first", card: card(declared, a2a.SecurityRequirements{}, a2a.SecurityRequirements{"jwt": {}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartner(t, true, nil)
			creds := everything(roots)
			creds.Headers = http.Header{"X-Partner": {"design-partner-a"}}
			client, names, err := creds.Authorize(t.Context(), tt.card)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if len(names) != 0 {
				t.Errorf("names = %q, want none", names)
			}
			get(t, client, p.URL+"/a2a")
			s := p.requests()[0]
			carriesNoCredential(t, s)
			if s.header.Get("X-Partner") != "design-partner-a" {
				t.Errorf("extra header missing: %v", flatten(s.header))
			}
		})
	}
}

func TestAuthorizeRejectsNilCard(t *testing.T) {
	if _, _, err := (auth.Credentials{}).Authorize(t.Context(), nil); err == nil || errors.Is(err, auth.ErrUnsatisfiable) {
		t.Fatalf("err = %v, want a plain error", err)
	}
}
