package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// ManifestSchema is the value of a tool manifest's "schema" field.
const ManifestSchema = "chio.manifest.v1"

// MaxToolDescription bounds a tool description (characters), as Chio does
// before a description reaches a model.
const MaxToolDescription = 500

// LatencyHint says how long a tool usually takes; moderate and slow tools
// default to streaming, slow ones to cancellation.
type LatencyHint string

// Latency hints.
const (
	LatencyFast     LatencyHint = "fast"
	LatencyModerate LatencyHint = "moderate"
	LatencySlow     LatencyHint = "slow"
)

// ToolAnnotations are behaviour hints for clients.
type ToolAnnotations struct {
	ReadOnly         bool `json:"read_only,omitempty"`
	Destructive      bool `json:"destructive,omitempty"`
	Idempotent       bool `json:"idempotent,omitempty"`
	RequiresApproval bool `json:"requires_approval,omitempty"`
}

// ToolDefinition describes one tool of a server. Metadata carries
// deployment keys such as "a2a.expose" and "a2a.tier"; the x-chio-* bridge
// hints live in InputSchema (OutputSchema as fallback).
type ToolDefinition struct {
	Name           string                     `json:"name"`
	Description    string                     `json:"description"`
	InputSchema    json.RawMessage            `json:"input_schema"`
	OutputSchema   json.RawMessage            `json:"output_schema,omitempty"`
	Pricing        json.RawMessage            `json:"pricing,omitempty"`
	Annotations    *ToolAnnotations           `json:"annotations,omitempty"`
	HasSideEffects bool                       `json:"has_side_effects"`
	LatencyHint    LatencyHint                `json:"latency_hint,omitempty"`
	Metadata       map[string]json.RawMessage `json:"metadata,omitempty"`
}

// ToolManifest is a chio.manifest.v1 manifest: one tool server's tools.
type ToolManifest struct {
	Schema              string           `json:"schema"`
	ServerID            string           `json:"server_id"`
	Name                string           `json:"name"`
	Description         string           `json:"description,omitempty"`
	Version             string           `json:"version"`
	Tools               []ToolDefinition `json:"tools"`
	ServerTools         json.RawMessage  `json:"server_tools,omitempty"`
	RequiredPermissions json.RawMessage  `json:"required_permissions,omitempty"`
	PublicKey           string           `json:"public_key,omitempty"`
}

// ParseManifest decodes and validates a manifest. Unknown top-level or tool
// fields are refused, so a misspelt key is an error, not a silent default.
func ParseManifest(raw []byte) (*ToolManifest, error) {
	var m ToolManifest
	if err := DecodeStrict(raw, &m); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks a manifest's structure.
func (m *ToolManifest) Validate() error {
	switch {
	case m.Schema != ManifestSchema:
		return fmt.Errorf("manifest: schema is %q, want %q", abbreviate(m.Schema), ManifestSchema)
	case !ValidName(m.ServerID):
		return errors.New("manifest: server_id is required (at most 256 bytes, no control characters)")
	case m.Name == "" || m.Version == "":
		return fmt.Errorf("manifest %s: name and version are required", m.ServerID)
	case len(m.Tools) == 0:
		return fmt.Errorf("manifest %s: no tools", m.ServerID)
	}
	seen := make(map[string]bool, len(m.Tools))
	for i := range m.Tools {
		t := &m.Tools[i]
		if err := t.validate(); err != nil {
			return fmt.Errorf("manifest %s: tools[%d]: %w", m.ServerID, i, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("manifest %s: tool %q listed twice", m.ServerID, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

func (t *ToolDefinition) validate() error {
	switch {
	case !ValidName(t.Name) || t.Name == "*":
		return errors.New("name is required (at most 256 bytes, no control characters, not \"*\")")
	case utf8.RuneCountInString(t.Description) > MaxToolDescription:
		return fmt.Errorf("tool %s: description longer than %d characters", t.Name, MaxToolDescription)
	case !isJSONObject(t.InputSchema):
		return fmt.Errorf("tool %s: input_schema must be a JSON object", t.Name)
	case len(t.OutputSchema) > 0 && !isJSONObject(t.OutputSchema):
		return fmt.Errorf("tool %s: output_schema must be a JSON object", t.Name)
	}
	switch t.LatencyHint {
	case "", LatencyFast, LatencyModerate, LatencySlow:
	default:
		return fmt.Errorf("tool %s: latency_hint %q is not fast, moderate or slow", t.Name, abbreviate(string(t.LatencyHint)))
	}
	return nil
}

func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return len(raw) > 0 && json.Unmarshal(raw, &m) == nil && m != nil
}
