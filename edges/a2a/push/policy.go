package push

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chio-ledger/chio/edges/guards"
)

// Policy decides which webhook URLs are acceptable: the SSRF defence of
// push notifications. It is applied twice: by CheckURL when a config is
// created (the edge calls it before Store.Put), and by the Outbox for
// every delivery, on the URL and again on every address the HTTP client
// connects to, so that a name that resolved to a public address at
// creation and to an internal one later (DNS rebinding) is refused.
//
// The rules:
//
//   - The URL is an absolute http or https URL of at most MaxURLBytes
//     printable ASCII characters (no spaces, controls or backslashes) with
//     a host, no userinfo, no percent-encoding in the authority and a port,
//     if any, in 1..65535.
//   - A host whose last label is a number must be a dotted-decimal IPv4
//     address: octal, hex, decimal-integer and short forms
//     ("0177.1", "0x7f000001", "2130706433", "127.1"), which some
//     resolvers read as addresses, are refused.
//   - Every address the host is (an IP literal) or resolves to (a name)
//     must be public unicast, unless it is in AllowPrivate: see
//     guards.NonPublicAddr, shared with the kernel's egress guard. Not
//     public are loopback, unspecified, RFC 1918 and unique-local,
//     link-local (including 169.254.169.254), multicast, CGNAT, "this
//     network", benchmarking, reserved and documentation ranges, IPv6
//     forms that embed a non-public IPv4 address (IPv4-mapped,
//     -translated and -compatible, NAT64, 6to4) and every Teredo address.
//   - Loopback: when AllowInsecureLoopback is set, a URL whose host is
//     literally "localhost", a dotted-decimal address in 127.0.0.0/8, or
//     the IPv6 loopback ("[::1]", in any spelling of that address but not
//     IPv4-mapped) may use http or https and may connect to loopback
//     addresses only. A name that merely resolves to a loopback address
//     is refused like any other non-public address: loopback is allowed by
//     what the client wrote, never by what DNS answered.
//   - Otherwise the scheme must be https: http is allowed for loopback
//     hosts only, never for public or AllowPrivate hosts.
//
// The zero Policy allows no loopback and no private network;
// DefaultPolicy allows loopback, for local development and the A2A
// conformance kit's webhook receiver. Redirects are never followed and no
// HTTP proxy is used (a proxy would connect on the client's behalf to
// addresses the policy cannot see).
type Policy struct {
	// AllowPrivate lists private or internal networks the operator
	// explicitly allows (for any host, name or literal). It also wins over
	// every other address rule.
	AllowPrivate []netip.Prefix
	// AllowInsecureLoopback allows webhooks on loopback hosts, over http
	// or https (see the rules above). DefaultPolicy sets it.
	AllowInsecureLoopback bool
	// Resolver resolves host names; nil means net.DefaultResolver.
	Resolver *net.Resolver
}

// DefaultPolicy is the policy of an edge with no configuration: public
// https webhooks and loopback webhooks over http or https.
func DefaultPolicy() Policy { return Policy{AllowInsecureLoopback: true} }

func (p Policy) resolver() *net.Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

func forbidden(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrForbiddenURL}, args...)...)
}

// CheckURL reports whether raw is an acceptable webhook URL (see Policy),
// resolving its host with the policy's resolver. It returns nil or an
// error wrapping ErrForbiddenURL with the reason, except when ctx ends
// first (then the error wraps ctx's).
func (p Policy) CheckURL(ctx context.Context, raw string) error {
	t, err := p.checkStatic(raw)
	if err != nil {
		return fmt.Errorf("check webhook URL: %w", err)
	}
	if t.addr.IsValid() || (t.loopbackName && p.AllowInsecureLoopback) {
		// A literal is judged as written; "localhost" may only connect
		// to loopback addresses, which the dialer enforces.
		return nil
	}
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", t.host)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("check webhook URL: resolve host: %w", ctx.Err())
		}
		return fmt.Errorf("check webhook URL: %w", forbidden("host does not resolve: %w", err))
	}
	if len(addrs) == 0 {
		return fmt.Errorf("check webhook URL: %w", forbidden("host has no addresses"))
	}
	for _, a := range addrs {
		if why := p.addrForbidden(a, false); why != "" {
			return fmt.Errorf("check webhook URL: %w", forbidden("host resolves to a %s", why))
		}
	}
	return nil
}

// checkStatic applies every rule that needs no resolution: the URL's
// syntax, the scheme and, for an IP literal, the address.
func (p Policy) checkStatic(raw string) (target, error) {
	t, err := parseURL(raw)
	if err != nil {
		return target{}, err
	}
	loopback := t.loopbackName || (t.addr.IsValid() && t.loopbackLiteral())
	if t.u.Scheme == "http" && !(loopback && p.AllowInsecureLoopback) {
		return target{}, forbidden("http is allowed only for loopback hosts; use https")
	}
	if t.addr.IsValid() {
		if why := p.addrForbidden(t.addr, t.loopbackLiteral()); why != "" {
			return target{}, forbidden("%s", why)
		}
	}
	return t, nil
}

