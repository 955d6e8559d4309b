package kernel

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/chio-ledger/chio/edges/guards"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
)

// verified is a token whose static checks passed: parse and schema,
// trusted root issuer, its signature and its whole delegation chain. Only
// per-call checks remain: time window, revocation, grant, budgets, guards.
type verified struct {
	tok *schemas.CapabilityToken
	// ancestors rebuilt from the chain, root first.
	ancestors []*schemas.CapabilityToken
	// lineage is every id a revocation must be checked for: the
	// ancestors' ids, root first, then the token's own.
	lineage    []string
	rootIssuer string
	// rootSubject is the first delegatee (the token's subject when it is
	// not delegated): per-principal limits key on it.
	rootSubject string
	// cover[i][j] is the index of the grant of chain element i-1 that
	// covers grant j of chain element i (chain = ancestors, then the token).
	cover [][]int
	// constraints[i] is grant i's compiled constraints, or constraintErr[i]
	// why they could not be compiled (the grant then denies every call).
	constraints   []*guards.ConstraintSet
	constraintErr []error
	// intentRequired[i] says grant i carries governed_intent_required.
	intentRequired []bool
	// principals names each prefix of the authority path, root first
	// (schemas.PathPrincipals); the last is the caller's principal.
	principals []string
	// records is the chain as capability lineage records, root first,
	// for decision events; computed once per verified token.
	records []schemas.CapabilityLineage
	// caller is set for an access token standing as a capability
	// (identity.go); budgetID is then what its grants' budgets are kept
	// under: its identity's, across every token it is given.
	caller   *identity.Caller
	budgetID string
}

// ConstraintGovernedIntent is the grant constraint that requires a call to
// come with a governed intent. The kernel enforces it itself; it takes no
// operands.
const ConstraintGovernedIntent = "governed_intent_required"

// stepError is a failed validation step; step becomes the deny guard.
type stepError struct {
	step string
	err  error
	tok  *schemas.CapabilityToken // the parsed token, when parsing succeeded
}

func (e *stepError) Error() string { return e.err.Error() }

func fail(step string, format string, args ...any) *stepError {
	return &stepError{step: step, err: fmt.Errorf(format, args...)}
}

// Validation step names, as they appear as the guard of a deny decision.
const (
	StepToolResolution = "tool_resolution"
	StepParse          = "parse"
	StepIssuer         = "issuer"
	StepSignature      = "signature"
	StepTime           = "time"
	StepDelegation     = "delegation"
	StepRevocation     = "revocation"
	StepGrant          = "grant"
	StepBudget         = "budget"
	// StepGovernedIntent denies a call whose governed intent does not fit
	// it, or that lacks one its grant requires.
	StepGovernedIntent = "governed_intent"
)

// verify runs the static steps in order: parse and schema → trusted issuer
// → signature → delegation chain. The time window, ordered between
// signature and delegation, depends on the clock, so it is checked per call
// (Decide checks it first when the delegation step fails, keeping the order).
func verify(p *LoadedPolicy, text string) (*verified, *stepError) {
	raw, err := schemas.DecodeCapabilityText(text)
	if err != nil {
		return nil, fail(StepParse, "%v", err)
	}
	tok, err := schemas.ParseCapability(raw)
	if err != nil {
		return nil, fail(StepParse, "%v", err)
	}
	v := &verified{tok: tok, rootIssuer: tok.Issuer, rootSubject: tok.Subject}
	if len(tok.DelegationChain) > 0 {
		v.rootIssuer = tok.DelegationChain[0].Delegator
		v.rootSubject = tok.DelegationChain[0].Delegatee
	}
	serr := v.verifyChain(p)
	if serr != nil {
		serr.tok = tok
		return nil, serr
	}
	return v, nil
}

func (v *verified) verifyChain(p *LoadedPolicy) *stepError {
	chain, err := schemas.VerifyChain(v.tok, p.Trusted)
	if err != nil {
		var ce *schemas.ChainError
		if errors.As(err, &ce) {
			return &stepError{step: ce.Step, err: ce.Err}
		}
		return fail(StepDelegation, "%v", err)
	}
	v.ancestors = chain.Tokens[:len(chain.Tokens)-1]
	v.lineage = chain.IDs()
	v.cover = chain.Cover
	v.principals = chain.Principals()
	return v.compile()
}

