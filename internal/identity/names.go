package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"

	"github.com/chio-ledger/chio/schemas"
)

// Names of a caller in the capability model, so that the kernel and the
// read APIs treat it alike. The issuer and subject "keys" are SHA-256
// names of the provider and of the provider's subject: 32 bytes each, so
// public keys in form, but keys whose private half no one holds, so no
// capability can be issued by one (and policies trust their own issuers
// only), and no capability holder shares a caller's principal.

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
	return schemas.ReservedIDPrefix + nameHash("chio.identity.token", c.Issuer, c.Subject, c.TokenID)[:32]
}

// BudgetID is what the caller's grant budgets are kept under: its
// identity and rule, across every token it is given.
func (c *Caller) BudgetID() string {
	return schemas.ReservedIDPrefix + "budget-" + nameHash("chio.identity.budget", c.Issuer, c.Subject, strconv.Itoa(c.Rule))[:32]
}

func nameHash(kind string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	// Each part length-prefixed: a subject or token id may hold any byte,
	// so no separator alone keeps two different lists apart.
	for _, p := range parts {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(p))))
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}
