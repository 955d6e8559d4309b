package console

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
)

func get(t *testing.T, e *echo.Echo, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

// Every file is served with its own content type and the security headers;
// the page's config names the ledger origin, which the CSP lets it reach.
func TestConsoleServesFilesWithHeaders(t *testing.T) {
	e := echo.New()
	if err := Register(e, WithLedgerURL("https://ledger.example:8443/")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/console/":            "text/html; charset=utf-8",
		"/console/index.html":  "text/html; charset=utf-8",
		"/console/app.js":      "text/javascript; charset=utf-8",
		"/console/verify.js":   "text/javascript; charset=utf-8",
		"/console/charts.js":   "text/javascript; charset=utf-8",
		"/console/style.css":   "text/css; charset=utf-8",
		"/console/config.json": "application/json",
	}
	for path, ct := range want {
		res := get(t, e, path)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != ct {
			t.Errorf("%s: %d %q, want 200 %q", path, res.StatusCode, res.Header.Get("Content-Type"), ct)
		}
		h := res.Header
		if h.Get("Content-Security-Policy") != CSP("https://ledger.example:8443") || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
	csp := CSP("https://ledger.example:8443")
	for _, d := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:",
		"connect-src 'self' https://ledger.example:8443", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, d) {
			t.Errorf("CSP %q lacks %q", csp, d)
		}
	}
	var cfg Config
	b, _ := io.ReadAll(get(t, e, "/console/config.json").Body)
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.LedgerURL != "https://ledger.example:8443" {
		t.Errorf("config.json: %s %v", b, err)
	}
	if res := get(t, e, "/console"); res.StatusCode != http.StatusMovedPermanently || res.Header.Get("Location") != "/console/" {
		t.Errorf("/console: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	for _, p := range []string{"/console/nope.js", "/console/../console.go", "/console/static/app.js", "/console/README"} {
		if res := get(t, e, p); res.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, res.StatusCode)
		}
	}
}

// In chio up the ledger is the page's own origin: config.json says so and
// the CSP allows no other.
func TestConsoleSameOrigin(t *testing.T) {
	e := echo.New()
	if err := Register(e); err != nil {
		t.Fatal(err)
	}
	res := get(t, e, "/console/config.json")
	b, _ := io.ReadAll(res.Body)
	if string(b) != `{"ledgerUrl":""}` || !strings.Contains(res.Header.Get("Content-Security-Policy"), "connect-src 'self';") {
		t.Fatalf("config %s, CSP %s", b, res.Header.Get("Content-Security-Policy"))
	}
}

// A ledger URL's origin goes into the CSP: only a scheme, a DNS name or IP
// address and a numeric port are taken, so nothing in it can add a
// directive or a source to the policy.
func TestConsoleLedgerOrigin(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"", ""},
		{"https://ledger.example", "https://ledger.example"},
		{"https://ledger.example:8443/", "https://ledger.example:8443"},
		{"HTTP://Ledger.Example:80", "http://ledger.example:80"},
		{"http://127.0.0.1:8081", "http://127.0.0.1:8081"},
		{"https://[::1]:8443", "https://[::1]:8443"},
		{"https://[2001:db8::1]", "https://[2001:db8::1]"},
		{"https://xn--bcher-kva.example", "https://xn--bcher-kva.example"},
		{"https://a-b.c1.example", "https://a-b.c1.example"},
	} {
		got, err := LedgerOrigin(c.raw)
		if err != nil || got != c.want {
			t.Errorf("LedgerOrigin(%q) = %q, %v; want %q", c.raw, got, err, c.want)
		}
	}
	for _, raw := range []string{
		"ftp://x", "https://", "https://a/b", "https://u:p@a", "https://u@a", "https://a?x=1", "https://a?", "https://a#", "https://a#f",
		"javascript:alert(1)", "a b", "ledger.example", "https:ledger.example",
		"https://x;script-src", "https://a,b", "https://x'unsafe-inline'", "https://a%3Bb", "https://a_b.example",
		"https://-a.example", "https://a-.example", "https://a..b", "https://a.", "https://" + strings.Repeat("a", 64) + ".example",
		"https://a:", "https://a:0", "https://a:99999", "https://a:0x50", "https://a:8443;x", "https://[fe80::1%25eth0]:8443", "https://*.example",
	} {
		if got, err := LedgerOrigin(raw); err == nil {
			t.Errorf("LedgerOrigin(%q) = %q, want an error", raw, got)
		}
		if err := Register(echo.New(), WithLedgerURL(raw)); err == nil {
			t.Errorf("Register accepts %q", raw)
		}
	}
	// A URL that does not parse keeps its parse error.
	var ue *url.Error
	if _, err := LedgerOrigin("https://a b"); !errors.As(err, &ue) {
		t.Errorf("LedgerOrigin(%q): %v does not wrap the *url.Error", "https://a b", err)
	}
}

// The page builds its DOM from text: no module assigns markup, evaluates
// strings or writes the document, and the HTML has no inline script or
// style for the CSP to refuse.
func TestConsoleHasNoMarkupSinks(t *testing.T) {
	sub, _ := fs.Sub(static, "static")
	err := fs.WalkDir(sub, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(sub, path)
		text := string(b)
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", "style="} {
			if strings.Contains(text, bad) {
				t.Errorf("%s uses %s", path, bad)
			}
		}
		if strings.HasSuffix(path, ".html") && (strings.Contains(text, "<script>") || strings.Contains(text, "<style")) {
			t.Errorf("%s has inline script or style", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
