package guards

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
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
// is an absolute URL against allowed schemes and hosts and, unless
// cfg.AllowPrivate, denies local and private targets: local host names
// ("localhost", "*.internal", single labels), numeric hosts other than a
// dotted quad, and the addresses of NonPublicAddr. It reads strings as
// a WHATWG URL parser (browsers, Node's URL, many HTTP clients) would:
// leading and trailing controls and spaces are ignored, tabs and newlines
// anywhere are dropped, a special scheme (http, https, ws, wss, ftp, file)
// may be followed by any mix of "/" and "\" (or none) before the host, and
// a string starting with two of them ("//host/x") is a scheme-relative URL,
// which is denied. Other schemes are URLs only as "scheme://…". It never
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
	if !mayBeURL(s) {
		return ""
	}
	s = preprocessURL(s)
	if colon := strings.IndexByte(s, ':'); colon > 0 && validScheme(s[:colon]) {
		scheme, rest := s[:colon], s[colon+1:]
		if specialScheme(scheme) {
			rest = trimSlashes(rest) // "\" counts as "/", any number of them
		} else if r, ok := strings.CutPrefix(rest, "//"); ok {
			rest = r
		} else {
			return "" // "note: see docs", "mailto:…": not a URL with a host
		}
		if !g.schemeAllowed(scheme) {
			return "URL scheme not allowed"
		}
		full := "" // s if it is already "scheme://rest"
		if len(rest) == len(s)-colon-3 && s[colon+1] == '/' && s[colon+2] == '/' {
			full = s
		}
		return g.checkHost(scheme, rest, full)
	}
	if schemeRelative(s) {
		// Resolved against the page or client base URL, "//host/x"
		// reaches host with a scheme this guard cannot know.
		return "scheme-relative URL"
	}
	return ""
}

// checkHost checks the host of the URL scheme://rest, which is full
// unless full is "".
func (g *egressGuard) checkHost(scheme, rest, full string) string {
	host, ok := simpleURLHost(rest)
	if !ok {
		if full == "" {
			full = scheme + "://" + rest
		}
		u, err := url.Parse(full)
		if err != nil {
			// A WHATWG parser ends a special URL's authority at a
			// backslash (https:\\host\x), where url.Parse fails: judge
			// that host for the details, but deny in any case, since
			// other parsers read the authority on (https://a\@b/).
			if i := strings.IndexByte(rest, '\\'); i >= 0 && specialScheme(scheme) && strings.IndexAny(rest[:i], "/?#") < 0 {
				if why := g.checkHost(scheme, rest[:i], ""); why != "" {
					return why
				}
			}
			return "unparseable URL"
		}
		host = u.Hostname()
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		// "https:///" or "https://user@/": a client refuses it.
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
		if a, numeric := NumericHost(host); numeric {
			// Only the canonical dotted quad is judged as an address,
			// the other numeric forms denied.
			switch {
			case a.IsValid():
				addr = a
			case !g.allowPrivate:
				return "numeric host"
			}
		}
	}
	if !g.allowPrivate {
		if addr.IsValid() {
			if why := NonPublicAddr(addr); why != "" {
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

// mayBeURL is visit's prefilter: a URL has a ":" or, scheme-relative,
// starts with "/" or "\" after leading spaces and controls (non-ASCII
// bytes are skipped too: preprocessURL trims Unicode spaces).
func mayBeURL(s string) bool {
	if strings.IndexByte(s, ':') >= 0 {
		return true
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '/' || c == '\\':
			return true
		case c > ' ' && c < utf8.RuneSelf:
			return false
		}
	}
	return false
}

// preprocessURL does what a WHATWG URL parser does first: it drops
// leading and trailing C0 controls and spaces (Unicode spaces too, as
// strings.TrimSpace would) and every ASCII tab, CR and LF, so that
// "\x01ht\ttps://host" is read as "https://host".
func preprocessURL(s string) string {
	if n := len(s); n > 0 && (s[0] <= ' ' || s[0] >= utf8.RuneSelf || s[n-1] <= ' ' || s[n-1] >= utf8.RuneSelf) {
		s = strings.TrimFunc(s, isURLSpace)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\t' || c == '\n' || c == '\r' {
			var b strings.Builder
			b.Grow(len(s) - 1)
			b.WriteString(s[:i])
			for i++; i < len(s); i++ {
				if c := s[i]; c != '\t' && c != '\n' && c != '\r' {
					b.WriteByte(c)
				}
			}
			return b.String()
		}
	}
	return s
}

func isURLSpace(r rune) bool { return r <= ' ' || unicode.IsSpace(r) }

// specialScheme reports whether scheme is one of WHATWG's special schemes,
// after which any mix of "/" and "\" (or none) leads to the host.
func specialScheme(scheme string) bool {
	switch len(scheme) {
	case 2:
		return strings.EqualFold(scheme, "ws")
	case 3:
		return strings.EqualFold(scheme, "wss") || strings.EqualFold(scheme, "ftp")
	case 4:
		return strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "file")
	case 5:
		return strings.EqualFold(scheme, "https")
	}
	return false
}

func isSlash(c byte) bool { return c == '/' || c == '\\' }

// trimSlashes drops the leading "/" and "\" of s.
func trimSlashes(s string) string {
	i := 0
	for i < len(s) && isSlash(s[i]) {
		i++
	}
	return s[i:]
}

// schemeRelative reports whether s (preprocessed) starts with two slashes
// ("/" or "\", any mix) followed by an authority a WHATWG parser could
// take: resolved against a base URL with a special scheme it names a host.
// Text such as a "// comment" is not one: a host cannot have a space.
func schemeRelative(s string) bool {
	if len(s) < 2 || !isSlash(s[0]) || !isSlash(s[1]) {
		return false
	}
	auth := trimSlashes(s)
	if i := strings.IndexAny(auth, "/\\?#"); i >= 0 {
		auth = auth[:i]
	}
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		auth = auth[i+1:] // userinfo may hold anything
	}
	if auth == "" {
		return false
	}
	if auth[0] == '[' {
		return true // an IPv6 literal, or an error: either way not text
	}
	host, port, hasPort := strings.Cut(auth, ":")
	if host == "" {
		return false
	}
	for i := 0; i < len(host); i++ {
		switch c := host[i]; {
		case c <= ' ', c == 0x7f, c == '<', c == '>', c == '^', c == '|', c == '[', c == ']':
			return false // a forbidden host code point: the parse fails
		}
	}
	if hasPort {
		for i := 0; i < len(port); i++ {
			if !isDigit(port[i]) {
				return false
			}
		}
	}
	return true
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
