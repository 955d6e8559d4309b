// Package identity admits callers who come with the access token their
// identity provider gave them (a JWT, RFC 9068) instead of a chio
// capability: it verifies the token against the providers the policy
// trusts (issuer, signature by a key of the provider's JWKS, audience,
// time) and maps it, by the policy's rules, to grants in the same scope
// model as capabilities.
//
// What it refuses, and why:
//   - an issuer the policy does not name (ErrUntrusted);
//   - an algorithm outside the provider's list: "none" and the
//     shared-secret HS* algorithms are never accepted, since a provider's
//     public JWKS cannot check them and a key confused for a secret would
//     let anyone sign (ErrSignature);
//   - a key id not in the provider's JWKS, after at most one refetch per
//     RefetchInterval, so a stream of unknown key ids cannot make the edge
//     hammer the provider (ErrSignature);
//   - a token expired, not yet valid or issued in the future beyond the
//     clock skew, or without an expiry (ErrTime);
//   - an audience that is none of the provider's (ErrAudience);
//   - a token larger than MaxTokenBytes, or not a signed JWT (ErrMalformed);
//   - a token no rule matches (ErrNoRule).
package identity

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/chio-ledger/chio/schemas"
)

// Provider is one trusted identity provider, as the policy names it.
type Provider struct {
	// Issuer is the provider's issuer URL: a token's "iss" must equal it,
	// and its discovery document (Issuer +
	// "/.well-known/openid-configuration") gives the JWKS unless JWKSURI
	// is set.
	Issuer string `json:"issuer"`
	// JWKSURI, when set, is where the provider's keys are, without
	// discovery.
	JWKSURI string `json:"jwks_uri,omitempty"`
	// Audiences: a token's "aud" must contain one of them (this edge's
	// URL, or the API identifier the provider issues tokens for).
	Audiences []string `json:"audiences"`
	// Algorithms are the signature algorithms accepted (default RS256,
	// ES256 and EdDSA); "none" and HS* are refused.
	Algorithms []string `json:"algorithms,omitempty"`
	// ClockSkewSeconds tolerates clocks this far apart when checking exp,
	// nbf and iat (default 30, at most 300).
	ClockSkewSeconds *int `json:"clock_skew_seconds,omitempty"`
	// Rules map a verified token to grants: the first rule whose every
	// match holds gives its grants.
	Rules []Rule `json:"rules"`
}

// Rule gives Grants to a token whose claims all match Match.
type Rule struct {
	// Match maps a claim name to the value it must have: a string claim
	// equal to it, an array claim (groups, roles) that contains it, or,
	// for "scope", a space-separated list that contains it. "iss" is the
	// provider's already; an empty Match matches every token of it.
	Match map[string]string `json:"match"`
	// Grants are what the caller may do, as in a capability's scope.
	Grants []schemas.ToolGrant `json:"grants"`
}

// Limits.
const (
	// MaxTokenBytes bounds an access token: larger ones are refused before
	// any parsing.
	MaxTokenBytes = 8 << 10
	// DefaultClockSkew and MaxClockSkew bound a provider's clock skew.
	DefaultClockSkew = 30 * time.Second
	MaxClockSkew     = 5 * time.Minute
)

// DefaultAlgorithms are the algorithms a provider without a list is
// trusted with.
var defaultAlgorithms = []string{string(jose.RS256), string(jose.ES256), string(jose.EdDSA)}

// asymmetric are the algorithms a provider may be trusted with.
var asymmetric = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

// Validate checks a provider's configuration.
func (p *Provider) Validate() error {
	u, err := url.Parse(p.Issuer)
	if err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname()))) {
		return fmt.Errorf("identity provider %q: the issuer must be an https URL (http only on a loopback host)", p.Issuer)
	}
	if p.JWKSURI != "" {
		if j, err := url.Parse(p.JWKSURI); err != nil || j.Host == "" || (j.Scheme != "https" && !(j.Scheme == "http" && loopback(j.Hostname()))) {
			return fmt.Errorf("identity provider %s: jwks_uri %q must be an https URL", p.Issuer, p.JWKSURI)
		}
	}
	if len(p.Audiences) == 0 || slices.Contains(p.Audiences, "") {
		return fmt.Errorf("identity provider %s: name at least one audience, none empty: a token for another service must not be taken", p.Issuer)
	}
	for _, a := range p.Algorithms {
		switch {
		case strings.EqualFold(a, "none"):
			return fmt.Errorf("identity provider %s: algorithm %q: unsigned tokens are never accepted", p.Issuer, a)
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			return fmt.Errorf("identity provider %s: algorithm %q: shared-secret algorithms are not accepted (a provider's keys are public)", p.Issuer, a)
		case !slices.Contains(asymmetric, jose.SignatureAlgorithm(a)):
			return fmt.Errorf("identity provider %s: unknown algorithm %q (one of %v)", p.Issuer, a, asymmetric)
		}
	}
	if s := p.ClockSkewSeconds; s != nil && (*s < 0 || time.Duration(*s)*time.Second > MaxClockSkew) {
		return fmt.Errorf("identity provider %s: clock_skew_seconds %d: between 0 and %d", p.Issuer, *s, int(MaxClockSkew/time.Second))
	}
	if len(p.Rules) == 0 {
		return fmt.Errorf("identity provider %s: no rules: its tokens would grant nothing", p.Issuer)
	}
	for i, r := range p.Rules {
		if len(r.Grants) == 0 {
			return fmt.Errorf("identity provider %s: rule %d grants nothing", p.Issuer, i)
		}
		for claim := range r.Match {
			if claim == "" || claim == "iss" {
				return fmt.Errorf("identity provider %s: rule %d: match on %q: name a claim other than iss (the issuer is the provider's)", p.Issuer, i, claim)
			}
		}
		scope := schemas.Scope{Grants: r.Grants}
		if err := scope.Validate(); err != nil {
			return fmt.Errorf("identity provider %s: rule %d: %w", p.Issuer, i, err)
		}
	}
	return nil
}

func (p *Provider) algorithms() []jose.SignatureAlgorithm {
	names := p.Algorithms
	if len(names) == 0 {
		names = defaultAlgorithms
	}
	out := make([]jose.SignatureAlgorithm, len(names))
	for i, n := range names {
		out[i] = jose.SignatureAlgorithm(n)
	}
	return out
}

func (p *Provider) skew() time.Duration {
	if p.ClockSkewSeconds == nil {
		return DefaultClockSkew
	}
	return time.Duration(*p.ClockSkewSeconds) * time.Second
}

func loopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// Refusals, each wrapped with the specific reason.
var (
	ErrMalformed = errors.New("malformed access token")
	ErrUntrusted = errors.New("access token from an untrusted issuer")
	ErrSignature = errors.New("access token signature not verified")
	ErrTime      = errors.New("access token outside its validity")
	ErrAudience  = errors.New("access token for another audience")
	ErrNoRule    = errors.New("no rule grants this identity anything")
	// ErrUnavailable is the provider's keys not reachable (discovery or
	// JWKS fetch failed, and none are cached): the caller's token may be
	// good, so it is the server's condition, not the caller's.
	ErrUnavailable = errors.New("identity provider keys unavailable")
)
