package schemas

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// CapabilitySchema is the value of a capability token's "schema" field.
const CapabilitySchema = "chio.capability.v1"

// Capability token limits. A token travels in an HTTP header, so it is kept
// small; the chain bound keeps verification cost linear and small.
const (
	// MaxCapabilityBytes bounds a token's JSON text.
	MaxCapabilityBytes = 32 << 10
	// MaxDelegationDepth bounds delegation_chain.
	MaxDelegationDepth = 8
	// MaxGrants bounds the grants of one scope.
	MaxGrants = 64
	// MaxConstraints bounds the constraints of one grant.
	MaxConstraints = 32
	// maxJSONInteger is the largest integer JCS (IEEE doubles) carries exactly.
	maxJSONInteger = 1<<53 - 1
)

// Operation is what a grant permits on a tool.
type Operation string

// Operation wire values (§3.2 of the wire reference).
const (
	OpInvoke     Operation = "invoke"
	OpReadResult Operation = "read_result"
	OpRead       Operation = "read"
	OpSubscribe  Operation = "subscribe"
	OpGet        Operation = "get"
	OpDelegate   Operation = "delegate"
)

func (o Operation) valid() bool {
	switch o {
	case OpInvoke, OpReadResult, OpRead, OpSubscribe, OpGet, OpDelegate:
		return true
	}
	return false
}

// MonetaryAmount is an amount in the currency's smallest unit.
type MonetaryAmount struct {
	Units    uint64 `json:"units"`
	Currency string `json:"currency"`
}

// Constraint restricts a grant's arguments. Type names the rule; Value holds
// its operands. The kernel evaluates the types it knows and denies a call
// under any grant carrying a type it does not know (fail closed).
type Constraint struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value,omitempty"`
}

// ToolGrant permits operations on one tool ("*" = every tool of the server).
type ToolGrant struct {
	ServerID             string          `json:"server_id"`
	ToolName             string          `json:"tool_name"`
	Operations           []Operation     `json:"operations"`
	Constraints          []Constraint    `json:"constraints,omitempty"`
	MaxInvocations       *uint32         `json:"max_invocations,omitempty"`
	MaxCostPerInvocation *MonetaryAmount `json:"max_cost_per_invocation,omitempty"`
	MaxTotalCost         *MonetaryAmount `json:"max_total_cost,omitempty"`
	DPoPRequired         *bool           `json:"dpop_required,omitempty"`
}

// ResourceGrant permits operations on resources matching a URI pattern.
type ResourceGrant struct {
	URIPattern string      `json:"uri_pattern"`
	Operations []Operation `json:"operations"`
}

// PromptGrant permits operations on a named prompt.
type PromptGrant struct {
	PromptName string      `json:"prompt_name"`
	Operations []Operation `json:"operations"`
}

// Scope is what a capability grants.
type Scope struct {
	Grants         []ToolGrant     `json:"grants"`
	ResourceGrants []ResourceGrant `json:"resource_grants,omitempty"`
	PromptGrants   []PromptGrant   `json:"prompt_grants,omitempty"`
}

// ScopeHash is SHA-256 hex of the scope's JCS: what a delegation link binds.
func ScopeHash(s Scope) (string, error) {
	c, err := Canonical(s)
	if err != nil {
		return "", fmt.Errorf("scope hash: %w", err)
	}
	return SHA256Hex(c), nil
}

// DelegationLink is one ancestor of a delegated token, root first. It holds
// exactly the ancestor's signed fields, so a verifier rebuilds the ancestor
// (Ancestor) and checks its signature by Delegator with nothing but the
// token in hand: delegation is verifiable offline and by any replica.
//
// Delegator is the key that signed the ancestor (its issuer) and Delegatee
// the key it was granted to (its subject); ScopeHash binds the ancestor's
// scope, which the link carries so a verifier can check that each step
// only narrows the one before.
type DelegationLink struct {
	CapabilityID string `json:"capability_id"`
	Delegator    string `json:"delegator"`
	Delegatee    string `json:"delegatee"`
	Scope        Scope  `json:"scope"`
	ScopeHash    string `json:"scope_hash"`
	Timestamp    uint64 `json:"timestamp"`
	ExpiresAt    uint64 `json:"expires_at"`
	Signature    string `json:"signature"`
}

