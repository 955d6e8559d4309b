package wire

import "strings"

// Version is a wire dialect.
type Version string

// Dialects. V03 and V10 are negotiated; VHelloStdio is never negotiated and
// is chosen by the stdio loop, which speaks the hello-a2a example's shapes:
// 0.3 names, a plain-string status, and "type"-discriminated parts.
const (
	V03         Version = "0.3"
	V10         Version = "1.0"
	VHelloStdio Version = "hello-a2a"
)

// Service-parameter names (HTTP headers, or query parameters for the version).
const (
	HeaderVersion    = "A2A-Version"
	HeaderExtensions = "A2A-Extensions"
)

// NegotiateVersion applies the A2A-Version rules (1.0 spec §2.2 of the
// reference): the header wins over the query parameter; both missing or
// empty mean 0.3; "1.0" and "0.3" are supported; anything else, including a
// patch number such as "1.0.0", is VersionNotSupported (-32009).
func NegotiateVersion(header, query string) (Version, *Error) {
	s := strings.TrimSpace(header)
	if s == "" {
		s = strings.TrimSpace(query)
	}
	switch s {
	case "":
		return V03, nil
	case string(V10):
		return V10, nil
	case string(V03):
		return V03, nil
	}
	return "", VersionNotSupported(s)
}
