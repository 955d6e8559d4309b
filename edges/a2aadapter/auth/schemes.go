package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/schemas/dpop"
)

// credential attaches one scheme's secret to an outgoing request.
type credential func(*http.Request) error

// grant is what satisfying one scheme contributes to the client.
type grant struct {
	// slot names where the credential travels; two schemes of one set cannot
	// share it (bearer AND basic would both need Authorization).
	slot string
	// mtls asks the transport to present the configured client certificate.
	mtls bool
	// resolve builds the credential once the set is chosen; it is where
	// network work such as OIDC discovery happens. A nil credential means the
	// scheme is carried by TLS alone.
	resolve func(ctx context.Context, endpoints *http.Client) (credential, error)
}

const (
	authorizationSlot = "header:Authorization"
	clientCertSlot    = "tls:client-certificate"
	// wildcardAPIKey is the APIKeys entry used for any apiKey scheme.
	wildcardAPIKey = "*"
)

// grantFor decides, without any I/O, whether the credentials satisfy one
// declared scheme; the error is the reason they do not.
func (c Credentials) grantFor(name a2a.SecuritySchemeName, scheme a2a.SecurityScheme, scopes []string) (grant, error) {
	switch s := deref(scheme).(type) {
	case a2a.APIKeySecurityScheme:
		return c.apiKeyGrant(name, s)
	case a2a.HTTPAuthSecurityScheme:
		return c.httpGrant(s)
	case a2a.OAuth2SecurityScheme:
		return c.oauth2Grant(s, scopes)
	case a2a.OpenIDConnectSecurityScheme:
		return c.openIDGrant(s, scopes)
	case a2a.MutualTLSSecurityScheme:
		if c.TLS == nil || c.TLS.ClientCert == nil {
			return grant{}, errors.New("mtls scheme: no client certificate configured")
		}
		return grant{slot: clientCertSlot, mtls: true, resolve: static(nil)}, nil
	default:
		return grant{}, fmt.Errorf("unsupported security scheme type %T", scheme)
	}
}

func (c Credentials) apiKeyGrant(name a2a.SecuritySchemeName, s a2a.APIKeySecurityScheme) (grant, error) {
	if s.Name == "" {
		return grant{}, errors.New("apiKey scheme declares no parameter name")
	}
	key := c.APIKeys[string(name)]
	if key == "" {
		key = c.APIKeys[wildcardAPIKey]
	}
	if key == "" {
		return grant{}, fmt.Errorf("apiKey scheme: no API key configured for %q or %q", name, wildcardAPIKey)
	}
	switch s.Location {
	case a2a.APIKeySecuritySchemeLocationHeader:
		header := http.CanonicalHeaderKey(s.Name)
		return grant{slot: "header:" + header, resolve: static(func(r *http.Request) error {
			r.Header.Set(header, key)
			return nil
		})}, nil
	case a2a.APIKeySecuritySchemeLocationQuery:
		return grant{slot: "query:" + s.Name, resolve: static(func(r *http.Request) error {
			q := r.URL.Query()
			q.Set(s.Name, key)
			r.URL.RawQuery = q.Encode()
			return nil
		})}, nil
	case a2a.APIKeySecuritySchemeLocationCookie:
		// Checked here because net/http would otherwise log and strip the
		// offending bytes of the key when sending.
		if (&http.Cookie{Name: s.Name, Value: key}).Valid() != nil {
			return grant{}, fmt.Errorf("apiKey scheme: cookie %q cannot carry the configured key (invalid name or value bytes)", s.Name)
		}
		return grant{slot: "cookie:" + s.Name, resolve: static(func(r *http.Request) error {
			r.AddCookie(&http.Cookie{Name: s.Name, Value: key})
			return nil
		})}, nil
	default:
		return grant{}, fmt.Errorf("apiKey scheme: unsupported location %q", s.Location)
	}
}

func (c Credentials) httpGrant(s a2a.HTTPAuthSecurityScheme) (grant, error) {
	switch strings.ToLower(s.Scheme) {
	case "bearer", "dpop":
		if c.Bearer == "" {
			return grant{}, fmt.Errorf("http %s scheme: no bearer token configured", strings.ToLower(s.Scheme))
		}
		if strings.EqualFold(s.Scheme, "dpop") && c.BearerKey == nil {
			return grant{}, errors.New("http dpop scheme: no key to prove possession of the token with")
		}
		return c.bearerGrant()
	case "basic":
		if c.Basic == nil {
			return grant{}, errors.New("http basic scheme: no basic credentials configured")
		}
		user, password := c.Basic.User, c.Basic.Password
		return grant{slot: authorizationSlot, resolve: static(func(r *http.Request) error {
			r.SetBasicAuth(user, password)
			return nil
		})}, nil
	default:
		return grant{}, fmt.Errorf("http scheme %q is not supported (bearer and basic are)", s.Scheme)
	}
}

