package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// emptyInput is the input schema of a tool whose manifest gives none: MCP
// requires an object schema.
var emptyInput = json.RawMessage(`{"type":"object"}`)

// definition is en's tools/list entry, without its name (bindTools sets
// it). A tool whose input cannot be a JSON object cannot be called over
// MCP, so it is refused.
func definition(en *tools.Entry) (*sdk.Tool, error) {
	t := en.Tool
	in, err := inputSchema(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input_schema: %w", err)
	}
	def := &sdk.Tool{
		Description: t.Description,
		InputSchema: in,
		Annotations: annotations(t),
		Meta:        sdk.Meta{"chio": toolMeta(en)},
	}
	if out := outputSchema(t.OutputSchema); out != nil {
		def.OutputSchema = out
	}
	return def, nil
}

// toolMeta is a listed tool's _meta.chio: the Chio names of the tool.
func toolMeta(en *tools.Entry) map[string]any {
	m := map[string]any{"server_id": en.Manifest.ServerID, "tool_name": en.Tool.Name}
	if a := en.Tool.Annotations; a != nil && a.RequiresApproval {
		m["requires_approval"] = true // MCP has no such hint
	}
	return m
}

// inputSchema is the manifest's input schema as MCP wants it: an object
// schema. A schema without "type" gets "type": "object" (arguments are an
// object whatever it says); one of another type is refused.
func inputSchema(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return emptyInput, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(t, &m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	typ, ok := m["type"]
	if !ok {
		m["type"] = json.RawMessage(`"object"`)
		b, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("add its type: %w", err)
		}
		return b, nil
	}
	if s, _ := jsonString(typ); s != "object" {
		return nil, fmt.Errorf("type is %s, not \"object\"", typ)
	}
	return t, nil
}

// outputSchema is the manifest's output schema when it describes an
// object, or nil: any other output is wrapped as {"result": …}, which a
// schema of another type would not describe.
func outputSchema(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil
	}
	if s, _ := jsonString(m["type"]); s != "object" {
		return nil
	}
	return bytes.TrimSpace(raw)
}

// annotations are MCP's hints from the manifest. has_side_effects cannot
// tell false from absent, so only an explicit read_only claims
// readOnlyHint (and side effects overrule it); destructiveHint is set only
// when the manifest says destructive, since MCP's default (true) is the
// cautious reading of silence.
func annotations(t *schemas.ToolDefinition) *sdk.ToolAnnotations {
	a := t.Annotations
	if a == nil && !t.HasSideEffects {
		return nil
	}
	out := &sdk.ToolAnnotations{}
	if a != nil {
		out.ReadOnlyHint = a.ReadOnly && !t.HasSideEffects
		out.IdempotentHint = a.Idempotent
		if a.Destructive && !out.ReadOnlyHint {
			yes := true
			out.DestructiveHint = &yes
		}
	}
	return out
}

// listTools answers tools/list: the tools of t id may invoke, in one
// page. The answer depends on the capability, so it is private to the
// caller and immediately stale.
func (e *Edge) listTools(t *toolSet, id *kernel.Identity, req sdk.Request) (sdk.Result, error) {
	if lr, ok := req.(*sdk.ListToolsRequest); ok && lr.Params != nil && lr.Params.Cursor != "" {
		return nil, rpcError(codeInvalidParams, "tools/list: unknown cursor: every tool is listed in one page", nil)
	}
	res := &sdk.ListToolsResult{Tools: []*sdk.Tool{}, Cacheable: sdk.Cacheable{CacheScope: "private"}}
	for _, b := range t.bindings {
		if id.Invokes(b.entry) {
			res.Tools = append(res.Tools, b.tool)
		}
	}
	return res, nil
}

// jsonString decodes a JSON string.
func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}
