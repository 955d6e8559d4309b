package guards

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// EgressConfig configures NewEgressGuard.
type EgressConfig struct {
	AllowedSchemes []string `json:"allowed_schemes,omitempty"` // default ["https"]
	AllowedHosts   []string `json:"allowed_hosts,omitempty"`   // exact host or "*.example.com" (matches subdomains, not the apex); empty = any public host
	AllowPrivate   bool     `json:"allow_private,omitempty"`   // allow loopback/private/link-local/unspecified targets
}

type egressGuard struct {
	schemes      []string            // lowercase
	exact        map[string]struct{} // lowercase hosts, IPs in netip's form
	suffixes     []string            // ".example.com" for "*.example.com"
	allowPrivate bool
}

// NewEgressGuard returns the guard that checks every string argument that
// is an absolute URL ("scheme://…") against allowed schemes and hosts and,
// unless cfg.AllowPrivate, denies local and private targets. It never
// resolves names (decisions must be deterministic), so it judges the host
// as written: a public name that resolves to a private address passes.
func NewEgressGuard(cfg EgressConfig) (Guard, error) {
	g := &egressGuard{allowPrivate: cfg.AllowPrivate}
	schemes := cfg.AllowedSchemes
	if len(schemes) == 0 {
		schemes = []string{"https"}
	}
	for _, s := range schemes {
		if !validScheme(s) {
			return nil, fmt.Errorf("egress guard: allowed scheme %q is not an RFC 3986 scheme", abbreviate(s, 64))
		}
		g.schemes = append(g.schemes, strings.ToLower(s))
	}
	for _, h := range cfg.AllowedHosts {
		host := strings.TrimSuffix(strings.ToLower(h), ".")
		if rest, ok := strings.CutPrefix(host, "*."); ok {
			if !validHostName(rest) {
				return nil, fmt.Errorf("egress guard: allowed host %q is not a host or *.domain", abbreviate(h, 64))
			}
			g.suffixes = append(g.suffixes, "."+rest)
			continue
		}
		if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
			host = a.String()
		} else if !validHostName(host) {
			return nil, fmt.Errorf("egress guard: allowed host %q is not a host or *.domain", abbreviate(h, 64))
		}
		if g.exact == nil {
			g.exact = make(map[string]struct{})
		}
		g.exact[host] = struct{}{}
	}
	return g, nil
}

func (*egressGuard) Name() string { return "EgressAllowlistGuard" }

func (g *egressGuard) Check(_ context.Context, c *Call) (Result, error) {
	if c == nil {
		return Result{}, errors.New("egress guard: no call")
	}
	args, err := c.Args()
	if err != nil {
		return Result{}, fmt.Errorf("egress guard: %w", err)
	}
	if !anyViolation(args, false, "", g.visit) {
		return Result{Allow: true}, nil
	}
	return Result{Details: violationDetails(args, false, g.visit)}, nil
}

// visit checks one string value. Rules never quote the scheme or host:
// a host can carry exfiltrated data ("<secret>.attacker.example").
func (g *egressGuard) visit(s string, _ bool, _ string) string {
	if !strings.Contains(s, "://") {
		return ""
	}
	s = strings.TrimSpace(s)
	scheme, _, ok := strings.Cut(s, "://")
	if !ok || !validScheme(scheme) {
		return "" // text that merely contains "://" is not a URL
	}
	if !g.schemeAllowed(scheme) {
		return "URL scheme not allowed"
	}
	host, ok := simpleURLHost(s[len(scheme)+3:])
	if !ok {
		u, err := url.Parse(s)
		if err != nil {
			return "unparseable URL"
		}
		host = u.Hostname()
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		// A client following the WHATWG URL standard reads
		// "https:///evil.example" as host evil.example.
		return "URL has no host"
	}
	var addr netip.Addr // valid when the host is an IP literal
	if strings.IndexByte(host, ':') >= 0 {
		a, err := netip.ParseAddr(strings.ToLower(host))
		if err != nil {
			return "malformed IP address"
		}
		addr = a
	} else {
		valid, upper := scanHostName(host)
		if !valid {
			return "malformed or non-ASCII host"
		}
		if upper {
			host = strings.ToLower(host)
		}
		if lastLabelNumeric(host) {
			// WHATWG clients read a host ending in a number as IPv4 in
			// decimal, octal or hex, in 1 to 4 parts: only the canonical
			// dotted quad is judged as an address, the rest denied.
			a, err := netip.ParseAddr(host)
			switch {
			case err == nil && a.Is4():
				addr = a
			case !g.allowPrivate:
				return "numeric host"
			}
		}
	}
	if !g.allowPrivate {
		if addr.IsValid() {
			if why := nonPublicAddr(addr); why != "" {
				return why
			}
		} else if why := localName(host); why != "" {
			return why
		}
	}
	if !g.hostAllowed(host, addr) {
		return "host not in the allowlist"
	}
	return ""
}

