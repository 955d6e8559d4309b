package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/chio-ledger/chio/schemas"
)

// Names of a caller in the capability model, so that the kernel and the
// read APIs treat it alike. The issuer and subject "keys" are SHA-256
// names of the provider and of the provider's subject: no public keys, so
// no capability can be issued by one (policies trust Ed25519 keys only),
// and no capability holder shares a caller's principal.

// IssuerKey is the provider's name in a capability's issuer field.
func (c *Caller) IssuerKey() string { return nameHash("chio.identity.issuer", c.Issuer) }

// SubjectKey is the caller's name in a capability's subject field.
func (c *Caller) SubjectKey() string { return nameHash("chio.identity.subject", c.Issuer, c.Subject) }

// Principals are the caller's authority path's principals
// (schemas.PathPrincipals): the provider, then the caller.
func (c *Caller) Principals() []string {
	return schemas.PathPrincipals(c.IssuerKey(), []string{c.SubjectKey()})
}

// CapabilityID names this one token: revoking it refuses the token.
func (c *Caller) CapabilityID() string {
	return "jwt-" + nameHash("chio.identity.token", c.Issuer, c.Subject, c.TokenID)[:32]
}

// BudgetID is what the caller's grant budgets are kept under: its
// identity and rule, across every token it is given.
func (c *Caller) BudgetID() string {
	return "jwt-budget-" + nameHash("chio.identity.budget", c.Issuer, c.Subject, strconv.Itoa(c.Rule))[:32]
}

func nameHash(kind string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}
