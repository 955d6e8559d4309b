package guards

import (
	"errors"
	"strings"
)

// pointer is a parsed RFC 6901 JSON pointer.
type pointer struct {
	raw    string
	tokens []string // unescaped reference tokens; none = the whole document
}

func parsePointer(s string) (pointer, error) {
	if s == "" {
		return pointer{}, nil
	}
	if s[0] != '/' {
		return pointer{}, errors.New(`a JSON pointer must be empty or start with "/"`)
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		if !strings.Contains(p, "~") {
			continue
		}
		var b strings.Builder
		for j := 0; j < len(p); j++ {
			if p[j] != '~' {
				b.WriteByte(p[j])
				continue
			}
			if j+1 >= len(p) || (p[j+1] != '0' && p[j+1] != '1') {
				return pointer{}, errors.New(`a JSON pointer may only use "~" as "~0" or "~1"`)
			}
			if p[j+1] == '0' {
				b.WriteByte('~')
			} else {
				b.WriteByte('/')
			}
			j++
		}
		parts[i] = b.String()
	}
	return pointer{raw: s, tokens: parts}, nil
}

// resolve returns the value p points at in doc; ok is false when the
// target does not exist.
func (p *pointer) resolve(doc any) (v any, ok bool) {
	v = doc
	for _, tok := range p.tokens {
		switch x := v.(type) {
		case map[string]any:
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// arrayIndex parses an RFC 6901 array index: "0" or digits without a
// leading zero. "-" (past the end) never exists in a document.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 18 || (tok[0] == '0' && len(tok) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		if !isDigit(tok[i]) {
			return 0, false
		}
		n = n*10 + int(tok[i]-'0')
	}
	return n, true
}
