// Package kernel decides whether a caller may run a tool: it validates a
// capability token (trusted issuer, signature, time window, delegation
// chain, revocation, grant, budgets) and runs the guard pipeline, failing
// closed at every step. Every edge asks it before any tool runs.
//
// State shared by edge replicas lives in JetStream KV, never in process
// memory: revocations are watched (every replica sees a revocation as soon
// as it is written) and budgets are charged by compare-and-set, so limits
// hold exactly across any number of replicas. A kernel whose NATS
// connection is down denies.
package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/edges/guards"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// NoCapability is the capability_id recorded when no token could be read.
const NoCapability = "none"

// Option configures a kernel.
type Option func(*config)

type config struct {
	now        func() time.Time
	log        *slog.Logger
	replicas   int
	registry   *tools.Registry
	cacheLimit int
	metrics    prometheus.Registerer
	// requireDPoP: every token needs a proof of possession.
	requireDPoP              bool
	proofLifetime, proofSkew time.Duration
	tracer                   trace.Tracer // nil: tracing off
	identityClient           *http.Client // WithIdentityHTTPClient
}

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithReplicas sets the replica count of the KV buckets the kernel creates.
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithRegistry makes the kernel resolve every call's tool in r first: an
// unknown, hidden or internal tool is denied before anything else.
func WithRegistry(r *tools.Registry) Option { return func(c *config) { c.registry = r } }

// WithTokenCacheBytes bounds the verified-token cache by the total size
// of the cached token texts (default 64 MiB).
func WithTokenCacheBytes(n int) Option { return func(c *config) { c.cacheLimit = n } }

// WithRequireDPoP makes every token, not only those that can delegate or
// whose grants ask for it, need a proof of possession of its subject key.
func WithRequireDPoP(on bool) Option { return func(c *config) { c.requireDPoP = on } }

// WithProofWindow sets how long a proof of possession is fresh after it
// was made and how far ahead of this clock it may be (defaults
// dpop.DefaultLifetime and dpop.DefaultSkew).
func WithProofWindow(lifetime, skew time.Duration) Option {
	return func(c *config) { c.proofLifetime, c.proofSkew = lifetime, skew }
}

// Kernel makes governance decisions. It is safe for concurrent use.
type Kernel struct {
	cfg      config
	policy   *LoadedPolicy
	js       jetstream.JetStream
	pipeline []guards.Guard
	revs     *revocation.Watcher
	budgets  *budgets
	tokens   *tokenCache
	metrics  *metrics
	replay   *dpopreplay.Store
	// identities verifies access tokens of the policy's identity
	// providers; nil without any (identity.go).
	identities *identity.Verifier
}

// New opens (creating if needed) the shared state buckets, loads the
// revocation list and starts watching it. It returns once the kernel has
// every revocation written before it started.
func New(ctx context.Context, js jetstream.JetStream, policy *LoadedPolicy, opts ...Option) (*Kernel, error) {
	cfg := config{now: time.Now, log: slog.Default(), replicas: 1, cacheLimit: 64 << 20,
		proofLifetime: dpop.DefaultLifetime, proofSkew: dpop.DefaultSkew}
	for _, o := range opts {
		o(&cfg)
	}
	pipeline, err := policy.statelessGuards()
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	identities, err := newIdentities(policy, cfg)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	revKV, err := schemas.OpenKeyValue(ctx, js, schemas.RevocationsConfig(cfg.replicas)) // the operator owns it
	if err != nil {
		return nil, fmt.Errorf("kernel: open %s: %w", schemas.RevocationsBucket, err)
	}
	budKV, err := js.CreateOrUpdateKeyValue(ctx, schemas.BudgetsConfig(cfg.replicas))
	if err != nil {
		return nil, fmt.Errorf("kernel: open %s: %w", schemas.BudgetsBucket, err)
	}
	if v := policy.Guards.Velocity; v != nil {
		window := time.Duration(v.WindowSeconds) * time.Second
		velKV, err := js.CreateOrUpdateKeyValue(ctx, schemas.VelocityConfig(cfg.replicas, 2*window))
		if err != nil {
			return nil, fmt.Errorf("kernel: open %s: %w", schemas.VelocityBucket, err)
		}
		pipeline = append(pipeline, &velocityGuard{kv: velKV, max: v.MaxCalls, window: window, now: cfg.now})
	}
	replay, err := dpopreplay.Open(ctx, js, cfg.replicas, cfg.proofLifetime, cfg.proofSkew)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	revs, err := revocation.Watch(ctx, revKV, cfg.log)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	m := newMetrics(cfg.metrics)
	return &Kernel{
		cfg: cfg, policy: policy, js: js, pipeline: traced(m.timed(pipeline), cfg.tracer), revs: revs,
		budgets: &budgets{kv: budKV}, tokens: newTokenCache(cfg.cacheLimit), metrics: m, replay: replay, identities: identities,
	}, nil
}

