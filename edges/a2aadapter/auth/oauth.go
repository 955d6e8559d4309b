package auth

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

const wellKnownOpenID = "/.well-known/openid-configuration"

// credential returns a lazy bearer credential: the first request fetches a
// token at tokenURL, later ones reuse it until it expires.
func (cc ClientCredentials) credential(ctx context.Context, endpoints *http.Client, tokenURL string, scopes []string) credential {
	cfg := &clientcredentials.Config{
		ClientID:     cc.ClientID,
		ClientSecret: cc.ClientSecret,
		TokenURL:     tokenURL,
		Scopes:       mergeScopes(scopes, cc.Scopes),
	}
	// The source outlives Authorize, so it keeps ctx's values but not its
	// cancellation; the endpoints client's timeout bounds each fetch.
	src := cfg.TokenSource(context.WithValue(context.WithoutCancel(ctx), oauth2.HTTPClient, endpoints))
	return func(r *http.Request) error {
		tok, err := src.Token()
		if err != nil {
			return fmt.Errorf("auth: fetch OAuth2 token: %w", err)
		}
		// Anything but a bearer token (DPoP, MAC) would need proof this
		// package cannot produce; refuse rather than send it wrongly.
		if !strings.EqualFold(tok.Type(), "Bearer") {
			return fmt.Errorf("auth: fetch OAuth2 token: token type %q is not supported", tok.Type())
		}
		tok.SetAuthHeader(r)
		return nil
	}
}

// discoverTokenURL runs OIDC discovery for issuer and returns the token
// endpoint, held to the same https-or-loopback rule as a declared one.
func discoverTokenURL(ctx context.Context, endpoints *http.Client, issuer string) (string, error) {
	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, endpoints), issuer)
	if err != nil {
		return "", fmt.Errorf("discover OpenID provider %s: %w", issuer, err)
	}
	tokenURL, err := secureEndpoint(provider.Endpoint().TokenURL)
	if err != nil {
		return "", fmt.Errorf("discovered token endpoint: %w", err)
	}
	return tokenURL.String(), nil
}

// issuerOf derives the issuer from a discovery URL; a URL without the
// well-known suffix is taken to be the issuer itself. go-oidc then checks
// that the document names this same issuer.
func issuerOf(discoveryURL string) string {
	return strings.TrimSuffix(discoveryURL, wellKnownOpenID)
}

// mergeScopes is the requirement's scopes followed by the configured ones,
// without duplicates.
func mergeScopes(required, configured []string) []string {
	out := make([]string, 0, len(required)+len(configured))
	for _, s := range slices.Concat(required, configured) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
