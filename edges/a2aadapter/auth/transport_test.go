package auth_test

import (
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestRedirects: credentials follow a redirect only within the origin they
// were sent to.
func TestRedirects(t *testing.T) {
	roots := httptestRoots(t)
	bearerCard := card(a2a.NamedSecuritySchemes{"jwt": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}}, a2a.SecurityRequirements{"jwt": {}})
	tests := []struct {
		name string
		// target returns where the partner's /a2a redirects to.
		target      func(other *partner) string
		wantErr     bool
		wantPartner int
		wantOther   int
	}{
		{name: "same origin is followed with credentials", target: func(*partner) string { return "/moved" }, wantPartner: 2},
		{name: "another origin is refused", target: func(other *partner) string { return other.URL + "/steal" }, wantErr: true, wantPartner: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPartner(t, true, nil)
			other := newPartner(t, true, nil)
			p.redirects["/a2a"] = tt.target(other)
			client, _, err := everything(roots).Authorize(t.Context(), bearerCard)
			if err != nil {
				t.Fatalf("Authorize: %v", err)
			}
			resp, err := client.Get(p.URL + "/a2a")
			if tt.wantErr {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatal("cross-origin redirect was followed")
				}
				if !strings.Contains(err.Error(), "another origin") {
					t.Errorf("err = %v, want the redirect refusal", err)
				}
			} else {
				if err != nil {
					t.Fatalf("GET: %v", err)
				}
				_ = resp.Body.Close()
			}
			got := p.requests()
			if len(got) != tt.wantPartner || len(other.requests()) != tt.wantOther {
				t.Fatalf("partner saw %d, other origin saw %d; want %d and %d", len(got), len(other.requests()), tt.wantPartner, tt.wantOther)
			}
			for _, s := range got {
				if s.header.Get("Authorization") != "Bearer "+bearerToken {
					t.Errorf("%s: hop without credentials", s.path)
				}
			}
		})
	}
}

// TestCleartextRefused: with credentials in play the client will not speak
// plain http to a non-loopback host, but will to loopback.
func TestCleartextRefused(t *testing.T) {
	bearerCard := card(a2a.NamedSecuritySchemes{"jwt": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}}, a2a.SecurityRequirements{"jwt": {}})
	client, _, err := everything(nil).Authorize(t.Context(), bearerCard)
	if err != nil {
		t.Fatalf("Authorize: %v", err)
	}
	// 192.0.2.0/24 is TEST-NET-1: the refusal must come before any dial.
	resp, err := client.Get("http://192.0.2.1/a2a")
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("credentials sent over plain http to a non-loopback host")
	}
	if !strings.Contains(err.Error(), "refusing to send credentials over plain http") {
		t.Errorf("err = %v, want the cleartext refusal", err)
	}

	p := newPartner(t, false, nil)
	get(t, client, p.URL+"/a2a")
	if got := p.requests()[0].header.Get("Authorization"); got != "Bearer "+bearerToken {
		t.Errorf("loopback http: Authorization = %q", got)
	}
}
