package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// Operation extensions with a meaning here; every x-chio-*
// extension is also carried into the tool's metadata under its own name.
const (
	ExtPublish          = "x-chio-publish"
	ExtSideEffects      = "x-chio-side-effects"
	ExtApprovalRequired = "x-chio-approval-required"
)

// Tool metadata keys the bridge sets besides the x-chio-* extensions.
const (
	MetaMCPExpose    = "mcp.expose"
	MetaOpenAIExpose = "openai.expose"
	MetaMethod       = "openapi.method"
	MetaPath         = "openapi.path"
)

// extensions are an operation's x-chio-* settings, resolved.
type extensions struct {
	publish     bool
	sideEffects bool // x-chio-side-effects, else the method rule
	approval    bool
	meta        map[string]json.RawMessage // every x-chio-* extension
}

// readExtensions resolves the x-chio-* extensions of an operation. The
// boolean ones must be JSON booleans.
func readExtensions(method string, op *openapi3.Operation) (extensions, error) {
	ext := extensions{publish: true, sideEffects: !safeMethod(method), meta: make(map[string]json.RawMessage)}
	for _, k := range slices.Sorted(maps.Keys(op.Extensions)) {
		if !strings.HasPrefix(k, "x-chio-") {
			continue
		}
		v := op.Extensions[k]
		raw, err := json.Marshal(v)
		if err != nil {
			return ext, fmt.Errorf("%s: %w", k, err)
		}
		ext.meta[k] = raw
		var dst *bool
		switch k {
		case ExtPublish:
			dst = &ext.publish
		case ExtSideEffects:
			dst = &ext.sideEffects
		case ExtApprovalRequired:
			dst = &ext.approval
		default:
			continue
		}
		b, ok := v.(bool)
		if !ok {
			return ext, fmt.Errorf("%s must be a boolean, got %s", k, abbreviate(string(raw)))
		}
		*dst = b
	}
	return ext, nil
}

// safeMethod: GET, HEAD and OPTIONS have no side effects by default.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// idempotentMethod: GET, PUT, DELETE, HEAD and OPTIONS.
func idempotentMethod(m string) bool {
	return safeMethod(m) || m == http.MethodPut || m == http.MethodDelete
}

// toolDefinition describes one operation as a tool.
func toolDefinition(cs *components, c *candidate, cfg Config) (schemas.ToolDefinition, error) {
	rt, ext := c.route, c.ext
	in, err := inputSchema(cs, c)
	if err == nil {
		c.input, err = marshal(in)
	}
	if err != nil {
		return schemas.ToolDefinition{}, err
	}
	def := schemas.ToolDefinition{
		Name:           rt.Tool,
		Description:    description(c),
		InputSchema:    c.input,
		HasSideEffects: rt.SideEffects,
		Annotations: &schemas.ToolAnnotations{
			ReadOnly: !rt.SideEffects,
			// An operation declared free of side effects is not
			// destructive either, whatever its method: tools.ReadHints
			// reads destructive as a side effect.
			Destructive:      rt.Method == http.MethodDelete && rt.SideEffects,
			Idempotent:       idempotentMethod(rt.Method),
			RequiresApproval: ext.approval,
		},
		Metadata: maps.Clone(ext.meta),
	}
	if cfg.OutputSchemas {
		if def.OutputSchema, err = outputSchema(cs, c.op); err != nil {
			return schemas.ToolDefinition{}, err
		}
	}
	md := def.Metadata
	md[MetaMCPExpose] = json.RawMessage(`true`)
	md[MetaOpenAIExpose] = json.RawMessage(`true`)
	md[MetaMethod] = jsonString(rt.Method)
	md[MetaPath] = jsonString(rt.Path)
	// Approval forces deny-by-default over everything else.
	if rt.SideEffects || ext.approval {
		md[tools.MetaDenyByDefault] = json.RawMessage(`true`)
	}
	return def, nil
}

// description is summary and description joined by a blank line, either
// alone, or "METHOD path"; cut to schemas.MaxToolDescription characters.
func description(c *candidate) string {
	var parts []string
	for _, s := range []string{c.op.Summary, c.op.Description} {
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, s)
		}
	}
	d := strings.Join(parts, "\n\n")
	if d == "" {
		d = c.method + " " + c.path
	}
	if utf8.RuneCountInString(d) > schemas.MaxToolDescription {
		r := []rune(d)
		d = string(r[:schemas.MaxToolDescription-1]) + "…"
	}
	return d
}

