package auth

import (
	"net/url"
	"slices"
	"testing"
)

func TestSecureEndpoint(t *testing.T) {
	tests := []struct {
		raw    string
		wantOK bool
	}{
		{"https://idp.example.com/oauth/token", true},
		{"http://localhost:8080/token", true},
		{"http://LOCALHOST/token", true},
		{"http://127.0.0.1:9000/token", true},
		{"http://127.200.1.1/token", true},
		{"http://[::1]:9000/token", true},
		{"http://[::ffff:127.0.0.1]/token", true},
		{"http://idp.example.com/oauth/token", false},
		{"http://10.0.0.1/token", false},
		{"http://localhost.evil.example/token", false},
		{"http://128.0.0.1/token", false},
		{"ftp://idp.example.com/token", false},
		{"https:///token", false},
		{"", false},
		{"://bad", false},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			_, err := secureEndpoint(tt.raw)
			if (err == nil) != tt.wantOK {
				t.Errorf("secureEndpoint(%q) err = %v, want ok %t", tt.raw, err, tt.wantOK)
			}
		})
	}
}

func TestOrigin(t *testing.T) {
	tests := []struct {
		a, b string
		same bool
	}{
		{"https://a.example/x", "https://A.example:443/y", true},
		{"http://a.example/", "http://a.example:80/", true},
		{"https://a.example/", "http://a.example/", false},
		{"https://a.example/", "https://a.example:8443/", false},
		{"https://a.example/", "https://b.example/", false},
	}
	for _, tt := range tests {
		a, _ := url.Parse(tt.a)
		b, _ := url.Parse(tt.b)
		if got := origin(a) == origin(b); got != tt.same {
			t.Errorf("origin(%s) == origin(%s) is %t, want %t", tt.a, tt.b, got, tt.same)
		}
	}
}

func TestMergeScopes(t *testing.T) {
	got := mergeScopes([]string{"a2a.invoke", "read"}, []string{"read", "", "partner"})
	if want := []string{"a2a.invoke", "read", "partner"}; !slices.Equal(got, want) {
		t.Errorf("mergeScopes = %q, want %q", got, want)
	}
}
