// Package strictjson is the one reader of JSON that chio does not trust:
// requests from callers, arguments, and answers from upstreams.
//
// It accepts a subset of what encoding/json accepts, and for everything it
// accepts, encoding/json (with UseNumber) decodes the same value. The
// subset leaves out the documents that two readers could see differently,
// or that a later reader of the record could not read at all:
//
//   - a member name repeated in one object, exactly or as a case variant
//     (encoding/json matches struct fields without case and keeps the last
//     of repeated members; other parsers keep the first), names compared
//     after their \u escapes are decoded;
//   - invalid UTF-8 and lone UTF-16 surrogates (encoding/json turns them
//     into U+FFFD, so what is signed would differ from what was sent);
//   - nesting deeper than MaxDepth, and documents larger than MaxBytes;
//   - anything after the value.
//
// Numbers are kept as their text (json.Number), never rounded. Errors give
// a byte offset and never quote the input, which may hold a secret.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

const (
	// MaxDepth is the deepest nesting of arrays and objects any surface
	// accepts. A receipt wraps what it records in a few more levels, so
	// everything accepted can be signed, stored and parsed again by every
	// reader (encoding/json stops at 10,000; browsers sooner).
	MaxDepth = 64

	// MaxBytes is the largest document any surface reads: a model request
	// relayed by the OpenAI proxy, images included. Surfaces bound their
	// inputs lower where they can, and what is recorded lower still
	// (arguments are at most schemas.MaxParametersBytes).
	MaxBytes = 32 << 20
)

var (
	// ErrDuplicateMember: a member name appears twice in one object,
	// exactly or in another case.
	ErrDuplicateMember = errors.New("duplicate object key")
	// ErrDepth: nesting deeper than MaxDepth.
	ErrDepth = fmt.Errorf("nesting deeper than %d", MaxDepth)
	// ErrTooLarge: a document over its size limit.
	ErrTooLarge = errors.New("document too large")
	// ErrEncoding: invalid UTF-8 or a lone surrogate.
	ErrEncoding = errors.New("invalid UTF-8 or lone surrogate")
	// ErrSyntax: not one JSON value.
	ErrSyntax = errors.New("invalid JSON")
)

// Error is a refusal at a byte offset of the document.
type Error struct {
	Offset int
	Err    error  // one of the Err values above
	What   string // detail for ErrSyntax
}

