package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// DefaultRefetchInterval is the least time between two fetches of one
// provider's keys (or discovery document) that a token can cause.
const DefaultRefetchInterval = 30 * time.Second

// maxDocumentBytes bounds a discovery document or JWKS read.
const maxDocumentBytes = 1 << 20

// Option configures a Verifier.
type Option func(*Verifier)

// WithHTTPClient sets the client that fetches discovery documents and
// keys (default: one with a 10 s timeout).
func WithHTTPClient(c *http.Client) Option {
	return func(v *Verifier) {
		if c != nil && c.CheckRedirect == nil {
			cc := *c
			cc.CheckRedirect = httpsOnly // redirects to https only, as by default
			c = &cc
		}
		v.client = c
	}
}

// WithClock sets the clock tokens are checked against.
func WithClock(now func() time.Time) Option { return func(v *Verifier) { v.now = now } }

// WithRefetchInterval sets the least time between two fetches of one
// provider's keys that unknown key ids can cause (DefaultRefetchInterval).
func WithRefetchInterval(d time.Duration) Option { return func(v *Verifier) { v.refetch = d } }

// Verifier verifies access tokens against trusted providers. Safe for
// concurrent use.
type Verifier struct {
	providers map[string]*provider // by issuer
	client    *http.Client
	now       func() time.Time
	refetch   time.Duration
}

// provider is a trusted provider with its fetched keys.
type provider struct {
	cfg  Provider
	algs []jose.SignatureAlgorithm

	// fetching serialises fetches; mu guards what they found.
	fetching sync.Mutex
	jwksURI  string // from the configuration or discovery; under fetching
	mu       sync.RWMutex
	keys     jose.JSONWebKeySet
	fetched  time.Time // the last fetch, successful or not
	fetchErr error
}

// New makes a Verifier for the providers (each validated).
func New(providers []Provider, opts ...Option) (*Verifier, error) {
	v := &Verifier{providers: map[string]*provider{}, client: &http.Client{Timeout: 10 * time.Second, CheckRedirect: httpsOnly}, now: time.Now, refetch: DefaultRefetchInterval}
	for _, o := range opts {
		o(v)
	}
	for _, p := range providers {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, dup := v.providers[p.Issuer]; dup {
			return nil, fmt.Errorf("identity provider %s is named twice", p.Issuer)
		}
		v.providers[p.Issuer] = &provider{cfg: p, algs: p.algorithms(), jwksURI: p.JWKSURI}
	}
	return v, nil
}

// httpsOnly follows a redirect only to https (or loopback http): keys
// fetched in the clear could be anyone's.
func httpsOnly(req *http.Request, via []*http.Request) error {
	if len(via) >= 5 {
		return errors.New("too many redirects")
	}
	if req.URL.Scheme != "https" && !(req.URL.Scheme == "http" && loopback(req.URL.Hostname())) {
		return fmt.Errorf("redirect to %s: not https", req.URL.Redacted())
	}
	return nil
}

// LooksLikeJWT reports whether s has a compact JWS's shape (three
// base64url parts): a capability never has.
func LooksLikeJWT(s string) bool {
	return strings.Count(s, ".") == 2 && !strings.HasPrefix(s, "{")
}

// Caller is a verified access token: who the caller is, and what the
// policy's rules grant it.
type Caller struct {
	Issuer   string
	Subject  string
	ClientID string
	Audience []string
	// TokenID is the token's jti, or "sha256:" and the hex SHA-256 of the
	// token when it has none: what a receipt records of the token itself.
	TokenID string
	// Actors is the RFC 8693 "act" chain, the current actor first.
	Actors []Actor
	// Thumbprint is the RFC 7638 thumbprint the token is bound to
	// (cnf.jkt, RFC 9449), or "" for a bearer token.
	Thumbprint string
	Scope      string
	IssuedAt   time.Time
	NotBefore  time.Time
	Expiry     time.Time
	// Rule is the index of the rule that gave Grants.
	Rule   int
	Grants []schemas.ToolGrant
}

// Actor is one link of an "act" chain.
type Actor struct {
	Subject  string `json:"sub,omitempty"`
	Issuer   string `json:"iss,omitempty"`
	ClientID string `json:"client_id,omitempty"`
}

// claims are the non-registered claims read from a token.
type claims struct {
	ClientID string `json:"client_id"`
	Scope    string `json:"scope"`
	Cnf      *struct {
		JKT string `json:"jkt"`
	} `json:"cnf"`
	Act *act `json:"act"`
}

// act is a nested "act" claim.
type act struct {
	Actor
	Act *act `json:"act"`
}

// maxActors bounds an "act" chain.
const maxActors = 8

// Verify checks token and maps it to grants; the error wraps one of the
// package's refusals with the reason.
func (v *Verifier) Verify(ctx context.Context, token string) (*Caller, error) {
	return v.verify(ctx, token, true)
}