// compile prepares the token's grants' constraints and its lineage
// records.
func (v *verified) compile() *stepError {
	tok := v.tok
	v.constraints = make([]*guards.ConstraintSet, len(tok.Scope.Grants))
	v.constraintErr = make([]error, len(tok.Scope.Grants))
	v.intentRequired = make([]bool, len(tok.Scope.Grants))
	for i, g := range tok.Scope.Grants {
		cs := make([]schemas.Constraint, 0, len(g.Constraints))
		for _, c := range g.Constraints {
			if c.Type != ConstraintGovernedIntent {
				cs = append(cs, c)
				continue
			}
			if val := strings.TrimSpace(string(c.Value)); val != "" && val != "{}" && val != "null" {
				v.constraintErr[i] = fmt.Errorf("%s takes no value", ConstraintGovernedIntent)
			}
			v.intentRequired[i] = true
		}
		if len(g.Constraints) > 0 && v.constraintErr[i] == nil {
			v.constraints[i], v.constraintErr[i] = guards.CompileConstraints(cs)
		}
	}
	return v.lineageRecords()
}

// tokenCache holds verified tokens so a hot path does not repeat Ed25519
// verification per call. It is keyed by the token text itself: the map
// hashes it, and a lookup compares the whole text, so two tokens can never
// share an entry (a truncated digest as key could collide). Only successes
// are cached; the per-call checks never are. Size is bounded in bytes.
type tokenCache struct {
	mu       sync.RWMutex
	m        map[string]*verified
	bytes    int
	maxBytes int
}

func newTokenCache(maxBytes int) *tokenCache {
	return &tokenCache{m: make(map[string]*verified), maxBytes: maxBytes}
}

func (c *tokenCache) get(p *LoadedPolicy, text string) (*verified, *stepError) {
	c.mu.RLock()
	v := c.m[text]
	c.mu.RUnlock()
	if v != nil {
		return v, nil
	}
	v, serr := verify(p, text)
	if serr != nil {
		return nil, serr
	}
	// The verified token holds its own decoded copy; the key is a copy of
	// the text, so the cache never pins a caller's larger request buffer.
	key := strings.Clone(text)
	c.mu.Lock()
	if c.bytes+len(key) > c.maxBytes {
		// Drop about half, arbitrarily (map order): a bounded cache
		// without bookkeeping on the read path.
		for k := range c.m {
			delete(c.m, k)
			c.bytes -= len(k)
			if c.bytes <= c.maxBytes/2 {
				break
			}
		}
	}
	if _, ok := c.m[key]; !ok {
		c.m[key] = v
		c.bytes += len(key)
	}
	c.mu.Unlock()
	return v, nil
}

// lineageRecords describes the verified chain, root first, as decision
// events carry it. Grants are left out of a record whose grants alone
// would not fit the event's lineage bound.
func (v *verified) lineageRecords() *stepError {
	chain := append(append([]*schemas.CapabilityToken(nil), v.ancestors...), v.tok)
	v.records = make([]schemas.CapabilityLineage, len(chain))
	for i, t := range chain {
		h, err := schemas.ScopeHash(t.Scope)
		if err != nil {
			return fail(StepParse, "%s: %v", t.ID, err)
		}
		r := schemas.CapabilityLineage{
			CapabilityID: t.ID, SubjectKey: t.Subject, IssuerKey: t.Issuer, IssuedAt: t.IssuedAt, ExpiresAt: t.ExpiresAt,
			DelegationDepth: i, ScopeHash: h, Grants: t.Scope.Grants,
		}
		if i > 0 {
			r.ParentCapabilityID = chain[i-1].ID
		}
		v.records[i] = r
	}
	if c, err := schemas.Canonical(v.records); err != nil || len(c) > schemas.MaxLineageBytes {
		for i := range v.records {
			v.records[i].Grants, v.records[i].GrantsOmitted = nil, true
		}
	}
	return nil
}
