package auth_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
	"github.com/chio-ledger/chio/internal/authtest"
)

// TestOAuth2ClientCredentials gets real tokens from a running OpenID
// provider, through the declared token URL and through OIDC discovery, and
// has the partner verify them.
func TestOAuth2ClientCredentials(t *testing.T) {
	roots := httptestRoots(t)
	tests := []struct {
		name   string
		scheme func(o *authtest.OP) a2a.SecurityScheme
		// wantDiscoveries is what Authorize itself fetched: discovery is
		// eager, the token is not.
		wantDiscoveries int32
	}{
		{
			name: "oauth2 scheme at the declared token URL",
			scheme: func(o *authtest.OP) a2a.SecurityScheme {
				return a2a.OAuth2SecurityScheme{Flows: a2a.ClientCredentialsOAuthFlow{
					TokenURL: o.TokenURL,
					Scopes:   map[string]string{"a2a.invoke": "invoke skills"},
				}}
			},
		},
		{
			name: "openIdConnect scheme via discovery",
			scheme: func(o *authtest.OP) a2a.SecurityScheme {
				return a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: o.Issuer + "/.well-known/openid-configuration"}
			},
			wantDiscoveries: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := authtest.StartOP(t, clientID, clientSecret)
			p := newPartner(t, true, nil)
			creds := everything(roots)
			creds.OAuth2.Scopes = []string{"partner.read", "a2a.invoke"}
			c := card(a2a.NamedSecuritySchemes{"partnerAuth": tt.scheme(o)}, a2a.SecurityRequirements{"partnerAuth": {"a2a.invoke"}})

			client, names, err := creds.Authorize(t.Context(), c)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if !slices.Equal(names, []string{"partnerAuth"}) {
				t.Errorf("names = %q", names)
			}
			if got := o.Discoveries(); got != tt.wantDiscoveries {
				t.Errorf("discoveries during Authorize = %d, want %d", got, tt.wantDiscoveries)
			}
			if got := o.Tokens(); got != 0 {
				t.Errorf("token requests during Authorize = %d, want 0 (lazy)", got)
			}

			for range 3 {
				get(t, client, p.URL+"/a2a")
			}
			if got := o.Tokens(); got != 1 {
				t.Errorf("token requests for 3 calls = %d, want 1 (cached)", got)
			}
			if got := o.RequestedScopes(); len(got) != 1 || !slices.Equal(got[0], []string{"a2a.invoke", "partner.read"}) {
				t.Errorf("requested scopes = %q, want requirement's then configured, deduplicated", got)
			}
			seenReqs := p.requests()
			first := seenReqs[0].header.Get("Authorization")
			raw, ok := strings.CutPrefix(first, "Bearer ")
			if !ok || raw == bearerToken {
				t.Fatalf("Authorization = %q, want an issued bearer token", first)
			}
			for _, s := range seenReqs[1:] {
				if s.header.Get("Authorization") != first {
					t.Errorf("a later call carried a different token")
				}
			}
			if tok := o.Verify(t, raw); tok.Subject != clientID {
				t.Errorf("token subject = %q, want %q", tok.Subject, clientID)
			}
		})
	}
}

// TestOAuth2RejectedClientSendsNothing shows a token failure stops the
// request before it reaches the partner.
func TestOAuth2RejectedClientSendsNothing(t *testing.T) {
	roots := httptestRoots(t)
	o := authtest.StartOP(t, clientID, clientSecret)
	p := newPartner(t, true, nil)
	creds := everything(roots)
	creds.OAuth2 = &auth.ClientCredentials{ClientID: clientID, ClientSecret: "wrong-secret"}
	c := card(a2a.NamedSecuritySchemes{"oauth": a2a.OAuth2SecurityScheme{Flows: a2a.ClientCredentialsOAuthFlow{TokenURL: o.TokenURL}}},
		a2a.SecurityRequirements{"oauth": {}})

	client, _, err := creds.Authorize(t.Context(), c)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	resp, err := client.Get(p.URL + "/a2a")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("request succeeded with a rejected client")
	}
	if !strings.Contains(err.Error(), "fetch OAuth2 token") {
		t.Errorf("error = %v, want it to name the token fetch", err)
	}
	noSecretIn(t, "token error", err.Error())
	if n := len(p.requests()); n != 0 {
		t.Errorf("partner saw %d requests, want 0", n)
	}
	if o.Tokens() == 0 {
		t.Error("token endpoint was never asked")
	}
}