// CapabilityBody is the signed part of a token: everything but signature
// and algorithm, as for receipts.
type CapabilityBody struct {
	Schema          string           `json:"schema,omitempty"`
	ID              string           `json:"id"`
	Issuer          string           `json:"issuer"`
	Subject         string           `json:"subject"`
	Scope           Scope            `json:"scope"`
	IssuedAt        uint64           `json:"issued_at"`
	ExpiresAt       uint64           `json:"expires_at"`
	DelegationChain []DelegationLink `json:"delegation_chain,omitempty"`
}

// CapabilityToken is a chio.capability.v1 token.
type CapabilityToken struct {
	CapabilityBody
	Algorithm string `json:"algorithm,omitempty"`
	Signature string `json:"signature"`
}

// IssueCapability signs body with the issuer's key. The issuer field must be
// that key's public half; the schema field is set if empty.
func IssueCapability(priv ed25519.PrivateKey, body CapabilityBody) (*CapabilityToken, error) {
	if body.Schema == "" {
		body.Schema = CapabilitySchema
	}
	if want := EncodePublicKey(priv.Public().(ed25519.PublicKey)); body.Issuer != want {
		return nil, fmt.Errorf("issue capability: issuer %q is not the signing key %s", abbreviate(body.Issuer), want)
	}
	if err := body.Validate(); err != nil {
		return nil, fmt.Errorf("issue capability: %w", err)
	}
	// Sign the constraints in the form verifiers evaluate (see ParseCapability).
	probe := CapabilityToken{CapabilityBody: body}
	probe.Scope.Grants = cloneGrants(body.Scope.Grants)
	if err := probe.canonicalizeConstraints(); err != nil {
		return nil, fmt.Errorf("issue capability: %w", err)
	}
	body.Scope.Grants = probe.Scope.Grants
	sig, err := SignCanonical(priv, body)
	if err != nil {
		return nil, fmt.Errorf("issue capability: %w", err)
	}
	return &CapabilityToken{CapabilityBody: body, Signature: sig}, nil
}

func cloneGrants(gs []ToolGrant) []ToolGrant {
	out := append([]ToolGrant(nil), gs...)
	for i := range out {
		out[i].Constraints = append([]Constraint(nil), out[i].Constraints...)
	}
	return out
}

// Delegate issues a child of parent, signed by the parent's subject key
// (delegatorKey). The child must narrow the parent; the kernel re-checks
// that on every verification, this only refuses to mint an invalid child.
func Delegate(delegatorKey ed25519.PrivateKey, parent *CapabilityToken, child CapabilityBody) (*CapabilityToken, error) {
	link, err := parent.Link()
	if err != nil {
		return nil, fmt.Errorf("delegate: %w", err)
	}
	child.Issuer = EncodePublicKey(delegatorKey.Public().(ed25519.PublicKey))
	if child.Issuer != parent.Subject {
		return nil, errors.New("delegate: the delegating key is not the parent's subject")
	}
	child.DelegationChain = append(append([]DelegationLink(nil), parent.DelegationChain...), link)
	if err := CheckAttenuation(&parent.CapabilityBody, &child); err != nil {
		return nil, fmt.Errorf("delegate: %w", err)
	}
	return IssueCapability(delegatorKey, child)
}

// Link is the delegation link that stands for t in its children's chains.
func (t *CapabilityToken) Link() (DelegationLink, error) {
	if t.Schema != CapabilitySchema {
		// An ancestor is rebuilt with the schema field set; a token signed
		// without it could not be verified as an ancestor.
		return DelegationLink{}, errors.New("only a token with schema " + CapabilitySchema + " can be delegated")
	}
	h, err := ScopeHash(t.Scope)
	if err != nil {
		return DelegationLink{}, err
	}
	return DelegationLink{
		CapabilityID: t.ID, Delegator: t.Issuer, Delegatee: t.Subject, Scope: t.Scope, ScopeHash: h,
		Timestamp: t.IssuedAt, ExpiresAt: t.ExpiresAt, Signature: t.Signature,
	}, nil
}

