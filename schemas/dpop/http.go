package dpop

import (
	"errors"
	"net/http"
	"strings"

	"github.com/chio-ledger/chio/schemas"
)

// Header is the request header that carries an RFC 9449 proof.
const Header = "DPoP"

// Presented is the credential an HTTP request carried.
type Presented struct {
	// Token is the capability text.
	Token string
	// Proof is the DPoP header's value, "" when the request sent none.
	Proof string
	// Method and URL are the request as this server received it: what
	// the proof's htm and htu must be.
	Method, URL string
	// Invalid, when set, is why the presentation's proof is refused
	// before any check: the request names its token, but not a usable
	// proof (see FromRequest).
	Invalid *Error
}

// FromRequest reads the capability and its proof from a request. The
// token comes as "Authorization: DPoP <token>" with a DPoP header, or as
// "Authorization: Bearer <token>" or X-Chio-Capability without one
// (schemas.CapabilityFromHeaders). origin, when set ("https://host"), is
// the request's origin as its clients address it (a server behind a
// proxy that terminates TLS); otherwise the request's own Host and
// whether it came over TLS decide.
//
// A request whose token can be read but whose proof is wrong in form (the
// DPoP scheme without a DPoP header, two DPoP headers, a proof beside a
// bearer token) is returned with Invalid set, not as an error: the call
// is then refused by the kernel, on the record, with that check. An error
// means no token could be read at all.
func FromRequest(r *http.Request, origin string) (Presented, error) {
	h := r.Header
	p := Presented{Method: r.Method, URL: RequestURL(r, origin)}
	proofs := h.Values(Header)
	switch {
	case len(proofs) > 1:
		p.Invalid = fail(CheckMalformed, "more than one DPoP header")
	case len(proofs) == 1:
		if p.Proof = strings.TrimSpace(proofs[0]); p.Proof == "" {
			p.Invalid = fail(CheckMalformed, "the DPoP header is empty")
		}
	}
	if a := h.Get("Authorization"); a != "" {
		scheme, rest, _ := strings.Cut(a, " ")
		if strings.EqualFold(scheme, "DPoP") {
			p.Token = strings.TrimSpace(rest)
			if p.Token == "" {
				return Presented{}, errors.New("Authorization header is not \"DPoP <capability>\"")
			}
			if x := strings.TrimSpace(h.Get("X-Chio-Capability")); x != "" && x != p.Token {
				return Presented{}, errors.New("Authorization and X-Chio-Capability carry different capabilities")
			}
			if len(proofs) == 0 {
				p.Invalid = fail(CheckMissing, "Authorization: DPoP needs a DPoP header with the proof")
			}
			return p, nil
		}
	}
	tok, err := schemas.CapabilityFromHeaders(h)
	if err != nil {
		return Presented{}, err
	}
	p.Token = tok
	if len(proofs) > 0 && p.Invalid == nil {
		p.Invalid = fail(CheckMalformed, "a DPoP proof goes with Authorization: DPoP <capability>, not a bearer token")
	}
	return p, nil
}

// Presents reports whether a request carries a credential at all.
func Presents(h http.Header) bool {
	return h.Get("Authorization") != "" || h.Get("X-Chio-Capability") != "" || h.Get(Header) != ""
}

// RequestURL is a request's htu as this server sees it (see FromRequest).
func RequestURL(r *http.Request, origin string) string {
	if origin == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		origin = scheme + "://" + r.Host
	}
	return strings.TrimSuffix(origin, "/") + pathOf(r)
}

func pathOf(r *http.Request) string {
	p := r.URL.EscapedPath()
	if p == "" {
		p = "/"
	}
	return p
}

// Challenge is the WWW-Authenticate value of a 401 for a refused proof
// (check set) or for a missing or refused token (check ""): RFC 9449 §7.1
// with error="invalid_dpop_proof", or the DPoP scheme's plain challenge.
func Challenge(check Check) string {
	if check == "" {
		return `DPoP realm="chio", algs="EdDSA"`
	}
	return `DPoP realm="chio", algs="EdDSA", error="invalid_dpop_proof", error_description="` + string(check) + `"`
}

// SetChallenge sets the 401 challenges: the DPoP one and, where a bearer
// token could have done (no proof check failed), bearer's too.
func SetChallenge(h http.Header, check Check, bearer string) {
	h.Del("WWW-Authenticate")
	if check == "" && bearer != "" {
		h.Add("WWW-Authenticate", bearer)
	}
	h.Add("WWW-Authenticate", Challenge(check))
}
