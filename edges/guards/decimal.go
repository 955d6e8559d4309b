package guards

import (
	"cmp"
	"encoding/json"
	"strings"
)

// maxExponentDigits bounds the exponents decimal represents exactly. JSON
// numbers are compared as exact decimals, not float64: a constraint on an
// account number or an amount must not be passed by a value that merely
// rounds to the same double.
const maxExponentDigits = 9

// decimal is a JSON number as sign, significant digits and exponent:
// value = ±0.(hi lo) × 10^exp. hi and lo are slices of the number's text
// (its integer and fraction digits), so parsing does not allocate.
type decimal struct {
	neg    bool
	hi, lo string // significant digits: no leading zero in hi+lo, no trailing zero; both empty for zero
	exp    int64
}

// parseDecimal parses a JSON number. ok is false for text that is not a
// JSON number and for non-zero numbers whose exponent has more than
// maxExponentDigits digits.
func parseDecimal(s string) (d decimal, ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		d.neg = true
		i++
	}
	st := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[st:i]
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return decimal{}, false
	}
	frac := ""
	if i < len(s) && s[i] == '.' {
		i++
		st = i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if frac = s[st:i]; frac == "" {
			return decimal{}, false
		}
	}
	var e int64
	huge := false
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		st = i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		digits := s[st:i]
		if digits == "" {
			return decimal{}, false
		}
		digits = strings.TrimLeft(digits, "0")
		if len(digits) > maxExponentDigits {
			huge = true
		} else {
			for j := 0; j < len(digits); j++ {
				e = e*10 + int64(digits[j]-'0')
			}
			if eneg {
				e = -e
			}
		}
	}
	if i != len(s) {
		return decimal{}, false
	}
	hi, lo := strings.TrimLeft(intPart, "0"), frac
	if hi != "" {
		d.exp = e + int64(len(hi))
	} else {
		n := len(lo)
		lo = strings.TrimLeft(lo, "0")
		if lo == "" {
			return decimal{}, true // zero, whatever its sign and exponent
		}
		d.exp = e - int64(n-len(lo))
	}
	if huge {
		return decimal{}, false
	}
	if lo = strings.TrimRight(lo, "0"); lo == "" {
		hi = strings.TrimRight(hi, "0")
	}
	d.hi, d.lo = hi, lo
	return d, true
}

func (d *decimal) zero() bool { return d.hi == "" && d.lo == "" }

// digit is the i-th significant digit, or 0 past the end (which sorts
// below '0', right for digit strings without trailing zeros).
func (d *decimal) digit(i int) byte {
	if i < len(d.hi) {
		return d.hi[i]
	}
	if i -= len(d.hi); i < len(d.lo) {
		return d.lo[i]
	}
	return 0
}

func (d *decimal) sign() int {
	switch {
	case d.zero():
		return 0
	case d.neg:
		return -1
	}
	return 1
}

func compareDecimal(a, b *decimal) int {
	sa, sb := a.sign(), b.sign()
	if sa != sb || sa == 0 {
		return cmp.Compare(sa, sb)
	}
	m := cmp.Compare(a.exp, b.exp)
	for i, n := 0, max(len(a.hi)+len(a.lo), len(b.hi)+len(b.lo)); m == 0 && i < n; i++ {
		m = cmp.Compare(a.digit(i), b.digit(i))
	}
	return sa * m
}

// numbersEqual compares two JSON numbers exactly (1 == 1.0 == 10e-1).
func numbersEqual(a, b json.Number) bool {
	if a == b {
		return true
	}
	da, ok1 := parseDecimal(string(a))
	db, ok2 := parseDecimal(string(b))
	return ok1 && ok2 && compareDecimal(&da, &db) == 0
}

// jsonEqual is JSON equality of two decoded values, numbers compared
// numerically.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		return ok && numbersEqual(x, y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
