package guards

import (
	"net/url"
	"strings"
	"testing"
)

func TestEgressGuard(t *testing.T) {
	defaults, err := NewEgressGuard(EgressConfig{})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := NewEgressGuard(EgressConfig{
		AllowedSchemes: []string{"https", "HTTP"},
		AllowedHosts:   []string{"api.example.com", "*.cdn.example.net", "Docs.Example.org.", "8.8.8.8", "[2001:4860:4860::8888]"},
	})
	if err != nil {
		t.Fatal(err)
	}
	private, err := NewEgressGuard(EgressConfig{AllowedSchemes: []string{"http", "https"}, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	privateListed, err := NewEgressGuard(EgressConfig{AllowedHosts: []string{"localhost"}, AllowPrivate: true})
	if err != nil {
		t.Fatal(err)
	}
	api, err := NewEgressGuard(EgressConfig{AllowedHosts: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		g       Guard
		args    string
		details string // "" = allow
	}{
		{"public https", defaults, `{"url":"https://api.example.com/v1?q=1#f"}`, ""},
		{"port", defaults, `{"url":"https://api.example.com:8443/v1"}`, ""},
		{"upper-case scheme and host", defaults, `{"url":"HTTPS://API.Example.COM/"}`, ""},
		{"not a URL", defaults, `{"q":"hello world","n":1,"b":true}`, ""},
		{"text around a URL is not a URL", defaults, `{"q":"see http://localhost/ for details"}`, ""},
		{"invalid scheme is not a URL", defaults, `{"q":"1http://localhost"}`, ""},
		{"surrounding space", defaults, `{"u":"  http://example.com  "}`, `/u: URL scheme not allowed`},
		{"http by default", defaults, `{"url":"http://example.com"}`, `/url: URL scheme not allowed`},
		{"ftp", defaults, `{"url":"ftp://example.com/x"}`, `URL scheme not allowed`},
		{"file", defaults, `{"url":"file:///etc/passwd"}`, `URL scheme not allowed`},
		{"nested", defaults, `{"req":{"urls":["https://ok.example","https://localhost/"]}}`, `/req/urls/1: loopback host name`},
		{"no host", defaults, `{"url":"https:///"}`, `URL has no host`},
		{"no host after userinfo", defaults, `{"url":"https://user@/x"}`, `URL has no host`},
		{"third slash: WHATWG host", listed, `{"url":"https:///evil.example/"}`, `host not in the allowlist`},
		{"third slash: loopback", defaults, `{"url":"https:///127.0.0.1/"}`, `loopback address`},
		{"unparseable", defaults, `{"url":"https://exa mple.com/"}`, `unparseable URL`},
		{"bad escape", defaults, `{"url":"https://example.com/%zz"}`, `unparseable URL`},
		{"control character", defaults, `{"url":"https://example.com/a\u0001b"}`, `unparseable URL`},
		{"localhost", defaults, `{"url":"https://localhost:8080/"}`, `loopback host name`},
		{"localhost trailing dot", defaults, `{"url":"https://localhost./"}`, `loopback host name`},
		{"localhost upper case", defaults, `{"url":"https://LocalHost/"}`, `loopback host name`},
		{"sub.localhost", defaults, `{"url":"https://a.localhost/"}`, `loopback host name`},
		{"mdns", defaults, `{"url":"https://printer.local/"}`, `local host name`},
		{"internal", defaults, `{"url":"https://metadata.google.internal/computeMetadata/v1/"}`, `local host name`},
		{"single label", defaults, `{"url":"https://metadata/"}`, `single-label host name`},
		{"percent-encoded host", defaults, `{"url":"https://%6c%6fcalhost/"}`, `unparseable URL`},
		{"percent-encoded non-ASCII host", defaults, `{"url":"https://%E2%93%9Bocalhost/"}`, `malformed or non-ASCII host`},
		{"non-ASCII host", defaults, `{"url":"https://ⓛocalhost/"}`, `malformed or non-ASCII host`},
		{"fullwidth digits", defaults, `{"url":"https://１２７.０.０.１/"}`, `malformed or non-ASCII host`},
		{"empty label", defaults, `{"url":"https://a..example.com/"}`, `malformed or non-ASCII host`},
		{"userinfo trick", defaults, `{"url":"https://api.example.com@127.0.0.1/"}`, `loopback address`},
		{"userinfo allowed", defaults, `{"url":"https://user:pw@api.example.com/"}`, ""},
		{"backslash trick", defaults, `{"url":"https://api.example.com\\@127.0.0.1/"}`, `unparseable URL`},
		// IPv4 literals
		{"public IPv4", defaults, `{"url":"https://93.184.215.14/"}`, ""},
		{"loopback", defaults, `{"url":"https://127.0.0.1/"}`, `loopback address`},
		{"loopback range", defaults, `{"url":"https://127.8.9.10:443/"}`, `loopback address`},
		{"private 10", defaults, `{"url":"https://10.0.0.5/"}`, `private address`},
		{"private 172", defaults, `{"url":"https://172.16.3.4/"}`, `private address`},
		{"private 192", defaults, `{"url":"https://192.168.1.1/"}`, `private address`},
		{"link-local metadata", defaults, `{"url":"https://169.254.169.254/latest/meta-data/"}`, `link-local address`},
		{"unspecified", defaults, `{"url":"https://0.0.0.0/"}`, `unspecified address`},
		{"this network", defaults, `{"url":"https://0.1.2.3/"}`, `non-public address`},
		{"CGNAT", defaults, `{"url":"https://100.64.1.1/"}`, `non-public address`},
		{"CGNAT edge", defaults, `{"url":"https://100.127.255.255/"}`, `non-public address`},
		{"just past CGNAT", defaults, `{"url":"https://100.128.0.1/"}`, ""},
		{"multicast", defaults, `{"url":"https://224.0.0.1/"}`, `multicast address`},
		{"broadcast", defaults, `{"url":"https://255.255.255.255/"}`, `non-public address`},
		// obfuscated numeric hosts
		{"decimal", defaults, `{"url":"https://2130706433/"}`, `numeric host`},
		{"hex", defaults, `{"url":"https://0x7f000001/"}`, `numeric host`},
		{"hex upper", defaults, `{"url":"https://0X7F000001/"}`, `numeric host`},
		{"hex dotted", defaults, `{"url":"https://0x7f.0.0.1/"}`, `numeric host`},
		{"octal dotted", defaults, `{"url":"https://0177.0.0.1/"}`, `numeric host`},
		{"short form", defaults, `{"url":"https://127.1/"}`, `numeric host`},
		{"three parts", defaults, `{"url":"https://10.0.1/"}`, `numeric host`},
		{"five parts", defaults, `{"url":"https://1.2.3.4.5/"}`, `numeric host`},
		{"numeric last label", defaults, `{"url":"https://example.123/"}`, `numeric host`},
		{"numeric public decimal", defaults, `{"url":"https://134744072/"}`, `numeric host`},
		{"bare 0x", defaults, `{"url":"https://0x/"}`, `numeric host`},
		{"numeric first label is a name", defaults, `{"url":"https://123.example.com/"}`, ""},
		{"hex-looking name", defaults, `{"url":"https://0x7f.example.com/"}`, ""},
		// IPv6
		{"public IPv6", defaults, `{"url":"https://[2606:4700:4700::1111]/"}`, ""},
		{"IPv6 loopback", defaults, `{"url":"https://[::1]/"}`, `loopback address`},
		{"IPv6 loopback long", defaults, `{"url":"https://[0:0:0:0:0:0:0:1]:8080/"}`, `loopback address`},
		{"IPv6 unspecified", defaults, `{"url":"https://[::]/"}`, `unspecified address`},
		{"IPv6 link-local zone", defaults, `{"url":"https://[fe80::1%25eth0]/"}`, `link-local address`},
		{"IPv6 ULA", defaults, `{"url":"https://[fd00::1]/"}`, `private address`},
		{"IPv6 site-local", defaults, `{"url":"https://[fec0::1]/"}`, `non-public address`},
		{"IPv6 multicast", defaults, `{"url":"https://[ff02::1]/"}`, `multicast address`},
		{"IPv4-mapped loopback", defaults, `{"url":"https://[::ffff:127.0.0.1]/"}`, `loopback address`},
		{"IPv4-mapped hex", defaults, `{"url":"https://[::ffff:7f00:1]/"}`, `loopback address`},
		{"IPv4-mapped metadata", defaults, `{"url":"https://[::ffff:169.254.169.254]/"}`, `link-local address`},
		{"IPv4-compatible", defaults, `{"url":"https://[::10.0.0.1]/"}`, `private address (embedded in IPv6)`},
		{"NAT64", defaults, `{"url":"https://[64:ff9b::7f00:1]/"}`, `loopback address (embedded in IPv6)`},
		{"NAT64 public", defaults, `{"url":"https://[64:ff9b::808:808]/"}`, ""},
		{"6to4", defaults, `{"url":"https://[2002:c0a8:0101::1]/"}`, `private address (embedded in IPv6)`},
		{"IPv4-translated metadata", defaults, `{"url":"https://[::ffff:0:a9fe:a9fe]/"}`, `link-local address (embedded in IPv6)`},
		{"IPv4-translated loopback dotted", defaults, `{"url":"https://[::ffff:0:127.0.0.1]/"}`, `loopback address (embedded in IPv6)`},
		{"IPv4-translated public", defaults, `{"url":"https://[::ffff:0:808:808]/"}`, ""},
		{"Teredo", defaults, `{"url":"https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/"}`, `Teredo address`},
		{"Teredo client metadata", defaults, `{"url":"https://[2001:0:4136:e378:8000:63bf:5601:5601]/"}`, `Teredo address`},
		{"Teredo server private", defaults, `{"url":"https://[2001:0:a00:1:8000:63bf:f7f7:f7f7]/"}`, `Teredo address`},
		{"Teredo public client", defaults, `{"url":"https://[2001::4136:e378:8000:63bf:f7f7:f7f7]/"}`, `Teredo address`},
		{"2001:4860::/32 is not Teredo", defaults, `{"url":"https://[2001:4860:4860::8888]/"}`, ""},
		{"IPv6 benchmarking", defaults, `{"url":"https://[2001:2::1]/"}`, `non-public address`},
		{"IPv6 documentation", defaults, `{"url":"https://[2001:db8::1]/"}`, `non-public address`},
		{"IPv6 documentation 3fff", defaults, `{"url":"https://[3fff:fff::1]/"}`, `non-public address`},
		{"IPv6 discard-only", defaults, `{"url":"https://[100::1]/"}`, `non-public address`},
		{"TEST-NET-1", defaults, `{"url":"https://192.0.2.1/"}`, `non-public address`},
		{"TEST-NET-3 in 6to4", defaults, `{"url":"https://[2002:cb00:7101::1]/"}`, `non-public address (embedded in IPv6)`},
		{"IPv6 without brackets", defaults, `{"url":"https://::1/"}`, `unparseable URL`},
		{"IPv6 malformed", defaults, `{"url":"https://[::g]/"}`, `unparseable URL`},
		// allowlist
		{"listed exact", listed, `{"url":"https://api.example.com/v1"}`, ""},
		{"listed exact http", listed, `{"url":"http://api.example.com/v1"}`, ""},
		{"listed case and dot", listed, `{"url":"https://docs.example.org./a"}`, ""},
		{"listed wildcard sub", listed, `{"url":"https://img.cdn.example.net/a.png"}`, ""},
		{"listed wildcard deep", listed, `{"url":"https://a.b.cdn.example.net/"}`, ""},
		{"wildcard not apex", listed, `{"url":"https://cdn.example.net/"}`, `/url: host not in the allowlist`},
		{"suffix is not a subdomain", listed, `{"url":"https://evilcdn.example.net/"}`, `host not in the allowlist`},
		{"exact is not wildcard", listed, `{"url":"https://x.api.example.com/"}`, `host not in the allowlist`},
		{"look-alike", listed, `{"url":"https://api.example.com.evil.example/"}`, `host not in the allowlist`},
		{"listed IPv4", listed, `{"url":"https://8.8.8.8/"}`, ""},
		{"listed IPv6 other form", listed, `{"url":"https://[2001:4860:4860:0:0:0:0:8888]/"}`, ""},
		{"unlisted", listed, `{"url":"https://example.com/"}`, `host not in the allowlist`},
		{"scheme still checked", listed, `{"url":"ftp://api.example.com/"}`, `URL scheme not allowed`},
		{"private before allowlist", listed, `{"url":"https://localhost/"}`, `loopback host name`},
		// allow private
		{"private allowed", private, `{"url":"http://127.0.0.1:8080/"}`, ""},
		{"localhost allowed", private, `{"url":"http://localhost/"}`, ""},
		{"numeric allowed", private, `{"url":"http://2130706433/"}`, ""},
		{"IPv6 allowed", private, `{"url":"http://[::1]/"}`, ""},
		{"malformed still denied", private, `{"url":"http://a..b/"}`, `malformed or non-ASCII host`},
		{"private listed", privateListed, `{"url":"https://localhost/"}`, ""},
		{"private unlisted", privateListed, `{"url":"https://127.0.0.1/"}`, `host not in the allowlist`},
		// WHATWG URL parsing: what browsers, Node's URL and many clients do
		{"leading C0 control", api, `{"url":"\u0001https://169.254.169.254/latest/meta-data/"}`, `/url: link-local address`},
		{"leading controls and spaces", api, `{"url":" \u001f\u0000 https://evil.example/"}`, `host not in the allowlist`},
		{"tab in the scheme", api, `{"url":"ht\ttps://169.254.169.254/"}`, `link-local address`},
		{"newline in the scheme", api, `{"url":"http\r\ns://169.254.169.254/"}`, `link-local address`},
		{"tab in the host", api, `{"url":"https://169.254.\t169.254/"}`, `link-local address`},
		{"newline after the colon", api, `{"url":"https:\n//evil.example/"}`, `host not in the allowlist`},
		{"no slashes", api, `{"url":"https:169.254.169.254/latest"}`, `link-local address`},
		{"no slashes upper case", api, `{"url":"HTTPS:evil.example"}`, `host not in the allowlist`},
		{"one slash", api, `{"url":"https:/169.254.169.254/"}`, `link-local address`},
		{"backslashes", api, `{"url":"https:\\\\169.254.169.254\\latest"}`, `link-local address`},
		{"slash and backslash", api, `{"url":"https:/\\evil.example/"}`, `host not in the allowlist`},
		{"backslash and slash", api, `{"url":"https:\\/evil.example/"}`, `host not in the allowlist`},
		{"backslash after listed host", api, `{"url":"https:\\\\api.example.com\\v1"}`, `unparseable URL`},
		{"ws no slashes", api, `{"url":"ws:evil.example"}`, `URL scheme not allowed`},
		{"ftp backslashes", api, `{"url":"ftp:\\\\evil.example"}`, `URL scheme not allowed`},
		{"file one slash", api, `{"url":"file:/etc/passwd"}`, `URL scheme not allowed`},
		{"scheme-relative", api, `{"url":"//169.254.169.254/x"}`, `/url: scheme-relative URL`},
		{"scheme-relative listed host", api, `{"url":"//api.example.com/v1"}`, `scheme-relative URL`},
		{"scheme-relative backslashes", api, `{"url":"\\\\169.254.169.254\\x"}`, `scheme-relative URL`},
		{"scheme-relative mixed", api, `{"url":"/\\evil.example/"}`, `scheme-relative URL`},
		{"scheme-relative three slashes", api, `{"url":"///evil.example"}`, `scheme-relative URL`},
		{"scheme-relative port", api, `{"url":"//evil.example:8080"}`, `scheme-relative URL`},
		{"scheme-relative userinfo", api, `{"url":"//a b@evil.example/"}`, `scheme-relative URL`},
		{"scheme-relative IPv6", api, `{"url":"//[::1]/"}`, `scheme-relative URL`},
		{"scheme-relative after space", api, `{"url":" //evil.example"}`, `scheme-relative URL`},
		{"scheme-relative tab", api, `{"url":"/\t/evil.example"}`, `scheme-relative URL`},
		{"scheme-relative control", api, `{"url":"\u0001//evil.example"}`, `scheme-relative URL`},
		{"listed https", api, `{"url":"https://api.example.com/v1"}`, ""},
		{"listed trailing tab", api, `{"url":"https://api.example.com/v1\t"}`, ""},
		{"listed no slashes", api, `{"url":"https:api.example.com/v1"}`, ""},
		{"listed backslashes in the path", api, `{"url":"https://api.example.com/a\\b"}`, ""},
		{"text with a colon", api, `{"q":"note: see docs"}`, ""},
		{"ratio", api, `{"q":"ratio 1:2"}`, ""},
		{"windows path", api, `{"path":"C:\\Users\\x"}`, ""},
		{"mailto", api, `{"to":"mailto:a@b.example"}`, ""},
		{"urn", api, `{"id":"urn:isbn:0451450523"}`, ""},
		{"absolute path", api, `{"path":"/home/a/x"}`, ""},
		{"path with double slash", api, `{"path":"a//b"}`, ""},
		{"comment", api, `{"code":"// TODO: fix this\nfunc f() {}"}`, ""},
		{"build constraint", api, `{"code":"//go:build linux\n"}`, ""},
		{"directive", api, `{"code":"//go:generate stringer"}`, ""},
		{"slashes only", api, `{"q":"//"}`, ""},
		{"slashes and a path", api, `{"q":"///?x"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkArgs(t, tt.g, tt.args)
			if tt.details == "" {
				if !r.Allow || r.Details != "" {
					t.Errorf("got %+v, want allow", r)
				}
				return
			}
			if r.Allow || !strings.Contains(r.Details, tt.details) {
				t.Errorf("got %+v, want a deny with %q", r, tt.details)
			}
		})
	}
}

func TestEgressDetailsDoNotEchoTheHost(t *testing.T) {
	g, err := NewEgressGuard(EgressConfig{AllowedHosts: []string{"api.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	// Data smuggled out in a host name must not land in the receipt.
	r := checkArgs(t, g, `{"url":"https://c2VjcmV0LXRva2Vu.attacker.example/"}`)
	if r.Allow || strings.Contains(r.Details, "c2VjcmV0") || strings.Contains(r.Details, "attacker") {
		t.Errorf("got %+v", r)
	}
	for _, u := range []string{
		`//c2VjcmV0LXRva2Vu.attacker.example/`,
		`https:c2VjcmV0LXRva2Vu.attacker.example/`,
		`https:\\\\c2VjcmV0LXRva2Vu.attacker.example\\x`,
		`\u0001ht\ttps:/\\c2VjcmV0LXRva2Vu.attacker.example\\@x/`,
	} {
		r = checkArgs(t, g, `{"url":"`+u+`"}`)
		if r.Allow || strings.Contains(r.Details, "c2VjcmV0") || strings.Contains(r.Details, "attacker") {
			t.Errorf("%s: got %+v", u, r)
		}
	}
	r = checkArgs(t, g, `{"url":"SeCrEtScHeMe://api.example.com/"}`)
	if r.Allow || strings.Contains(strings.ToLower(r.Details), "secretscheme") {
		t.Errorf("got %+v", r)
	}
}

func TestEgressGuardConfig(t *testing.T) {
	bad := []EgressConfig{
		{AllowedSchemes: []string{"ht tp"}},
		{AllowedSchemes: []string{"1http"}},
		{AllowedHosts: []string{""}},
		{AllowedHosts: []string{"*."}},
		{AllowedHosts: []string{"*"}},
		{AllowedHosts: []string{"a.*.example.com"}},
		{AllowedHosts: []string{"https://example.com"}},
		{AllowedHosts: []string{"example.com:443"}},
		{AllowedHosts: []string{"exa mple.com"}},
	}
	for _, cfg := range bad {
		if _, err := NewEgressGuard(cfg); err == nil || !strings.HasPrefix(err.Error(), "egress guard: ") {
			t.Errorf("NewEgressGuard(%+v) error = %v", cfg, err)
		}
	}
	g, err := NewEgressGuard(EgressConfig{})
	if err != nil || g.Name() != "EgressAllowlistGuard" {
		t.Fatalf("%v %v", g, err)
	}
}

func TestSimpleURLHost(t *testing.T) {
	tests := []struct {
		rest, host string
		ok         bool
	}{
		{"api.example.com/v1", "api.example.com", true},
		{"API.example.com:8080?x=1", "API.example.com", true},
		{"a.b#frag", "a.b", true},
		{"a.b:", "a.b", true},
		{"1.2.3.4", "1.2.3.4", true},
		{"", "", false},
		{":80/", "", false},
		{"u@h/", "", false},
		{"[::1]/", "", false},
		{"h:80:90/", "", false},
		{"h:8a/", "", false},
		{"h/%41", "", false},
		{"h/a b", "", false},
		{"h/é", "", false},
	}
	for _, tt := range tests {
		host, ok := simpleURLHost(tt.rest)
		if host != tt.host || ok != tt.ok {
			t.Errorf("simpleURLHost(%q) = %q, %v; want %q, %v", tt.rest, host, ok, tt.host, tt.ok)
		}
	}
}

// FuzzSimpleURLHost checks the fast path against url.Parse: whatever it
// accepts, url.Parse accepts with the same host.
func FuzzSimpleURLHost(f *testing.F) {
	for _, s := range []string{"api.example.com/v1", "a:1", "a.b:/x?y#z", "1.2.3.4:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rest string) {
		host, ok := simpleURLHost(rest)
		if !ok {
			return
		}
		u, err := url.Parse("https://" + rest)
		if err != nil {
			t.Fatalf("fast path accepts %q, url.Parse: %v", rest, err)
		}
		if u.Hostname() != host {
			t.Fatalf("fast path host of %q = %q, url.Parse %q", rest, host, u.Hostname())
		}
	})
}
