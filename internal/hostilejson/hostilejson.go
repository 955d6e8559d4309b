// Package hostilejson makes the documents every surface must refuse, so
// that each surface's tests check the same list against the strict reader.
package hostilejson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Case is one hostile variant of a valid document.
type Case struct {
	Name string
	Doc  []byte
	Err  error // the strictjson error it must be refused with
}

// Nested is a JSON array nested depth deep.
func Nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

// Variants returns hostile variants of obj, a valid JSON object with at
// least one member whose name has a lower-case ASCII letter: its first
// member repeated, repeated as a case variant, and repeated through a
// \u escape; a member nested one level past strictjson.MaxDepth (and one
// as deep as the attack that once made receipts unreadable); a lone
// surrogate; invalid UTF-8; and data after the value. Each is refused by
// strictjson, so a surface that reads with it refuses them all.
func Variants(obj []byte) []Case {
	obj = bytes.TrimSpace(obj)
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		panic("hostilejson: not a JSON object")
	}
	var first struct {
		name, value string
	}
	if err := firstMember(obj, &first.name, &first.value); err != nil {
		panic(fmt.Sprintf("hostilejson: %v", err))
	}
	with := func(member string) []byte {
		return append(append(append([]byte("{"), member...), ','), obj[1:]...)
	}
	variant := flipCase(first.name)
	escaped := escapeFirst(first.name)
	return []Case{
		{"repeated member", with(quote(first.name) + ":" + first.value), strictjson.ErrDuplicateMember},
		{"case-variant member", with(quote(variant) + ":" + first.value), strictjson.ErrDuplicateMember},
		{"escaped repeated member", with(`"` + escaped + `":` + first.value), strictjson.ErrDuplicateMember},
		{"nesting past the limit", with(`"zzDeep":` + Nested(strictjson.MaxDepth)), strictjson.ErrDepth},
		{"nesting 9998 deep", with(`"zzDeep":` + Nested(9998)), strictjson.ErrDepth},
		{"lone surrogate", with(`"zzText":"\ud800"`), strictjson.ErrEncoding},
		{"invalid UTF-8", with("\"zzText\":\"\xff\""), strictjson.ErrEncoding},
		{"data after the value", append(append([]byte{}, obj...), " {}"...), strictjson.ErrSyntax},
	}
}

func quote(s string) string { return `"` + s + `"` }

// firstMember finds the first member's name (unescaped ASCII expected) and
// its raw value.
func firstMember(obj []byte, name, value *string) error {
	v, err := strictjson.Parse(obj)
	if err != nil {
		return err
	}
	m := v.(map[string]any)
	rest := bytes.TrimSpace(obj[1:])
	if len(rest) == 0 || rest[0] != '"' {
		return fmt.Errorf("no member")
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 {
		return fmt.Errorf("bad member name")
	}
	*name = string(rest[1 : 1+end])
	if _, ok := m[*name]; !ok || !strings.ContainsAny(*name, "abcdefghijklmnopqrstuvwxyz") {
		return fmt.Errorf("first member %q needs a plain lower-case ASCII letter", *name)
	}
	b, err := json.Marshal(m[*name])
	*value = string(b)
	return err
}

// flipCase upper-cases the first lower-case ASCII letter of s.
func flipCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
			break
		}
	}
	return string(b)
}

// escapeFirst writes the first lower-case ASCII letter of s as a \u escape.
func escapeFirst(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'a' <= c && c <= 'z' {
			return s[:i] + fmt.Sprintf(`\u%04x`, c) + s[i+1:]
		}
	}
	return s
}
