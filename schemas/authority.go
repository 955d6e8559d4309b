package schemas

import (
	"errors"
	"fmt"
	"strings"
)

// Steps of chain verification, named as the kernel names its deny guards.
const (
	ChainStepIssuer     = "issuer"
	ChainStepSignature  = "signature"
	ChainStepDelegation = "delegation"
)

// ChainError is a capability whose chain does not verify; Step says which
// check failed.
type ChainError struct {
	Step string
	Err  error
}

func (e *ChainError) Error() string { return e.Err.Error() }
func (e *ChainError) Unwrap() error { return e.Err }

func chainFail(step, format string, args ...any) *ChainError {
	return &ChainError{Step: step, Err: fmt.Errorf(format, args...)}
}

// Chain is a capability whose whole chain verified: a trusted root issuer,
// every signature, and each step issued by its parent's subject and only
// narrowing it. It says nothing about time or revocation, which depend on
// when and where it is used.
type Chain struct {
	// Tokens is the chain, root first, ending with the presented token.
	Tokens []*CapabilityToken
	// Cover[i][j] is the index of the grant of Tokens[i-1] that covers
	// grant j of Tokens[i]; Cover[0] is nil.
	Cover [][]int
}

// VerifyChain checks tok and its delegation chain in the kernel's order:
// trusted root issuer, the token's signature, then each ancestor (scope
// hash, signature), connectivity and attenuation. The error is a
// *ChainError.
func VerifyChain(tok *CapabilityToken, trusted func(issuer string) bool) (*Chain, error) {
	root := tok.Issuer
	if len(tok.DelegationChain) > 0 {
		root = tok.DelegationChain[0].Delegator
	}
	if !trusted(root) {
		return nil, chainFail(ChainStepIssuer, "capability %s: root issuer %s is not trusted", tok.ID, root)
	}
	if err := tok.VerifySignature(); err != nil {
		return nil, chainFail(ChainStepSignature, "%v", err)
	}
	c := &Chain{Tokens: make([]*CapabilityToken, 0, len(tok.DelegationChain)+1)}
	for i := range tok.DelegationChain {
		a := tok.Ancestor(i)
		l := &tok.DelegationChain[i]
		if h, err := ScopeHash(l.Scope); err != nil || h != l.ScopeHash {
			return nil, chainFail(ChainStepDelegation, "delegation_chain[%d] (%s): scope_hash does not match its scope", i, l.CapabilityID)
		}
		if err := a.VerifySignature(); err != nil {
			return nil, chainFail(ChainStepDelegation, "delegation_chain[%d]: %v", i, err)
		}
		c.Tokens = append(c.Tokens, a)
	}
	c.Tokens = append(c.Tokens, tok)
	c.Cover = make([][]int, len(c.Tokens))
	seen := map[string]bool{}
	for i, t := range c.Tokens {
		if seen[t.ID] {
			return nil, chainFail(ChainStepDelegation, "capability id %s appears twice in its own chain", t.ID)
		}
		seen[t.ID] = true
		if i == 0 {
			continue
		}
		parent := c.Tokens[i-1]
		if t.Issuer != parent.Subject {
			return nil, chainFail(ChainStepDelegation, "%s is issued by %s, not by the subject of its parent %s", t.ID, t.Issuer, parent.ID)
		}
		if err := CheckAttenuation(&parent.CapabilityBody, &t.CapabilityBody); err != nil {
			return nil, chainFail(ChainStepDelegation, "%s: %v", t.ID, err)
		}
		cover := make([]int, len(t.Scope.Grants))
		for j := range t.Scope.Grants {
			cover[j], _ = CoveringGrant(&t.Scope.Grants[j], parent.Scope.Grants) // cannot fail after CheckAttenuation
		}
		c.Cover[i] = cover
	}
	return c, nil
}

// IDs returns the chain's capability ids, root first: what a revocation
// check must cover.
func (c *Chain) IDs() []string {
	ids := make([]string, len(c.Tokens))
	for i, t := range c.Tokens {
		ids[i] = t.ID
	}
	return ids
}

// Principals returns the principal of every prefix of the chain's
// authority path, root first: see PathPrincipals.
func (c *Chain) Principals() []string { return c.Tokens[len(c.Tokens)-1].Principals() }

// Principals returns PathPrincipals of the token's authority path as its
// own fields state it: the root issuer (the first link's delegator, else
// its issuer), then each delegatee, then its subject. Element 0 is the
// tenant, the last the token's principal. It verifies nothing: VerifyChain
// does.
func (t *CapabilityToken) Principals() []string {
	root := t.Issuer
	subjects := make([]string, 0, len(t.DelegationChain)+1)
	for i, l := range t.DelegationChain {
		if i == 0 {
			root = l.Delegator
		}
		subjects = append(subjects, l.Delegatee)
	}
	return PathPrincipals(root, append(subjects, t.Subject))
}

// Principal names an authority path: the root issuer's key, then every
// subject key from the root grant down, joined by ">", as "p:" + SHA-256
// hex. A subject key alone proves nothing (anyone may delegate to any
// public key), so whatever belongs to a caller belongs to this name: the
// A2A edge scopes tasks to it, the read APIs scope receipts to it.
func Principal(rootIssuer string, subjects ...string) string {
	return "p:" + SHA256Hex([]byte(rootIssuer+">"+strings.Join(subjects, ">")))
}

// PathPrincipals returns Principal of each prefix of the path, shortest
// first: element 0 names the holder of the root grant (the tenant: every
// capability delegated from that grant belongs to it), the last names the
// whole path. Whoever may read as an element may read what was done under
// every longer path: its own calls and those of everything it delegated to.
func PathPrincipals(rootIssuer string, subjects []string) []string {
	out := make([]string, len(subjects))
	for i := range subjects {
		out[i] = Principal(rootIssuer, subjects[:i+1]...)
	}
	return out
}

// LineagePrincipals is PathPrincipals of a decision event's capability
// lineage (root first), or nil when there is none or it is not a chain.
func LineagePrincipals(l []CapabilityLineage) []string {
	if len(l) == 0 || checkLineage(l) != nil {
		return nil
	}
	subjects := make([]string, len(l))
	for i, c := range l {
		subjects[i] = c.SubjectKey
	}
	return PathPrincipals(l[0].IssuerKey, subjects)
}

// ValidPrincipal reports whether s has the form Principal returns.
func ValidPrincipal(s string) bool {
	h, ok := strings.CutPrefix(s, "p:")
	return ok && isSHA256Hex(h)
}

// Read grants. A capability whose grants include server ReadServer with
// operation "read" may read what the tool name says: ReadAll (every
// receipt and every operator view), ReadReceipts (every receipt, entry
// bundle and proof: an auditor), or a principal (ValidPrincipal: what was
// done under that authority path, a tenant when it is a root holder's).
// Names under "chio." are never exposed or invocable as tools, so a read
// grant runs nothing and no tool grant reads.
const (
	ReadServer   = "chio.read"
	ReadAll      = "*"
	ReadReceipts = "receipts"
)

// ReadGrant returns the grant for target (ReadAll, ReadReceipts or a
// principal), or an error naming what a target may be.
func ReadGrant(target string) (ToolGrant, error) {
	if target != ReadAll && target != ReadReceipts && !ValidPrincipal(target) {
		return ToolGrant{}, errors.New(`a read target is "*" (everything), "receipts" (every receipt) or a principal "p:<64 hex>"`)
	}
	return ToolGrant{ServerID: ReadServer, ToolName: target, Operations: []Operation{OpRead}}, nil
}
