package guards

import (
	"slices"
	"strconv"
	"strings"
)

// visitFunc inspects one string of the arguments: an object key (isKey) or
// a string value, with parentKey the object key the value sits under (kept
// through arrays, "" at the top). It returns the violated rule, or "".
type visitFunc func(s string, isKey bool, parentKey string) string

// anyViolation is the allow path's walk: map order, no bookkeeping, stops
// at the first violation. keys says whether object keys are visited.
func anyViolation(v any, keys bool, parentKey string, visit visitFunc) bool {
	switch x := v.(type) {
	case string:
		return visit(x, false, parentKey) != ""
	case map[string]any:
		for k, e := range x {
			if keys && visit(k, true, "") != "" {
				return true
			}
			if anyViolation(e, keys, k, visit) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if anyViolation(e, keys, parentKey, visit) {
				return true
			}
		}
	}
	return false
}

// violationDetails is the deny path's walk: it visits keys in sorted order
// so that every replica reports the same first violation, and returns
// "<pointer>: <rule>" for it (or "" if there is none).
func violationDetails(v any, keys bool, visit visitFunc) string {
	var t trail
	rule, inKey, ok := t.first(v, keys, "", visit)
	if !ok {
		return ""
	}
	if inKey {
		return t.String() + ": " + rule + " in an object key"
	}
	return t.String() + ": " + rule
}

// trail is the JSON pointer of the walk's position, built only on the
// deny path.
type trail struct {
	steps []step
}

type step struct {
	key   string
	index int // when key is unused
	isKey bool
}

func (t *trail) first(v any, keys bool, parentKey string, visit visitFunc) (rule string, inKey, ok bool) {
	switch x := v.(type) {
	case string:
		if r := visit(x, false, parentKey); r != "" {
			return r, false, true
		}
	case map[string]any:
		ks := make([]string, 0, len(x))
		for k := range x {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		for _, k := range ks {
			// The key is checked before anything below it, so a key the
			// visitor flags never appears in a reported pointer.
			if keys {
				if r := visit(k, true, ""); r != "" {
					return r, true, true
				}
			}
			t.steps = append(t.steps, step{key: k, isKey: true})
			if r, in, ok := t.first(x[k], keys, k, visit); ok {
				return r, in, ok
			}
			t.steps = t.steps[:len(t.steps)-1]
		}
	case []any:
		for i, e := range x {
			t.steps = append(t.steps, step{index: i})
			if r, in, ok := t.first(e, keys, parentKey, visit); ok {
				return r, in, ok
			}
			t.steps = t.steps[:len(t.steps)-1]
		}
	}
	return "", false, false
}

// Display limits for pointers in details: the keys come from the caller
// and could be long.
const (
	maxSegmentDisplay = 64
	maxPointerDisplay = 384
)

// String renders the trail as an RFC 6901 pointer, eliding long keys and
// redacting keys that look like secrets. The whole document (pointer "")
// is shown as "(root)" so that details never start with a bare colon.
func (t *trail) String() string {
	if len(t.steps) == 0 {
		return "(root)"
	}
	var b strings.Builder
	for _, s := range t.steps {
		b.WriteByte('/')
		if !s.isKey {
			b.WriteString(strconv.Itoa(s.index))
			continue
		}
		if builtinSecretKind(s.key) != "" {
			b.WriteString("<redacted>")
			continue
		}
		b.WriteString(abbreviate(escapePointerToken(s.key), maxSegmentDisplay))
	}
	return abbreviate(b.String(), maxPointerDisplay)
}

// escapePointerToken applies RFC 6901 escaping: "~" → "~0", "/" → "~1".
func escapePointerToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
