// Package readauth decides who may read what through the read APIs of the
// ledger and the projections.
//
// A request without a credential is anonymous: it reads only the public half
// of the log (checkpoints, hash tiles, consistency proofs, keys). A
// credential is either the bootstrap service token (an operator: reads
// everything) or a chio.capability.v1 token that verifies as the kernel
// verifies it (trusted root issuer, signatures, delegation, time window,
// revocation, then proof of possession). Such a token reads:
//   - what was done under its own authority path: its own calls and those
//     of every capability delegated from it (schemas.PathPrincipals);
//   - and what its read grants (schemas.ReadServer) name: everything, every
//     receipt, or a principal's subtree (a tenant).
//
// Proof of possession follows the kernel's rule. A capability with the
// delegate operation in any grant, or any grant with dpop_required (read
// grants included), or any capability when the operator requires proofs
// (WithRequireDPoP), is honoured only as "Authorization: DPoP <token>"
// with an RFC 9449 proof (DPoP header) signed by its subject key, for this
// request's method and URL, fresh, and used once (its jti is claimed in the
// shared replay state, WithReplay). Otherwise the token is a bearer token;
// a proof it brings anyway must still be valid. A token that can delegate
// is the ancestor of every token it hands out, and each of those carries
// it in its chain: honoured by possession alone, a rebuilt ancestor would
// let a delegate read as its delegator. The service token is no
// capability and has no key: it stays a bearer credential, and a proof
// sent with it is refused.
//
// A credential that is present and does not verify is refused with 401; it
// never falls back to anonymous. A refused proof is a 401 whose Error names
// the failed check (dpop.Check) and whose challenge is DPoP's, with
// error="invalid_dpop_proof". When the replay state cannot be reached, or
// none is configured, every proof is refused with 503 (fail closed, as for
// an unavailable revocation state): a proof whose single use cannot be
// recorded is not accepted, and the condition is the server's, not the
// caller's.
//
// WithRateLimit bounds how fast each principal reads, whatever addresses
// it reads from: a read past the bound is refused with 429 and a
// Retry-After.
package readauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/internal/ratelimit"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
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
	// Binding is how the reader proved who it is: dpop.MethodBearer, or
	// dpop.MethodDPoP with the proving key's RFC 7638 Thumbprint.
	Binding    string
	Thumbprint string
	// limitKey is who the reader's reads are counted against
	// (WithRateLimit): the root principal of its chain, so delegating to
	// fresh subjects does not multiply its budget; "service" for the
	// service token.
	limitKey string
}

// LimitKey is who r's reads are counted against: the root principal of
// its chain ("service" for the service token).
func (r *Reader) LimitKey() string { return r.limitKey }

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

