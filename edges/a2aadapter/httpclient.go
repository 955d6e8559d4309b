package a2aadapter

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Timeouts of the default clients. The call client has no overall
// timeout: a blocking SendMessage lasts as long as the task, a stream as
// long as its events; the caller's context bounds both.
const (
	discoveryTimeout = 30 * time.Second
	dialTimeout      = 10 * time.Second
	maxCardRedirects = 5
)

// errRedirect: A2A endpoints answer in place; following a redirect could
// carry credentials to a host the card never named.
var errRedirect = errors.New("redirects are not followed on A2A calls")

// defaultTransport is a transport with dial and handshake timeouts.
func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   dialTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// guard is the outermost round tripper of every adapter client: it refuses,
// before anything is dialed, a request that breaks the https rule or, when
// origin is set, leaves the chosen interface's origin.
type guard struct {
	next   http.RoundTripper
	origin string
}

func (g guard) RoundTrip(r *http.Request) (*http.Response, error) {
	refuse := func(err error) (*http.Response, error) {
		if r.Body != nil {
			r.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, err
	}
	u, err := checkURL(r.URL.String())
	if err != nil {
		return refuse(fmt.Errorf("refused before dialing: %w", err))
	}
	if g.origin != "" && origin(u) != g.origin {
		return refuse(fmt.Errorf("refused before dialing: %s is outside the chosen interface's origin %s", safeURL(u), g.origin))
	}
	next := g.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// discoveryClient is base (or a default) behind the guard, following at most
// a few redirects, each held to the https rule.
func discoveryClient(base *http.Client) *http.Client {
	if base == nil {
		base = &http.Client{Timeout: discoveryTimeout, Transport: defaultTransport()}
	}
	c := *base
	c.Transport = guard{next: base.Transport}
	theirs := base.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxCardRedirects {
			return fmt.Errorf("fetch card: more than %d redirects", maxCardRedirects)
		}
		if _, err := checkURL(req.URL.String()); err != nil {
			return fmt.Errorf("fetch card: redirect: %w", err)
		}
		if theirs != nil {
			return theirs(req, via)
		}
		return nil
	}
	return &c
}

// callClient is base behind the guard, held to the interface's origin and
// following no redirect, its answers read through the answerGate (bounded,
// strict JSON).
func callClient(base *http.Client, ifaceOrigin string) *http.Client {
	c := *base
	c.Transport = guard{next: answerGate{next: base.Transport}, origin: ifaceOrigin}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return errRedirect }
	return &c
}

// defaultCallClient is the client for calls without an Authorizer: the
// Discovery client (its TLS roots and client certificate apply to the
// partner too) without its overall timeout, which would cut a long task or
// stream short (the caller's context bounds calls), or a default.
func defaultCallClient(discovery *http.Client) *http.Client {
	if discovery == nil {
		return &http.Client{Transport: defaultTransport()}
	}
	c := *discovery
	c.Timeout = 0
	return &c
}
