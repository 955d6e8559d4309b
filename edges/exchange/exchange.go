// Package exchange is an OAuth 2.0 token exchange endpoint (RFC 8693)
// that turns an identity provider's access token into a short-lived chio
// capability for the grants the policy maps it to.
//
// A request (POST, application/x-www-form-urlencoded) carries:
//   - grant_type urn:ietf:params:oauth:grant-type:token-exchange;
//   - subject_token, a JWT access token of a provider the policy trusts,
//     with subject_token_type urn:ietf:params:oauth:token-type:access_token
//     or urn:ietf:params:oauth:token-type:jwt;
//   - optionally actor_token (a JWT of a trusted provider, of the same two
//     types, in actor_token_type): the party that acts for the subject;
//   - optionally requested_token_type, which must be TokenTypeCapability;
//   - optionally a DPoP header (RFC 9449 section 5): a proof, without ath,
//     for this endpoint, by the Ed25519 key the capability is to be bound
//     to. A subject token bound by cnf.jkt needs a proof by that key.
//
// The answer is RFC 8693's: access_token is the capability in header form
// (base64url), issued_token_type TokenTypeCapability, token_type DPoP for
// a bound capability or Bearer, and expires_in. The capability is signed
// by the exchange's key, which the policy must trust as an issuer; it
// expires with the subject token, or after the exchange's lifetime if
// that comes first; a bound capability's grants have dpop_required.
//
// Delegation: the capability's chain starts at the subject, always: the
// exchange's key issues to a key it derives from its own for the subject's
// identity (so every capability of one identity has one root subject, the
// principal velocity limits and per-caller quotas count), the subject
// delegates to each actor of its act chain (RFC 8693 section 4.1), oldest
// first, then to the actor token's subject, and the last party to the
// proof's key, if there is one. Each actor is named by a derived key too,
// so each link is a real chio delegation a verifier checks, and the chain
// names every party that acted; the links before the last can delegate.
//
// A subject or actor token whose id (identity.Caller.CapabilityID) is
// revoked is refused; a capability already issued is revoked by its own id
// (or its root's), which the exchange logs with the identity. An actor
// token bound by cnf.jkt is refused, and its exp bounds the capability too.
// A proof's jti is not held to one use here: a replayed proof gets a
// capability bound to its own key, which only that key's holder can use.
//
// Refusals are RFC 6749 section 5.2's JSON errors (invalid_request,
// unsupported_grant_type, invalid_target), RFC 9449's invalid_dpop_proof,
// and temporarily_unavailable (503) when a provider's keys are out of
// reach.
package exchange

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Path is where the endpoint is served.
const Path = "/v1/token"

// Token types and the grant type (RFC 8693 section 3), and the type of
// the tokens this endpoint issues.
const (
	GrantType           = "urn:ietf:params:oauth:grant-type:token-exchange"
	TokenTypeAccess     = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeJWT        = "urn:ietf:params:oauth:token-type:jwt"
	TokenTypeCapability = "urn:chio:params:oauth:token-type:capability"
)

// DefaultLifetime bounds an issued capability's life.
const DefaultLifetime = 10 * time.Minute

// maxBody bounds a request's form: two tokens of identity.MaxTokenBytes
// and their names fit with room to spare.
const maxBody = 64 << 10

// Verifier checks the tokens presented: *identity.Verifier.
type Verifier interface {
	Verify(ctx context.Context, token string) (*identity.Caller, error)
	VerifyActor(ctx context.Context, token string) (*identity.Caller, error)
}

// Exchange is the endpoint; it holds the key it signs capabilities with.
type Exchange struct {
	key      ed25519.PrivateKey
	verifier Verifier
	revoked  func(id string) (bool, error)
	origin   string
	lifetime time.Duration
	now      func() time.Time
	log      *slog.Logger
}

// Option configures an Exchange.
type Option func(*Exchange)

// WithPublicOrigin is the origin clients address the endpoint by
// ("https://host"), which their DPoP proofs' htu names; default: each
// request's Host.
func WithPublicOrigin(origin string) Option { return func(e *Exchange) { e.origin = origin } }

// WithLifetime sets how long an issued capability lives at most.
func WithLifetime(d time.Duration) Option { return func(e *Exchange) { e.lifetime = d } }

// WithRevocations sets how the exchange learns that an access token was
// revoked (the kernel's Revoked: by the id its receipts name); an error
// means the revocation state is out of reach, and nothing is issued.
func WithRevocations(revoked func(id string) (bool, error)) Option {
	return func(e *Exchange) { e.revoked = revoked }
}

// WithClock sets the exchange's clock.
func WithClock(now func() time.Time) Option { return func(e *Exchange) { e.now = now } }