// oauth2Grant uses client credentials when the card offers that flow and
// they are configured; otherwise a configured bearer token stands in for a
// token obtained out of band ("OAuth2-bearer").
func (c Credentials) oauth2Grant(s a2a.OAuth2SecurityScheme, scopes []string) (grant, error) {
	flow, isClientCredentials := clientCredentialsFlow(s.Flows)
	if c.OAuth2 != nil && isClientCredentials {
		// An unusable token URL is a refusal, not a reason to fall back to
		// the bearer token: the operator configured client credentials.
		tokenURL, err := secureEndpoint(flow.TokenURL)
		if err != nil {
			return grant{}, fmt.Errorf("oauth2 scheme: token URL: %w", err)
		}
		cc := *c.OAuth2
		return grant{slot: authorizationSlot, resolve: func(ctx context.Context, endpoints *http.Client) (credential, error) {
			return cc.credential(ctx, endpoints, tokenURL.String(), scopes), nil
		}}, nil
	}
	if c.Bearer != "" {
		return c.bearerGrant()
	}
	if c.OAuth2 != nil {
		return grant{}, fmt.Errorf("oauth2 scheme: flow %s is not supported for client credentials, and no bearer token is configured", flowName(s.Flows))
	}
	return grant{}, errors.New("oauth2 scheme: no client credentials or bearer token configured")
}

// openIDGrant discovers the provider from the declared URL when client
// credentials are configured; otherwise a bearer token stands in
// ("OpenID-bearer").
func (c Credentials) openIDGrant(s a2a.OpenIDConnectSecurityScheme, scopes []string) (grant, error) {
	if c.OAuth2 != nil {
		discovery, err := secureEndpoint(s.OpenIDConnectURL)
		if err != nil {
			return grant{}, fmt.Errorf("openIdConnect scheme: discovery URL: %w", err)
		}
		cc := *c.OAuth2
		issuer := issuerOf(discovery.String())
		return grant{slot: authorizationSlot, resolve: func(ctx context.Context, endpoints *http.Client) (credential, error) {
			tokenURL, err := discoverTokenURL(ctx, endpoints, issuer)
			if err != nil {
				return nil, fmt.Errorf("openIdConnect scheme: %w", err)
			}
			return cc.credential(ctx, endpoints, tokenURL, scopes), nil
		}}, nil
	}
	if c.Bearer != "" {
		return c.bearerGrant()
	}
	return grant{}, errors.New("openIdConnect scheme: no client credentials or bearer token configured")
}

// bearerGrant sends the bearer token; with BearerKey, as "Authorization:
// DPoP" with a fresh proof of possession for each request's method and
// URL (RFC 9449), as a Chio partner needs for a token that can delegate.
func (c Credentials) bearerGrant() (grant, error) {
	if c.BearerKey == nil {
		return bearerGrant(c.Bearer), nil
	}
	s, err := dpop.NewSigner(c.BearerKey, c.Bearer)
	if err != nil {
		return grant{}, fmt.Errorf("bearer key: %w", err)
	}
	return grant{slot: authorizationSlot, resolve: static(func(r *http.Request) error {
		u := *r.URL
		u.RawQuery, u.Fragment = "", ""
		return s.Authorize(r.Header, r.Method, u.String())
	})}, nil
}

func bearerGrant(token string) grant {
	return grant{slot: authorizationSlot, resolve: static(func(r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	})}
}

func static(cred credential) func(context.Context, *http.Client) (credential, error) {
	return func(context.Context, *http.Client) (credential, error) { return cred, nil }
}

func clientCredentialsFlow(flows a2a.OAuthFlows) (a2a.ClientCredentialsOAuthFlow, bool) {
	switch f := flows.(type) {
	case a2a.ClientCredentialsOAuthFlow:
		return f, true
	case *a2a.ClientCredentialsOAuthFlow:
		if f != nil {
			return *f, true
		}
	}
	return a2a.ClientCredentialsOAuthFlow{}, false
}

func flowName(flows a2a.OAuthFlows) a2a.OAuthFlowName {
	switch flows.(type) {
	case a2a.AuthorizationCodeOAuthFlow, *a2a.AuthorizationCodeOAuthFlow:
		return a2a.AuthorizationCodeOAuthFlowName
	case a2a.ClientCredentialsOAuthFlow, *a2a.ClientCredentialsOAuthFlow:
		return a2a.ClientCredentialsOAuthFlowName
	case a2a.ImplicitOAuthFlow, *a2a.ImplicitOAuthFlow:
		return a2a.ImplicitOAuthFlowName
	case a2a.PasswordOAuthFlow, *a2a.PasswordOAuthFlow:
		return a2a.PasswordOAuthFlowName
	case a2a.DeviceCodeOAuthFlow, *a2a.DeviceCodeOAuthFlow:
		return a2a.DeviceCodeOAuthFlowName
	default:
		return "(none)"
	}
}

// deref accepts pointer variants too, since the sealed interface admits them
// and Go callers building cards by hand may use them.
func deref(s a2a.SecurityScheme) a2a.SecurityScheme {
	switch p := s.(type) {
	case *a2a.APIKeySecurityScheme:
		if p != nil {
			return *p
		}
	case *a2a.HTTPAuthSecurityScheme:
		if p != nil {
			return *p
		}
	case *a2a.OAuth2SecurityScheme:
		if p != nil {
			return *p
		}
	case *a2a.OpenIDConnectSecurityScheme:
		if p != nil {
			return *p
		}
	case *a2a.MutualTLSSecurityScheme:
		if p != nil {
			return *p
		}
	}
	return s
}