// Close stops the revocation watch.
func (k *Kernel) Close() { k.revs.Stop() }

// Policy is the kernel's policy.
func (k *Kernel) Policy() *LoadedPolicy { return k.policy }

// Request asks whether a call may run.
type Request struct {
	// Token is the capability as presented: header form (base64url) or JSON.
	Token     string
	ServerID  string
	ToolName  string
	Operation schemas.Operation // default invoke
	Arguments json.RawMessage   // default {}
	// Cost is what the caller declares the call costs; without it a grant
	// with max_cost_per_invocation is charged that worst case.
	Cost *schemas.MonetaryAmount
	// Exposure, when set, is the edge's audience: the tool must be exposed
	// to it. Without it only the hard floor of internal names applies.
	Exposure *tools.Exposure
	// RequestID identifies the call; a governed intent's call chain may
	// not name it as its own parent.
	RequestID string
	// GovernedIntent is the caller's declared intent, if any. It must fit
	// the call; a grant with governed_intent_required demands one.
	GovernedIntent *schemas.GovernedIntent
	// Proof is the caller's proof of possession of the token's subject
	// key; nil for a bearer call.
	Proof *Proof
}

// Decision is the kernel's answer, with everything a decision event needs.
type Decision struct {
	Allow bool
	// Guard is the failing validation step or guard of a deny.
	Guard  string
	Reason string
	// Evidence lists each guard that ran (and the failing validation step).
	Evidence   []schemas.GuardEvidence
	PolicyHash string
	// CapabilityID is the presented token's id, or NoCapability.
	CapabilityID    string
	Subject         string
	Issuer          string
	RootIssuer      string
	DelegationDepth int
	// GrantIndex is the index of the matched grant, -1 if none matched.
	GrantIndex int
	// Lineage is the token's ancestors' ids, root first, then its own.
	Lineage []string
	// CapabilityLineage describes the same chain for decision events.
	CapabilityLineage []schemas.CapabilityLineage
	// Charged is the cost charged against budgets, if any.
	Charged *schemas.MonetaryAmount
	// Tool is the resolved tool when a registry is configured.
	Tool *tools.Entry
	// Binding is how the caller proved who it is (once its token verified).
	Binding Binding
	// Identity is the caller as its identity provider's access token
	// names it, when it came with one instead of a capability.
	Identity *identity.Caller
	// proof is the accepted proof whose one-time claim SettleProof waits for.
	proof *Proof
	// charges and cost are what an allow charged, for RefuseProof.
	charges []charge
	cost    uint64
}

// Verdict is the receipt form of the decision.
func (d *Decision) Verdict() schemas.Decision {
	if d.Allow {
		return schemas.Decision{Verdict: schemas.VerdictAllow}
	}
	return schemas.Decision{Verdict: schemas.VerdictDeny, Reason: d.Reason, Guard: d.Guard}
}

// Attribution is metadata.attribution of the receipt.
func (d *Decision) Attribution() map[string]any {
	if d.Subject == "" {
		return nil
	}
	a := map[string]any{
		"subject_key": d.Subject, "issuer_key": d.Issuer,
		"delegation_depth": d.DelegationDepth, "grant_index": d.GrantIndex,
	}
	if b := d.Binding.record(); b != nil {
		a["binding"] = b
	}
	if d.Identity != nil {
		a["identity"] = identityRecord(d.Identity)
	}
	return a
}

