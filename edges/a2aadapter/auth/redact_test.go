package auth_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
	"github.com/chio-ledger/chio/internal/authtest"
)

func TestCredentialsFormatWithoutSecrets(t *testing.T) {
	creds := everything(nil)
	creds.APIKeys = map[string]string{"partnerKey": apiKeyValue}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{creds, &creds, *creds.Basic, *creds.OAuth2} {
			noSecretIn(t, verb, fmt.Sprintf(verb, v))
		}
	}
}

// TestUnsatisfiableWrapsCause: a discovery cut short by the caller's context
// is both unsatisfiable and recognisably cancelled.
func TestUnsatisfiableWrapsCause(t *testing.T) {
	o := authtest.StartOP(t, clientID, clientSecret)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c := card(a2a.NamedSecuritySchemes{"oidc": a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: o.Issuer + "/.well-known/openid-configuration"}},
		a2a.SecurityRequirements{"oidc": {}})
	_, _, err := everything(httptestRoots(t)).Authorize(ctx, c)
	if !errors.Is(err, auth.ErrUnsatisfiable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrUnsatisfiable wrapping context.Canceled", err)
	}
}
