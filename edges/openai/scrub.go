package openai

import "github.com/chio-ledger/chio/internal/redact"

// upstreamRedactor removes what the proxy sends an upstream on the
// operator's behalf from the upstream's answers: the Authorization value
// (and so the key alone), and the base URL's user info and password.
func upstreamRedactor(u *Upstream) *redact.Redactor {
	var values []string
	if u.APIKey != "" {
		values = append(values, "Bearer "+u.APIKey)
	}
	if u.BaseURL != nil && u.BaseURL.User != nil {
		if p, ok := u.BaseURL.User.Password(); ok {
			values = append(values, p)
		}
		values = append(values, u.BaseURL.User.String())
	}
	return redact.New(values...)
}

// scrub replaces the upstream's credentials in b, an upstream answer or
// anything quoting one, before it reaches a client. b itself is left
// unchanged.
func (u *Upstream) scrub(b []byte) []byte {
	out, _ := u.redactor.Bytes(b)
	return out
}

// scrubString is scrub for a message.
func (u *Upstream) scrubString(s string) string { return u.redactor.String(s) }
