package openai

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// minSecret is the shortest credential scrubbed: a shorter one would
// match ordinary text far more often than it protects a key.
const minSecret = 8

// redaction replaces an upstream credential found in an upstream answer.
const redaction = "[REDACTED]"

// upstreamSecrets lists what scrub looks for in u's answers: the
// Authorization value the proxy sends, the key alone (which an upstream
// may echo without its scheme), the password of the base URL's user info,
// and their JSON-escaped forms. The OpenAPI bridge redacts its operator
// headers the same way.
func upstreamSecrets(u *Upstream) [][]byte {
	var out [][]byte
	add := func(s string) {
		if len(s) < minSecret {
			return
		}
		out = append(out, []byte(s))
		if esc, err := json.Marshal(s); err == nil {
			if e := esc[1 : len(esc)-1]; string(e) != s {
				out = append(out, e)
			}
		}
	}
	if k := strings.TrimSpace(u.APIKey); k != "" {
		add("Bearer " + k)
		add(k)
	}
	if u.BaseURL != nil && u.BaseURL.User != nil {
		if p, ok := u.BaseURL.User.Password(); ok {
			add(p)
		}
		add(u.BaseURL.User.String())
	}
	// Longest first, so a whole value goes before the key inside it.
	slices.SortFunc(out, func(a, b []byte) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return bytes.Compare(a, b)
	})
	return slices.CompactFunc(out, bytes.Equal)
}

// scrub replaces the upstream's credentials in b, an upstream answer or
// anything quoting one, before it reaches a client: an upstream may echo
// the request's headers in an error (or anywhere), and the proxy's key
// is the operator's, never the caller's. b itself is left unchanged.
func (u *Upstream) scrub(b []byte) []byte {
	for _, sec := range u.secrets {
		if bytes.Contains(b, sec) {
			b = bytes.ReplaceAll(b, sec, []byte(redaction))
		}
	}
	return b
}

// scrubString is scrub for a message.
func (u *Upstream) scrubString(s string) string {
	for _, sec := range u.secrets {
		s = strings.ReplaceAll(s, string(sec), redaction)
	}
	return s
}
