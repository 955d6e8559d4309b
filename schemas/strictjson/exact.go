package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// ErrInexactName: a member whose name matches a field of the target only
// without case ("Name" for "name"). encoding/json would fill the field
// from it; a reader that matches names exactly would not.
var ErrInexactName = errors.New("member name matches a field only in case")

// UnmarshalExact is Unmarshal that also refuses, at every level decoded
// into a struct, a member whose name matches one of its fields only in
// case (ErrInexactName), so that what v holds is what a reader matching
// names exactly reads from raw. Members no field matches are left alone.
func UnmarshalExact(raw []byte, v any) error { return unmarshalExact(raw, v, false) }

// UnmarshalExactKnown is UnmarshalExact that also refuses members v has no
// field for.
func UnmarshalExactKnown(raw []byte, v any) error { return unmarshalExact(raw, v, true) }

func unmarshalExact(raw []byte, v any, known bool) error {
	doc, err := Parse(raw)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return &Error{Err: ErrSyntax, What: "empty document"}
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("strictjson: UnmarshalExact needs a non-nil pointer")
	}
	if err := exactNames(doc, rv.Type().Elem(), ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if known {
		dec.DisallowUnknownFields()
	}
	return dec.Decode(v)
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// exactNames walks doc (as Parse returns it) along t, the type it will be
// decoded into. Types that decode themselves are not walked.
func exactNames(doc any, t reflect.Type, at string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil // a type error, reported by the decoder
		}
		fields := jsonFields(t)
		for name, val := range obj {
			ft, ok := fields[name]
			if !ok {
				for f := range fields {
					if strings.EqualFold(name, f) {
						return fmt.Errorf("%w: member %s/%s for field %q", ErrInexactName, at, clip(name), f)
					}
				}
				continue
			}
			if err := exactNames(val, ft, at+"/"+clip(name)); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := doc.(map[string]any)
		if !ok {
			return nil
		}
		for name, val := range obj {
			if err := exactNames(val, t.Elem(), at+"/"+clip(name)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := doc.([]any)
		if !ok {
			return nil
		}
		for i, val := range arr {
			if err := exactNames(val, t.Elem(), at+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonFields maps the names encoding/json decodes t's fields from
// (embedded structs' fields promoted) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			continue // its fields are promoted, and listed on their own
		}
		if name == "" {
			name = f.Name
		}
		if _, seen := out[name]; !seen {
			out[name] = f.Type
		}
	}
	return out
}

// clip shortens a member name quoted in an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