// Authenticator turns requests into Readers.
type Authenticator struct {
	trusted     map[string]bool
	revs        Revocations
	service     *[sha256.Size]byte
	now         func() time.Time
	skew        time.Duration
	origin      string
	replay      *dpopreplay.Store
	requireDPoP bool
	limit       *ratelimit.Keyed
	refused     *ratelimit.Metrics
	identities  *identity.Verifier // WithIdentities; nil: no access tokens
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

// WithClockSkew sets how far ahead of the clock a capability's issued_at
// may be (default 30 s). Proofs have their own window: dpop.DefaultLifetime
// and dpop.DefaultSkew, which the replay state's entries must outlive
// (dpopreplay.Window).
func WithClockSkew(d time.Duration) Option { return func(a *Authenticator) { a.skew = d } }

// WithPublicOrigin sets the origin ("https://ledger.example") clients
// address this service by, when it differs from what the request shows
// (behind a proxy that terminates TLS or rewrites Host): a proof's htu
// must be that origin plus the request's path. By default the request's
// Host and whether it came over TLS decide.
func WithPublicOrigin(origin string) Option {
	return func(a *Authenticator) { a.origin = strings.TrimSuffix(origin, "/") }
}

// WithReplay sets the one-time state proofs are claimed in, shared by
// every replica (and with the edges: one bucket, one claim per proof).
// Without it every proof is refused with 503 (fail closed).
func WithReplay(r *dpopreplay.Store) Option { return func(a *Authenticator) { a.replay = r } }

// WithRequireDPoP makes every capability need a proof of possession, as
// the kernel's --require-dpop does for calls. The service token is not a
// capability and stays a bearer credential.
func WithRequireDPoP(on bool) Option { return func(a *Authenticator) { a.requireDPoP = on } }

// WithRateLimit bounds how fast each principal may read (the root of its
// capability's chain; the service token counts as one principal), from
// however many addresses: a read past the limit is refused with 429
// (CodeRateLimited, Error.RetryAfter) and counted on m as surface "reads",
// reason "principal". A nil limit is no limit.
func WithRateLimit(limit *ratelimit.Keyed, m *ratelimit.Metrics) Option {
	return func(a *Authenticator) { a.limit, a.refused = limit, m }
}

// WithIdentities accepts the access tokens (JWTs) v verifies, the
// identity providers of the edges' policy: a token reads as its identity
// (what it did under its own calls) plus the read grants its rule gives
// (schemas.ReadServer), exactly as a capability with those grants would.
func WithIdentities(v *identity.Verifier) Option { return func(a *Authenticator) { a.identities = v } }

// New returns an authenticator.
func New(opts ...Option) *Authenticator {
	a := &Authenticator{trusted: map[string]bool{}, now: time.Now, skew: 30 * time.Second}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Error is a refused credential: Status is 401, or 503 when the revocation
// or replay state, or an identity provider's keys, are unavailable. Check names the failed proof check when
// a proof of possession was refused or missing (the code is then
// CodeInvalidProof, or CodeProofState with 503). Message never repeats the
// credential.
type Error struct {
	Status  int
	Code    string
	Message string
	Check   dpop.Check
	// RetryAfter is when to try again, for a 429 (CodeRateLimited).
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// Error codes besides "unauthorized".
const (
	// CodeInvalidProof: a proof of possession is missing or refused; Check
	// says which check failed.
	CodeInvalidProof = "invalid_dpop_proof"
	// CodeProofState: the proofs' one-time state cannot be reached.
	CodeProofState = "dpop_state_unavailable"
	// CodeRateLimited: the reader's principal read faster than
	// WithRateLimit allows (Status 429).
	CodeRateLimited = "rate_limited"
)

func refuse(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: fmt.Sprintf(format, args...)}
}

// refuseProof is the Error of a failed proof check.
func refuseProof(err error) *Error {
	var de *dpop.Error
	if !errors.As(err, &de) {
		de = &dpop.Error{Check: dpop.CheckMalformed, Msg: err.Error()}
	}
	if de.Check == dpop.CheckState {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeProofState, Message: de.Error(), Check: de.Check}
	}
	return &Error{Status: http.StatusUnauthorized, Code: CodeInvalidProof, Message: de.Error(), Check: de.Check}
}

// Authenticate returns the reader the request authenticates, nil for a
// request without a credential, or an *Error. The credential comes as
// "Authorization: Bearer <token>" (or X-Chio-Capability), or as
// "Authorization: DPoP <token>" with a DPoP proof for r's method and URL.
func (a *Authenticator) Authenticate(r *http.Request) (*Reader, error) {
	if !dpop.Presents(r.Header) {
		return nil, nil
	}
	p, err := dpop.FromRequest(r, a.origin)
	if err != nil {
		if proofForm(r.Header) {
			return nil, refuseProof(&dpop.Error{Check: dpop.CheckMalformed, Msg: err.Error()})
		}
		return nil, refuse("%v", err)
	}
	if p.Invalid != nil {
		return nil, refuseProof(p.Invalid)
	}
	if a.service != nil {
		sum := sha256.Sum256([]byte(p.Token))
		if subtle.ConstantTimeCompare(sum[:], a.service[:]) == 1 {
			if p.Proof != "" {
				return nil, refuseProof(&dpop.Error{Check: dpop.CheckMalformed,
					Msg: "the service token is a bearer credential with no key to prove: send it as Authorization: Bearer, without a DPoP proof"})
			}
			return &Reader{All: true, Binding: dpop.MethodBearer, limitKey: "service"}, nil
		}
	}
	var (
		tok        *schemas.CapabilityToken
		ids        []string
		principals []string
		caller     *identity.Caller
	)
	now := a.now()
	if identity.LooksLikeJWT(p.Token) {
		if a.identities == nil {
			return nil, refuse("credential refused: an access token (JWT), and this service trusts no identity provider")
		}
		c, err := a.identities.Verify(r.Context(), p.Token)
		if errors.Is(err, identity.ErrUnavailable) {
			slog.Warn("read authorization: identity provider keys unavailable", "err", err)
			return nil, &Error{Status: http.StatusServiceUnavailable, Code: "identity_provider_unavailable",
				Message: "access tokens cannot be checked: the identity provider's keys are unavailable (fail closed)"}
		}
		if err != nil {
			return nil, refuse("access token refused: %v", err)
		}
		caller, principals, ids = c, c.Principals(), []string{c.CapabilityID()}
		tok = &schemas.CapabilityToken{CapabilityBody: schemas.CapabilityBody{ID: ids[0], Issuer: c.IssuerKey(), Subject: c.SubjectKey(),
			Scope: schemas.Scope{Grants: c.Grants}}}
	} else {
		if len(a.trusted) == 0 {
			return nil, refuse("credential refused: this service accepts only its service token (it trusts no capability issuer)")
		}
		raw, err := schemas.DecodeCapabilityText(p.Token)
		if err != nil {
			return nil, refuse("credential is neither the service token, a capability nor an access token: %v", err)
		}
		if tok, err = schemas.ParseCapability(raw); err != nil {
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
		if issued := time.Unix(int64(tok.IssuedAt), 0); issued.After(now.Add(a.skew)) {
			return nil, refuse("capability refused at time: %s is not valid before %d", tok.ID, tok.IssuedAt)
		}
		if !now.Before(time.Unix(int64(tok.ExpiresAt), 0)) {
			return nil, refuse("capability refused at time: %s expired at %d", tok.ID, tok.ExpiresAt)
		}
		ids, principals = chain.IDs(), chain.Principals()
	}
	if a.revs == nil || !a.revs.Live() {
		return nil, &Error{Status: http.StatusServiceUnavailable, Code: "revocation_state_unavailable",
			Message: "capabilities cannot be checked: the revocation state is unavailable (fail closed)"}
	}
	if id := a.revs.FirstRevoked(ids); id != "" {
		return nil, refuse("capability refused at revocation: %s is revoked", id)
	}
	binding, thumbprint, err := a.checkProof(r.Context(), tok, caller, p, now)
	if err != nil {
		return nil, refuseProof(err)
	}
	rd := &Reader{Principals: principals[len(principals)-1:], CapabilityIDs: ids, Binding: binding, Thumbprint: thumbprint, limitKey: principals[0]}
	for _, g := range tok.Scope.Grants {
		if g.ServerID != schemas.ReadServer || !slices.Contains(g.Operations, schemas.OpRead) {
			continue
		}
		// A dpop_required grant counts: the token was honoured only with
		// a proof (needsProof), so it is proven here.
		switch {
		case g.ToolName == schemas.ReadAll:
			rd.All = true
		case g.ToolName == schemas.ReadReceipts:
			rd.Receipts = true
		case schemas.ValidPrincipal(g.ToolName) && !slices.Contains(rd.Principals, g.ToolName):
			rd.Principals = append(rd.Principals, g.ToolName)
		}
	}
	return rd, nil
}

// proofForm reports whether the request meant to present a proof: a DPoP
// header, or the DPoP authorization scheme. Its malformed credentials are
// refused as malformed proofs.
func proofForm(h http.Header) bool {
	if len(h.Values(dpop.Header)) > 0 {
		return true
	}
	scheme, _, _ := strings.Cut(h.Get("Authorization"), " ")
	return strings.EqualFold(scheme, "DPoP")
}

// needsProof says why tok is honoured only with a proof, "" when it is a
// bearer token: the kernel's rule (edges/kernel needsProof).
func (a *Authenticator) needsProof(tok *schemas.CapabilityToken) string {
	if a.requireDPoP {
		return "this server requires a proof of possession with every capability"
	}
	return tok.HolderProofReason()
}

// checkProof is the proof step for a capability that verified: the
// binding method and thumbprint, or a *dpop.Error. A presented proof is
// verified (key, method, URL, token, time) and its jti claimed once.
func (a *Authenticator) checkProof(ctx context.Context, tok *schemas.CapabilityToken, caller *identity.Caller, p dpop.Presented, now time.Time) (string, string, error) {
	// An access token is bound by its cnf.jkt, or not at all (the kernel's
	// rule, edges/kernel).
	bound := caller != nil && caller.Thumbprint != ""
	if p.Proof == "" {
		why := a.needsProof(tok)
		if bound {
			why = "the access token is bound to a key (cnf.jkt, RFC 9449)"
		}
		if why != "" {
			if caller != nil && !bound {
				return "", "", &dpop.Error{Check: dpop.CheckMissing, Msg: why + ", and a bearer access token proves no key: present an access token bound to your DPoP key (cnf.jkt) with a DPoP proof"}
			}
			return "", "", &dpop.Error{Check: dpop.CheckMissing, Msg: why + ", so it is honoured only with a proof of possession of its subject key: " +
				"send it as Authorization: DPoP <token> with a DPoP proof header for this request"}
		}
		return dpop.MethodBearer, "", nil
	}
	if caller != nil && !bound {
		return "", "", &dpop.Error{Check: dpop.CheckKey, Msg: "the access token is not bound to a key (no cnf.jkt): a proof cannot be checked against it"}
	}
	pr, err := dpop.Parse(p.Proof)
	if err != nil {
		return "", "", err
	}
	e := dpop.Expect{Subject: tok.Subject, Token: p.Token, Method: p.Method, URL: p.URL, Now: now}
	if bound {
		e.Subject, e.Thumbprint = "", caller.Thumbprint
	}
	if err := pr.Verify(e); err != nil {
		return "", "", err
	}
	if a.replay == nil {
		return "", "", &dpop.Error{Check: dpop.CheckState, Msg: "this service has no replay state for proofs (fail closed)"}
	}
	if err := a.replay.Claim(ctx, pr.ReplayKey(), time.Unix(pr.IAT, 0)); err != nil {
		return "", "", err
	}
	return dpop.MethodDPoP, pr.Thumbprint, nil
}

// Middleware authenticates every request and stores its reader (nil when
// anonymous) for From. A refused credential is answered by deny, which
// writes the error in the service's own JSON form; a 401 carries the
// challenges (Challenge).
func Middleware(a *Authenticator, deny func(c echo.Context, e *Error) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r, err := a.Authenticate(c.Request())
			if err == nil {
				err = a.charge(r)
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					e = refuse("%v", err)
				}
				switch e.Status {
				case http.StatusUnauthorized:
					Challenge(c.Response().Header(), e.Check)
				case http.StatusTooManyRequests:
					c.Response().Header().Set("Retry-After", strconv.Itoa(ratelimit.RetryAfterSeconds(e.RetryAfter)))
				}
				return deny(c, e)
			}
			c.Set(contextKeyName, r)
			return next(c)
		}
	}
}