// VerifyActor checks token as Verify does but maps it to no grants: an
// RFC 8693 actor token says who acts, not what it may do, so it needs no
// rule; its Caller has Rule -1 and no Grants.
func (v *Verifier) VerifyActor(ctx context.Context, token string) (*Caller, error) {
	return v.verify(ctx, token, false)
}

func (v *Verifier) verify(ctx context.Context, token string, mapRule bool) (*Caller, error) {
	if len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(token), MaxTokenBytes)
	}
	// Parse with every algorithm any provider accepts; each provider's own
	// list is checked once the issuer is known.
	tok, err := jwt.ParseSigned(token, asymmetric)
	if err != nil {
		if strings.Contains(err.Error(), "unexpected signature algorithm") {
			return nil, fmt.Errorf("%w: %v (none and HS* are never accepted)", ErrSignature, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if len(tok.Headers) != 1 {
		return nil, fmt.Errorf("%w: %d signatures, want one", ErrMalformed, len(tok.Headers))
	}
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	p := v.providers[unverified.Issuer]
	if p == nil {
		return nil, fmt.Errorf("%w: %q is not among the policy's identity providers", ErrUntrusted, unverified.Issuer)
	}
	h := tok.Headers[0]
	if !slices.Contains(p.algs, jose.SignatureAlgorithm(h.Algorithm)) {
		return nil, fmt.Errorf("%w: algorithm %s is not one %s is trusted with (%v)", ErrSignature, h.Algorithm, p.cfg.Issuer, p.algs)
	}
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); strings.EqualFold(typ, "dpop+jwt") {
		return nil, fmt.Errorf("%w: a DPoP proof is not an access token", ErrMalformed)
	}
	key, err := v.key(ctx, p, h.KeyID)
	if err != nil {
		return nil, err
	}
	var payload json.RawMessage
	if err := tok.Claims(key.Key, &payload); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignature, err)
	}
	// The claims as a reader matching names exactly reads them: each
	// member once, no case variants ("Sub" beside "sub"), bounded depth.
	var std jwt.Claims
	var extra claims
	var all map[string]any
	for _, dst := range []any{&std, &extra} {
		if err := strictjson.UnmarshalExact(payload, dst); err != nil {
			return nil, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
		}
	}
	if err := strictjson.Unmarshal(payload, &all); err != nil {
		return nil, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	// An OpenID Connect ID token says who signed in to a client; it is not
	// an access token for this resource, even where its audience (the
	// client id) is one of the provider's.
	for _, c := range []string{"nonce", "at_hash", "c_hash", "auth_time"} {
		if _, ok := all[c]; ok {
			return nil, fmt.Errorf("%w: an ID token (it has %s), not an access token", ErrMalformed, c)
		}
	}
	now := v.now()
	if std.Expiry == nil {
		return nil, fmt.Errorf("%w: no exp: an access token must expire", ErrTime)
	}
	switch err := std.ValidateWithLeeway(jwt.Expected{Issuer: p.cfg.Issuer, AnyAudience: p.cfg.Audiences, Time: now}, p.cfg.skew()); {
	case err == nil:
	case errors.Is(err, jwt.ErrInvalidAudience):
		return nil, fmt.Errorf("%w: aud %v is none of %v", ErrAudience, []string(std.Audience), p.cfg.Audiences)
	case errors.Is(err, jwt.ErrExpired), errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return nil, fmt.Errorf("%w: %v (now %s, exp %s)", ErrTime, err, now.UTC().Format(time.RFC3339), std.Expiry.Time().UTC().Format(time.RFC3339))
	default:
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if std.Subject == "" {
		return nil, fmt.Errorf("%w: no sub", ErrMalformed)
	}
	c := &Caller{Issuer: std.Issuer, Subject: std.Subject, ClientID: extra.ClientID, Audience: std.Audience, TokenID: std.ID,
		Scope: extra.Scope, Expiry: std.Expiry.Time(), Rule: -1}
	if c.TokenID == "" {
		sum := sha256.Sum256([]byte(token))
		c.TokenID = "sha256:" + hex.EncodeToString(sum[:])
	}
	if std.IssuedAt != nil {
		c.IssuedAt = std.IssuedAt.Time()
	}
	if std.NotBefore != nil {
		c.NotBefore = std.NotBefore.Time()
	}
	if extra.Cnf != nil {
		if extra.Cnf.JKT == "" {
			return nil, fmt.Errorf("%w: cnf without jkt: a binding this edge cannot check", ErrMalformed)
		}
		c.Thumbprint = extra.Cnf.JKT
	}
	for a := extra.Act; a != nil; a = a.Act {
		if len(c.Actors) == maxActors {
			return nil, fmt.Errorf("%w: act chain longer than %d", ErrMalformed, maxActors)
		}
		c.Actors = append(c.Actors, a.Actor)
	}
	if !mapRule {
		return c, nil
	}
	for i, r := range p.cfg.Rules {
		if matches(r.Match, all) {
			c.Rule, c.Grants = i, r.Grants
			return c, nil
		}
	}
	return nil, fmt.Errorf("%w: no rule of %s matches sub %q", ErrNoRule, p.cfg.Issuer, c.Subject)
}

// matches reports whether every claim of match holds in claims.
func matches(match map[string]string, claims map[string]any) bool {
	for name, want := range match {
		switch got := claims[name].(type) {
		case string:
			if name == "scope" {
				if !slices.Contains(strings.Fields(got), want) {
					return false
				}
			} else if got != want {
				return false
			}
		case []any:
			if !slices.Contains(got, any(want)) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// key returns the provider's key kid, fetching the provider's keys when
// it has none yet, or when kid is not among them and the last fetch is
// at least the refetch interval old. A fetch holds up only the callers
// that need it: a known key is found while another caller fetches.
func (v *Verifier) key(ctx context.Context, p *provider, kid string) (*jose.JSONWebKey, error) {
	if k := p.find(kid); k != nil {
		return k, nil
	}
	p.fetching.Lock()
	defer p.fetching.Unlock()
	if k := p.find(kid); k != nil {
		return k, nil // fetched while this caller waited
	}
	p.mu.RLock()
	fetched, fetchErr, known := p.fetched, p.fetchErr, len(p.keys.Keys)
	p.mu.RUnlock()
	since := v.now().Sub(fetched)
	if !fetched.IsZero() && since < v.refetch {
		if known == 0 {
			return nil, fmt.Errorf("%w: %s: %v (next fetch in %s)", ErrUnavailable, p.cfg.Issuer, fetchErr, (v.refetch - since).Round(time.Second))
		}
		return nil, fmt.Errorf("%w: key id %q is not in %s's keys (fetched %s ago; refetched at most every %s)", ErrSignature, kid, p.cfg.Issuer, since.Round(time.Second), v.refetch)
	}
	// The fetch is not the caller's to cancel: a request dropped mid-fetch
	// would otherwise spend the provider's one fetch per interval, and a
	// stream of such requests would keep every caller out.
	keys, err := v.fetchKeys(context.WithoutCancel(ctx), p)
	p.mu.Lock()
	p.fetched, p.fetchErr = v.now(), err
	if err == nil {
		p.keys = keys
	}
	p.mu.Unlock()
	if err != nil {
		if known == 0 {
			return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, p.cfg.Issuer, err)
		}
		return nil, fmt.Errorf("%w: key id %q is not in %s's keys, and refetching them failed: %v", ErrSignature, kid, p.cfg.Issuer, err)
	}
	if k := p.find(kid); k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("%w: key id %q is not in %s's keys", ErrSignature, kid, p.cfg.Issuer)
}

// find returns the public signing key kid (the only key, when kid is
// empty and there is one), or nil.
func (p *provider) find(kid string) *jose.JSONWebKey {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var found []*jose.JSONWebKey
	for i := range p.keys.Keys {
		k := &p.keys.Keys[i]
		if (kid == "" || k.KeyID == kid) && k.Use != "enc" && k.IsPublic() {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		return nil
	}
	return found[0]
}

// fetchKeys reads the provider's JWKS, discovering where it is first if
// the configuration does not say.
func (v *Verifier) fetchKeys(ctx context.Context, p *provider) (jose.JSONWebKeySet, error) {
	if p.jwksURI == "" {
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := v.getJSON(ctx, strings.TrimSuffix(p.cfg.Issuer, "/")+"/.well-known/openid-configuration", &doc); err != nil {
			return jose.JSONWebKeySet{}, fmt.Errorf("discovery: %w", err)
		}
		if doc.Issuer != p.cfg.Issuer {
			return jose.JSONWebKeySet{}, fmt.Errorf("discovery: the document names issuer %q, not %q", doc.Issuer, p.cfg.Issuer)
		}
		if doc.JWKSURI == "" {
			return jose.JSONWebKeySet{}, errors.New("discovery: no jwks_uri")
		}
		if u, err := url.Parse(doc.JWKSURI); err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname()))) {
			return jose.JSONWebKeySet{}, fmt.Errorf("discovery: jwks_uri %q is not an https URL", doc.JWKSURI)
		}
		p.jwksURI = doc.JWKSURI
	}
	// Key by key: one key of a type this verifier does not know (a new
	// algorithm, an encryption key) must not make the others unusable.
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := v.getJSON(ctx, p.jwksURI, &raw); err != nil {
		return jose.JSONWebKeySet{}, fmt.Errorf("keys: %w", err)
	}
	var set jose.JSONWebKeySet
	for _, k := range raw.Keys {
		var key jose.JSONWebKey
		if err := key.UnmarshalJSON(k); err == nil {
			set.Keys = append(set.Keys, key)
		}
	}
	if len(set.Keys) == 0 {
		return jose.JSONWebKeySet{}, fmt.Errorf("keys: %s holds no key this verifier can use", p.jwksURI)
	}
	return set, nil
}

func (v *Verifier) getJSON(ctx context.Context, url string, dst any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("GET %s: larger than %d bytes", url, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}
