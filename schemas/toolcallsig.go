package schemas

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// A call an edge sends to a worker (chio.tools.<key>.invoke) is signed by
// the edge key like an event: a worker that trusts the issuers runs only
// calls a certified edge sent, so a NATS credential alone runs no tool.
// No stream stores a call, so the edge names the time it signed it, and a
// worker takes only calls signed within its freshness window.

// HeaderEdgeSignedAt is when the edge signed a call: unix milliseconds.
const HeaderEdgeSignedAt = "Chio-Edge-Signed-At"

// ErrEdgeStale: a call's signing time is outside the worker's freshness
// window (or missing): a call captured and sent again later, or a clock
// far off.
var ErrEdgeStale = errors.New("edge signature outside the freshness window")

// ToolCallSigningInput is what an edge signs of a call to a worker: a
// domain tag, the subject, the signing time and the SHA-256 of the body
// (which names the call's id and its decision's receipt id).
func ToolCallSigningInput(subject string, signedAtMillis int64, body []byte) []byte {
	h := sha256.Sum256(body)
	return fmt.Appendf(nil, "chio.tool_call.v1\n%s\n%d\n%x", subject, signedAtMillis, h)
}

// SignToolCall returns the headers of a call on subject with body, signed
// at the time at.
func (s *EdgeSigner) SignToolCall(subject string, body []byte, at time.Time) nats.Header {
	ms := at.UnixMilli()
	sig := ed25519.Sign(s.key, ToolCallSigningInput(subject, ms, body))
	return nats.Header{
		HeaderEdgeCredential: {s.header},
		HeaderEdgeSignature:  {base64.RawURLEncoding.EncodeToString(sig)},
		HeaderEdgeSignedAt:   {strconv.FormatInt(ms, 10)},
	}
}

// CheckToolCall returns the credential of the certified edge that signed
// a call on subject with headers h and body, and when it signed it; or
// why it is refused. The signing time must be within window of now; the
// credential must be valid then and not revoked before it.
func (v *EdgeVerifier) CheckToolCall(subject string, h nats.Header, body []byte, now time.Time, window time.Duration) (*EdgeCredential, time.Time, error) {
	cred, sig := h.Get(HeaderEdgeCredential), h.Get(HeaderEdgeSignature)
	if cred == "" || sig == "" {
		return nil, time.Time{}, ErrEdgeUnsigned
	}
	ms, err := strconv.ParseInt(h.Get(HeaderEdgeSignedAt), 10, 64)
	if err != nil {
		return nil, time.Time{}, ErrEdgeStale
	}
	at := time.UnixMilli(ms)
	if d := now.Sub(at); d > window || d < -window {
		return nil, at, ErrEdgeStale
	}
	c, err := v.check(cred, sig, at, func() []byte { return ToolCallSigningInput(subject, ms, body) })
	return c, at, err
}
