// Package console serves Chio's web console at /console/: static ES
// modules embedded in the binary, no build step and nothing fetched at run
// time. The page reads the ledger and projection APIs with the credential
// its user signs in with (Authorization: Bearer, never a cookie), so it
// shows exactly what that credential may read, and it verifies receipts,
// inclusion proofs, checkpoint signatures and witness cosignatures in the
// browser (WebCrypto).
//
// Every answer carries a strict Content-Security-Policy: scripts and styles
// only from this origin, no inline script, no framing, and network access
// only to this origin and the configured ledger origin.
package console

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

//go:embed static
var static embed.FS

// Prefix is where the console is mounted.
const Prefix = "/console/"

// Config is the body of /console/config.json: where the page finds the
// ledger API. LedgerURL is empty when the ledger is this origin (chio up).
type Config struct {
	LedgerURL string `json:"ledgerUrl"`
}

// Option configures Register.
type Option func(*settings) error

type settings struct {
	ledger string // an origin (scheme://host[:port]) or ""
}

// WithLedgerURL points the page at a ledger API on another origin (chio
// projections --console-ledger-url); see LedgerOrigin.
func WithLedgerURL(raw string) Option {
	return func(s *settings) (err error) {
		s.ledger, err = LedgerOrigin(raw)
		return err
	}
}

// LedgerOrigin checks a ledger URL and returns its origin ("" for ""):
// only an origin is taken, since the ledger's routes are at its root. The
// origin goes into the CSP, so its host must be a DNS name or an IP address
// and its port a number: anything else (";", ",", quotes, spaces) could add
// directives or sources to the policy.
func LedgerOrigin(raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("console ledger URL %q: %w", raw, err)
	}
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("console ledger URL %q: %s; want http(s)://host[:port] with no path, query or credentials", raw, why)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("the scheme is not http or https")
	case u.Opaque != "" || u.Host == "":
		return bad("no host")
	case u.User != nil:
		return bad("it holds credentials")
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || strings.Contains(raw, "#"):
		return bad("it has a path, query or fragment")
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	ip, ipErr := netip.ParseAddr(host)
	switch {
	case ipErr == nil && ip.Zone() != "":
		return bad("an IPv6 zone is not an origin")
	case ipErr != nil && !isDNSName(host):
		return bad(fmt.Sprintf("host %q is not a DNS name or an IP address", u.Hostname()))
	case strings.HasSuffix(u.Host, ":") && port == "":
		return bad("an empty port")
	}
	if port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return bad(fmt.Sprintf("port %q is not a number from 1 to 65535", port))
		}
	}
	if ipErr == nil && ip.Is6() {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return u.Scheme + "://" + host, nil
}

// isDNSName reports whether s is a DNS host name: dot-separated labels of
// letters, digits and inner hyphens, each at most 63 bytes (punycode for
// international names).
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// CSP is the policy every console answer carries, given the ledger origin
// the page may also reach ("" for none).
func CSP(ledgerOrigin string) string {
	connect := "'self'"
	if ledgerOrigin != "" {
		connect += " " + ledgerOrigin
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " + connect +
		"; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// contentType is the type of a file the console serves, by extension, and
// whether it is one the console serves at all: nothing is left to sniffing
// (and nosniff forbids it).
func contentType(ext string) (string, bool) {
	switch ext {
	case ".html":
		return "text/html; charset=utf-8", true
	case ".js":
		return "text/javascript; charset=utf-8", true
	case ".css":
		return "text/css; charset=utf-8", true
	case ".json":
		return "application/json", true
	case ".svg":
		return "image/svg+xml", true
	case ".png":
		return "image/png", true
	}
	return "", false
}

// Register mounts the console on e: /console (a redirect), /console/
// (the page), /console/config.json and the page's assets.
func Register(e *echo.Echo, opts ...Option) error {
	var s settings
	for _, o := range opts {
		if err := o(&s); err != nil {
			return err
		}
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		return err
	}
	cfg, err := json.Marshal(Config{LedgerURL: s.ledger})
	if err != nil {
		return err
	}
	csp := CSP(s.ledger)
	headers := func(c echo.Context, contentType string) {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		// A new binary may bring new files; the page is small.
		h.Set(echo.HeaderCacheControl, "no-cache")
		h.Set(echo.HeaderContentType, contentType)
	}
	serve := func(c echo.Context) error {
		name := strings.TrimPrefix(c.Request().URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		ct, known := contentType(path.Ext(name))
		if name == "config.json" {
			headers(c, ct)
			return c.Blob(http.StatusOK, ct, cfg)
		}
		b, err := fs.ReadFile(files, name)
		if !known || strings.Contains(name, "/") || err != nil {
			headers(c, "text/plain; charset=utf-8")
			return c.Blob(http.StatusNotFound, "text/plain; charset=utf-8", []byte("not found\n"))
		}
		headers(c, ct)
		if c.Request().Method == http.MethodHead {
			return c.NoContent(http.StatusOK)
		}
		return c.Blob(http.StatusOK, ct, b)
	}
	e.GET("/console", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, Prefix) })
	e.GET(Prefix, serve)
	e.HEAD(Prefix, serve)
	e.GET(Prefix+"*", serve)
	e.HEAD(Prefix+"*", serve)
	return nil
}
