package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// componentRefPrefix is the only $ref form a tool schema may use: the
// referenced component is copied into the tool schema's "$defs".
const componentRefPrefix = "#/components/schemas/"

// components converts the spec's schema components once per Build; every
// tool schema that reaches a component shares the converted value, which is
// never changed afterwards.
type components struct {
	doc   *openapi3.T
	oas30 bool
	done  map[string]*component
}

// component is one converted schema component and the components it
// refers to directly.
type component struct {
	schema any
	refs   []string
}

func newComponents(doc *openapi3.T) *components {
	return &components{doc: doc, oas30: doc.IsOpenAPI30(), done: make(map[string]*component)}
}

// get converts a component on first use. A reference cycle is no
// recursion here: references are only recorded, never followed.
func (cs *components) get(name string) (*component, error) {
	if c, ok := cs.done[name]; ok {
		return c, nil
	}
	refs := make(map[string]bool)
	s, err := cs.convert(cs.doc.Components.Schemas[name], refs)
	if err != nil {
		return nil, fmt.Errorf("component %s: %w", name, err)
	}
	c := &component{schema: s, refs: slices.Sorted(maps.Keys(refs))}
	cs.done[name] = c
	return c, nil
}

// convert converts one schema into plain JSON Schema (draft 2020-12),
// adding the components it refers to to refs; nil is the empty schema.
func (cs *components) convert(ref *openapi3.SchemaRef, refs map[string]bool) (any, error) {
	if ref == nil {
		return map[string]any{}, nil
	}
	raw, err := json.Marshal(ref)
	if err != nil {
		return nil, fmt.Errorf("convert schema: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // numbers keep their exact text
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("convert schema: %w", err)
	}
	w := walker{cs: cs, refs: refs}
	return w.walk(v)
}

// converter builds one tool schema document (an input or an output
// schema): component references become "#/$defs/<name>" and the
// components they reach, transitively, are put under "$defs", which keeps
// recursive schemas finite. OpenAPI-only keywords are dropped, and a 3.0
// spec's dialect is translated (nullable, boolean exclusive bounds,
// example).
type converter struct {
	cs   *components
	refs map[string]bool
}

func newConverter(cs *components) *converter {
	return &converter{cs: cs, refs: make(map[string]bool)}
}

// schema converts one schema of the document.
func (c *converter) schema(ref *openapi3.SchemaRef) (any, error) {
	return c.cs.convert(ref, c.refs)
}

// finish returns the components the document reaches, for "$defs" (nil
// when there are none).
func (c *converter) finish() (map[string]any, error) {
	defs := make(map[string]any)
	queue := slices.Sorted(maps.Keys(c.refs))
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, ok := defs[name]; ok {
			continue
		}
		comp, err := c.cs.get(name)
		if err != nil {
			return nil, err
		}
		defs[name] = comp.schema
		queue = append(queue, comp.refs...)
	}
	if len(defs) == 0 {
		return nil, nil
	}
	return defs, nil
}

// walker converts the nodes of one schema.
type walker struct {
	cs   *components
	refs map[string]bool
}

// Keywords whose value is one subschema, a list of them, or a map of them;
// functions rather than variables, so no caller can change them.
func subschemaKeys() []string {
	return []string{"items", "not", "additionalProperties", "if", "then", "else", "contains", "propertyNames", "contentSchema", "unevaluatedItems", "unevaluatedProperties"}
}
func subschemaLists() []string { return []string{"allOf", "anyOf", "oneOf", "prefixItems"} }
func subschemaMaps() []string {
	return []string{"properties", "patternProperties", "$defs", "dependentSchemas"}
}

// droppedKeys are OpenAPI vocabulary, and keywords that would change how
// the tool schema's own references resolve ($id, $schema).
func droppedKeys() []string {
	return []string{"discriminator", "xml", "externalDocs", "$id", "$schema"}
}

// walk converts one schema node. Only schema positions are walked, so a
// property called "nullable" or an enum value is never mistaken for a
// keyword.
func (c *walker) walk(v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return v, nil // a boolean schema
	}
	if ref, ok := m["$ref"].(string); ok {
		local, err := c.ref(ref)
		if err != nil {
			return nil, err
		}
		m["$ref"] = local
	}
	for k := range m {
		if strings.HasPrefix(k, "x-") || slices.Contains(droppedKeys(), k) {
			delete(m, k)
		}
	}
	var err error
	for _, k := range subschemaKeys() {
		if sub, ok := m[k]; ok {
			if m[k], err = c.walk(sub); err != nil {
				return nil, err
			}
		}
	}
	for _, k := range subschemaLists() {
		list, _ := m[k].([]any)
		for i, sub := range list {
			if list[i], err = c.walk(sub); err != nil {
				return nil, err
			}
		}
	}
	for _, k := range subschemaMaps() {
		subs, _ := m[k].(map[string]any)
		for name, sub := range subs {
			if subs[name], err = c.walk(sub); err != nil {
				return nil, err
			}
		}
	}
	if c.cs.oas30 {
		return from30(m), nil
	}
	return m, nil
}

// ref maps a component reference into the document's "$defs" and records
// the component. A pointer below a component ("#/components/schemas/A/items")
// keeps its tail, which still resolves inside the copy.
func (c *walker) ref(ref string) (string, error) {
	rest, ok := strings.CutPrefix(ref, componentRefPrefix)
	if !ok {
		return "", fmt.Errorf("schema $ref %q: only %s... references are supported in tool schemas", abbreviate(ref), componentRefPrefix)
	}
	token, tail, _ := strings.Cut(rest, "/")
	name := strings.NewReplacer("~1", "/", "~0", "~").Replace(token)
	if comps := c.cs.doc.Components; comps == nil || comps.Schemas[name] == nil {
		return "", fmt.Errorf("schema $ref %q: no such component", abbreviate(ref))
	}
	c.refs[name] = true
	local := "#/$defs/" + token
	if tail != "" {
		local += "/" + tail
	}
	return local, nil
}

// from30 translates the OpenAPI 3.0 schema dialect into JSON Schema 2020-12.
func from30(m map[string]any) any {
	if ex, ok := m["example"]; ok {
		delete(m, "example")
		if _, has := m["examples"]; !has {
			m["examples"] = []any{ex}
		}
	}
	// 3.0: exclusiveMaximum is a boolean qualifying maximum; 2020-12: it is
	// the bound itself.
	for bound, excl := range map[string]string{"maximum": "exclusiveMaximum", "minimum": "exclusiveMinimum"} {
		b, ok := m[excl].(bool)
		if !ok {
			continue
		}
		delete(m, excl)
		if v, has := m[bound]; b && has {
			m[excl] = v
			delete(m, bound)
		}
	}
	nullable, _ := m["nullable"].(bool)
	delete(m, "nullable")
	if !nullable {
		return m
	}
	// nullable adds null to the declared type (and to an enum, which would
	// otherwise still exclude it); a schema without a type gets an anyOf.
	t, ok := m["type"].(string)
	if !ok {
		return map[string]any{"anyOf": []any{m, map[string]any{"type": "null"}}}
	}
	m["type"] = []any{t, "null"}
	if enum, ok := m["enum"].([]any); ok && !slices.Contains(enum, nil) {
		m["enum"] = append(enum, nil)
	}
	return m
}