func (k *Kernel) deny(d *Decision, step, reason string) *Decision {
	d.Allow, d.Guard, d.Reason = false, step, schemas.TruncateText(reason)
	d.Evidence = append(d.Evidence, schemas.GuardEvidence{GuardName: step, Verdict: false, Details: d.Reason})
	return d
}

// decide is Decide without its timing.
func (k *Kernel) decide(ctx context.Context, req *Request) *Decision {
	d := &Decision{PolicyHash: k.policy.Hash, CapabilityID: NoCapability, GrantIndex: -1}
	op := req.Operation
	if op == "" {
		op = schemas.OpInvoke
	}
	if k.cfg.registry != nil {
		exp := tools.Exposure{Protocol: "native", ExposeAll: true}
		if req.Exposure != nil {
			exp = *req.Exposure
		}
		e, err := k.cfg.registry.Resolve(exp, req.ServerID, req.ToolName)
		if err != nil {
			return k.deny(d, StepToolResolution, err.Error())
		}
		d.Tool = e
	} else if exp := (tools.Exposure{Protocol: "native", ExposeAll: true}); exp.IsInternal(req.ServerID) || exp.IsInternal(req.ToolName) {
		// Without a registry the hard floor still holds: a "*" grant
		// never reaches an internal tool.
		return k.deny(d, StepToolResolution, fmt.Sprintf("%s/%s is in an internal namespace", req.ServerID, req.ToolName))
	}
	v, serr := k.verifyToken(ctx, req.Token)
	if serr != nil {
		// The time window comes before delegation in the validation order.
		if serr.step == StepDelegation && serr.tok != nil {
			if msg := k.outsideWindow(serr.tok); msg != "" {
				return k.deny(d, StepTime, msg)
			}
		}
		return k.deny(d, serr.step, serr.Error())
	}
	tok := v.tok
	d.CapabilityID, d.Subject, d.Issuer, d.RootIssuer = tok.ID, tok.Subject, tok.Issuer, v.rootIssuer
	d.DelegationDepth, d.Lineage, d.CapabilityLineage, d.Identity = len(v.ancestors), v.lineage, v.records, v.caller

	if msg := k.outsideWindow(tok); msg != "" {
		return k.deny(d, StepTime, msg)
	}

	if !k.js.Conn().IsConnected() || !k.revs.Live() {
		return k.deny(d, StepRevocation, "governance state unavailable: NATS is not connected or the revocation watch has ended (fail closed)")
	}
	if id := k.revs.FirstRevoked(v.lineage); id != "" {
		if id == tok.ID {
			return k.deny(d, StepRevocation, fmt.Sprintf("capability %s is revoked", id))
		}
		return k.deny(d, StepRevocation, fmt.Sprintf("ancestor capability %s of %s is revoked", id, tok.ID))
	}

	byName := d.Tool.DenyByDefault()
	gi := matchGrant(tok.Scope.Grants, req.ServerID, req.ToolName, op, byName)
	if gi < 0 {
		if byName && matchGrant(tok.Scope.Grants, req.ServerID, req.ToolName, op, false) >= 0 {
			return k.deny(d, StepGrant, fmt.Sprintf("capability %s grants %s on %s/%s only through a wildcard: the tool has side effects and is denied by default unless a grant names it",
				tok.ID, op, req.ServerID, req.ToolName))
		}
		return k.deny(d, StepGrant, fmt.Sprintf("capability %s grants no %s on %s/%s", tok.ID, op, req.ServerID, req.ToolName))
	}
	d.GrantIndex = gi
	grant := &tok.Scope.Grants[gi]
	b, err := k.checkProof(ctx, req.Token, v, req.Proof, &dpop.Call{ToolServer: req.ServerID, ToolName: req.ToolName, Arguments: req.Arguments})
	if err != nil {
		return k.deny(d, StepDPoP, err.Error())
	}
	d.Binding, d.proof = b, req.Proof

	if g := req.GovernedIntent; g != nil {
		if err := g.Validate(req.RequestID, req.ServerID, req.ToolName); err != nil {
			return k.deny(d, StepGovernedIntent, err.Error())
		}
	} else if v.intentRequired[gi] {
		return k.deny(d, StepGovernedIntent, fmt.Sprintf("grant %d of %s requires a governed intent, and the call has none", gi, tok.ID))
	}

	if err := v.constraintErr[gi]; err != nil {
		return k.deny(d, guardConstraint, fmt.Sprintf("grant %d of %s has constraints this kernel cannot enforce: %v (fail closed)", gi, tok.ID, err))
	}

	charged, cost, err := k.chargeBudgets(ctx, v, gi, req, d)
	if err != nil {
		var be *errBudget
		if errors.As(err, &be) {
			return k.deny(d, StepBudget, be.msg)
		}
		return k.deny(d, StepBudget, err.Error()+" (fail closed)")
	}

	args := req.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	call := &guards.Call{
		CapabilityID: tok.ID, Subject: tok.Subject, RootSubject: v.rootSubject, ServerID: req.ServerID, ToolName: req.ToolName,
		Operation: op, Arguments: args, Grant: grant, GrantIndex: gi, Constraints: v.constraints[gi],
	}
	evidence, by, reason := guards.Run(ctx, k.pipeline, call)
	d.Evidence = evidence
	if by != "" {
		// The call will not run: give back what it was charged.
		k.budgets.refundAll(ctx, charged, cost, k.cfg.log)
		d.Allow, d.Guard, d.Reason, d.Charged = false, by, schemas.TruncateText(reason), nil
		return d
	}
	d.Allow, d.charges, d.cost = true, charged, cost
	return d
}