// target is a parsed webhook URL.
type target struct {
	u    *url.URL
	host string     // lower case, no trailing dot; no brackets
	addr netip.Addr // valid when the host is an IP literal
	// loopbackName: the host is the name "localhost".
	loopbackName bool
}

// loopbackLiteral reports whether the host is a loopback IP literal
// written as one: 127.0.0.0/8 in dotted decimal or the IPv6 loopback,
// not an IPv4-mapped form.
func (t target) loopbackLiteral() bool {
	return t.addr.IsValid() && !t.addr.Is4In6() && t.addr.IsLoopback()
}

// parseURL applies the policy-independent syntax rules (see Policy).
func parseURL(raw string) (target, error) {
	if raw == "" {
		return target{}, forbidden("empty URL")
	}
	if len(raw) > MaxURLBytes {
		return target{}, forbidden("URL longer than %d bytes", MaxURLBytes)
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return target{}, forbidden("URL has spaces, control, non-ASCII or backslash characters")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, forbidden("malformed URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return target{}, forbidden("scheme is not http or https")
	}
	rest := raw[len(u.Scheme)+1:]
	if u.Opaque != "" || !strings.HasPrefix(rest, "//") {
		return target{}, forbidden("URL has no authority")
	}
	authority := rest[2:]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	if u.User != nil || strings.Contains(authority, "@") {
		return target{}, forbidden("userinfo in URL")
	}
	if strings.Contains(authority, "%") {
		return target{}, forbidden("percent-encoded host")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return target{}, forbidden("port not in 1..65535")
		}
	}
	t := target{u: u}
	host := u.Hostname()
	switch {
	case host == "":
		return target{}, forbidden("URL has no host")
	case strings.HasPrefix(authority, "["):
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return target{}, forbidden("malformed IPv6 address")
		}
		t.host, t.addr = host, a
		return t, nil
	}
	name := strings.ToLower(host)
	trimmed := strings.TrimSuffix(name, ".")
	if !validHostName(trimmed) {
		return target{}, forbidden("malformed or non-ASCII host name")
	}
	if a, numeric := guards.NumericHost(trimmed); numeric {
		// Only the canonical dotted quad, without a trailing dot, is an
		// address; the other numeric forms are refused, not guessed at.
		if !a.IsValid() || trimmed != name {
			return target{}, forbidden("numeric host not in dotted-decimal IPv4 form")
		}
		t.host, t.addr = name, a
		return t, nil
	}
	t.host = trimmed
	t.loopbackName = trimmed == "localhost"
	return t, nil
}

// validHostName reports whether h is a plain ASCII host name: letters,
// digits, "-" and "_" in non-empty dot-separated labels of at most 63
// bytes, 253 in all. Non-ASCII names must be sent in punycode.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	label := 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
		label++
		if label > 63 {
			return false
		}
	}
	return label > 0
}

// addrForbidden returns why the policy refuses a connection to a, or ""
// when it allows it. loopbackOK says the URL's host was a loopback host
// as written (see Policy).
func (p Policy) addrForbidden(a netip.Addr, loopbackOK bool) string {
	a = a.WithZone("")
	u := a.Unmap()
	for _, pre := range p.AllowPrivate {
		if pre.Contains(a) || pre.Contains(u) {
			return ""
		}
	}
	if loopbackOK && p.AllowInsecureLoopback && u.IsLoopback() {
		return ""
	}
	return guards.NonPublicAddr(u)
}

// dialer returns the DialContext of the delivery client: it dials with the
// policy's resolver and refuses, in net.Dialer.Control, a connection to
// any address the policy forbids for the host being dialed. Control runs
// for every address the dialer tries, after resolution, so the check is
// on the address actually connected to.
func (p Policy) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, forbidden("malformed address"))
		}
		// The transport dials the URL's host as written (brackets
		// stripped): the same rules decide whether it is a loopback host.
		loopbackOK := false
		if a, err := netip.ParseAddr(host); err == nil {
			loopbackOK = !a.Is4In6() && a.IsLoopback() && a.Zone() == ""
		} else {
			loopbackOK = strings.TrimSuffix(strings.ToLower(host), ".") == "localhost"
		}
		d := &net.Dialer{
			Timeout:   timeout,
			KeepAlive: 30 * time.Second,
			Resolver:  p.resolver(),
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return forbidden("unparseable address")
				}
				if why := p.addrForbidden(ap.Addr(), loopbackOK); why != "" {
					return forbidden("connection to a %s", why)
				}
				return nil
			},
		}
		return d.DialContext(ctx, network, addr)
	}
}
