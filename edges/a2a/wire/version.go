package wire

import "strings"

// Version is a wire dialect.
type Version string

// Dialects. V03 and V10 are negotiated; VHelloStdio is never negotiated and
// is chosen by the stdio loop, which speaks the hello-a2a example's shapes:
// 0.3 names, a plain-string status, and "type"-discriminated parts.
//
// V03REST is never negotiated either: the edge chooses it (see
// RESTRoute.ResultVersion) for the results of the 0.3 HTTP+JSON routes under
// /v1, which are ProtoJSON of the 0.3 gRPC proto (package a2a.v1) rather
// than the JSON-RPC 0.3 shapes: no "kind", ROLE_* and TASK_STATE_* enums
// (TASK_STATE_CANCELLED), message parts under "content", wrapped send
// results and stream events. Only the result encoders accept it (see
// encode03rest.go); errors on /v1 stay EncodeRESTError's AIP-193 bodies.
const (
	V03         Version = "0.3"
	V10         Version = "1.0"
	VHelloStdio Version = "hello-a2a"
	V03REST     Version = "0.3-rest"
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