// Ancestor rebuilds the i-th ancestor of t from its delegation chain.
func (t *CapabilityToken) Ancestor(i int) *CapabilityToken {
	l := t.DelegationChain[i]
	return &CapabilityToken{
		CapabilityBody: CapabilityBody{
			Schema: CapabilitySchema, ID: l.CapabilityID, Issuer: l.Delegator, Subject: l.Delegatee,
			Scope: l.Scope, IssuedAt: l.Timestamp, ExpiresAt: l.ExpiresAt,
			DelegationChain: t.DelegationChain[:i:i],
		},
		Signature: l.Signature,
	}
}

// VerifySignature checks the token's own signature by its issuer. It does
// not check the chain, the time window or trust in the issuer.
func (t *CapabilityToken) VerifySignature() error {
	if t.Algorithm != "" && t.Algorithm != "ed25519" {
		return fmt.Errorf("capability %s: algorithm %q: %w", t.ID, t.Algorithm, ErrUnsupportedAlgorithm)
	}
	if err := VerifyCanonical(t.Issuer, t.Signature, &t.CapabilityBody); err != nil {
		return fmt.Errorf("capability %s: %w", t.ID, err)
	}
	return nil
}

// Validate checks a token's structure: ids, keys, scope, time order and the
// shape of its chain. Signatures and attenuation are the verifier's job.
// ReservedIDPrefix begins the ids the kernel gives identity providers'
// access tokens (internal/identity): no capability may have one, so none
// can stand for an access token in lineage, revocation or reads.
const ReservedIDPrefix = "jwt-"

func (b *CapabilityBody) Validate() error {
	switch {
	case b.Schema != "" && b.Schema != CapabilitySchema:
		return fmt.Errorf("unknown schema %q", abbreviate(b.Schema))
	case !ValidID(b.ID):
		return fmt.Errorf("id %q is not a valid id (1-128 of [A-Za-z0-9._:-])", abbreviate(b.ID))
	case strings.HasPrefix(b.ID, ReservedIDPrefix):
		return fmt.Errorf("id %q: ids beginning %q name access tokens, not capabilities", abbreviate(b.ID), ReservedIDPrefix)
	case b.IssuedAt == 0 || b.ExpiresAt > maxJSONInteger:
		return errors.New("issued_at and expires_at must be Unix seconds")
	case b.ExpiresAt <= b.IssuedAt:
		return errors.New("expires_at must be after issued_at")
	case len(b.DelegationChain) > MaxDelegationDepth:
		return fmt.Errorf("delegation_chain is deeper than %d", MaxDelegationDepth)
	}
	if _, err := ParsePublicKey(b.Issuer); err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	if _, err := ParsePublicKey(b.Subject); err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	if err := b.Scope.Validate(); err != nil {
		return err
	}
	for i, l := range b.DelegationChain {
		if err := l.validate(); err != nil {
			return fmt.Errorf("delegation_chain[%d]: %w", i, err)
		}
	}
	return nil
}

func (l *DelegationLink) validate() error {
	switch {
	case !ValidID(l.CapabilityID):
		return fmt.Errorf("capability_id %q is not a valid id", abbreviate(l.CapabilityID))
	case l.Timestamp == 0 || l.ExpiresAt <= l.Timestamp || l.ExpiresAt > maxJSONInteger:
		return errors.New("timestamp and expires_at must be Unix seconds, expires_at after timestamp")
	case !isSHA256Hex(l.ScopeHash):
		return errors.New("scope_hash must be 64 lowercase hex")
	}
	if _, err := ParsePublicKey(l.Delegator); err != nil {
		return fmt.Errorf("delegator: %w", err)
	}
	if _, err := ParsePublicKey(l.Delegatee); err != nil {
		return fmt.Errorf("delegatee: %w", err)
	}
	if _, err := ParseSignature(l.Signature); err != nil {
		return err
	}
	return l.Scope.Validate()
}

