// Package readauth decides who may read what through the read APIs of the
// ledger and the projections.
//
// A request without a credential is anonymous: it reads only the public half
// of the log (checkpoints, hash tiles, consistency proofs, keys). A
// credential is either the bootstrap service token (an operator: reads
// everything) or a chio.capability.v1 token that verifies as the kernel
// verifies it (trusted root issuer, signatures, delegation, time window,
// revocation). Such a token reads:
//   - what was done under its own authority path: its own calls and those
//     of every capability delegated from it (schemas.PathPrincipals);
//   - and what its read grants (schemas.ReadServer) name: everything, every
//     receipt, or a principal's subtree (a tenant).
//
// A credential that is present and does not verify is refused with 401; it
// never falls back to anonymous.
package readauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/schemas"
)

// Reader is an authenticated caller's read scope.
type Reader struct {
	// All: every receipt and every operator view.
	All bool
	// Receipts: every receipt, entry bundle and proof, not the operator
	// views (an auditor).
	Receipts bool
	// Principals are the authority paths (schemas.Principal) whose
	// subtrees this reader may read: its own, then those its read grants
	// name.
	Principals []string
	// CapabilityIDs is the reader's own chain, root first: a reader may
	// see its own ancestors' lineage, which its token carries anyway.
	CapabilityIDs []string
}

// AllReceipts reports whether r may read every receipt.
func (r *Reader) AllReceipts() bool { return r != nil && (r.All || r.Receipts) }

// AllViews reports whether r may read every task, lineage record and report row.
func (r *Reader) AllViews() bool { return r != nil && r.All }

// Sees reports whether r may read what was done under an authority path,
// given that path's principals (schemas.PathPrincipals, any order): true
// when one of them is one of r's.
func (r *Reader) Sees(path []string) bool {
	if r == nil {
		return false
	}
	for _, p := range path {
		if slices.Contains(r.Principals, p) {
			return true
		}
	}
	return false
}

// Revocations is what the authenticator needs of a revocation mirror
// (internal/revocation.Watcher).
type Revocations interface {
	Live() bool
	FirstRevoked(ids []string) string
}

// Authenticator turns request headers into a Reader.
type Authenticator struct {
	trusted map[string]bool
	revs    Revocations
	service *[sha256.Size]byte
	now     func() time.Time
	skew    time.Duration
}

// Option configures New.
type Option func(*Authenticator)

// WithTrustedIssuers sets the root issuer keys (schemas.EncodePublicKey
// form) whose capabilities are accepted. Without any, only the service
// token is.
func WithTrustedIssuers(keys ...string) Option {
	return func(a *Authenticator) {
		for _, k := range keys {
			a.trusted[k] = true
		}
	}
}

// WithRevocations sets the revocation mirror. Capabilities are refused
// (503) while it is not live, and always when none is set.
func WithRevocations(r Revocations) Option { return func(a *Authenticator) { a.revs = r } }

// WithServiceToken accepts token as the bootstrap operator credential.
func WithServiceToken(token string) Option {
	return func(a *Authenticator) {
		if token != "" {
			sum := sha256.Sum256([]byte(token))
			a.service = &sum
		}
	}
}

// WithClock sets the clock the time window is checked against.
func WithClock(now func() time.Time) Option { return func(a *Authenticator) { a.now = now } }

// WithClockSkew sets how far ahead of the clock issued_at may be (default 30 s).
func WithClockSkew(d time.Duration) Option { return func(a *Authenticator) { a.skew = d } }

// New returns an authenticator.
func New(opts ...Option) *Authenticator {
	a := &Authenticator{trusted: map[string]bool{}, now: time.Now, skew: 30 * time.Second}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Error is a refused credential: Status is 401, or 503 when the revocation
// state is unavailable. Message never repeats the credential.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

func refuse(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: fmt.Sprintf(format, args...)}
}

