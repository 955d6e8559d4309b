package auth_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
)

// TestAuthorizeSendsDeclaredCredentials runs each static scheme against a
// TLS partner and checks what arrives, with every other credential also
// configured so that anything sent beyond the requirement shows up.
func TestAuthorizeSendsDeclaredCredentials(t *testing.T) {
	roots := httptestRoots(t)
	headerKey := a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationHeader, Name: "X-Partner-Key"}
	tests := []struct {
		name      string
		card      *a2a.AgentCard
		creds     func(auth.Credentials) auth.Credentials
		wantNames []string
		check     func(t *testing.T, s seen)
	}{
		{
			name:      "http bearer",
			card:      card(a2a.NamedSecuritySchemes{"jwt": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", BearerFormat: "JWT"}}, a2a.SecurityRequirements{"jwt": {}}),
			wantNames: []string{"jwt"},
			check: func(t *testing.T, s seen) {
				if got := s.header.Get("Authorization"); got != "Bearer "+bearerToken {
					t.Errorf("Authorization = %q, want the bearer token", got)
				}
			},
		},
		{
			name:      "http basic is sent as Basic, not Bearer",
			card:      card(a2a.NamedSecuritySchemes{"basic": a2a.HTTPAuthSecurityScheme{Scheme: "basic"}}, a2a.SecurityRequirements{"basic": {}}),
			wantNames: []string{"basic"},
			check: func(t *testing.T, s seen) {
				if got := s.header.Get("Authorization"); !strings.HasPrefix(got, "Basic ") {
					t.Fatalf("Authorization = %q, want Basic", got)
				}
				r := &http.Request{Header: s.header}
				user, pass, ok := r.BasicAuth()
				if !ok || user != basicUser || pass != basicPass {
					t.Errorf("basic credentials = %q/%q (ok %t), want the configured pair", user, pass, ok)
				}
			},
		},
		{
			name:      "api key in the declared header",
			card:      card(a2a.NamedSecuritySchemes{"partnerKey": headerKey}, a2a.SecurityRequirements{"partnerKey": {}}),
			wantNames: []string{"partnerKey"},
			check: func(t *testing.T, s seen) {
				if got := s.header.Get("X-Partner-Key"); got != apiKeyValue {
					t.Errorf("X-Partner-Key = %q, want the key", got)
				}
				if s.query.Has("X-Partner-Key") || s.cookie("X-Partner-Key") != "" || s.header.Get("Authorization") != "" {
					t.Errorf("key or other credential sent elsewhere: %+v", s)
				}
			},
		},
		{
			name: "api key in the declared query parameter",
			card: card(a2a.NamedSecuritySchemes{"queryKey": a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationQuery, Name: "api_key"}},
				a2a.SecurityRequirements{"queryKey": {}}),
			creds: func(c auth.Credentials) auth.Credentials {
				c.APIKeys = map[string]string{"queryKey": apiKeyValue, "*": "wildcard-must-lose"}
				return c
			},
			wantNames: []string{"queryKey"},
			check: func(t *testing.T, s seen) {
				if got := s.query["api_key"]; !slices.Equal(got, []string{apiKeyValue}) {
					t.Errorf("api_key = %q, want exactly the scheme's own key", got)
				}
				if s.header.Get("Api_key") != "" || s.cookie("api_key") != "" {
					t.Errorf("key also sent outside the query: %+v", s)
				}
			},
		},
		{
			name: "api key in the declared cookie",
			card: card(a2a.NamedSecuritySchemes{"cookieKey": a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationCookie, Name: "partner_session"}},
				a2a.SecurityRequirements{"cookieKey": {}}),
			wantNames: []string{"cookieKey"},
			check: func(t *testing.T, s seen) {
				if got := s.cookie("partner_session"); got != apiKeyValue {
					t.Errorf("cookie partner_session = %q, want the key", got)
				}
				if s.query.Has("partner_session") || s.header.Get("Partner_session") != "" {
					t.Errorf("key also sent outside the cookie: %+v", s)
				}
			},
		},
		{
			name: "schemes of one set are all sent",
			card: card(a2a.NamedSecuritySchemes{"partnerKey": headerKey, "jwt": a2a.HTTPAuthSecurityScheme{Scheme: "bearer"}},
				a2a.SecurityRequirements{"partnerKey": {}, "jwt": {}}),
			wantNames: []string{"jwt", "partnerKey"},
			check: func(t *testing.T, s seen) {
				if s.header.Get("Authorization") != "Bearer "+bearerToken || s.header.Get("X-Partner-Key") != apiKeyValue {
					t.Errorf("want both bearer and key, got %v", flatten(s.header))
				}
			},
		},
		{
			name:      "oauth2 scheme with a bearer token and no client credentials",
			card:      card(a2a.NamedSecuritySchemes{"oauth": a2a.OAuth2SecurityScheme{Flows: a2a.AuthorizationCodeOAuthFlow{AuthorizationURL: "https://idp.example/authorize", TokenURL: "https://idp.example/token"}}}, a2a.SecurityRequirements{"oauth": {"a2a.invoke"}}),
			creds:     func(c auth.Credentials) auth.Credentials { c.OAuth2 = nil; return c },
			wantNames: []string{"oauth"},
			check: func(t *testing.T, s seen) {
				if got := s.header.Get("Authorization"); got != "Bearer "+bearerToken {
					t.Errorf("Authorization = %q, want the bearer token", got)
				}
			},
		},
		{
			name:      "openIdConnect scheme with a bearer token and no client credentials",
			card:      card(a2a.NamedSecuritySchemes{"oidc": a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: "https://idp.example/.well-known/openid-configuration"}}, a2a.SecurityRequirements{"oidc": {}}),
			creds:     func(c auth.Credentials) auth.Credentials { c.OAuth2 = nil; return c },
			wantNames: []string{"oidc"},
			check: func(t *testing.T, s seen) {
				if got := s.header.Get("Authorization"); got != "Bearer "+bearerToken {
					t.Errorf("Authorization = %q, want the bearer token", got)
				}
			},
		},
		{
			name: "extras ride along with the credentials",
			card: card(a2a.NamedSecuritySchemes{"jwt": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}}, a2a.SecurityRequirements{"jwt": {}}),
			creds: func(c auth.Credentials) auth.Credentials {
				// An extra Authorization must not displace the scheme's.
				c.Headers = http.Header{"X-Partner": {"design-partner-a"}, "Authorization": {"Bearer extra-must-lose"}}
				c.Query = map[string][]string{"tenant": {"tenant-alpha"}}
				c.Cookies = []*http.Cookie{{Name: "region", Value: "eu"}}
				return c
			},
			wantNames: []string{"jwt"},
			check: func(t *testing.T, s seen) {
				if s.header.Get("X-Partner") != "design-partner-a" || s.query.Get("tenant") != "tenant-alpha" || s.cookie("region") != "eu" {
					t.Errorf("extras missing: headers %v query %v cookies %v", flatten(s.header), s.query, s.cookies)
				}
				if got := s.header.Values("Authorization"); !slices.Equal(got, []string{"Bearer " + bearerToken}) {
					t.Errorf("Authorization = %q, want only the scheme's bearer", got)
				}
				if s.query.Get("caller") != "kept" {
					t.Errorf("caller's own query lost: %v", s.query)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartner(t, true, nil)
			creds := everything(roots)
			if tt.creds != nil {
				creds = tt.creds(creds)
			}
			client, names, err := creds.Authorize(t.Context(), tt.card)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if !slices.Equal(names, tt.wantNames) {
				t.Errorf("names = %q, want %q", names, tt.wantNames)
			}
			get(t, client, p.URL+"/a2a?caller=kept")
			got := p.requests()
			if len(got) != 1 {
				t.Fatalf("partner saw %d requests, want 1", len(got))
			}
			tt.check(t, got[0])
		})
	}
}
