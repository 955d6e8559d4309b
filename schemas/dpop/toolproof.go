package dpop

import (
	"crypto/ed25519"
	"encoding/json"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// ToolProof is a chio.dpop_proof.v1: proof of possession bound to one tool
// call, for transports without an HTTP request to bind (stdio, ACP, an
// MCP call's _meta). AgentKey is the token's subject; Signature is over
// the JCS of every other field.
type ToolProof struct {
	Schema       string `json:"schema"`
	CapabilityID string `json:"capability_id"`
	ToolServer   string `json:"tool_server"`
	ToolName     string `json:"tool_name"`
	// ActionHash is the SHA-256 hex of the arguments' RFC 8785 form.
	ActionHash string `json:"action_hash"`
	// Nonce is the caller's one-time value.
	Nonce     string `json:"nonce"`
	IssuedAt  uint64 `json:"issued_at"`
	AgentKey  string `json:"agent_key"`
	Signature string `json:"signature"`
}

type toolProofBody struct {
	Schema       string `json:"schema"`
	CapabilityID string `json:"capability_id"`
	ToolServer   string `json:"tool_server"`
	ToolName     string `json:"tool_name"`
	ActionHash   string `json:"action_hash"`
	Nonce        string `json:"nonce"`
	IssuedAt     uint64 `json:"issued_at"`
	AgentKey     string `json:"agent_key"`
}

func (p *ToolProof) body() toolProofBody {
	return toolProofBody{Schema: p.Schema, CapabilityID: p.CapabilityID, ToolServer: p.ToolServer, ToolName: p.ToolName,
		ActionHash: p.ActionHash, Nonce: p.Nonce, IssuedAt: p.IssuedAt, AgentKey: p.AgentKey}
}

// ActionHash is the action_hash of a call's arguments: SHA-256 hex of
// their RFC 8785 form ({} when there are none).
func ActionHash(args json.RawMessage) (string, error) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	c, err := schemas.CanonicalizeJSON(args)
	if err != nil {
		return "", err
	}
	return schemas.SHA256Hex(c), nil
}

// toolProofMembers are a tool proof's members, all of them.
var toolProofMembers = []string{"schema", "capability_id", "tool_server", "tool_name", "action_hash", "nonce", "issued_at", "agent_key", "signature"}

// ParseToolProof decodes a chio.dpop_proof.v1 and checks its form and its
// signature by its agent_key. Whether it fits the call is VerifyCall's.
func ParseToolProof(raw []byte) (*ToolProof, error) {
	if len(raw) > MaxProofBytes {
		return nil, fail(CheckMalformed, "tool proof is %d bytes, over %d", len(raw), MaxProofBytes)
	}
	var p ToolProof
	if err := strictJSON(raw, &p, toolProofMembers, true); err != nil {
		return nil, fail(CheckMalformed, "tool proof: %v", err)
	}
	switch {
	case p.Schema != ToolProofSchema:
		return nil, fail(CheckMalformed, "schema is %q, not %s", clip(p.Schema), ToolProofSchema)
	case p.Nonce == "" || len(p.Nonce) > maxIDBytes:
		return nil, fail(CheckMalformed, "nonce must be 1 to %d bytes", maxIDBytes)
	case p.IssuedAt == 0 || p.IssuedAt > 1<<53:
		return nil, fail(CheckMalformed, "issued_at is missing or out of range")
	case p.CapabilityID == "" || p.ToolServer == "" || p.ToolName == "" || p.ActionHash == "":
		return nil, fail(CheckMalformed, "capability_id, tool_server, tool_name and action_hash are required")
	}
	if _, err := schemas.ParsePublicKey(p.AgentKey); err != nil {
		return nil, fail(CheckMalformed, "agent_key: %v", err)
	}
	if err := schemas.VerifyCanonical(p.AgentKey, p.Signature, p.body()); err != nil {
		return nil, fail(CheckMalformed, "signature: %v", err)
	}
	return &p, nil
}

// Call is what a tool proof must match.
type Call struct {
	Subject      string
	CapabilityID string
	ToolServer   string
	ToolName     string
	Arguments    json.RawMessage
	Now          time.Time
	Lifetime     time.Duration
	Skew         time.Duration
}

// VerifyCall checks the proof against the call in Chio's order: key,
// then the call it names, then freshness.
func (p *ToolProof) VerifyCall(c Call) error {
	if p.AgentKey != c.Subject {
		return fail(CheckKey, "signed by agent_key %s, not by the token's subject %s", clip(p.AgentKey), clip(c.Subject))
	}
	if p.CapabilityID != c.CapabilityID || p.ToolServer != c.ToolServer || p.ToolName != c.ToolName {
		return fail(CheckCall, "proof is for %s on %s/%s, the call is %s on %s/%s",
			clip(p.CapabilityID), clip(p.ToolServer), clip(p.ToolName), c.CapabilityID, c.ToolServer, c.ToolName)
	}
	h, err := ActionHash(c.Arguments)
	if err != nil || h != p.ActionHash {
		return fail(CheckCall, "action_hash is not the hash of the call's arguments")
	}
	return p.Fresh(c.Now, c.Lifetime, c.Skew)
}

// Fresh checks the proof's issued_at against now (zero values: time.Now,
// DefaultLifetime, DefaultSkew).
func (p *ToolProof) Fresh(now time.Time, lifetime, skew time.Duration) error {
	e := Expect{Now: now, Lifetime: lifetime, Skew: skew}
	n, life, sk := e.window()
	return fresh(time.Unix(int64(p.IssuedAt), 0), n, life, sk)
}

// ReplayKey is the proof's one-time key for the replay state.
func (p *ToolProof) ReplayKey() string { return replayKey("chio:"+p.AgentKey, p.Nonce) }

// Thumbprint is the RFC 7638 thumbprint of the proof's key.
func (p *ToolProof) Thumbprint() string {
	k, err := schemas.ParsePublicKey(p.AgentKey)
	if err != nil {
		return ""
	}
	return Thumbprint(ed25519.PublicKey(k))
}
