package auth

import (
	"fmt"
	"sort"
	"strings"
)

// The credential types format without their secrets so that a stray %v or
// %#v in a caller's log line cannot leak them.

// String lists which credentials are configured, never their values.
func (c Credentials) String() string {
	var parts []string
	if c.Bearer != "" {
		parts = append(parts, "bearer")
	}
	if c.BearerKey != nil {
		parts = append(parts, "dpop")
	}
	if c.Basic != nil {
		parts = append(parts, "basic")
	}
	if len(c.APIKeys) > 0 {
		names := make([]string, 0, len(c.APIKeys))
		for name := range c.APIKeys {
			names = append(names, name)
		}
		sort.Strings(names)
		parts = append(parts, "apiKeys("+strings.Join(names, ",")+")")
	}
	if c.OAuth2 != nil {
		parts = append(parts, c.OAuth2.String())
	}
	if c.TLS != nil {
		parts = append(parts, c.TLS.String())
	}
	if n := len(c.Headers) + len(c.Query) + len(c.Cookies); n > 0 {
		parts = append(parts, fmt.Sprintf("extras(%d)", n))
	}
	return "auth.Credentials{" + strings.Join(parts, " ") + "}"
}

// GoString redacts like String.
func (c Credentials) GoString() string { return c.String() }

// String redacts the password.
func (b Basic) String() string { return "auth.Basic{User:[redacted] Password:[redacted]}" }

// GoString redacts like String.
func (b Basic) GoString() string { return b.String() }

// String shows the client id and scopes, not the secret.
func (c ClientCredentials) String() string {
	return fmt.Sprintf("oauth2(client %q, scopes %v)", c.ClientID, c.Scopes)
}

// GoString redacts like String.
func (c ClientCredentials) GoString() string { return c.String() }

// String hides the private key a tls.Certificate would otherwise print.
func (t TLS) String() string {
	return fmt.Sprintf("tls(roots:%t clientCert:%t)", t.RootCAs != nil, t.ClientCert != nil)
}

// GoString redacts like String.
func (t TLS) GoString() string { return t.String() }
