package auth

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// secureEndpoint accepts a token or discovery URL only when it is https, or
// plain http to a loopback host, so client secrets never cross a network in
// the clear.
func secureEndpoint(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("no URL declared")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parse URL: %w", err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %s has no host", u.Redacted())
	}
	if !secureTarget(u) {
		return nil, fmt.Errorf("URL %s must be https, or http to a loopback host", u.Redacted())
	}
	return u, nil
}

// secureTarget reports whether a request to u keeps secrets off the network
// in cleartext.
func secureTarget(u *url.URL) bool {
	switch strings.ToLower(u.Scheme) {
	case "https":
		return true
	case "http":
		return isLoopback(u.Hostname())
	default:
		return false
	}
}

// isLoopback accepts localhost, 127.0.0.0/8 and ::1 (also IPv4-mapped).
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}

// origin is scheme://host:port with the default port made explicit, so
// https://a and https://a:443 compare equal.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		switch scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
