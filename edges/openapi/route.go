package openapi

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// BodyKey is the input-schema property that carries the request body.
const BodyKey = "body"

// Route is one published operation and how its arguments map onto an HTTP
// request. Routes belong to their Bridge and must be treated as read-only.
type Route struct {
	Tool        string
	Method      string // upper case
	Path        string // the template, e.g. /pets/{petId}
	OperationID string
	SideEffects bool
	Params      []Param // path, then query, header, cookie; by name within each
	Body        *Body   // nil: the operation takes no request body

	schema *jsonschema.Schema // the compiled input schema
	keys   map[string]bool    // the input schema's properties
}

// Body binds the request body to the BodyKey argument.
type Body struct {
	Key       string
	MediaType string // sent as Content-Type
	Required  bool
	JSON      bool // a JSON body; otherwise text (the argument is a string)
}

// bindRoute binds the operation's parameters and body to arguments.
func bindRoute(c *candidate) (*Route, error) {
	rt := &Route{Method: c.method, Path: c.path, OperationID: c.op.OperationID, SideEffects: c.ext.sideEffects}
	var err error
	if rt.Body, err = bindBody(c.op); err != nil {
		return nil, err
	}
	params, err := mergedParams(c.item, c.op)
	if err != nil {
		return nil, err
	}
	for _, p := range params {
		bp, ref, err := bindParam(p)
		if err != nil {
			return nil, err
		}
		rt.Params = append(rt.Params, bp)
		c.paramSchemas = append(c.paramSchemas, ref)
	}
	c.params = params
	if err := assignKeys(rt); err != nil {
		return nil, err
	}
	for _, name := range templateNames(c.path) {
		if !slices.ContainsFunc(rt.Params, func(p Param) bool { return p.In == InPath && p.Name == name }) {
			return nil, fmt.Errorf("path parameter %q is not declared", name)
		}
	}
	return rt, nil
}

// mergedParams are the path item's parameters overridden by the
// operation's (same name and location), minus the header parameters OpenAPI
// says to ignore (Accept, Content-Type, Authorization), ordered by location
// (path, query, header, cookie) and then by name, so the binding does not
// depend on how the spec orders them.
func mergedParams(item *openapi3.PathItem, op *openapi3.Operation) ([]*openapi3.Parameter, error) {
	byKey := make(map[string]*openapi3.Parameter)
	for _, list := range []openapi3.Parameters{item.Parameters, op.Parameters} {
		for _, ref := range list {
			if ref == nil || ref.Value == nil {
				continue
			}
			p := ref.Value
			name := p.Name
			if p.In == InHeader {
				name = strings.ToLower(name) // header names are case-insensitive
				switch name {
				case "accept", "content-type", "authorization":
					continue
				}
			}
			byKey[p.In+" "+name] = p
		}
	}
	order := map[string]int{InPath: 0, InQuery: 1, InHeader: 2, InCookie: 3}
	out := make([]*openapi3.Parameter, 0, len(byKey))
	for _, p := range byKey {
		if _, ok := order[p.In]; !ok {
			return nil, fmt.Errorf("parameter %s: unknown location %q", p.Name, p.In)
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *openapi3.Parameter) int {
		if d := order[a.In] - order[b.In]; d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// assignKeys names the arguments. The body is "body"; a parameter is keyed
// by its name unless that is taken (by the body, or by a parameter of an
// earlier location: path, query, header, cookie), in which case it is keyed
// "<location>.<name>" (e.g. "query.id"). If that is taken too, the operation
// cannot be bound. A key is taken by another that it equals but for case:
// strictjson refuses arguments with two such member names, so query "id"
// and query "ID" are keyed "ID" and "query.id".
func assignKeys(rt *Route) error {
	taken := make(map[string]bool)  // exact keys
	folded := make(map[string]bool) // keys as EqualFold matches them
	take := func(k string) { taken[k], folded[foldKey(k)] = true, true }
	if rt.Body != nil {
		take(rt.Body.Key)
	}
	for i := range rt.Params {
		p := &rt.Params[i]
		p.Key = p.Name
		if folded[foldKey(p.Key)] {
			p.Key = p.In + "." + p.Name
		}
		if folded[foldKey(p.Key)] {
			return fmt.Errorf("parameter %s in %s: argument name %q is taken", p.Name, p.In, p.Key)
		}
		take(p.Key)
	}
	rt.keys = taken
	return nil
}

// foldKey is s as bytes.EqualFold (and encoding/json's field matching)
// compares it: each rune the least of its case-folding orbit.
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// bindBody picks the request body's media type: application/json first,
// then another JSON type (+json), then text (text/plain first); a wildcard
// (*/*, application/*) is sent as application/json. Other media types
// (forms, multipart, binary, XML) are not supported.
func bindBody(op *openapi3.Operation) (*Body, error) {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return nil, nil
	}
	rb := op.RequestBody.Value
	mt, isJSON, ok := pickMediaType(rb.Content)
	if !ok {
		return nil, fmt.Errorf("request body media types %v are not supported (JSON or text only)", slices.Sorted(maps.Keys(rb.Content)))
	}
	return &Body{Key: BodyKey, MediaType: mt, Required: rb.Required, JSON: isJSON}, nil
}

// pickMediaType returns the chosen content key (its canonical send form for
// wildcards) and whether it is JSON.
func pickMediaType(content openapi3.Content) (mt string, isJSON, ok bool) {
	keys := slices.Sorted(maps.Keys(content))
	for _, k := range keys {
		if t, _, _ := strings.Cut(k, ";"); strings.TrimSpace(t) == "application/json" {
			return k, true, true
		}
	}
	for _, k := range keys {
		if jsonMediaType(k) {
			return k, true, true
		}
	}
	for _, k := range keys {
		if t, _, _ := strings.Cut(k, ";"); strings.TrimSpace(t) == "text/plain" {
			return k, false, true
		}
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "text/") && !strings.HasPrefix(k, "text/*") {
			return k, false, true
		}
	}
	for _, k := range keys {
		if k == "*/*" || k == "application/*" {
			return "application/json", true, true
		}
	}
	return "", false, false
}

// templateNames are the {name}s of a path template, in order.
func templateNames(path string) []string {
	var names []string
	for {
		_, rest, ok := strings.Cut(path, "{")
		if !ok {
			return names
		}
		name, after, ok := strings.Cut(rest, "}")
		if !ok {
			return names
		}
		names = append(names, name)
		path = after
	}
}