// outsideWindow explains why now is outside tok's validity window, or "".
// issued_at may be up to the clock skew ahead of us; expiry is exact.
func (k *Kernel) outsideWindow(tok *schemas.CapabilityToken) string {
	now := uint64(k.cfg.now().Unix())
	skew := uint64(k.policy.ClockSkew() / time.Second)
	if tok.IssuedAt > now+skew {
		return fmt.Sprintf("capability %s is not valid before %d (now %d)", tok.ID, tok.IssuedAt, now)
	}
	if now >= tok.ExpiresAt {
		return fmt.Sprintf("capability %s expired at %d (now %d)", tok.ID, tok.ExpiresAt, now)
	}
	return ""
}

// chargeBudgets charges the matched grant and, up the chain, each
// ancestor grant that covered it at delegation (so a delegated child spends
// its parents' budget too, and delegation cannot multiply a budget). It
// returns the charges made, for a refund if a guard then denies.
func (k *Kernel) chargeBudgets(ctx context.Context, v *verified, gi int, req *Request, d *Decision) ([]charge, uint64, error) {
	grant := &v.tok.Scope.Grants[gi]
	if c := req.Cost; c != nil && (c.Units > maxCostUnits || c.Currency == "") {
		return nil, 0, &errBudget{fmt.Sprintf("declared cost must have a currency and at most %d units", uint64(maxCostUnits))}
	}
	chain := append(append([]*schemas.CapabilityToken(nil), v.ancestors...), v.tok)
	charges := make([]charge, 0, len(chain))
	idx := gi
	for i := len(chain) - 1; i >= 0; i-- {
		t := chain[i]
		id := t.ID
		if i == len(chain)-1 && v.budgetID != "" {
			id = v.budgetID // an access token's budgets are its identity's, not one token's
		}
		charges = append(charges, charge{capabilityID: id, grantIndex: idx, grant: &t.Scope.Grants[idx]})
		if i > 0 {
			idx = v.cover[i][idx]
		}
	}
	var cost uint64
	currency := ""
	for _, c := range charges {
		g := c.grant
		for _, m := range []*schemas.MonetaryAmount{g.MaxCostPerInvocation, g.MaxTotalCost} {
			if m == nil {
				continue
			}
			if currency != "" && m.Currency != currency {
				return nil, 0, &errBudget{fmt.Sprintf("grant %d of %s is in %s, not %s", c.grantIndex, c.capabilityID, m.Currency, currency)}
			}
			currency = m.Currency
		}
	}
	switch {
	case req.Cost != nil:
		if currency != "" && req.Cost.Currency != currency {
			return nil, 0, &errBudget{fmt.Sprintf("declared cost is in %s, the grant in %s", req.Cost.Currency, currency)}
		}
		cost, currency = req.Cost.Units, req.Cost.Currency
	case grant.MaxCostPerInvocation != nil:
		cost = grant.MaxCostPerInvocation.Units // worst case
	}
	for _, c := range charges {
		g := c.grant
		if g.MaxCostPerInvocation != nil && cost > g.MaxCostPerInvocation.Units {
			return nil, 0, &errBudget{fmt.Sprintf("cost %d %s exceeds max_cost_per_invocation %d of grant %d of %s",
				cost, currency, g.MaxCostPerInvocation.Units, c.grantIndex, c.capabilityID)}
		}
		if g.MaxTotalCost != nil && req.Cost == nil && grant.MaxCostPerInvocation == nil {
			// An unknown cost cannot be charged against a total.
			return nil, 0, &errBudget{fmt.Sprintf("grant %d of %s has max_total_cost but the call declares no cost and no max_cost_per_invocation bounds it",
				c.grantIndex, c.capabilityID)}
		}
	}
	limited := charges[:0:0]
	for _, c := range charges {
		if c.limited() {
			limited = append(limited, c)
		}
	}
	if len(limited) == 0 {
		return nil, 0, nil
	}
	if err := k.budgets.chargeAll(ctx, limited, cost, k.cfg.log); err != nil {
		return nil, 0, err
	}
	if cost > 0 {
		d.Charged = &schemas.MonetaryAmount{Units: cost, Currency: currency}
	}
	return limited, cost, nil
}