// Validate checks a scope's structure.
func (s *Scope) Validate() error {
	if len(s.Grants)+len(s.ResourceGrants)+len(s.PromptGrants) == 0 {
		return errors.New("scope grants nothing")
	}
	if len(s.Grants) > MaxGrants {
		return fmt.Errorf("scope has more than %d grants", MaxGrants)
	}
	for i := range s.Grants {
		if err := s.Grants[i].validate(); err != nil {
			return fmt.Errorf("scope.grants[%d]: %w", i, err)
		}
	}
	for i, g := range s.ResourceGrants {
		if g.URIPattern == "" || validOperations(g.Operations) != nil {
			return fmt.Errorf("scope.resource_grants[%d]: uri_pattern and known operations required", i)
		}
	}
	for i, g := range s.PromptGrants {
		if g.PromptName == "" || validOperations(g.Operations) != nil {
			return fmt.Errorf("scope.prompt_grants[%d]: prompt_name and known operations required", i)
		}
	}
	return nil
}

func validOperations(ops []Operation) error {
	if len(ops) == 0 {
		return errors.New("operations must list at least one operation")
	}
	for _, o := range ops {
		if !o.valid() {
			return fmt.Errorf("unknown operation %q", abbreviate(string(o)))
		}
	}
	return nil
}

func (g *ToolGrant) validate() error {
	switch {
	case !ValidName(g.ServerID) || g.ServerID == "*":
		return errors.New("server_id must name one server")
	case !ValidName(g.ToolName):
		return errors.New("tool_name must be a tool name or \"*\"")
	case len(g.Constraints) > MaxConstraints:
		return fmt.Errorf("more than %d constraints", MaxConstraints)
	}
	if err := validOperations(g.Operations); err != nil {
		return err
	}
	for i, c := range g.Constraints {
		if !ValidName(c.Type) {
			return fmt.Errorf("constraints[%d]: type is required", i)
		}
	}
	for _, m := range []*MonetaryAmount{g.MaxCostPerInvocation, g.MaxTotalCost} {
		if m != nil && (m.Currency == "" || m.Units > maxJSONInteger) {
			return errors.New("monetary amounts need a currency and at most 2^53-1 units")
		}
	}
	if g.MaxCostPerInvocation != nil && g.MaxTotalCost != nil && g.MaxCostPerInvocation.Currency != g.MaxTotalCost.Currency {
		return errors.New("max_cost_per_invocation and max_total_cost must use one currency")
	}
	return nil
}

// ParseCapability decodes and structurally validates a token given as JSON
// text. Unknown fields are refused: they would be outside the checked
// structure yet inside the signed bytes.
func ParseCapability(raw []byte) (*CapabilityToken, error) {
	if len(raw) > MaxCapabilityBytes {
		return nil, fmt.Errorf("capability: larger than %d bytes", MaxCapabilityBytes)
	}
	// The strict reader first: what it refuses (a lone surrogate, nesting
	// past its limit) could otherwise verify and still not read back the
	// same in every reader of the receipts that quote this token.
	if err := strictjson.Valid(raw); err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	var t CapabilityToken
	if err := DecodeStrict(raw, &t); err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	// The signature covers the JCS form, where numbers are IEEE doubles:
	// guards must evaluate exactly that form, and a constraint number that
	// a double cannot hold would let a holder swap it for a neighbour that
	// verifies under the same signature.
	if err := t.canonicalizeConstraints(); err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	// encoding/json matches field names case-insensitively and keeps the
	// last of repeated ones; a token must read the same to every parser, so
	// its text must canonicalize to exactly what was decoded.
	want, err := CanonicalizeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	got, err := Canonical(&t)
	if err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	if !bytes.Equal(want, got) {
		return nil, errors.New("capability: field names must match exactly, once each, and empty optional fields must be omitted")
	}
	if _, err := ParseSignature(t.Signature); err != nil {
		return nil, fmt.Errorf("capability: %w", err)
	}
	return &t, nil
}

