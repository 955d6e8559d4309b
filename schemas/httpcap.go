package schemas

import (
	"errors"
	"net/http"
	"strings"
)

// CapabilityFromHeaders reads a capability from Authorization: Bearer or
// X-Chio-Capability. Both present and different is an error: which one
// counts would otherwise depend on the reader.
func CapabilityFromHeaders(h http.Header) (string, error) {
	var bearer string
	if a := h.Get("Authorization"); a != "" {
		scheme, rest, ok := strings.Cut(a, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(rest) == "" {
			return "", errors.New("Authorization header is not \"Bearer <capability>\"")
		}
		bearer = strings.TrimSpace(rest)
	}
	x := strings.TrimSpace(h.Get("X-Chio-Capability"))
	switch {
	case bearer != "" && x != "" && bearer != x:
		return "", errors.New("Authorization and X-Chio-Capability carry different capabilities")
	case bearer != "":
		return bearer, nil
	case x != "":
		return x, nil
	}
	return "", errors.New("no capability: send Authorization: Bearer <token> or X-Chio-Capability")
}
