package a2aadapter

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// wellKnownCardPath is where a base URL's card lives.
const wellKnownCardPath = "/.well-known/agent-card.json"

// checkURL parses raw as an absolute http(s) URL that may be used: https,
// or plain http to a loopback host (localhost, 127.0.0.0/8, ::1). It never
// dials. URLs with user info are refused: they carry credentials, which
// would then travel into errors and logs.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse URL: %w", err)
	}
	switch {
	case !u.IsAbs() || u.Host == "":
		return nil, fmt.Errorf("URL %s is not absolute", safeURL(u))
	case u.User != nil:
		return nil, fmt.Errorf("URL %s carries user info; credentials belong to the Authorizer", safeURL(u))
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("URL %s: %w", safeURL(u), ErrInsecureURL)
		}
	default:
		return nil, fmt.Errorf("URL %s: scheme %q is not http or https", safeURL(u), u.Scheme)
	}
	return u, nil
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// cardURL is the card's URL for a target: the target itself when its path
// ends in ".json", else the well-known path under it (joined as a2a-go's
// resolver does).
func cardURL(target *url.URL) *url.URL {
	if strings.HasSuffix(strings.ToLower(target.Path), ".json") {
		return target
	}
	return target.JoinPath(wellKnownCardPath)
}

// origin is u's scheme://host[:port], lower-cased, default port dropped.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	port := u.Port()
	if port == "" || (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		return scheme + "://" + host
	}
	return scheme + "://" + host + ":" + port
}

// serverIDOf is the adapter's server id for a target: "a2a:" and its
// host[:port], lower-cased, the scheme's default port dropped, so that
// spellings of one target share an id.
func serverIDOf(target *url.URL) string {
	o := origin(target)
	return "a2a:" + o[strings.Index(o, "://")+3:]
}

// safeURL is u without user info, query or fragment: the form errors and
// logs may carry, since API keys can travel in a query string.
func safeURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return c.String()
}

// safeRawURL is safeURL of raw; a bare host:port as it is (a gRPC
// interface's URL, which holds no user info or query, and which url.Parse
// refuses or reads as a scheme); a placeholder for anything else that
// does not parse.
func safeRawURL(raw string) string {
	if !strings.Contains(raw, "://") {
		if host, port, err := net.SplitHostPort(raw); err == nil && host != "" && port != "" &&
			strings.Trim(port, "0123456789") == "" && !strings.ContainsFunc(host, func(r rune) bool {
			return r <= ' ' || r == 0x7f || strings.ContainsRune("/?#@", r) // nothing a terminal or a URL reads
		}) {
			return net.JoinHostPort(host, port)
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return safeURL(u)
}