// inputSchema is one JSON Schema object: a property per parameter (keyed as
// the route says) and "body" for the request body. Unknown arguments are
// refused (additionalProperties: false).
func inputSchema(cs *components, c *candidate) (map[string]any, error) {
	conv := newConverter(cs)
	props := make(map[string]any)
	var required []string
	var err error
	for i, p := range c.params {
		bp, ref := c.route.Params[i], c.paramSchemas[i]
		var s any = map[string]any{"type": "string"} // a parameter without a schema is a string
		if ref != nil || bp.JSON {
			if s, err = conv.schema(ref); err != nil {
				return nil, fmt.Errorf("parameter %s: %w", p.Name, err)
			}
		}
		if m, ok := s.(map[string]any); ok && p.Description != "" && m["description"] == nil {
			m["description"] = p.Description
		}
		props[bp.Key] = s
		if bp.Required {
			required = append(required, bp.Key)
		}
	}
	if body := c.route.Body; body != nil {
		rb := c.op.RequestBody.Value
		var s any = map[string]any{"type": "string"}
		if body.JSON {
			if s, err = conv.schema(mediaSchema(rb.Content, body.MediaType)); err != nil {
				return nil, fmt.Errorf("request body: %w", err)
			}
		}
		if m, ok := s.(map[string]any); ok && rb.Description != "" && m["description"] == nil {
			m["description"] = rb.Description
		}
		props[body.Key] = s
		if body.Required {
			required = append(required, body.Key)
		}
	}
	root := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		slices.Sort(required)
		root["required"] = required
	}
	defs, err := conv.finish()
	if err != nil {
		return nil, err
	}
	if defs != nil {
		root["$defs"] = defs
	}
	return root, nil
}

// outputSchema is the shape Invoke returns, {httpStatus, method, path,
// body}. The success response's JSON schema (the 200 response, else 201,
// else the first other 2xx by code) constrains body only when httpStatus
// is that response's status: any other answer (a 204, a redirect, an
// error) is still the tool's output, and MCP clients reject structured
// content that does not match the schema.
func outputSchema(cs *components, op *openapi3.Operation) (json.RawMessage, error) {
	conv := newConverter(cs)
	root := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"httpStatus": map[string]any{"type": "integer"},
			"method":     map[string]any{"type": "string"},
			"path":       map[string]any{"type": "string"},
			"body":       map[string]any{},
		},
		"required": []string{"httpStatus", "method", "path", "body"},
	}
	if ref, code := successSchema(op); ref != nil {
		body, err := conv.schema(ref)
		if err != nil {
			return nil, fmt.Errorf("response schema: %w", err)
		}
		status := map[string]any{"minimum": 200, "maximum": 299}
		if n, err := strconv.Atoi(code); err == nil {
			status = map[string]any{"const": n}
		}
		root["if"] = map[string]any{"properties": map[string]any{"httpStatus": status}}
		root["then"] = map[string]any{"properties": map[string]any{"body": body}}
	}
	defs, err := conv.finish()
	if err != nil {
		return nil, err
	}
	if defs != nil {
		root["$defs"] = defs
	}
	return marshal(root)
}

func successSchema(op *openapi3.Operation) (*openapi3.SchemaRef, string) {
	if op.Responses == nil {
		return nil, ""
	}
	codes := []string{"200", "201"}
	for _, k := range slices.Sorted(maps.Keys(op.Responses.Map())) {
		if n, err := strconv.Atoi(k); err == nil && n >= 200 && n <= 299 && k != "200" && k != "201" {
			codes = append(codes, k)
		}
	}
	codes = append(codes, "2XX")
	for _, code := range codes {
		r := op.Responses.Value(code)
		if r == nil || r.Value == nil {
			continue
		}
		for _, mt := range slices.Sorted(maps.Keys(r.Value.Content)) {
			if media := r.Value.Content[mt]; jsonMediaType(mt) && media != nil && media.Schema != nil {
				return media.Schema, code
			}
		}
	}
	return nil, ""
}

// mediaSchema is the schema of a content entry; for a wildcard picked as
// application/json, the wildcard's.
func mediaSchema(content openapi3.Content, mt string) *openapi3.SchemaRef {
	media := content[mt]
	if media == nil {
		for _, k := range []string{"*/*", "application/*"} {
			if media = content[k]; media != nil {
				break
			}
		}
	}
	if media == nil {
		return nil
	}
	return media.Schema
}

// marshal encodes without HTML escaping, so "<" in a description stays "<".
func marshal(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func jsonString(s string) json.RawMessage {
	raw, _ := marshal(s) // a string always encodes
	return raw
}

// cloneManifest deep-copies a manifest.
func cloneManifest(m *schemas.ToolManifest) *schemas.ToolManifest {
	c := *m
	c.ServerTools = bytes.Clone(m.ServerTools)
	c.RequiredPermissions = bytes.Clone(m.RequiredPermissions)
	c.Tools = make([]schemas.ToolDefinition, len(m.Tools))
	for i, t := range m.Tools {
		t.InputSchema = bytes.Clone(t.InputSchema)
		t.OutputSchema = bytes.Clone(t.OutputSchema)
		t.Pricing = bytes.Clone(t.Pricing)
		if t.Annotations != nil {
			a := *t.Annotations
			t.Annotations = &a
		}
		if t.Metadata != nil {
			md := make(map[string]json.RawMessage, len(t.Metadata))
			for k, v := range t.Metadata {
				md[k] = bytes.Clone(v)
			}
			t.Metadata = md
		}
		c.Tools[i] = t
	}
	return &c
}