func (t *CapabilityToken) canonicalizeConstraints() error {
	scopes := []*Scope{&t.Scope}
	for i := range t.DelegationChain {
		scopes = append(scopes, &t.DelegationChain[i].Scope)
	}
	for _, s := range scopes {
		for gi := range s.Grants {
			for ci := range s.Grants[gi].Constraints {
				c := &s.Grants[gi].Constraints[ci]
				if len(c.Value) == 0 {
					continue
				}
				if err := exactNumbers(c.Value); err != nil {
					return fmt.Errorf("grant %d constraint %d: %w", gi, ci, err)
				}
				canon, err := CanonicalizeJSON(c.Value)
				if err != nil {
					return fmt.Errorf("grant %d constraint %d: %w", gi, ci, err)
				}
				c.Value = canon
			}
		}
	}
	return nil
}

// exactNumbers refuses JSON numbers that an IEEE double does not hold
// exactly (JCS, and so the signature, would cover a different number).
func exactNumbers(raw json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n, ok := tok.(json.Number)
		if !ok {
			continue
		}
		exact, ok := new(big.Rat).SetString(n.String())
		f, ferr := strconv.ParseFloat(n.String(), 64)
		if !ok || ferr != nil || new(big.Rat).SetFloat64(f).Cmp(exact) != 0 {
			return fmt.Errorf("number %s is not exactly representable as an IEEE double, which JCS signs", abbreviate(n.String()))
		}
	}
}