func (g *egressGuard) schemeAllowed(scheme string) bool {
	for _, s := range g.schemes {
		if strings.EqualFold(s, scheme) {
			return true
		}
	}
	return false
}

func (g *egressGuard) hostAllowed(host string, addr netip.Addr) bool {
	if g.exact == nil && g.suffixes == nil {
		return true
	}
	if addr.IsValid() {
		host = addr.WithZone("").String()
	}
	if _, ok := g.exact[host]; ok {
		return true
	}
	for _, suf := range g.suffixes {
		if len(host) > len(suf) && strings.HasSuffix(host, suf) {
			return true
		}
	}
	return false
}

// validScheme reports whether s is an RFC 3986 scheme:
// ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ).
func validScheme(s string) bool {
	if s == "" || !isAlpha(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isAlpha(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// validHostName reports whether h is a plain ASCII host name: letters,
// digits, "-" and "_" in non-empty dot-separated labels. Anything else
// (non-ASCII that a client would IDNA-map, say "ⓛocalhost", or stray
// punctuation) is refused rather than guessed at.
func validHostName(h string) bool {
	ok, _ := scanHostName(h)
	return ok
}

// scanHostName is validHostName, also reporting upper-case letters so
// that the common lower-case host is not copied to be lowered.
func scanHostName(h string) (valid, upper bool) {
	if h == "" || len(h) > 253 {
		return false, false
	}
	label := 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if label == 0 {
				return false, false
			}
			label = 0
			continue
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= 'a' && c <= 'z', isDigit(c), c == '-', c == '_':
		default:
			return false, false
		}
		label++
	}
	return label > 0, upper
}

// simpleURLHost returns the host of the common URL without url.Parse's
// allocation: rest (what follows "scheme://") must have an authority of
// only letters, digits, "." and "-" with an optional numeric port, and
// nothing after it that url.Parse could refuse (no "%", controls, space
// or non-ASCII). Anything else goes to url.Parse; FuzzSimpleURLHost
// checks that both agree.
func simpleURLHost(rest string) (host string, ok bool) {
	end := len(rest)
	port := -1
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if c == '/' || c == '?' || c == '#' {
			end = i
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '.', c == '-':
			if port >= 0 {
				return "", false
			}
		case isDigit(c):
		case c == ':' && port < 0:
			port = i
		default:
			return "", false
		}
	}
	for i := end; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c >= 0x7f || c == '%' {
			return "", false
		}
	}
	host = rest[:end]
	if port >= 0 {
		host = rest[:port]
	}
	return host, host != ""
}

// lastLabelNumeric reports whether h's last label is a number (decimal
// or 0x-hex), which makes WHATWG clients parse h as an IPv4 address.
func lastLabelNumeric(h string) bool {
	l := h[strings.LastIndexByte(h, '.')+1:]
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") {
		l = l[2:]
		for i := 0; i < len(l); i++ {
			if !isDigit(l[i]) && (l[i] < 'a' || l[i] > 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if !isDigit(l[i]) {
			return false
		}
	}
	return true
}

// localName returns why a host name is local, or "".
func localName(h string) string {
	switch {
	case h == "localhost", strings.HasSuffix(h, ".localhost"):
		return "loopback host name"
	case strings.HasSuffix(h, ".local"), strings.HasSuffix(h, ".internal"),
		strings.HasSuffix(h, ".home.arpa"), h == "home.arpa":
		return "local host name"
	case strings.IndexByte(h, '.') < 0:
		// Single-label names ("metadata", "intranet") resolve only
		// through local search domains.
		return "single-label host name"
	}
	return ""
}

// nonPublicRanges are the ranges beyond netip's predicates that a call
// must not reach: "this network", CGNAT, IETF protocol assignments,
// benchmarking, reserved and broadcast; IPv6 site-local and local-use
// NAT64.
var nonPublicRanges = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("fec0::/10"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
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
	addr = addr.Unmap().WithZone("") // a zoned address matches no prefix

	switch {
	case addr.IsLoopback():
		return "loopback address"
	case addr.IsUnspecified():
		return "unspecified address"
	case addr.IsPrivate():
		return "private address"
	case addr.IsLinkLocalUnicast():
		return "link-local address"
	case addr.IsMulticast():
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