// maxCostUnits bounds a declared cost: integers JSON carries exactly, far
// from overflowing a budget's running total.
const maxCostUnits = 1<<53 - 1

// matchGrant is the index of the first grant covering server/tool/op, or
// -1; byName leaves out wildcard grants (a deny-by-default tool).
func matchGrant(gs []schemas.ToolGrant, server, tool string, op schemas.Operation, byName bool) int {
	for i := range gs {
		g := &gs[i]
		if g.ServerID != server || (g.ToolName != tool && (byName || g.ToolName != "*")) {
			continue
		}
		for _, o := range g.Operations {
			if o == op {
				return i
			}
		}
	}
	return -1
}

// Identity is an authenticated caller: a token that passes every check that
// does not depend on a tool (parse, issuer, signature, time, delegation,
// revocation). Edges scope task reads and cancels to it.
type Identity struct {
	CapabilityID string
	Subject      string
	RootSubject  string
	Lineage      []string
	// Principal names the whole authority path: the root issuer and every
	// subject from the root grant down to this token's. A subject alone
	// proves nothing (anyone may delegate to any public key), so whatever
	// is scoped to a caller must be scoped to this.
	Principal string
	// Binding is how the caller proved who it is.
	Binding Binding
	// Caller is who the caller is by its identity provider's access
	// token, when it came with one instead of a capability.
	Caller *identity.Caller
	grants []schemas.ToolGrant
}

// Invokes reports whether the capability grants invoking the tool (by
// name when it is deny-by-default). It says what the token allows, not
// what a call would be allowed: guards, budgets and intents are decided
// per call (Decide). Edges use it to show a caller the tools it may call.
func (id *Identity) Invokes(e *tools.Entry) bool {
	return matchGrant(id.grants, e.Manifest.ServerID, e.Tool.Name, schemas.OpInvoke, e.DenyByDefault()) >= 0
}

