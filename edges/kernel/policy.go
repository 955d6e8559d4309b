package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/chio-ledger/chio/edges/guards"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
)

// PolicySchema is the value of a policy document's "schema" field.
const PolicySchema = "chio.policy.v1"

// Policy limits.
const (
	// DefaultClockSkew is the tolerance for a token issued by a clock that
	// runs ahead of ours.
	DefaultClockSkew = 30 * time.Second
	// MaxClockSkew bounds the configured tolerance.
	MaxClockSkew   = 5 * time.Minute
	maxPolicyBytes = 1 << 20
)

// Policy is the one document that configures a kernel: whom it trusts, the
// guards it runs and which tools each outward protocol may see. Its hash,
// SHA-256 of its JCS, is the policy_hash of every decision it makes.
type Policy struct {
	Schema string `json:"schema"`
	// TrustedIssuers are the keys whose root capabilities are honoured.
	TrustedIssuers []string `json:"trusted_issuers"`
	// ClockSkewSeconds tolerates a token whose issued_at is at most this
	// far in the future (default 30, at most 300). Expiry is never extended.
	ClockSkewSeconds *int `json:"clock_skew_seconds,omitempty"`
	// Guards configures the guard pipeline.
	Guards GuardsConfig `json:"guards"`
	// Exposure configures which tools each outward protocol shows.
	Exposure map[string]ExposureConfig `json:"exposure,omitempty"`
	// Record configures what decision events (and so receipts) record of
	// a call's arguments.
	Record *RecordConfig `json:"record,omitempty"`
	// IdentityProviders are the OpenID providers whose JWT access tokens
	// are honoured instead of a capability, with the rules that map them
	// to grants (package identity).
	IdentityProviders []identity.Provider `json:"identity_providers,omitempty"`
}

// RecordConfig says what a receipt keeps of the arguments. The kernel and
// the guards always see the arguments as sent; only the record changes.
type RecordConfig struct {
	// HashArguments names top-level argument keys whose values are
	// recorded as "sha256:<hex>": of the UTF-8 bytes of a string, of the
	// JCS of any other value. An auditor holding the value can check it;
	// a reader of the log learns only that it matched.
	HashArguments []string `json:"hash_arguments,omitempty"`
}

// GuardsConfig configures the pipeline. Constraints, path, egress and
// secret-leak guards are on unless listed in Disable; velocity is on when
// configured.
type GuardsConfig struct {
	Path       *guards.PathConfig       `json:"path,omitempty"`
	Egress     *guards.EgressConfig     `json:"egress,omitempty"`
	SecretLeak *guards.SecretLeakConfig `json:"secret_leak,omitempty"`
	Velocity   *VelocityConfig          `json:"velocity,omitempty"`
	// Disable names guards to leave out (e.g. "SecretLeakGuard").
	Disable []string `json:"disable,omitempty"`
}

// VelocityConfig limits calls per subject per fixed window, across every
// replica (the counters live in JetStream KV).
type VelocityConfig struct {
	MaxCalls      uint64 `json:"max_calls"`
	WindowSeconds uint64 `json:"window_seconds"`
}

// ExposureConfig is one protocol's exposure rules (see tools.Exposure).
type ExposureConfig struct {
	ExposeAll        bool     `json:"expose_all,omitempty"`
	Tier             string   `json:"tier,omitempty"`
	InternalPrefixes []string `json:"internal_prefixes,omitempty"`
}

// LoadedPolicy is a parsed, validated policy with its hash.
type LoadedPolicy struct {
	Policy
	// Hash is SHA-256 hex of the JCS of the document as written.
	Hash    string
	trusted map[string]bool
	skew    time.Duration
}

// Issuers are the identity providers' issuer URLs, in the policy's order.
func (p *LoadedPolicy) Issuers() []string {
	out := make([]string, len(p.IdentityProviders))
	for i, ip := range p.IdentityProviders {
		out[i] = ip.Issuer
	}
	return out
}

