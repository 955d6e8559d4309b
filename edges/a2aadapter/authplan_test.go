package a2aadapter

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

func TestAuthorization(t *testing.T) {
	const secret = "hunter2"
	bearerScheme := a2a.NamedSecuritySchemes{
		"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"},
		"apikey": a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationHeader, Name: "X-API-Key"},
	}
	slowNeedsBearer := []a2a.AgentSkill{defaultSkills()[0],
		{ID: "slow", Name: "Slow", Description: "d", Tags: []string{"t"}, SecurityRequirements: a2a.SecurityRequirementsOptions{{"bearer": {}}}}}
	claims := func(schemes ...string) func(p *partner) Authorizer {
		return func(p *partner) Authorizer {
			return func(context.Context, *a2a.AgentCard) (*http.Client, []string, error) {
				return p.srv.Client(), schemes, nil
			}
		}
	}
	for _, tc := range []struct {
		name      string
		opts      partnerOpts
		authorize func(p *partner) Authorizer // nil: no Authorizer
		deniedAll bool                        // every call denied locally
		deniedOne string                      // only this tool's calls
		schemes   []string                    // Report.Auth.Schemes
	}{
		{name: "bearer satisfied", opts: partnerOpts{bearer: secret},
			authorize: func(p *partner) Authorizer { return bearerAuthorizer(p, secret) }, schemes: []string{"bearer"}},
		{name: "authorizer fails", opts: partnerOpts{bearer: secret}, deniedAll: true,
			authorize: func(*partner) Authorizer {
				return func(context.Context, *a2a.AgentCard) (*http.Client, []string, error) {
					return nil, nil, errors.New("token endpoint https://idp.example/token?client_secret=" + secret + " refused Bearer " + secret)
				}
			}},
		{name: "authorizer returns no client", opts: partnerOpts{bearer: secret}, deniedAll: true,
			authorize: func(*partner) Authorizer {
				return func(context.Context, *a2a.AgentCard) (*http.Client, []string, error) {
					return nil, []string{"bearer"}, nil
				}
			}},
		{name: "no authorizer for a card that requires one", opts: partnerOpts{bearer: secret}, deniedAll: true},
		{name: "authorizer claims an undeclared scheme", opts: partnerOpts{bearer: secret}, deniedAll: true,
			authorize: claims("oauth"), schemes: []string{"oauth"}},
		{name: "authorizer satisfies another scheme", opts: partnerOpts{schemes: bearerScheme, requirements: a2a.SecurityRequirementsOptions{{"bearer": {}}}},
			deniedAll: true, authorize: claims("apikey"), schemes: []string{"apikey"}},
		{name: "a skill's own requirement unmet", opts: partnerOpts{schemes: bearerScheme, skills: slowNeedsBearer}, deniedOne: "slow"},
		{name: "a skill's own requirement met", opts: partnerOpts{schemes: bearerScheme, skills: slowNeedsBearer},
			authorize: claims("bearer"), schemes: []string{"bearer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPartner(t, tc.opts)
			cfg := Config{}
			if tc.authorize != nil {
				cfg.Authorize = tc.authorize(p)
			}
			a := discover(t, p, cfg) // authorization never fails discovery
			r := a.Report()
			if strings.Join(r.Auth.Schemes, ",") != strings.Join(tc.schemes, ",") || (r.Auth.Unsatisfiable != "") != tc.deniedAll {
				t.Fatalf("auth plan %+v", r.Auth)
			}
			if strings.Contains(r.Auth.Unsatisfiable, secret) {
				t.Fatalf("report leaks a secret: %s", r.Auth.Unsatisfiable)
			}
			for _, tool := range a.ToolNames() {
				denied := tc.deniedAll || tool == tc.deniedOne
				before := p.requests.Load()
				_, err := a.Invoke(t.Context(), call(a, tool, `{"message":"hi","return_immediately":true}`))
				switch {
				case denied && !errors.Is(err, ErrDeniedLocally):
					t.Fatalf("%s: err = %v, want denied locally", tool, err)
				case denied && p.requests.Load() != before:
					t.Fatalf("%s: a denied call reached the partner", tool)
				case denied && strings.Contains(err.Error(), secret):
					t.Fatalf("%s: error leaks a secret: %v", tool, err)
				case !denied && err != nil:
					t.Fatalf("%s: %v", tool, err)
				}
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`Post "https://u:pw@partner.example/a2a?api_key=k1&x=2": EOF`, `Post "https://partner.example/a2a": EOF`},
		{"auth failed: Bearer abc.def-ghi", "auth failed: Bearer [redacted]"},
		{"basic ZGVtbzpwdw== refused", "basic [redacted] refused"},
		{"no URL here", "no URL here"},
	} {
		err := redactErr(errors.New(tc.in))
		if err.Error() != tc.want {
			t.Errorf("redactErr(%q) = %q, want %q", tc.in, err.Error(), tc.want)
		}
	}
	if redactErr(nil) != nil {
		t.Error("redactErr(nil) is not nil")
	}
	if !errors.Is(redactErr(a2a.ErrTaskNotFound), a2a.ErrTaskNotFound) {
		t.Error("redact hides the error chain")
	}
}