// WithLogger sets where refusals are logged.
func WithLogger(l *slog.Logger) Option { return func(e *Exchange) { e.log = l } }

// New is an exchange that verifies tokens with v and signs with key.
func New(key ed25519.PrivateKey, v Verifier, opts ...Option) *Exchange {
	e := &Exchange{key: key, verifier: v, lifetime: DefaultLifetime, now: time.Now, log: slog.Default()}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Issuer is the public key the issued capabilities name as issuer, in
// wire form: the policy must trust it.
func (e *Exchange) Issuer() string {
	return schemas.EncodePublicKey(e.key.Public().(ed25519.PublicKey))
}

// Response is RFC 8693 section 2.2.1's answer.
type Response struct {
	AccessToken     string `json:"access_token"`
	IssuedTokenType string `json:"issued_token_type"`
	TokenType       string `json:"token_type"`
	ExpiresIn       int64  `json:"expires_in"`
}

// Error is RFC 6749 section 5.2's error answer.
type Error struct {
	Status      int    `json:"-"`
	Code        string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Description }

func refuse(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Description: fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one exchange.
func (e *Exchange) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := e.exchange(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		var ee *Error
		if !errors.As(err, &ee) {
			ee = refuse(http.StatusInternalServerError, "server_error", "the capability could not be issued")
			e.log.Error("token exchange", "err", err)
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
		}
		w.WriteHeader(ee.Status)
		_ = json.NewEncoder(w).Encode(ee)
		return
	}
	_ = json.NewEncoder(w).Encode(resp)
}

// exchange reads, checks and answers a request; its errors are *Error
// but for a failure to sign.
func (e *Exchange) exchange(r *http.Request) (*Response, error) {
	if r.Method != http.MethodPost {
		return nil, refuse(http.StatusMethodNotAllowed, "invalid_request", "the token endpoint takes POST, not %s", r.Method)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "the body must be application/x-www-form-urlencoded")
	}
	r.Body = http.MaxBytesReader(nil, r.Body, maxBody)
	if err := r.ParseForm(); err != nil {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "the form does not read (at most %d bytes): %v", maxBody, err)
	}
	form := r.PostForm
	// RFC 6749 section 3.2: no parameter more than once.
	for name, vs := range form {
		if len(vs) > 1 {
			return nil, refuse(http.StatusBadRequest, "invalid_request", "%s is given %d times", name, len(vs))
		}
	}
	if len(r.URL.Query()) > 0 {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "parameters go in the body, not the URL")
	}
	switch gt := form.Get("grant_type"); gt {
	case GrantType:
	case "":
		return nil, refuse(http.StatusBadRequest, "invalid_request", "grant_type is missing")
	default:
		return nil, refuse(http.StatusBadRequest, "unsupported_grant_type", "this endpoint does token exchange (%s) only, not %q", GrantType, gt)
	}
	if rt := form.Get("requested_token_type"); rt != "" && rt != TokenTypeCapability {
		return nil, refuse(http.StatusBadRequest, "invalid_target", "this endpoint issues %s only, not %q", TokenTypeCapability, rt)
	}
	subjectToken := form.Get("subject_token")
	if subjectToken == "" {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "subject_token is missing")
	}
	if err := jwtType("subject_token_type", form.Get("subject_token_type")); err != nil {
		return nil, err
	}
	ctx := r.Context()
	subject, err := e.verifier.Verify(ctx, subjectToken)
	if err != nil {
		return nil, tokenRefusal("subject_token", err)
	}
	if err := e.unrevoked("subject_token", subject); err != nil {
		return nil, err
	}
	expires := subject.Expiry
	actors := make([]identity.Actor, 0, len(subject.Actors)+1)
	for i := len(subject.Actors) - 1; i >= 0; i-- { // oldest first
		actors = append(actors, subject.Actors[i])
	}
	if at := form.Get("actor_token"); at != "" {
		if err := jwtType("actor_token_type", form.Get("actor_token_type")); err != nil {
			return nil, err
		}
		actor, err := e.verifier.VerifyActor(ctx, at)
		if err != nil {
			return nil, tokenRefusal("actor_token", err)
		}
		if actor.Thumbprint != "" {
			// Its key's proof would have to come beside the subject's:
			// a bound actor token is not taken rather than taken unproved.
			return nil, refuse(http.StatusBadRequest, "invalid_request", "actor_token is bound to a key (cnf.jkt): present a bearer actor token")
		}
		if err := e.unrevoked("actor_token", actor); err != nil {
			return nil, err
		}
		if actor.Expiry.Before(expires) {
			expires = actor.Expiry
		}
		actors = append(actors, identity.Actor{Subject: actor.Subject, Issuer: actor.Issuer, ClientID: actor.ClientID})
	} else if form.Get("actor_token_type") != "" {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "actor_token_type without actor_token")
	}
	holder, bound, err := e.holder(r, subject)
	if err != nil {
		return nil, err
	}
	if links := len(actors) + boolInt(bound); links > schemas.MaxDelegationDepth {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "%d actors and a key to bind to: a capability's delegation chain holds at most %d links", len(actors), schemas.MaxDelegationDepth)
	}
	grants, err := exchangeable(subject.Grants, bound)
	if err != nil {
		return nil, err
	}
	now := e.now()
	if lim := now.Add(e.lifetime); lim.Before(expires) {
		expires = lim
	}
	// The verifier takes a token up to its clock skew past exp; a
	// capability must still end after it begins, at second precision.
	if expires.Unix() <= now.Unix() {
		return nil, refuse(http.StatusBadRequest, "invalid_request", "the token expired at %s: there is no time left to issue a capability for", expires.UTC().Format(time.RFC3339))
	}
	tok, err := e.issue(subject, actors, holder, grants, now, expires)
	if err != nil {
		return nil, err
	}
	text, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		return nil, fmt.Errorf("token exchange: encode: %w", err)
	}
	resp := &Response{AccessToken: text, IssuedTokenType: TokenTypeCapability, TokenType: "Bearer", ExpiresIn: int64(expires.Sub(now).Seconds())}
	if bound {
		resp.TokenType = "DPoP"
	}
	e.log.Info("token exchange", "issuer", subject.Issuer, "subject", subject.Subject, "actors", len(actors), "capability", tok.ID, "bound", bound)
	return resp, nil
}

