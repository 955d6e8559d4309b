package schemas

import (
	"errors"
	"sync"
	"time"
)

// EdgeVerifier checks that a certified edge signed a stream message: its
// credential is signed by a trusted issuer, valid when the stream stored
// the message and not revoked before that second, and its key signed the
// message. Every reader of what edges write (the ledger of events, the
// task readers of commits) checks with one, so a NATS credential alone
// can neither mint a receipt nor forge a task. It keeps the credentials
// it verified, so a message costs one signature check. Safe for
// concurrent use.
type EdgeVerifier struct {
	issuers   map[string]bool
	revokedAt func(id string) (uint64, bool)

	mu    sync.Mutex
	creds map[string]*EdgeCredential
}

// maxVerifiedCredentials bounds the verified credentials an EdgeVerifier
// keeps; past it the cache starts over.
const maxVerifiedCredentials = 4096

// NewEdgeVerifier honours the credentials the issuers (hex Ed25519 keys)
// signed. revokedAt reports when a credential id was revoked (unix
// seconds), false when it is not; nil means no revocations.
func NewEdgeVerifier(issuers []string, revokedAt func(id string) (uint64, bool)) *EdgeVerifier {
	v := &EdgeVerifier{issuers: map[string]bool{}, revokedAt: revokedAt, creds: map[string]*EdgeCredential{}}
	for _, k := range issuers {
		v.issuers[k] = true
	}
	return v
}

// Check returns the credential that signed a message on subject with
// data, whose edge headers are credential and signature, stored at
// stored; or why it is refused (one of the ErrEdge errors).
func (v *EdgeVerifier) Check(subject string, data []byte, credential, signature string, stored time.Time) (*EdgeCredential, error) {
	return v.check(credential, signature, stored, func() []byte { return EdgeSigningInput(subject, data) })
}

func (v *EdgeVerifier) check(credential, signature string, stored time.Time, input func() []byte) (*EdgeCredential, error) {
	if credential == "" || signature == "" {
		return nil, ErrEdgeUnsigned
	}
	cred, err := v.credential(credential)
	if err != nil {
		return nil, err
	}
	at := uint64(max(stored.Unix(), 0))
	if v.revokedAt != nil {
		// Revocations are in whole seconds: a message stored in the second
		// of the revocation still counts as signed before it, on every
		// replay alike.
		if r, ok := v.revokedAt(cred.ID); ok && r < at {
			return nil, ErrEdgeRevoked
		}
	}
	if err := verifyEdgeInput(cred, signature, input(), at); err != nil {
		return nil, err
	}
	return cred, nil
}

// credential parses and verifies a credential header, or returns the one
// verified before.
func (v *EdgeVerifier) credential(header string) (*EdgeCredential, error) {
	v.mu.Lock()
	cred := v.creds[header]
	v.mu.Unlock()
	if cred != nil {
		return cred, nil
	}
	cred, err := ParseEdgeHeader(header)
	if err != nil {
		return nil, err
	}
	if err := cred.Verify(func(k string) bool { return v.issuers[k] }); err != nil {
		return nil, err
	}
	v.mu.Lock()
	if len(v.creds) >= maxVerifiedCredentials {
		clear(v.creds)
	}
	v.creds[header] = cred
	v.mu.Unlock()
	return cred, nil
}

// EdgeReason is a short label for why a message was refused, for metrics.
func EdgeReason(err error) string {
	for _, r := range []struct {
		err   error
		label string
	}{{ErrEdgeUnsigned, "unsigned"}, {ErrEdgeCredential, "credential"}, {ErrEdgeIssuer, "issuer"},
		{ErrEdgeExpired, "expired"}, {ErrEdgeRevoked, "revoked"}, {ErrEdgeSignature, "signature"}, {ErrEdgeStale, "stale"}} {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}