// LoadPolicy reads and parses a policy file.
func LoadPolicy(path string) (*LoadedPolicy, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	p, err := ParsePolicy(raw)
	if err != nil {
		return nil, fmt.Errorf("load policy %s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy parses and validates a policy document. Unknown fields are
// refused: a misspelt guard setting must not silently fall back to a default.
func ParsePolicy(raw []byte) (*LoadedPolicy, error) {
	if len(raw) > maxPolicyBytes {
		return nil, fmt.Errorf("policy: larger than %d bytes", maxPolicyBytes)
	}
	var p Policy
	if err := schemas.DecodeStrict(raw, &p); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	canon, err := schemas.CanonicalizeJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	// encoding/json matches names case-insensitively and keeps the last of
	// repeated ones, so {"trusted_issuers":[A],"Trusted_Issuers":[B]} would
	// hash as a file trusting A and load as a kernel trusting B. The
	// document must read back exactly as decoded.
	if again, err := schemas.Canonical(&p); err != nil || !bytes.Equal(again, canon) {
		return nil, errors.New("policy: field names must match exactly, once each, and empty optional fields must be omitted")
	}
	lp := &LoadedPolicy{Policy: p, Hash: schemas.SHA256Hex(canon), trusted: map[string]bool{}, skew: DefaultClockSkew}
	if err := lp.validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return lp, nil
}

// NewPolicy builds a policy in code (tests, `chio up` defaults) by encoding
// it, so its hash is computed exactly as for a file.
func NewPolicy(p Policy) (*LoadedPolicy, error) {
	if p.Schema == "" {
		p.Schema = PolicySchema
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return ParsePolicy(raw)
}

func (p *LoadedPolicy) validate() error {
	if p.Schema != PolicySchema {
		return fmt.Errorf("schema is %q, want %q", p.Schema, PolicySchema)
	}
	if len(p.TrustedIssuers) == 0 && len(p.IdentityProviders) == 0 {
		return errors.New("trusted_issuers is empty and no identity_providers are named: no caller could ever be honoured")
	}
	if _, err := identity.New(p.IdentityProviders); err != nil {
		return err
	}
	for i, k := range p.TrustedIssuers {
		if _, err := schemas.ParsePublicKey(k); err != nil {
			return fmt.Errorf("trusted_issuers[%d]: %w", i, err)
		}
		p.trusted[k] = true
	}
	if s := p.ClockSkewSeconds; s != nil {
		if *s < 0 || time.Duration(*s)*time.Second > MaxClockSkew {
			return fmt.Errorf("clock_skew_seconds must be 0..%d", int(MaxClockSkew/time.Second))
		}
		p.skew = time.Duration(*s) * time.Second
	}
	if v := p.Guards.Velocity; v != nil && (v.MaxCalls == 0 || v.WindowSeconds == 0 || v.WindowSeconds > 86400) {
		return errors.New("guards.velocity needs max_calls > 0 and window_seconds in 1..86400")
	}
	for _, name := range p.Guards.Disable {
		switch name {
		case guardPath, guardEgress, guardSecretLeak:
		default:
			// ConstraintGuard enforces the grant itself and cannot be turned off.
			return fmt.Errorf("guards.disable: %q is not a guard that can be disabled (%s, %s, %s)", name, guardPath, guardEgress, guardSecretLeak)
		}
	}
	if r := p.Record; r != nil {
		for i, k := range r.HashArguments {
			if k == "" || !schemas.ValidName(k) {
				return fmt.Errorf("record.hash_arguments[%d]: %q is not an argument name", i, k)
			}
		}
	}
	// Build the pipeline once so a bad pattern fails at load, not per call.
	if _, err := p.statelessGuards(); err != nil {
		return err
	}
	return nil
}

// Guard names, as they appear in evidence and in deny decisions.
const (
	guardConstraint = "ConstraintGuard"
	guardPath       = "PathGuard"
	guardEgress     = "EgressAllowlistGuard"
	guardSecretLeak = "SecretLeakGuard"
	guardVelocity   = "VelocityGuard"
)

func (p *LoadedPolicy) disabled(name string) bool {
	for _, d := range p.Guards.Disable {
		if d == name {
			return true
		}
	}
	return false
}

// statelessGuards builds the deterministic guards, cheapest first.
func (p *LoadedPolicy) statelessGuards() ([]guards.Guard, error) {
	gs := []guards.Guard{guards.NewConstraintGuard()}
	if !p.disabled(guardPath) {
		cfg := guards.PathConfig{}
		if p.Guards.Path != nil {
			cfg = *p.Guards.Path
		}
		g, err := guards.NewPathGuard(cfg)
		if err != nil {
			return nil, fmt.Errorf("guards.path: %w", err)
		}
		gs = append(gs, g)
	}
	if !p.disabled(guardEgress) {
		cfg := guards.EgressConfig{}
		if p.Guards.Egress != nil {
			cfg = *p.Guards.Egress
		}
		g, err := guards.NewEgressGuard(cfg)
		if err != nil {
			return nil, fmt.Errorf("guards.egress: %w", err)
		}
		gs = append(gs, g)
	}
	if !p.disabled(guardSecretLeak) {
		cfg := guards.SecretLeakConfig{}
		if p.Guards.SecretLeak != nil {
			cfg = *p.Guards.SecretLeak
		}
		g, err := guards.NewSecretLeakGuard(cfg)
		if err != nil {
			return nil, fmt.Errorf("guards.secret_leak: %w", err)
		}
		gs = append(gs, g)
	}
	return gs, nil
}

// Trusted reports whether key is a configured issuer.
func (p *LoadedPolicy) Trusted(key string) bool { return p.trusted[key] }

// ClockSkew is the configured tolerance for future issued_at.
func (p *LoadedPolicy) ClockSkew() time.Duration { return p.skew }

// ToolExposure is the exposure of protocol's surface: the policy's
// settings for it plus the given --expose-all override.
func (p *LoadedPolicy) ToolExposure(protocol string, exposeAll bool) tools.Exposure {
	c := p.Exposure[protocol]
	return tools.Exposure{Protocol: protocol, ExposeAll: c.ExposeAll || exposeAll, Tier: c.Tier, InternalPrefixes: c.InternalPrefixes}
}

// HashedPrefix starts an argument value the record replaced by its hash.
const HashedPrefix = "sha256:"

// Recorded is args (a canonical JSON object) as a decision event records
// it: the values of record.hash_arguments replaced by their hashes, the
// result canonical again. Without such keys it is args itself.
func (p *LoadedPolicy) Recorded(args json.RawMessage) (json.RawMessage, error) {
	if p.Record == nil || len(p.Record.HashArguments) == 0 {
		return args, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return nil, fmt.Errorf("record arguments: %w", err)
	}
	changed := false
	for _, k := range p.Record.HashArguments {
		v, ok := m[k]
		if !ok {
			continue
		}
		var s string
		sum := ""
		if json.Unmarshal(v, &s) == nil {
			sum = schemas.SHA256Hex([]byte(s))
		} else {
			canon, err := schemas.CanonicalizeJSON(v)
			if err != nil {
				return nil, fmt.Errorf("record argument %s: %w", k, err)
			}
			sum = schemas.SHA256Hex(canon)
		}
		m[k] = json.RawMessage(`"` + HashedPrefix + sum + `"`)
		changed = true
	}
	if !changed {
		return args, nil
	}
	out, err := schemas.Canonical(m)
	if err != nil {
		return nil, fmt.Errorf("record arguments: %w", err)
	}
	return out, nil
}