// unrevoked refuses a token whose id (identity.Caller.CapabilityID, what
// `chio capability revoke` revokes) is revoked, and issues nothing while
// the revocation state is out of reach.
func (e *Exchange) unrevoked(name string, c *identity.Caller) *Error {
	if e.revoked == nil {
		return nil
	}
	revoked, err := e.revoked(c.CapabilityID())
	switch {
	case err != nil:
		return refuse(http.StatusServiceUnavailable, "temporarily_unavailable", "the revocation state is out of reach: nothing is issued (fail closed)")
	case revoked:
		return refuse(http.StatusBadRequest, "invalid_request", "%s is revoked (%s)", name, c.CapabilityID())
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func jwtType(name, typ string) *Error {
	switch typ {
	case TokenTypeAccess, TokenTypeJWT:
		return nil
	case TokenTypeCapability:
		return refuse(http.StatusBadRequest, "invalid_request",
			"%s: a chio capability is narrowed by delegating it (chio capability issue --delegate-from), which its holder signs: this endpoint exchanges access tokens", name)
	case "":
		return refuse(http.StatusBadRequest, "invalid_request", "%s is missing", name)
	default:
		return refuse(http.StatusBadRequest, "invalid_request", "%s %q: this endpoint takes JWT access tokens (%s or %s)", name, typ, TokenTypeAccess, TokenTypeJWT)
	}
}

// tokenRefusal is RFC 8693 section 2.2.2's answer to a token that does
// not verify: invalid_request, or 503 when its provider is out of reach.
func tokenRefusal(name string, err error) *Error {
	if errors.Is(err, identity.ErrUnavailable) {
		return refuse(http.StatusServiceUnavailable, "temporarily_unavailable", "%s: its provider's keys cannot be fetched now", name)
	}
	return refuse(http.StatusBadRequest, "invalid_request", "%s: %v", name, err)
}

// holder is the key the capability is issued to: the DPoP proof's, when
// the request carries one (and the one the subject token is bound to,
// when it is bound), or "" for the last party of the chain.
func (e *Exchange) holder(r *http.Request, subject *identity.Caller) (key string, bound bool, err error) {
	proofs := r.Header.Values(dpop.Header)
	switch {
	case len(proofs) > 1:
		return "", false, refuse(http.StatusBadRequest, "invalid_dpop_proof", "more than one DPoP header")
	case len(proofs) == 0:
		if subject.Thumbprint != "" {
			return "", false, refuse(http.StatusBadRequest, "invalid_dpop_proof", "subject_token is bound to a key (cnf.jkt): send a DPoP proof by it")
		}
		return "", false, nil
	}
	p, err := dpop.Parse(proofs[0])
	if err != nil {
		return "", false, refuse(http.StatusBadRequest, "invalid_dpop_proof", "%v", err)
	}
	x := dpop.Expect{Subject: schemas.EncodePublicKey(p.Key), Thumbprint: subject.Thumbprint, TokenRequest: true,
		Method: r.Method, URL: dpop.RequestURL(r, e.origin), Now: e.now()}
	if x.Thumbprint != "" {
		x.Subject = ""
	}
	if err := p.Verify(x); err != nil {
		return "", false, refuse(http.StatusBadRequest, "invalid_dpop_proof", "%v", err)
	}
	return schemas.EncodePublicKey(p.Key), true, nil
}

// exchangeable is the grants a capability is issued with: the rule's,
// bound to the holder's key when there is one. A grant with a budget is
// refused: an access token's budgets are its identity's (the kernel keeps
// them across its tokens), a capability's are its own, so each exchange
// would start the budget afresh.
func exchangeable(rule []schemas.ToolGrant, bound bool) ([]schemas.ToolGrant, error) {
	out := make([]schemas.ToolGrant, len(rule))
	for i, g := range rule {
		if g.MaxInvocations != nil || g.MaxCostPerInvocation != nil || g.MaxTotalCost != nil {
			return nil, refuse(http.StatusBadRequest, "invalid_request",
				"grant %d (%s/%s) has a budget, which is kept per identity: call with the access token itself", i, g.ServerID, g.ToolName)
		}
		required := g.DPoPRequired != nil && *g.DPoPRequired
		if required && !bound {
			return nil, refuse(http.StatusBadRequest, "invalid_dpop_proof", "grant %d (%s/%s) has dpop_required: send a DPoP proof by the key to bind", i, g.ServerID, g.ToolName)
		}
		g.Operations = slices.Clone(g.Operations)
		if bound {
			t := true
			g.DPoPRequired = &t
		}
		out[i] = g
	}
	return out, nil
}

// issue signs the capability and its delegation chain. The root is
// always issued to the subject's derived key, so every capability of one
// identity has the same root subject, the principal that velocity limits
// and per-caller quotas count: a caller cannot start them afresh by
// binding each exchange to a new key. The subject delegates to each actor
// in turn, oldest first, and the last party to the key of the proof, if
// there is one; the links before the last can delegate.
func (e *Exchange) issue(subject *identity.Caller, actors []identity.Actor, holder string, grants []schemas.ToolGrant, now, expires time.Time) (*schemas.CapabilityToken, error) {
	body := func(subjectKey string, gs []schemas.ToolGrant) schemas.CapabilityBody {
		return schemas.CapabilityBody{ID: uuid.Must(uuid.NewV7()).String(), Subject: subjectKey, Scope: schemas.Scope{Grants: gs},
			IssuedAt: uint64(max(now.Unix(), 0)), ExpiresAt: uint64(max(expires.Unix(), 0))}
	}
	parties := []ed25519.PrivateKey{e.derive("subject", subject.Issuer, subject.Subject)}
	for _, a := range actors {
		iss := a.Issuer
		if iss == "" {
			iss = subject.Issuer
		}
		parties = append(parties, e.derive("actor", iss, a.Subject, a.ClientID))
	}
	// The subjects, root first: each party, then the proof's key.
	subjects := make([]string, 0, len(parties)+1)
	for _, p := range parties {
		subjects = append(subjects, pub(p))
	}
	if holder != "" {
		subjects = append(subjects, holder)
	}
	delegable := make([]schemas.ToolGrant, len(grants))
	for i, g := range grants {
		if !slices.Contains(g.Operations, schemas.OpDelegate) {
			g.Operations = append(slices.Clone(g.Operations), schemas.OpDelegate)
		}
		delegable[i] = g
	}
	scope := func(i int) []schemas.ToolGrant {
		if i == len(subjects)-1 {
			return grants
		}
		return delegable
	}
	root := body(subjects[0], scope(0))
	root.Issuer = e.Issuer()
	tok, err := schemas.IssueCapability(e.key, root)
	if err != nil {
		return nil, fmt.Errorf("token exchange: %w", err)
	}
	for i := 1; i < len(subjects); i++ {
		if tok, err = schemas.Delegate(parties[i-1], tok, body(subjects[i], scope(i))); err != nil {
			return nil, fmt.Errorf("token exchange: delegate to party %d: %w", i, err)
		}
	}
	return tok, nil
}

// derive is the key the exchange names a party by: from its own key and
// the party's identity, so the same party is always the same key, and no
// one but this exchange holds it.
func (e *Exchange) derive(kind string, parts ...string) ed25519.PrivateKey {
	m := hmac.New(sha256.New, e.key.Seed())
	m.Write([]byte("chio.exchange." + kind))
	for _, p := range parts {
		m.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		m.Write([]byte(p))
	}
	return ed25519.NewKeyFromSeed(m.Sum(nil))
}

func pub(k ed25519.PrivateKey) string { return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey)) }
