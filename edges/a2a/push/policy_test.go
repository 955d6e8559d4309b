package push

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	dns := newFakeDNS()
	dns.set("hooks.example.com", "93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
	dns.set("internal.example.com", "10.1.2.3")
	dns.set("mixed.example.com", "93.184.215.14", "192.168.1.10")
	dns.set("metadata.example.com", "169.254.169.254")
	dns.set("loop.example.com", "127.0.0.1")
	dns.set("mapped.example.com", "::ffff:10.0.0.1")
	dns.set("corp.example.com", "10.20.30.40")

	def := DefaultPolicy()
	def.Resolver = dns.resolver()
	strict := Policy{Resolver: dns.resolver()} // the zero policy: no loopback
	corp := Policy{Resolver: dns.resolver(), AllowInsecureLoopback: true,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00:1::/32")}}

	tests := []struct {
		name   string
		policy Policy
		url    string
		ok     bool
	}{
		// Public https.
		{"https public name", def, "https://hooks.example.com/a2a?x=1", true},
		{"https public name, port", def, "https://hooks.example.com:8443/a2a", true},
		{"https public name, trailing dot", def, "https://hooks.example.com./a2a", true},
		{"https public IPv4", def, "https://93.184.215.14/hook", true},
		{"https public IPv6", def, "https://[2606:4700:4700::1111]/hook", true},
		{"HTTPS upper case", def, "HTTPS://HOOKS.EXAMPLE.COM/x", true},
		{"http public", def, "http://hooks.example.com/a2a", false},
		{"http public IPv4", def, "http://93.184.215.14/", false},

		// Loopback.
		{"http localhost", def, "http://localhost:8080/hook", true},
		{"http localhost trailing dot", def, "http://localhost.:8080/hook", true},
		{"https localhost", def, "https://localhost/hook", true},
		{"http 127.0.0.1", def, "http://127.0.0.1:9999/hook", true},
		{"http 127.8.9.10", def, "http://127.8.9.10/hook", true},
		{"http [::1]", def, "http://[::1]:8080/hook", true},
		{"http [0:0:0:0:0:0:0:1]", def, "http://[0:0:0:0:0:0:0:1]/hook", true},
		{"strict: http localhost", strict, "http://localhost:8080/hook", false},
		{"strict: https localhost", strict, "https://localhost/hook", false},
		{"strict: http 127.0.0.1", strict, "http://127.0.0.1/hook", false},
		{"strict: https 127.0.0.1", strict, "https://127.0.0.1/hook", false},
		{"strict: https [::1]", strict, "https://[::1]/hook", false},
		{"name resolving to loopback", def, "https://loop.example.com/", false},
		{"sub.localhost is not localhost", def, "http://evil.localhost/", false},
		{"IPv4-mapped loopback", def, "http://[::ffff:127.0.0.1]/", false},
		{"IPv4-mapped loopback, https", def, "https://[::ffff:7f00:1]/", false},
		{"IPv4-compatible loopback", def, "https://[::127.0.0.1]/", false},
		{"NAT64 loopback", def, "https://[64:ff9b::127.0.0.1]/", false},
		{"6to4 private", def, "https://[2002:a00:1::]/", false},
		{"IPv4-translated metadata", def, "https://[::ffff:0:a9fe:a9fe]/", false},
		{"Teredo", def, "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", false},
		{"unspecified", def, "http://0.0.0.0:8080/", false},
		{"unspecified IPv6", def, "http://[::]:8080/", false},
		{"IPv6 zone", def, "http://[fe80::1%25eth0]/", false},

		// Private and internal.
		{"10/8", def, "https://10.0.0.1/hook", false},
		{"192.168", def, "https://192.168.1.20/hook", false},
		{"172.16/12", def, "https://172.31.255.1/hook", false},
		{"metadata", def, "https://169.254.169.254/latest/meta-data/", false},
		{"metadata name", def, "https://metadata.example.com/", false},
		{"CGNAT", def, "https://100.64.1.1/", false},
		{"ULA", def, "https://[fd12:3456::1]/", false},
		{"link-local IPv6", def, "https://[fe80::1]/", false},
		{"multicast", def, "https://224.0.0.1/", false},
		{"broadcast", def, "https://255.255.255.255/", false},
		{"IPv4-mapped private", def, "https://[::ffff:10.0.0.1]/", false},
		{"name resolving to private", def, "https://internal.example.com/", false},
		{"name resolving to public and private", def, "https://mixed.example.com/", false},
		{"name resolving to mapped private", def, "https://mapped.example.com/", false},
		{"unknown name", def, "https://nxdomain.example.com/", false},

		// Numeric obfuscation.
		{"decimal integer", def, "http://2130706433/", false},
		{"decimal integer https", def, "https://2130706433/", false},
		{"hex integer", def, "https://0x7f000001/", false},
		{"octal quad", def, "https://0177.0.0.1/", false},
		{"hex quad", def, "https://0x7f.0.0.1/", false},
		{"short form", def, "https://127.1/", false},
		{"leading zeros", def, "https://010.0.0.1/", false},
		{"numeric trailing dot", def, "http://127.0.0.1./", false},
		{"name ending in a number", def, "https://example.123/", false},

		// Syntax.
		{"userinfo", def, "https://user:pass@hooks.example.com/", false},
		{"userinfo, empty", def, "https://@hooks.example.com/", false},
		{"userinfo to loopback", def, "http://hooks.example.com@127.0.0.1/", false},
		{"ftp", def, "ftp://hooks.example.com/", false},
		{"file", def, "file:///etc/passwd", false},
		{"gopher", def, "gopher://hooks.example.com/", false},
		{"javascript", def, "javascript:alert(1)", false},
		{"no authority", def, "https:hooks.example.com/x", false},
		{"scheme-relative", def, "//hooks.example.com/x", false},
		{"relative", def, "/hook", false},
		{"empty", def, "", false},
		{"no host", def, "https:///x", false},
		{"backslash", def, `https://hooks.example.com\@127.0.0.1/`, false},
		{"space", def, "https://hooks.example.com /", false},
		{"newline", def, "https://hooks.example.com/\n", false},
		{"percent host", def, "https://%31%32%37.0.0.1/", false},
		{"non-ASCII host", def, "https://ⓛocalhost/", false},
		{"port zero", def, "https://hooks.example.com:0/", false},
		{"port too large", def, "https://hooks.example.com:70000/", false},
		{"too long", def, "https://hooks.example.com/" + strings.Repeat("a", MaxURLBytes), false},

		// AllowPrivate.
		{"allowed network literal", corp, "https://10.20.30.40/hook", true},
		{"allowed network name", corp, "https://corp.example.com/hook", true},
		{"allowed IPv6 network", corp, "https://[fd00:1::5]/hook", true},
		{"allowed network over http", corp, "http://10.20.30.40/hook", false},
		{"outside the allowed network", corp, "https://10.21.0.1/hook", false},
		{"allowed network: public still ok", corp, "https://hooks.example.com/", true},
		{"allowed network: metadata still refused", corp, "https://169.254.169.254/", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.CheckURL(t.Context(), tc.url)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("CheckURL(%q) = %v, want ok", tc.url, err)
			case !tc.ok && err == nil:
				t.Fatalf("CheckURL(%q) = ok, want refused", tc.url)
			case !tc.ok && !errors.Is(err, ErrForbiddenURL):
				t.Fatalf("CheckURL(%q) = %v, not ErrForbiddenURL", tc.url, err)
			}
		})
	}
}

func TestCheckURLReasons(t *testing.T) {
	p := DefaultPolicy()
	for url, want := range map[string]string{
		"http://hooks.example.com/":        "use https",
		"https://u@hooks.example.com/":     "userinfo",
		"https://10.0.0.1/":                "private address",
		"https://169.254.169.254/":         "link-local address",
		"https://2130706433/":              "numeric host",
		"https://[::ffff:169.254.169.254]": "link-local address",
		"https://[2002:a9fe:a9fe::]/":      "embedded in IPv6",
	} {
		err := p.CheckURL(t.Context(), url)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckURL(%q) = %v, want a reason with %q", url, err, want)
		}
	}
}

func TestCheckURLContext(t *testing.T) {
	dns := newFakeDNS()
	p := Policy{Resolver: dns.resolver()}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := p.CheckURL(ctx, "https://hooks.example.com/")
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrForbiddenURL) {
		t.Fatalf("CheckURL with a canceled context = %v, want context.Canceled", err)
	}
}
