package guards

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit, kept so that both decoders
// accept the same documents.
const maxDepth = 10000

// errDuplicateKey marks the one kind of document encoding/json accepts and
// decodeJSON refuses (besides trailing data).
var errDuplicateKey = errors.New("duplicate object key")

// decodeJSON decodes one JSON document into the values json.Decoder with
// UseNumber produces, several times faster: strings without escapes are
// slices of one copy of the input instead of one allocation each, which
// is what keeps the guard pipeline within its per-call budget.
// FuzzDecodeJSON checks it against encoding/json.
//
// Errors give an offset, never input bytes, since the input may hold a
// secret.
func decodeJSON(raw []byte) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	d := decoder{s: string(raw)}
	d.skipSpace()
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.pos != len(d.s) {
		return nil, d.errorf("data after the JSON value")
	}
	return v, nil
}

type decoder struct {
	s     string
	pos   int
	depth int
	buf   []byte // scratch for strings with escapes
}

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", d.pos, fmt.Sprintf(format, args...))
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
		return nil, d.errorf("unexpected end of JSON")
	}
	switch c := d.s[d.pos]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		s, err := d.str()
		if err != nil {
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
	return nil, d.errorf("invalid character looking for a value")
}

func (d *decoder) literal(lit string) error {
	if len(d.s)-d.pos < len(lit) || d.s[d.pos:d.pos+len(lit)] != lit {
		return d.errorf("invalid literal")
	}
	d.pos += len(lit)
	return nil
}

func (d *decoder) object() (any, error) {
	if d.depth++; d.depth > maxDepth {
		return nil, d.errorf("exceeded max depth")
	}
	d.pos++ // '{'
	m := make(map[string]any)
	d.skipSpace()
	if d.pos < len(d.s) && d.s[d.pos] == '}' {
		d.pos++
		d.depth--
		return m, nil
	}
	for {
		if d.pos >= len(d.s) || d.s[d.pos] != '"' {
			return nil, d.errorf("expected an object key")
		}
		keyAt := d.pos
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			d.pos = keyAt
			return nil, fmt.Errorf("offset %d: %w", keyAt, errDuplicateKey)
		}
		d.skipSpace()
		if d.pos >= len(d.s) || d.s[d.pos] != ':' {
			return nil, d.errorf("expected ':' after an object key")
		}
		d.pos++
		d.skipSpace()
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m[k] = v
		d.skipSpace()
		if d.pos >= len(d.s) {
			return nil, d.errorf("unexpected end of JSON")
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
			return nil, d.errorf("expected ',' or '}' in an object")
		}
	}
}

func (d *decoder) array() (any, error) {
	if d.depth++; d.depth > maxDepth {
		return nil, d.errorf("exceeded max depth")
	}
	d.pos++ // '['
	a := make([]any, 0)
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
		a = append(a, v)
		d.skipSpace()
		if d.pos >= len(d.s) {
			return nil, d.errorf("unexpected end of JSON")
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
			return nil, d.errorf("expected ',' or ']' in an array")
		}
	}
}

// number scans a number by the JSON grammar and returns it as text.
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
		return nil, d.errorf("invalid number")
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			d.pos = i
			return nil, d.errorf("invalid number")
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
			return nil, d.errorf("invalid number")
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	d.pos = i
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
			return "", d.errorf("control character in a string")
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	d.pos = len(d.s)
	return "", d.errorf("unterminated string")
}

// strSlow decodes a string with escapes or invalid UTF-8 the way
// encoding/json does: each invalid byte and each unpaired surrogate
// becomes U+FFFD.
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
			return "", d.errorf("control character in a string")
		case c == '\\':
			if i+1 >= len(s) {
				d.pos = i
				return "", d.errorf("unterminated string")
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
					return "", d.errorf("invalid \\u escape")
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if r2 := unicodeEscape(s, i); r2 >= 0 {
						if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
							b = utf8.AppendRune(b, dec)
							i += 6
							continue
						}
					}
					r = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				d.pos = i
				return "", d.errorf("invalid escape")
			}
			i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
		}
	}
	d.pos = len(s)
	return "", d.errorf("unterminated string")
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
