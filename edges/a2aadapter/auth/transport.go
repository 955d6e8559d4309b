package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/chio-ledger/chio/internal/redact"
	"net"
	"net/http"
	"net/url"
	"slices"
	"time"
)

const (
	dialTimeout         = 10 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	idleConnTimeout     = 90 * time.Second
	// endpointTimeout bounds a whole token or discovery exchange.
	endpointTimeout = 30 * time.Second
	maxRedirects    = 10
)

// transport adds the extras and the chosen scheme credentials to every
// request, on a clone as the RoundTripper contract requires.
type transport struct {
	base        http.RoundTripper
	credentials []credential
	// guarded is set when any credential (including a client certificate)
	// is in play, so cleartext to a non-loopback host is refused.
	guarded bool
	headers http.Header
	query   url.Values
	cookies []*http.Cookie
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.guarded && !secureTarget(req.URL) {
		closeBody(req)
		return nil, fmt.Errorf("auth: refusing to send credentials over plain %s to non-loopback host %s", req.URL.Scheme, req.URL.Host)
	}
	out := req.Clone(req.Context())
	for name, values := range t.headers {
		out.Header[http.CanonicalHeaderKey(name)] = append([]string(nil), values...)
	}
	if len(t.query) > 0 {
		q := out.URL.Query()
		for name, values := range t.query {
			q[name] = append([]string(nil), values...)
		}
		out.URL.RawQuery = q.Encode()
	}
	for _, c := range t.cookies {
		out.AddCookie(c)
	}
	// Credentials go last so that an extra cannot overwrite them.
	for _, attach := range t.credentials {
		if err := attach(out); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	// Whoever reads the answer redacts what was attached here from it: a
	// partner may echo a request's credentials back.
	redact.Collect(req.Context(), attached(req, out)...)
	return t.base.RoundTrip(out)
}

// attached lists the header, query and cookie values out carries that
// req did not: the extras and the credentials.
func attached(req, out *http.Request) []string {
	var values []string
	for name, vs := range out.Header {
		if !slices.Equal(req.Header[name], vs) {
			values = append(values, vs...)
		}
	}
	if out.URL.RawQuery != req.URL.RawQuery {
		q := req.URL.Query()
		for name, vs := range out.URL.Query() {
			if !slices.Equal(q[name], vs) {
				values = append(values, vs...)
			}
		}
	}
	return values
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// newBaseTransport has dial and handshake timeouts but no response timeout:
// a blocking SendMessage or a stream legitimately holds the response open,
// and the caller's context bounds the call.
func newBaseTransport(roots *x509.CertPool, clientCert *tls.Certificate) *http.Transport {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       cfg,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   tlsHandshakeTimeout,
		IdleConnTimeout:       idleConnTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          100,
	}
}

// sameOriginRedirects follows redirects only within the first request's
// origin, because the transport re-attaches credentials on every hop.
func sameOriginRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("auth: stopped after %d redirects", maxRedirects)
	}
	if from, to := origin(via[0].URL), origin(req.URL); from != to {
		return fmt.Errorf("auth: refusing redirect from %s to another origin %s", from, to)
	}
	return nil
}

// endpointClient talks to token and discovery endpoints. It never presents
// the client certificate: that identity is for the partner's mTLS scheme.
func endpointClient(roots *x509.CertPool) *http.Client {
	return &http.Client{
		Transport: newBaseTransport(roots, nil),
		Timeout:   endpointTimeout,
		// Endpoints are used exactly as declared or discovered: a redirect
		// could carry the client secret, or the discovery, elsewhere.
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			return fmt.Errorf("auth: refusing redirect of token or discovery request to %s", origin(req.URL))
		},
	}
}