// Authenticate returns the reader the headers authenticate, nil for a
// request without a credential, or an *Error.
func (a *Authenticator) Authenticate(h http.Header) (*Reader, error) {
	if h.Get("Authorization") == "" && h.Get("X-Chio-Capability") == "" {
		return nil, nil
	}
	text, err := schemas.CapabilityFromHeaders(h)
	if err != nil {
		return nil, refuse("%v", err)
	}
	if a.service != nil {
		sum := sha256.Sum256([]byte(text))
		if subtle.ConstantTimeCompare(sum[:], a.service[:]) == 1 {
			return &Reader{All: true}, nil
		}
	}
	if len(a.trusted) == 0 {
		return nil, refuse("credential refused: this service accepts only its service token (it trusts no capability issuer)")
	}
	raw, err := schemas.DecodeCapabilityText(text)
	if err != nil {
		return nil, refuse("credential is neither the service token nor a capability: %v", err)
	}
	tok, err := schemas.ParseCapability(raw)
	if err != nil {
		return nil, refuse("capability refused at parse: %v", err)
	}
	chain, err := schemas.VerifyChain(tok, func(k string) bool { return a.trusted[k] })
	if err != nil {
		step := "delegation"
		var ce *schemas.ChainError
		if errors.As(err, &ce) {
			step = ce.Step
		}
		return nil, refuse("capability refused at %s: %v", step, err)
	}
	now := a.now()
	if issued := time.Unix(int64(tok.IssuedAt), 0); issued.After(now.Add(a.skew)) {
		return nil, refuse("capability refused at time: %s is not valid before %d", tok.ID, tok.IssuedAt)
	}
	if !now.Before(time.Unix(int64(tok.ExpiresAt), 0)) {
		return nil, refuse("capability refused at time: %s expired at %d", tok.ID, tok.ExpiresAt)
	}
	ids := chain.IDs()
	if a.revs == nil || !a.revs.Live() {
		return nil, &Error{Status: http.StatusServiceUnavailable, Code: "revocation_state_unavailable",
			Message: "capabilities cannot be checked: the revocation state is unavailable (fail closed)"}
	}
	if id := a.revs.FirstRevoked(ids); id != "" {
		return nil, refuse("capability refused at revocation: %s is revoked", id)
	}
	principals := chain.Principals()
	r := &Reader{Principals: principals[len(principals)-1:], CapabilityIDs: ids}
	for _, g := range tok.Scope.Grants {
		if g.ServerID != schemas.ReadServer || !slices.Contains(g.Operations, schemas.OpRead) {
			continue
		}
		if g.DPoPRequired != nil && *g.DPoPRequired {
			continue // proof of possession is not supported here; the kernel refuses such grants too
		}
		switch {
		case g.ToolName == schemas.ReadAll:
			r.All = true
		case g.ToolName == schemas.ReadReceipts:
			r.Receipts = true
		case schemas.ValidPrincipal(g.ToolName) && !slices.Contains(r.Principals, g.ToolName):
			r.Principals = append(r.Principals, g.ToolName)
		}
	}
	return r, nil
}

// Middleware authenticates every request and stores its reader (nil when
// anonymous) for From. A refused credential is answered by deny, which
// writes the error in the service's own JSON form.
func Middleware(a *Authenticator, deny func(c echo.Context, e *Error) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r, err := a.Authenticate(c.Request().Header)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					e = refuse("%v", err)
				}
				if e.Status == http.StatusUnauthorized {
					challenge(c)
				}
				return deny(c, e)
			}
			c.Set(contextKeyName, r)
			return next(c)
		}
	}
}

const contextKeyName = "chio.reader"

// From returns the request's reader, nil when anonymous.
func From(c echo.Context) *Reader {
	r, _ := c.Get(contextKeyName).(*Reader)
	return r
}

// Require refuses an anonymous request (after Middleware) with a 401 that
// names the credentials that work: for routes with no public answer.
func Require(what string, deny func(c echo.Context, e *Error) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if From(c) == nil {
				challenge(c)
				return deny(c, refuse("%s needs a credential: Authorization: Bearer <capability or service token>", what))
			}
			return next(c)
		}
	}
}

func challenge(c echo.Context) {
	c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="chio"`)
}

// Forbidden is the error for a reader whose scope does not cover a path
// that only whole-log readers may read.
func Forbidden(what string) *Error {
	return &Error{Status: http.StatusForbidden, Code: "forbidden",
		Message: what + " needs a read grant on every receipt (" + schemas.ReadServer + "/" + schemas.ReadReceipts + " or " + schemas.ReadServer + "/" + schemas.ReadAll + ")"}
}
