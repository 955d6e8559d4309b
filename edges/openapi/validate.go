package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// newCompiler is a draft 2020-12 compiler with no URL loader, so a schema
// can make it read nothing but the resources it is given and the built-in
// metaschemas.
func newCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseRegexpEngine(lenientRegexp)
	return c
}

// sharedSchemaURL names the document compileAll compiles.
const sharedSchemaURL = "https://chio.invalid/openapi/tools.json"

// compileAll compiles every tool's input schema in one compiler, from one
// document holding the components under "$defs" and each tool's schema
// (without its own "$defs") as "$defs/tool:<name>": the components are
// then checked against the metaschema and compiled once, not once per
// tool that reaches them. The "tool:" keys cannot clash with component
// names, which OpenAPI restricts to [a-zA-Z0-9._-]. The schema compiled is
// the published one, its "#/$defs/..." references resolving in the same
// place.
func compileAll(kept []*candidate) error {
	defs := make(map[string]json.RawMessage)
	for _, c := range kept {
		var in map[string]json.RawMessage
		if err := json.Unmarshal(c.input, &in); err != nil {
			return fmt.Errorf("input schema of %s: %w", c.tool, err)
		}
		if raw, ok := in["$defs"]; ok {
			var own map[string]json.RawMessage
			if err := json.Unmarshal(raw, &own); err != nil {
				return fmt.Errorf("input schema of %s: %w", c.tool, err)
			}
			maps.Copy(defs, own) // a component converts to the same bytes for every tool
			delete(in, "$defs")
		}
		root, err := marshal(in)
		if err != nil {
			return fmt.Errorf("input schema of %s: %w", c.tool, err)
		}
		defs["tool:"+c.tool] = root
	}
	raw, err := marshal(map[string]any{"$defs": defs})
	if err != nil {
		return fmt.Errorf("input schemas: %w", err)
	}
	doc, err := strictjson.Parse(raw) // the values jsonschema.UnmarshalJSON makes
	if err != nil {
		return fmt.Errorf("input schemas: %w", err)
	}
	comp := newCompiler()
	if err := comp.AddResource(sharedSchemaURL, doc); err != nil {
		return fmt.Errorf("input schemas: %w", err)
	}
	for _, c := range kept {
		if c.route.schema, err = comp.Compile(sharedSchemaURL + "#/$defs/tool:" + c.tool); err != nil {
			return fmt.Errorf("input schema of %s: %w", c.tool, err)
		}
	}
	return nil
}

// compileTools compiles the tools' input schemas, together when it can;
// when that fails, one at a time, leaving out those that do not compile.
func compileTools(kept []*candidate) ([]*candidate, []Skipped) {
	if compileAll(kept) == nil {
		return kept, nil
	}
	var ok []*candidate
	var skipped []Skipped
	for _, c := range kept {
		var err error
		if c.route.schema, err = compileInputSchema(c.tool, c.input); err != nil {
			skipped = append(skipped, Skipped{c.method, c.path, err.Error()})
			continue
		}
		ok = append(ok, c)
	}
	return ok, skipped
}

// compileInputSchema compiles one tool's input schema on its own.
func compileInputSchema(tool string, schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	c := newCompiler()
	loc := "https://chio.invalid/openapi/tools/" + tool + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	return s, nil
}

// lenientRegexp compiles a schema pattern with Go's RE2. OpenAPI patterns
// are ECMA-262; one RE2 cannot compile (a lookahead) is not asserted here
// rather than leaving the whole operation out: the upstream still enforces
// its own patterns.
func lenientRegexp(s string) (jsonschema.Regexp, error) {
	re, err := regexp.Compile(s)
	if err != nil {
		return anyString(s), nil
	}
	return re, nil
}

// anyString is a pattern that matches everything.
type anyString string

func (a anyString) MatchString(string) bool { return true }
func (a anyString) String() string          { return string(a) }

// arguments checks a tool's arguments and returns them by key: a JSON
// object (absent or null is {}), no key given twice, no key the input schema
// does not declare, and valid against the input schema. Errors wrap
// ErrBadArguments.
func (rt *Route) arguments(raw json.RawMessage) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage(`{}`)
	}
	args, err := objectMembers(raw)
	if err != nil {
		return nil, fmt.Errorf("arguments of %s: %w: %w", rt.Tool, ErrBadArguments, err)
	}
	for k := range args {
		if !rt.keys[k] {
			return nil, fmt.Errorf("arguments of %s: %w: unknown argument %q", rt.Tool, ErrBadArguments, abbreviate(k))
		}
	}
	doc, err := strictjson.Parse(raw) // the values jsonschema.UnmarshalJSON makes
	if err != nil {
		return nil, fmt.Errorf("arguments of %s: %w: %w", rt.Tool, ErrBadArguments, err)
	}
	if err := rt.schema.Validate(doc); err != nil {
		return nil, fmt.Errorf("arguments of %s: %w: %s", rt.Tool, ErrBadArguments, validationMessage(err))
	}
	return args, nil
}

// objectMembers splits a JSON object into its members, read with
// strictjson: a member repeated, exactly or but for case, at any depth, is
// refused (parsers disagree on which copy wins, an upstream may match
// names without case, and the guards must see the value that is sent), as
// are nesting past strictjson.MaxDepth, invalid UTF-8 and trailing data.
func objectMembers(raw json.RawMessage) (map[string]json.RawMessage, error) {
	var out map[string]json.RawMessage
	if err := strictjson.Unmarshal(raw, &out); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			return nil, fmt.Errorf("malformed JSON: %w", err)
		}
		return nil, errors.New("not a JSON object")
	}
	if out == nil {
		return nil, errors.New("not a JSON object")
	}
	return out, nil
}

// validationMessage flattens a jsonschema error onto one line.
func validationMessage(err error) string {
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	const limit = 512
	if len(msg) > limit {
		msg = msg[:limit] + "…"
	}
	return msg
}
