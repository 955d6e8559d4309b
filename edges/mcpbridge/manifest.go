package mcpbridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Tool metadata keys the bridge sets.
const (
	// MetaToolName is the tool's name on the upstream MCP server.
	MetaToolName = "mcp.tool_name"
	// MetaAnnotations is the annotations object the upstream sent, as it
	// sent it: what the server claims of the tool, kept for audit.
	MetaAnnotations = "mcp.annotations"
	// MetaFidelity is the bridge's rating of how faithfully the Chio tool
	// carries the upstream tool, in the tools.Fidelity JSON shape.
	MetaFidelity = "mcpbridge.fidelity"
	// MetaStructured (true) says the output is the upstream's
	// structuredContent; otherwise it is {"content": [the content blocks]}.
	MetaStructured = "mcpbridge.structured"
)

// Edges lists the outward protocols whose "<protocol>.expose" the bridge
// sets: every edge by default, since the operator chose to wrap the server.
func Edges() []string { return []string{"a2a", "acp", "mcp", "openai"} }

// Caveats of the bridge's fidelity rating.
const (
	caveatClaims       = "the tool's annotations (read-only, destructive, idempotent) are what the upstream MCP server claims; Chio does not check them"
	caveatUnstructured = "the tool has no output schema: its output is {\"content\": [the MCP content blocks]}"
	caveatNoProgress   = "progress notifications are delivered as stream chunks only where an edge streams the call"
)

// contentSchema is the output schema of a tool without one of its own; a
// constant, so each manifest gets its own bytes.
const contentSchema = `{"type":"object","properties":{"content":{"type":"array","items":{"type":"object"}}},"required":["content"]}`

// toolDef is one upstream tool as the bridge carries it.
type toolDef struct {
	upstream   string // the MCP tool name
	structured bool   // the upstream declared an output schema
	def        schemas.ToolDefinition
}

// describeTools turns the upstream's tools into tool definitions. A tool
// the bridge cannot carry (a name Chio refuses, a schema that is not an
// object) is left out and reported in skipped, never guessed at.
func describeTools(ts []*mcp.Tool, expose []string) (defs []toolDef, skipped []string) {
	seen := map[string]bool{}
	for _, t := range ts {
		if t == nil {
			continue
		}
		d, err := describeTool(t, expose)
		switch {
		case err != nil:
			skipped = append(skipped, fmt.Sprintf("%s: %v", quoted(t.Name), err))
			continue
		case seen[d.def.Name]:
			skipped = append(skipped, fmt.Sprintf("%s: listed twice", quoted(t.Name)))
			continue
		}
		seen[d.def.Name] = true
		defs = append(defs, d)
	}
	slices.SortFunc(defs, func(a, b toolDef) int { return strings.Compare(a.def.Name, b.def.Name) })
	return defs, skipped
}

// describeTool maps one MCP tool. The MCP annotations map to the manifest
// as the MCP spec defines their defaults: readOnlyHint (default false) is
// "no side effects"; destructiveHint (default true, meaningful only when
// not read-only) makes the tool deny-by-default, so that only a grant
// naming it reaches it, a wildcard never; idempotentHint is carried as is.
// They are the server's claims (MetaAnnotations keeps them verbatim).
func describeTool(t *mcp.Tool, expose []string) (toolDef, error) {
	if !schemas.ValidName(t.Name) || t.Name == "*" {
		return toolDef{}, fmt.Errorf("name is not a valid Chio tool name")
	}
	in, err := schemaObject(t.InputSchema)
	if err != nil {
		return toolDef{}, fmt.Errorf("input schema: %w", err)
	}
	var out json.RawMessage
	structured := t.OutputSchema != nil
	if structured {
		if out, err = schemaObject(t.OutputSchema); err != nil {
			return toolDef{}, fmt.Errorf("output schema: %w", err)
		}
	} else {
		out = json.RawMessage(contentSchema)
	}
	var readOnly, idempotent bool
	destructive := true
	var annRaw json.RawMessage
	if a := t.Annotations; a != nil {
		readOnly, idempotent = a.ReadOnlyHint, a.IdempotentHint
		if a.DestructiveHint != nil {
			destructive = *a.DestructiveHint
		}
		if annRaw, err = json.Marshal(a); err != nil {
			return toolDef{}, fmt.Errorf("annotations: %w", err)
		}
	}
	destructive = destructive && !readOnly
	name, err := schemas.Canonical(t.Name)
	if err != nil {
		return toolDef{}, fmt.Errorf("name: %w", err)
	}
	md := map[string]json.RawMessage{MetaToolName: name}
	for _, p := range expose {
		md[p+".expose"] = json.RawMessage(`true`)
	}
	if annRaw != nil {
		md[MetaAnnotations] = annRaw
	}
	if destructive {
		md[tools.MetaDenyByDefault] = json.RawMessage(`true`)
	}
	if structured {
		md[MetaStructured] = json.RawMessage(`true`)
	}
	caveats := []string{caveatClaims}
	if !structured {
		caveats = append(caveats, caveatUnstructured)
	}
	caveats = append(caveats, caveatNoProgress)
	fid, err := json.Marshal(tools.Fidelity{Kind: tools.FidelityAdapted, Caveats: caveats})
	if err != nil {
		return toolDef{}, fmt.Errorf("fidelity: %w", err)
	}
	md[MetaFidelity] = fid
	return toolDef{upstream: t.Name, structured: structured, def: schemas.ToolDefinition{
		Name:           t.Name,
		Description:    description(t),
		InputSchema:    in,
		OutputSchema:   out,
		HasSideEffects: !readOnly,
		Annotations:    &schemas.ToolAnnotations{ReadOnly: readOnly, Destructive: destructive, Idempotent: idempotent},
		Metadata:       md,
	}}, nil
}

// schemaObject re-encodes an upstream schema as a JSON object, without
// its top-level x-chio-* members: the bridge hints are the operator's and
// the bridge's to set, never the upstream's.
func schemaObject(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := strictjson.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	for k := range m {
		if strings.HasPrefix(strings.ToLower(k), "x-chio-") {
			delete(m, k)
		}
	}
	if typ, ok := m["type"]; ok && !bytes.Equal(bytes.TrimSpace(typ), []byte(`"object"`)) {
		return nil, fmt.Errorf("type is %s, not \"object\"", quoted(string(typ)))
	}
	// Canonical JSON does not escape HTML: "<" in a description stays "<".
	return schemas.Canonical(m)
}

// description is the tool's description, else its title, else a default,
// cut to what a manifest allows.
func description(t *mcp.Tool) string {
	d := strings.TrimSpace(t.Description)
	if d == "" && t.Annotations != nil {
		d = strings.TrimSpace(t.Annotations.Title)
	}
	if d == "" {
		d = strings.TrimSpace(t.Title)
	}
	if d == "" {
		d = "MCP tool " + t.Name
	}
	if utf8.RuneCountInString(d) > schemas.MaxToolDescription {
		r := []rune(d)
		d = string(r[:schemas.MaxToolDescription-1]) + "…"
	}
	return d
}

// quoted renders untrusted text for a message: cut as a decision's text
// is (schemas.TruncateText), then quoted.
func quoted(s string) string { return strconv.Quote(schemas.TruncateText(s)) }