// EncodeCapabilityHeader is the header form of a token: unpadded base64url
// of its JSON, for Authorization: Bearer and X-Chio-Capability.
func EncodeCapabilityHeader(t *CapabilityToken) (string, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("encode capability: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// DecodeCapabilityText returns the JSON of a token given either as JSON or
// in header form (base64url, padded or not).
func DecodeCapabilityText(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "{") {
		return []byte(s), nil
	}
	if len(s) > base64.RawURLEncoding.EncodedLen(MaxCapabilityBytes) {
		return nil, fmt.Errorf("capability: larger than %d bytes", MaxCapabilityBytes)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, errors.New("capability: not JSON and not base64url")
	}
	return raw, nil
}

// HolderProofReason says why t is honoured only with a proof of
// possession of its subject key, "" when it may be a bearer token: it can
// delegate (a tool, resource or prompt grant lists the delegate
// operation) or a grant has dpop_required. A token that can delegate is
// the ancestor of every token delegated from it, and each of those
// carries its signed fields (Ancestor rebuilds it): honoured by
// possession alone, it would be honoured for whoever holds a child.
func (t *CapabilityToken) HolderProofReason() string {
	for i, g := range t.Scope.Grants {
		if hasOp(g.Operations, OpDelegate) {
			return fmt.Sprintf("capability %s can delegate (grant %d)", t.ID, i)
		}
		if g.DPoPRequired != nil && *g.DPoPRequired {
			return fmt.Sprintf("grant %d of capability %s has dpop_required", i, t.ID)
		}
	}
	for i, g := range t.Scope.ResourceGrants {
		if hasOp(g.Operations, OpDelegate) {
			return fmt.Sprintf("capability %s can delegate (resource grant %d)", t.ID, i)
		}
	}
	for i, g := range t.Scope.PromptGrants {
		if hasOp(g.Operations, OpDelegate) {
			return fmt.Sprintf("capability %s can delegate (prompt grant %d)", t.ID, i)
		}
	}
	return ""
}

// CheckAttenuation reports whether child only narrows parent: a window
// inside the parent's, and every grant covered by a delegable parent grant
// (one listing the delegate operation) with no more tools, operations or
// budget, and at least the parent's constraints.
func CheckAttenuation(parent, child *CapabilityBody) error {
	if child.IssuedAt < parent.IssuedAt || child.ExpiresAt > parent.ExpiresAt {
		return fmt.Errorf("attenuation: child window [%d,%d) exceeds parent %s [%d,%d)",
			child.IssuedAt, child.ExpiresAt, parent.ID, parent.IssuedAt, parent.ExpiresAt)
	}
	for i := range child.Scope.Grants {
		if _, err := CoveringGrant(&child.Scope.Grants[i], parent.Scope.Grants); err != nil {
			return fmt.Errorf("attenuation: grants[%d] (%s/%s) widens parent %s: %w",
				i, child.Scope.Grants[i].ServerID, child.Scope.Grants[i].ToolName, parent.ID, err)
		}
	}
	for i, g := range child.Scope.ResourceGrants {
		ok := false
		for _, p := range parent.Scope.ResourceGrants {
			if patternCovers(p.URIPattern, g.URIPattern) && opsSubset(g.Operations, p.Operations) && hasOp(p.Operations, OpDelegate) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("attenuation: resource_grants[%d] widens parent %s", i, parent.ID)
		}
	}
	for i, g := range child.Scope.PromptGrants {
		ok := false
		for _, p := range parent.Scope.PromptGrants {
			if (p.PromptName == "*" || p.PromptName == g.PromptName) && opsSubset(g.Operations, p.Operations) && hasOp(p.Operations, OpDelegate) {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("attenuation: prompt_grants[%d] widens parent %s", i, parent.ID)
		}
	}
	return nil
}

// CoveringGrant is the index of the first parent grant that covers c (a
// delegable grant for the same tools that c only narrows), or an error
// explaining the closest miss. A delegated call charges that grant's budget.
func CoveringGrant(c *ToolGrant, parents []ToolGrant) (int, error) {
	why := errors.New("no parent grant for this tool")
	for i := range parents {
		p := &parents[i]
		if p.ServerID != c.ServerID || !(p.ToolName == "*" || p.ToolName == c.ToolName) {
			continue
		}
		if err := narrows(p, c); err != nil {
			why = err
			continue
		}
		return i, nil
	}
	return -1, why
}

func narrows(p, c *ToolGrant) error {
	switch {
	case !hasOp(p.Operations, OpDelegate):
		return errors.New("the parent grant does not allow delegate")
	case !opsSubset(c.Operations, p.Operations):
		return errors.New("operations not in the parent grant")
	case p.MaxInvocations != nil && (c.MaxInvocations == nil || *c.MaxInvocations > *p.MaxInvocations):
		return errors.New("max_invocations above the parent's")
	case !amountWithin(c.MaxCostPerInvocation, p.MaxCostPerInvocation):
		return errors.New("max_cost_per_invocation above the parent's")
	case !amountWithin(c.MaxTotalCost, p.MaxTotalCost):
		return errors.New("max_total_cost above the parent's")
	case p.DPoPRequired != nil && *p.DPoPRequired && (c.DPoPRequired == nil || !*c.DPoPRequired):
		return errors.New("dpop_required dropped")
	}
	// Every parent constraint must reappear unchanged in the child: a
	// child may add constraints, never loosen or drop one.
	for _, pc := range p.Constraints {
		found := false
		for _, cc := range c.Constraints {
			if constraintEqual(pc, cc) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("parent constraint %q dropped or changed", pc.Type)
		}
	}
	return nil
}

func constraintEqual(a, b Constraint) bool {
	if a.Type != b.Type {
		return false
	}
	ca, err1 := canonicalOrNull(a.Value)
	cb, err2 := canonicalOrNull(b.Value)
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}

func canonicalOrNull(v json.RawMessage) ([]byte, error) {
	if len(v) == 0 {
		return []byte("null"), nil
	}
	return CanonicalizeJSON(v)
}

func amountWithin(c, p *MonetaryAmount) bool {
	if p == nil {
		return true
	}
	return c != nil && c.Currency == p.Currency && c.Units <= p.Units
}

func hasOp(ops []Operation, o Operation) bool {
	for _, x := range ops {
		if x == o {
			return true
		}
	}
	return false
}

func opsSubset(child, parent []Operation) bool {
	for _, o := range child {
		if !hasOp(parent, o) {
			return false
		}
	}
	return true
}

// patternCovers: "*" covers everything, "prefix*" covers what starts with
// prefix (including a narrower "prefix…*"), anything else only itself.
func patternCovers(parent, child string) bool {
	if prefix, ok := strings.CutSuffix(parent, "*"); ok {
		return strings.HasPrefix(child, prefix)
	}
	return parent == child
}