func (e *Error) Error() string {
	if e.What != "" {
		return fmt.Sprintf("offset %d: %s", e.Offset, e.What)
	}
	return fmt.Sprintf("offset %d: %v", e.Offset, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Parse decodes one JSON document into the values json.Decoder with
// UseNumber produces (map[string]any, []any, string, json.Number, bool,
// nil). Strings without escapes are slices of one copy of the input, so
// it is several times faster than encoding/json. Empty input is null.
func Parse(raw []byte) (any, error) {
	return run(raw, true)
}

// Valid reports whether raw is one document this package accepts.
func Valid(raw []byte) error {
	if len(raw) == 0 {
		return &Error{Err: ErrSyntax, What: "empty document"}
	}
	_, err := run(raw, false)
	return err
}

// Unmarshal checks raw with Valid and decodes it into v with
// encoding/json. Numbers decoded into interface values are json.Number.
func Unmarshal(raw []byte, v any) error {
	if err := Valid(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// UnmarshalKnown is Unmarshal that also refuses members v has no field for.
func UnmarshalKnown(raw []byte, v any) error {
	if err := Valid(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// ReadAll reads r to its end, refusing with ErrTooLarge once it passes max
// bytes (MaxBytes when max is 0 or above it), without reading further.
func ReadAll(r io.Reader, max int64) ([]byte, error) {
	if max <= 0 || max > MaxBytes {
		max = MaxBytes
	}
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, max)
	}
	return b, nil
}

func run(raw []byte, build bool) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if len(raw) > MaxBytes {
		return nil, &Error{Err: ErrTooLarge, What: fmt.Sprintf("document over %d bytes", MaxBytes)}
	}
	d := decoder{s: string(raw), build: build}
	d.skipSpace()
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos != len(d.s) {
		return nil, d.syntax("data after the JSON value")
	}
	return v, nil
}

type decoder struct {
	s     string
	pos   int
	depth int
	build bool
	buf   []byte // scratch for strings with escapes
	fold  []byte // scratch for folded member names
}

func (d *decoder) syntax(what string) error {
	return &Error{Offset: d.pos, Err: ErrSyntax, What: what}
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.s) {
		switch d.s[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) value() (any, error) {
	if d.pos >= len(d.s) {
		return nil, d.syntax("unexpected end of JSON")
	}
	switch c := d.s[d.pos]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		s, err := d.str()
		if err != nil || !d.build {
			return nil, err
		}
		return s, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, d.syntax("invalid character looking for a value")
}

func (d *decoder) literal(lit string) error {
	if len(d.s)-d.pos < len(lit) || d.s[d.pos:d.pos+len(lit)] != lit {
		return d.syntax("invalid literal")
	}
	d.pos += len(lit)
	return nil
}

func (d *decoder) enter() error {
	if d.depth++; d.depth > MaxDepth {
		return &Error{Offset: d.pos, Err: ErrDepth}
	}
	return nil
}

func (d *decoder) object() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	d.pos++ // '{'
	var m map[string]any
	if d.build {
		m = make(map[string]any)
	}
	var names nameSet
	d.skipSpace()
	if d.pos < len(d.s) && d.s[d.pos] == '}' {
		d.pos++
		d.depth--
		return m, nil
	}
	for {
		if d.pos >= len(d.s) || d.s[d.pos] != '"' {
			return nil, d.syntax("expected an object key")
		}
		keyAt := d.pos
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if !names.add(d, k) {
			return nil, &Error{Offset: keyAt, Err: ErrDuplicateMember}
		}
		d.skipSpace()
		if d.pos >= len(d.s) || d.s[d.pos] != ':' {
			return nil, d.syntax("expected ':' after an object key")
		}
		d.pos++
		d.skipSpace()
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		if d.build {
			m[k] = v
		}
		d.skipSpace()
		if d.pos >= len(d.s) {
			return nil, d.syntax("unexpected end of JSON")
		}
		switch d.s[d.pos] {
		case ',':
			d.pos++
			d.skipSpace()
		case '}':
			d.pos++
			d.depth--
			return m, nil
		default:
			return nil, d.syntax("expected ',' or '}' in an object")
		}
	}
}

// nameSet holds the folded member names of one object: a short list
// scanned in place for the common small object, a map past that.
type nameSet struct {
	few  [8]string
	n    int
	many map[string]struct{}
}

// add records k's folded name and reports false if it was already there.
func (ns *nameSet) add(d *decoder, k string) bool {
	f := k
	if needsFold(k) {
		d.fold = appendFolded(d.fold[:0], k)
		f = string(d.fold)
	}
	if ns.many != nil {
		if _, dup := ns.many[f]; dup {
			return false
		}
		ns.many[f] = struct{}{}
		return true
	}
	for _, seen := range ns.few[:ns.n] {
		if seen == f {
			return false
		}
	}
	if ns.n < len(ns.few) {
		ns.few[ns.n] = f
		ns.n++
		return true
	}
	ns.many = make(map[string]struct{}, 2*len(ns.few))
	for _, seen := range ns.few {
		ns.many[seen] = struct{}{}
	}
	ns.many[f] = struct{}{}
	return true
}

// needsFold reports whether k has a byte appendFolded would change.
func needsFold(k string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c >= utf8.RuneSelf || ('A' <= c && c <= 'Z') {
			return true
		}
	}
	return false
}

// appendFolded appends the name under which encoding/json would match k
// to a struct field: two names fold alike exactly when bytes.EqualFold
// holds between them. Each rune becomes the smallest rune of its
// unicode.SimpleFold orbit, as encoding/json folds, except that an ASCII
// letter is written in lower case (no other orbit's smallest rune is a
// lower-case ASCII letter), so the common all-lower-case name needs no
// copy (needsFold).
func appendFolded(b []byte, k string) []byte {
	for i := 0; i < len(k); {
		c := k[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(k[i:])
		r = foldRune(r)
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		b = utf8.AppendRune(b, r)
		i += n
	}
	return b
}

// foldRune is the smallest rune of r's case-folding orbit.
func foldRune(r rune) rune {
	for {
		next := unicode.SimpleFold(r)
		if next <= r {
			return next
		}
		r = next
	}
}

func (d *decoder) array() (any, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	d.pos++ // '['
	var a []any
	if d.build {
		a = make([]any, 0)
	}
	d.skipSpace()
	if d.pos < len(d.s) && d.s[d.pos] == ']' {
		d.pos++
		d.depth--
		return a, nil
	}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		if d.build {
			a = append(a, v)
		}
		d.skipSpace()
		if d.pos >= len(d.s) {
			return nil, d.syntax("unexpected end of JSON")
		}
		switch d.s[d.pos] {
		case ',':
			d.pos++
			d.skipSpace()
		case ']':
			d.pos++
			d.depth--
			return a, nil
		default:
			return nil, d.syntax("expected ',' or ']' in an array")
		}
	}
}

// number scans a number by the JSON grammar and returns it as its text.
func (d *decoder) number() (any, error) {
	s, start, i := d.s, d.pos, d.pos
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		d.pos = i
		return nil, d.syntax("invalid number")
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			d.pos = i
			return nil, d.syntax("invalid number")
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			d.pos = i
			return nil, d.syntax("invalid number")
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	d.pos = i
	if !d.build {
		return nil, nil
	}
	return json.Number(s[start:i]), nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// str decodes the string at d.pos. The common string (no escapes, valid
// UTF-8) is returned as a slice of the input, without copying.
func (d *decoder) str() (string, error) {
	start := d.pos + 1
	ascii := true
	for i := start; i < len(d.s); i++ {
		switch c := d.s[i]; {
		case c == '"':
			s := d.s[start:i]
			if !ascii && !utf8.ValidString(s) {
				return d.strSlow(start)
			}
			d.pos = i + 1
			return s, nil
		case c == '\\':
			return d.strSlow(start)
		case c < 0x20:
			d.pos = i
			return "", d.syntax("control character in a string")
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	d.pos = len(d.s)
	return "", d.syntax("unterminated string")
}

// strSlow decodes a string with escapes, refusing invalid UTF-8 and
// unpaired surrogates, which encoding/json would turn into U+FFFD.
func (d *decoder) strSlow(start int) (string, error) {
	b := d.buf[:0]
	s := d.s
	for i := start; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			d.pos = i + 1
			d.buf = b
			return string(b), nil
		case c < 0x20:
			d.pos = i
			return "", d.syntax("control character in a string")
		case c == '\\':
			if i+1 >= len(s) {
				d.pos = i
				return "", d.syntax("unterminated string")
			}
			switch e := s[i+1]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hex4(s, i+2)
				if r < 0 {
					d.pos = i
					return "", d.syntax("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					r2 := unicodeEscape(s, i+6)
					dec := utf16.DecodeRune(r, r2)
					if r2 < 0 || dec == unicode.ReplacementChar {
						return "", &Error{Offset: i, Err: ErrEncoding}
					}
					b = utf8.AppendRune(b, dec)
					i += 12
					continue
				}
				b = utf8.AppendRune(b, r)
				i += 6
				continue
			default:
				d.pos = i
				return "", d.syntax("invalid escape")
			}
			i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return "", &Error{Offset: i, Err: ErrEncoding}
			}
			b = append(b, s[i:i+size]...)
			i += size
		}
	}
	d.pos = len(s)
	return "", d.syntax("unterminated string")
}

// unicodeEscape is the rune of a `\uXXXX` escape at s[i:], or -1.
func unicodeEscape(s string, i int) rune {
	if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
		return hex4(s, i+2)
	}
	return -1
}

// hex4 is the value of four hex digits at s[i:], or -1.
func hex4(s string, i int) rune {
	if i+4 > len(s) {
		return -1
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
