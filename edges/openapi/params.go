package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Parameter locations.
const (
	InPath   = openapi3.ParameterInPath
	InQuery  = openapi3.ParameterInQuery
	InHeader = openapi3.ParameterInHeader
	InCookie = openapi3.ParameterInCookie
)

// Param binds one OpenAPI parameter to one top-level argument.
//
// Supported shapes: a scalar (string, integer, number, boolean, or no type)
// or an array of scalars, serialized with the OpenAPI default styles (path
// and header "simple"; query "form", exploded or not, "spaceDelimited",
// "pipeDelimited"; cookie "form", scalars only); or a parameter described by
// a JSON "content" entry, sent as compact JSON text. Other shapes (objects,
// deepObject, label and matrix styles) leave the operation unpublished, with
// the reason in Bridge.Skipped.
type Param struct {
	Name     string // the parameter's name on the wire
	In       string // InPath, InQuery, InHeader or InCookie
	Key      string // the argument's name in the input schema
	Required bool
	Array    bool // an array of scalars
	JSON     bool // content-serialized: the value is any JSON, sent as JSON text
	// Repeat: an array is sent as repeated query keys (form, explode);
	// otherwise it is joined with Delim.
	Repeat bool
	Delim  string
	types  []string // JSON types of the scalar (the items of an array); empty: any
}

// bindParam builds the binding of p, or says why the bridge cannot carry it.
// The returned schema is the one the input schema shows for it.
func bindParam(p *openapi3.Parameter) (Param, *openapi3.SchemaRef, error) {
	b := Param{Name: p.Name, In: p.In, Required: p.Required || p.In == InPath}
	if p.In == InHeader && transportHeader(p.Name) {
		return b, nil, fmt.Errorf("parameter %s: header %s is the transport's, not an argument", p.Name, p.Name)
	}
	if len(p.Content) > 0 {
		if len(p.Content) != 1 {
			return b, nil, fmt.Errorf("parameter %s: more than one content entry", p.Name)
		}
		for mt, media := range p.Content {
			if !jsonMediaType(mt) {
				return b, nil, fmt.Errorf("parameter %s: content %q is not JSON", p.Name, mt)
			}
			b.JSON = true
			if media == nil {
				return b, nil, nil
			}
			return b, media.Schema, nil
		}
	}
	sm, err := p.SerializationMethod()
	if err != nil {
		return b, nil, fmt.Errorf("parameter %s: %w", p.Name, err)
	}
	var sch *openapi3.Schema
	if p.Schema != nil {
		sch = p.Schema.Value
	}
	types := schemaTypes(sch)
	if slices.Contains(types, openapi3.TypeObject) {
		return b, nil, fmt.Errorf("parameter %s: object parameters are not supported", p.Name)
	}
	if slices.Contains(types, openapi3.TypeArray) {
		if len(types) > 1 && !(len(types) == 2 && slices.Contains(types, openapi3.TypeNull)) {
			return b, nil, fmt.Errorf("parameter %s: a parameter that may or may not be an array is not supported", p.Name)
		}
		var items *openapi3.Schema
		if sch.Items != nil {
			items = sch.Items.Value
		}
		b.Array = true
		b.types = schemaTypes(items)
		if slices.Contains(b.types, openapi3.TypeObject) || slices.Contains(b.types, openapi3.TypeArray) {
			return b, nil, fmt.Errorf("parameter %s: arrays of arrays or objects are not supported", p.Name)
		}
	} else {
		b.types = types
	}
	switch {
	case (p.In == InPath || p.In == InHeader) && sm.Style == openapi3.SerializationSimple:
		b.Delim = ","
	case p.In == InQuery && sm.Style == openapi3.SerializationForm:
		b.Delim, b.Repeat = ",", sm.Explode
	case p.In == InQuery && sm.Style == openapi3.SerializationSpaceDelimited:
		b.Delim = " "
	case p.In == InQuery && sm.Style == openapi3.SerializationPipeDelimited:
		b.Delim = "|"
	case p.In == InCookie && sm.Style == openapi3.SerializationForm && !b.Array:
	default:
		return b, nil, fmt.Errorf("parameter %s: style %q in %s is not supported", p.Name, sm.Style, p.In)
	}
	if !b.Array {
		b.Repeat = false
	}
	return b, p.Schema, nil
}

// schemaTypes are the JSON types a schema declares, null included; empty
// when it declares none.
func schemaTypes(s *openapi3.Schema) []string {
	if s == nil || s.Type == nil {
		return nil
	}
	return s.Type.Slice()
}

