package a2aadapter

import (
	"encoding/json"
	"fmt"

	"github.com/chio-ledger/chio/schemas"
)

// Tool metadata keys the adapter sets.
const (
	// MetaSkillID is the skill a tool calls; the tool name may differ.
	MetaSkillID = "a2a.skill_id"
	// metaMCPExpose and metaOpenAIExpose opt the tools into the MCP and
	// OpenAI edges' listings.
	metaMCPExpose    = "mcp.expose"
	metaOpenAIExpose = "openai.expose"
)

// Manifest describes the partner's skills as tools; a fresh copy on every
// call.
func (a *Adapter) Manifest() *schemas.ToolManifest {
	name := a.card.name
	if name == "" {
		name = "A2A agent at " + a.serverID
	}
	version := a.card.version
	if version == "" {
		version = "unversioned"
	}
	desc := fmt.Sprintf("Skills of the A2A agent %q at %s, called through the Chio A2A adapter", name, a.report.Target)
	if a.partner != "" {
		desc += " (partner " + a.partner + ")"
	}
	m := &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: a.serverID, Name: name, Version: version,
		Description: desc, Tools: make([]schemas.ToolDefinition, 0, len(a.skills))}
	for _, s := range a.skills {
		id, _ := json.Marshal(s.id) // a string always marshals
		m.Tools = append(m.Tools, schemas.ToolDefinition{
			Name:           s.tool,
			Description:    toolDescription(s),
			InputSchema:    append(json.RawMessage(nil), a.schema...),
			HasSideEffects: true, // a remote agent's skill may do anything
			Metadata: map[string]json.RawMessage{
				metaMCPExpose:    json.RawMessage(`true`),
				metaOpenAIExpose: json.RawMessage(`true`),
				MetaSkillID:      id,
			},
		})
	}
	return m
}

// toolDescription is the skill's description (else its name), cut to what
// a manifest allows.
func toolDescription(s skill) string {
	d := s.description
	if d == "" {
		d = s.name
	}
	if d == "" {
		d = "A2A skill " + s.id
	}
	r := []rune(d)
	if len(r) > schemas.MaxToolDescription {
		d = string(r[:schemas.MaxToolDescription-1]) + "…"
	}
	return d
}
