package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// Authorize picks the first of the card's security requirement sets whose
// every scheme the credentials satisfy, and returns an *http.Client that
// sends exactly those credentials (and the extras) on every request, plus
// the names of the schemes it satisfies, sorted.
//
// A card with no requirements, or whose chosen set is empty, gets a client
// with the extras only. When no set can be satisfied the error wraps
// ErrUnsatisfiable (as an *UnsatisfiableError naming each scheme and why)
// and nothing has been sent anywhere. Token acquisition is lazy; OIDC
// discovery, which needs ctx, runs here for the chosen set only.
func (c Credentials) Authorize(ctx context.Context, card *a2a.AgentCard) (*http.Client, []string, error) {
	if card == nil {
		return nil, nil, errors.New("auth: authorize: nil agent card")
	}
	if err := c.checkExtras(); err != nil {
		return nil, nil, fmt.Errorf("auth: authorize: %w", err)
	}
	if len(card.SecurityRequirements) == 0 {
		return c.client(nil, false), nil, nil
	}
	endpoints := endpointClient(c.TLS.rootCAs())
	var failures []Failure
	for i, set := range card.SecurityRequirements {
		names, grants, failed := c.plan(i, card.SecuritySchemes, set)
		if len(failed) > 0 {
			failures = append(failures, failed...)
			continue
		}
		creds, mtls, failed := resolve(ctx, i, names, grants, endpoints)
		if len(failed) > 0 {
			failures = append(failures, failed...)
			continue
		}
		return c.client(creds, mtls), names, nil
	}
	return nil, nil, &UnsatisfiableError{Failures: failures}
}

// plan checks one requirement set without any I/O. Names are sorted so that
// results and errors are deterministic despite the set being a map.
func (c Credentials) plan(set int, schemes a2a.NamedSecuritySchemes, req a2a.SecurityRequirements) ([]string, []grant, []Failure) {
	names := make([]string, 0, len(req))
	for name := range req {
		names = append(names, string(name))
	}
	slices.Sort(names)
	grants := make([]grant, 0, len(names))
	var failures []Failure
	slots := make(map[string]string, len(names))
	for _, name := range names {
		fail := func(err error) { failures = append(failures, Failure{Set: set, Scheme: name, Err: err}) }
		scheme, ok := schemes[a2a.SecuritySchemeName(name)]
		if !ok {
			fail(errors.New("not declared in the card's securitySchemes"))
			continue
		}
		g, err := c.grantFor(a2a.SecuritySchemeName(name), scheme, req[a2a.SecuritySchemeName(name)])
		if err != nil {
			fail(err)
			continue
		}
		if other, taken := slots[g.slot]; taken {
			fail(fmt.Errorf("conflicts with scheme %q: both need %s", other, g.slot))
			continue
		}
		slots[g.slot] = name
		grants = append(grants, g)
	}
	return names, grants, failures
}

// resolve builds the credentials of a set that passed plan; a failure here
// (say, discovery) makes the set unsatisfiable and Authorize moves on.
func resolve(ctx context.Context, set int, names []string, grants []grant, endpoints *http.Client) ([]credential, bool, []Failure) {
	var (
		creds    []credential
		mtls     bool
		failures []Failure
	)
	for i, g := range grants {
		cred, err := g.resolve(ctx, endpoints)
		if err != nil {
			failures = append(failures, Failure{Set: set, Scheme: names[i], Err: err})
			continue
		}
		if cred != nil {
			creds = append(creds, cred)
		}
		mtls = mtls || g.mtls
	}
	return creds, mtls, failures
}

// client snapshots the extras so later changes by the caller cannot race
// with requests in flight.
func (c Credentials) client(creds []credential, mtls bool) *http.Client {
	var clientCert *tls.Certificate
	if mtls {
		clientCert = c.TLS.ClientCert
	}
	cookies := make([]*http.Cookie, 0, len(c.Cookies))
	for _, ck := range c.Cookies {
		cookies = append(cookies, &http.Cookie{Name: ck.Name, Value: ck.Value, Quoted: ck.Quoted})
	}
	return &http.Client{
		Transport: &transport{
			base:        newBaseTransport(c.TLS.rootCAs(), clientCert),
			credentials: creds,
			guarded:     len(creds) > 0 || mtls,
			headers:     c.Headers.Clone(),
			query:       cloneValues(c.Query),
			cookies:     cookies,
		},
		CheckRedirect: sameOriginRedirects,
	}
}

// checkExtras rejects extra cookies net/http would otherwise log and alter
// when sending; the message names the cookie, not its value.
func (c Credentials) checkExtras() error {
	for _, ck := range c.Cookies {
		if ck == nil {
			return errors.New("extra cookie is nil")
		}
		if (&http.Cookie{Name: ck.Name, Value: ck.Value}).Valid() != nil {
			return fmt.Errorf("extra cookie %q has an invalid name or value", ck.Name)
		}
	}
	return nil
}

func cloneValues(v url.Values) url.Values {
	out := make(url.Values, len(v))
	for name, values := range v {
		out[name] = append([]string(nil), values...)
	}
	return out
}