// NamesTool reports whether the capability is a root token (issued by a
// trusted issuer, not delegated) with a grant naming server/tool exactly,
// not by "*", with the invoke operation: the issuer's explicit act, which
// a holder of a wildcard could not fake by delegating to itself.
func (id *Identity) NamesTool(server, tool string) bool {
	return len(id.Lineage) == 1 && matchGrant(id.grants, server, tool, schemas.OpInvoke, true) >= 0
}

// StepSubject denies a caller whose credential verified but is not the
// subject the request named (an AuthZEN subject.id naming someone else).
const StepSubject = "subject"

// RefuseSubject is the deny of a call by the caller id identified (Admit
// or Identify), which its edge refuses because the request names another
// subject than the credential's: reason says which.
func (k *Kernel) RefuseSubject(id *Identity, reason string) *Decision {
	d := &Decision{PolicyHash: k.policy.Hash, CapabilityID: id.CapabilityID, Subject: id.Subject, Identity: id.Caller, GrantIndex: -1}
	return k.deny(d, StepSubject, reason)
}

// Held verifies a token as Identify does, except proof of possession:
// for a token a process is configured with (the stdio profiles and the
// ACP proxy check theirs at start), whose calls each bring their own
// proof to Decide.
func (k *Kernel) Held(token string) (*Identity, *Decision) {
	return k.identify(context.Background(), token, nil, false)
}

// Identify authenticates a token, with its proof of possession, for calls
// that run no tool (get, list, cancel). A failure is a Decision naming
// the failed step. The proof's one-time claim is settled before it
// returns: whatever the caller does next, the proof is spent.
func (k *Kernel) Identify(ctx context.Context, token string, proof *Proof) (*Identity, *Decision) {
	id, d := k.identify(ctx, token, proof, true)
	if d != nil {
		return nil, d
	}
	if err := proof.settle(ctx); err != nil {
		return nil, k.deny(&Decision{PolicyHash: k.policy.Hash, CapabilityID: id.CapabilityID, Subject: id.Subject, GrantIndex: -1}, StepDPoP, err.Error())
	}
	return id, nil
}

// Admit is Identify for a request that goes on to a governed call
// (Decide, through the dispatcher) before it has any other effect: the
// proof's one-time claim is left running, for the dispatcher to settle
// beside the call's decision write.
func (k *Kernel) Admit(ctx context.Context, token string, proof *Proof) (*Identity, *Decision) {
	return k.identify(ctx, token, proof, true)
}

func (k *Kernel) identify(ctx context.Context, token string, proof *Proof, holder bool) (*Identity, *Decision) {
	d := &Decision{PolicyHash: k.policy.Hash, CapabilityID: NoCapability, GrantIndex: -1}
	v, serr := k.verifyToken(ctx, token)
	if serr != nil {
		if serr.step == StepDelegation && serr.tok != nil {
			if msg := k.outsideWindow(serr.tok); msg != "" {
				return nil, k.deny(d, StepTime, msg)
			}
		}
		return nil, k.deny(d, serr.step, serr.Error())
	}
	d.CapabilityID, d.Subject, d.Identity = v.tok.ID, v.tok.Subject, v.caller
	if msg := k.outsideWindow(v.tok); msg != "" {
		return nil, k.deny(d, StepTime, msg)
	}
	if !k.js.Conn().IsConnected() || !k.revs.Live() {
		return nil, k.deny(d, StepRevocation, "governance state unavailable: NATS is not connected or the revocation watch has ended (fail closed)")
	}
	if id := k.revs.FirstRevoked(v.lineage); id != "" {
		return nil, k.deny(d, StepRevocation, fmt.Sprintf("capability %s is revoked", id))
	}
	var b Binding
	if holder {
		var err error
		if b, err = k.checkProof(ctx, token, v, proof, nil); err != nil {
			return nil, k.deny(d, StepDPoP, err.Error())
		}
	}
	return &Identity{Binding: b, CapabilityID: v.tok.ID, Subject: v.tok.Subject, RootSubject: v.rootSubject, Lineage: v.lineage,
		Principal: v.principals[len(v.principals)-1], Caller: v.caller, grants: v.tok.Scope.Grants}, nil
}
