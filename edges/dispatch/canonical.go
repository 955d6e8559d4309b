package dispatch

import (
	"slices"
	"strconv"
)

// appendCanonical appends v in its RFC 8785 (JCS) form and reports true
// when v is built only from what edges put in a decision's metadata:
// maps with string keys, strings of printable ASCII, integers within
// ±2^53, booleans and null. For those, JCS is plain: members sorted by
// key (byte order is UTF-16 order in ASCII), no escapes but \" and \\
// (which it refuses here), integers in decimal. Anything else reports
// false, and the caller takes schemas.Canonical (a marshal and a JCS
// transform, ~30 µs for a call's metadata, on every call).
func appendCanonical(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case string:
		return appendPlainString(b, x)
	case int:
		return appendSafeInt(b, int64(x))
	case int64:
		return appendSafeInt(b, x)
	case map[string]string:
		return appendObject(b, x, appendPlainString)
	case map[string]any:
		return appendObject(b, x, appendCanonical)
	}
	return b, false
}

// appendObject appends m as a JCS object, each value by appendValue; a
// nil map is null, as encoding/json writes it.
func appendObject[V any](b []byte, m map[string]V, appendValue func([]byte, V) ([]byte, bool)) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	b = append(b, '{')
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendPlainString(b, k); !ok {
			return b, false
		}
		b = append(b, ':')
		if b, ok = appendValue(b, m[k]); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appendPlainString quotes s when JCS writes it as is: printable ASCII
// without a quote or a backslash.
func appendPlainString(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// appendSafeInt writes n when a double holds it exactly, as JCS's
// number form then is its decimal digits.
func appendSafeInt(b []byte, n int64) ([]byte, bool) {
	const limit = 1 << 53
	if n > limit || n < -limit {
		return b, false
	}
	return strconv.AppendInt(b, n, 10), true
}