// charge takes one read from r's principal's budget; anonymous reads are
// bounded per address, where the HTTP server is.
func (a *Authenticator) charge(r *Reader) error {
	if a.limit == nil || r == nil {
		return nil
	}
	ok, wait := a.limit.Allow(r.limitKey, a.now())
	if ok {
		return nil
	}
	a.refused.Refused("reads", ratelimit.ReasonPrincipal)
	return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, RetryAfter: wait,
		Message: fmt.Sprintf("too many reads by this principal: retry after %ds", ratelimit.RetryAfterSeconds(wait))}
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
				Challenge(c.Response().Header(), "")
				return deny(c, refuse("%s needs a credential: Authorization: Bearer <capability or service token>, "+
					"or Authorization: DPoP <capability> with a DPoP proof (required for a capability that can delegate)", what))
			}
			return next(c)
		}
	}
}

// Challenge sets the WWW-Authenticate challenges of a 401: for a refused
// proof (check set) DPoP's alone, with error="invalid_dpop_proof" naming
// the check; otherwise Bearer's, then DPoP's.
func Challenge(h http.Header, check dpop.Check) {
	dpop.SetChallenge(h, check, `Bearer realm="chio"`)
}

// Forbidden is the error for a reader whose scope does not cover a path
// that only whole-log readers may read.
func Forbidden(what string) *Error {
	return &Error{Status: http.StatusForbidden, Code: "forbidden",
		Message: what + " needs a read grant on every receipt (" + schemas.ReadServer + "/" + schemas.ReadReceipts + " or " + schemas.ReadServer + "/" + schemas.ReadAll + ")"}
}
