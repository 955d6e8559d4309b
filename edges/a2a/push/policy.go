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
//     must be public unicast, unless it is in AllowPrivate. Not public are
//     loopback, unspecified, RFC 1918 and unique-local, link-local
//     (including 169.254.169.254), multicast, CGNAT, "this network",
//     benchmarking, reserved and documentation ranges, IPv4-mapped and
//     -translated forms of those, and IPv6 prefixes that embed a
//     non-public IPv4 address (NAT64, IPv4-compatible, 6to4).
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
	if lastLabelNumeric(trimmed) {
		// Only the canonical dotted quad, without a trailing dot, is an
		// address; the other numeric forms are refused, not guessed at.
		a, err := netip.ParseAddr(name)
		if err != nil || !a.Is4() {
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

// lastLabelNumeric reports whether h's last label is a number (decimal
// or 0x-hex), which makes WHATWG URL parsers and inet_aton read h as an
// IPv4 address.
func lastLabelNumeric(h string) bool {
	l := h[strings.LastIndexByte(h, '.')+1:]
	if l == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(l, "0x"); ok {
		for i := 0; i < len(rest); i++ {
			if c := rest[i]; !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
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
	if why := nonPublicAddr(u); why != "" {
		return why
	}
	return ""
}

// The address classification below follows edges/guards (egress.go),
// whose classifier is not exported; it adds the documentation, discard,
// Teredo and IPv4-translated ranges, which a webhook never needs.

// nonPublicRanges are the ranges beyond netip's predicates that a webhook
// must not reach.
var nonPublicRanges = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("fec0::/10"),       // site-local
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001::/32"),       // Teredo
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated
}

// Prefixes of IPv6 addresses that embed an IPv4 address a gateway may
// forward to: NAT64 (last 32 bits), IPv4-compatible (last 32 bits) and
// 6to4 (bits 16-47).
var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	compatPrefix = netip.MustParsePrefix("::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
)

// nonPublicAddr returns why addr is not a public unicast address, or "".
func nonPublicAddr(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	switch {
	case !addr.IsValid():
		return "invalid address"
	case addr.IsLoopback():
		return "loopback address"
	case addr.IsUnspecified():
		return "unspecified address"
	case addr.IsPrivate():
		return "private address"
	case addr.IsLinkLocalUnicast():
		return "link-local address"
	case addr.IsMulticast(), addr.IsLinkLocalMulticast(), addr.IsInterfaceLocalMulticast():
		return "multicast address"
	}
	for _, p := range nonPublicRanges {
		if p.Contains(addr) {
			return "non-public address"
		}
	}
	if addr.Is6() {
		b := addr.As16()
		var v4 [4]byte
		switch {
		case nat64Prefix.Contains(addr), compatPrefix.Contains(addr):
			copy(v4[:], b[12:])
		case sixToFour.Contains(addr):
			copy(v4[:], b[2:6])
		default:
			return ""
		}
		if why := nonPublicAddr(netip.AddrFrom4(v4)); why != "" {
			return why + " (embedded in IPv6)"
		}
	}
	return ""
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
