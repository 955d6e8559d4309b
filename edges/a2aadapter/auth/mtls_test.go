package auth_test

import (
	"crypto/tls"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
	"github.com/chio-ledger/chio/internal/authtest"
)

// TestMutualTLS uses a CA, server and client certificates made here; the
// partner verifies client certificates against that CA.
func TestMutualTLS(t *testing.T) {
	pk := authtest.NewPKI(t, "chio test CA", clientID)
	serve := func(mode tls.ClientAuthType) func(*httptest.Server) {
		return func(s *httptest.Server) {
			s.TLS = pk.ServerTLS(mode)
		}
	}
	mtlsCard := card(a2a.NamedSecuritySchemes{"mtls": a2a.MutualTLSSecurityScheme{}}, a2a.SecurityRequirements{"mtls": {}})
	keyCard := card(a2a.NamedSecuritySchemes{"partnerKey": a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationHeader, Name: "X-Partner-Key"}},
		a2a.SecurityRequirements{"partnerKey": {}})
	withCert := auth.Credentials{APIKeys: map[string]string{"*": apiKeyValue}, TLS: &auth.TLS{RootCAs: pk.Pool, ClientCert: &pk.Client}}
	withoutCert := auth.Credentials{APIKeys: map[string]string{"*": apiKeyValue}, TLS: &auth.TLS{RootCAs: pk.Pool}}

	tests := []struct {
		name      string
		mode      tls.ClientAuthType
		card      *a2a.AgentCard
		creds     auth.Credentials
		wantNames []string
		wantErr   bool
		wantCN    string
	}{
		{name: "client certificate presented for an mtls scheme", mode: tls.RequireAndVerifyClientCert, card: mtlsCard, creds: withCert, wantNames: []string{"mtls"}, wantCN: clientID},
		// Proves the partner really refuses a client without a certificate.
		{name: "partner refuses a client without certificate", mode: tls.RequireAndVerifyClientCert, card: keyCard, creds: withoutCert, wantNames: []string{"partnerKey"}, wantErr: true},
		{name: "certificate withheld when the card does not ask for mtls", mode: tls.VerifyClientCertIfGiven, card: keyCard, creds: withCert, wantNames: []string{"partnerKey"}, wantCN: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartner(t, true, serve(tt.mode))
			client, names, err := tt.creds.Authorize(t.Context(), tt.card)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			if !slices.Equal(names, tt.wantNames) {
				t.Errorf("names = %q, want %q", names, tt.wantNames)
			}
			resp, err := client.Get(p.URL + "/a2a")
			if tt.wantErr {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatal("request succeeded, want a TLS failure")
				}
				if n := len(p.requests()); n != 0 {
					t.Errorf("partner handled %d requests, want 0", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("GET: %v", err)
			}
			_ = resp.Body.Close()
			got := p.requests()
			if len(got) != 1 {
				t.Fatalf("partner saw %d requests, want 1", len(got))
			}
			if got[0].peerCN != tt.wantCN {
				t.Errorf("verified client CN = %q, want %q", got[0].peerCN, tt.wantCN)
			}
		})
	}
}