// encode renders an argument as the parameter's wire values; present is
// false for null and for an empty array, which are left out.
func (p *Param) encode(raw json.RawMessage) (vals []string, present bool, err error) {
	if p.JSON {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, false, fmt.Errorf("%s: %w", p.Key, err)
		}
		return []string{buf.String()}, true, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", p.Key, err)
	}
	if v == nil {
		return nil, false, nil
	}
	if !p.Array {
		s, err := scalarText(v)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", p.Key, err)
		}
		return []string{s}, true, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false, fmt.Errorf("%s: want an array", p.Key)
	}
	if len(list) == 0 {
		return nil, false, nil
	}
	items := make([]string, len(list))
	for i, item := range list {
		if items[i], err = scalarText(item); err != nil {
			return nil, false, fmt.Errorf("%s[%d]: %w", p.Key, i, err)
		}
		// A delimiter inside an item would split it into two upstream.
		if !p.Repeat && strings.Contains(items[i], p.Delim) {
			return nil, false, fmt.Errorf("%s[%d]: contains the delimiter %q", p.Key, i, p.Delim)
		}
	}
	if p.Repeat {
		return items, true, nil
	}
	return []string{strings.Join(items, p.Delim)}, true, nil
}

// decode is encode's inverse: it turns wire values into the argument, typed
// by the schema (a query "5" of an integer parameter becomes 5).
func (p *Param) decode(vals []string) (any, error) {
	if p.JSON {
		if len(vals) != 1 || strictjson.Valid([]byte(vals[0])) != nil {
			return nil, fmt.Errorf("%s %s: want one JSON value strictjson accepts", p.In, p.Name)
		}
		return json.RawMessage(vals[0]), nil
	}
	if !p.Array {
		if len(vals) != 1 {
			return nil, fmt.Errorf("%s %s: given %d times", p.In, p.Name, len(vals))
		}
		return typed(vals[0], p.types), nil
	}
	items := vals
	if !p.Repeat {
		if len(vals) != 1 {
			return nil, fmt.Errorf("%s %s: given %d times", p.In, p.Name, len(vals))
		}
		items = strings.Split(vals[0], p.Delim)
	}
	out := make([]any, len(items))
	for i, s := range items {
		out[i] = typed(s, p.types)
	}
	return out, nil
}

// typed reads wire text as the schema's type. A string-typed (or untyped)
// value stays a string, so nothing is lost; text that fits no declared type
// stays a string too, for validation to refuse with a clear message.
func typed(s string, types []string) any {
	if len(types) == 0 || slices.Contains(types, openapi3.TypeString) {
		return s
	}
	for _, t := range types {
		switch t {
		case openapi3.TypeInteger:
			if isJSONNumber(s) && !strings.ContainsAny(s, ".eE") {
				return json.Number(s)
			}
		case openapi3.TypeNumber:
			if isJSONNumber(s) {
				return json.Number(s)
			}
		case openapi3.TypeBoolean:
			if s == "true" || s == "false" {
				return s == "true"
			}
		}
	}
	return s
}

func isJSONNumber(s string) bool {
	return s != "" && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') && json.Valid([]byte(s))
}

// scalarText renders a JSON scalar as wire text.
func scalarText(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		if v {
			return "true", nil
		}
		return "false", nil
	}
	return "", fmt.Errorf("want a string, number or boolean, got %T", v)
}

// decodeJSON decodes one JSON value with strictjson, numbers as
// json.Number.
func decodeJSON(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errors.New("no JSON value")
	}
	return strictjson.Parse(raw)
}

// checkPathValue refuses a path parameter value that could change the
// path's structure: empty, "." or "..", or holding a slash or backslash —
// also once percent-decoded, repeatedly, since an upstream (or a proxy in
// front of it) may decode more than once.
func checkPathValue(v string) error {
	for range 4 {
		switch {
		case v == "", v == ".", v == "..":
			return fmt.Errorf("path value %q would change the path", abbreviate(v))
		case strings.ContainsAny(v, `/\`):
			return fmt.Errorf("path value %q holds a path separator", abbreviate(v))
		}
		d, err := url.PathUnescape(v)
		if err != nil || d == v {
			return nil // nothing more to decode: url.PathEscape will escape any '%'
		}
		v = d
	}
	return fmt.Errorf("path value %q is encoded too many times", abbreviate(v))
}

// jsonMediaType reports whether a media type is JSON: application/json or
// any type with a +json suffix.
func jsonMediaType(mt string) bool {
	t, _, err := mime.ParseMediaType(mt)
	if err != nil {
		return false
	}
	_, sub, _ := strings.Cut(t, "/")
	return sub == "json" || strings.HasSuffix(sub, "+json")
}

// transportHeader reports whether a header belongs to the connection or
// the message framing, which net/http sets itself.
func transportHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "Proxy-Authorization", "Proxy-Authenticate", "Proxy-Connection":
		return true
	}
	return false
}

// checkHeaderValue refuses a header value that net/http would reject or
// that could split the header.
func checkHeaderValue(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("header value holds control character %#x", c)
		}
	}
	return nil
}
