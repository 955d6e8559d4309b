package dispatch

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// TestAppendCanonical: where appendCanonical takes a value it writes
// exactly schemas.Canonical's bytes, and it refuses every value it could
// get wrong (escapes, non-ASCII, floats, large integers, other types).
func TestAppendCanonical(t *testing.T) {
	plain := []any{
		map[string]any{},
		map[string]any{"protocol": "a2a", "a2a": map[string]any{"taskId": "t-1", "contextId": "c-1"},
			"manifest":    map[string]string{"hash": "ab12", "signer_key": "ed25519:xyz"},
			"attribution": map[string]any{"subject_key": "k", "issuer_key": "i", "delegation_depth": 0, "grant_index": -3}},
		map[string]any{"b": true, "a": false, "n": nil, "z": int64(1 << 53), "y": -(1 << 53), "s": "<&> 'x' ~"},
		map[string]any{"Z": "1", "a": "2", "_": "3", "0": "4", "": ""},
		map[string]any{"nil any": map[string]any(nil), "nil strings": map[string]string(nil)}, // null, as encoding/json
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		plain = append(plain, randomPlain(rnd, 3))
	}
	for _, v := range plain {
		got, ok := appendCanonical(nil, v)
		if !ok {
			t.Fatalf("appendCanonical(%v) refused a plain value", v)
		}
		want, err := schemas.Canonical(v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("appendCanonical(%v):\n got %s\nwant %s", v, got, want)
		}
	}
	for _, v := range []any{
		map[string]any{"s": "quote \" inside"}, map[string]any{"s": `back\slash`}, map[string]any{"s": "tab\t"},
		map[string]any{"s": "é"}, map[string]any{"é": "x"}, map[string]any{"f": 1.5}, map[string]any{"n": int64(1<<53 + 1)},
		map[string]any{"l": []string{"a"}}, map[string]any{"m": map[string]int{"a": 1}}, map[string]string{"k": "\u2028"},
		map[string]any{"deep": map[string]any{"x": struct{}{}}},
	} {
		if _, ok := appendCanonical(nil, v); ok {
			t.Errorf("appendCanonical(%v) took a value it must leave to schemas.Canonical", v)
		}
	}
}

func randomPlain(rnd *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for i := range rnd.IntN(6) {
		k := fmt.Sprintf("%c%d", ' '+2+rune(rnd.IntN(90)), i) // printable ASCII; a quote or a backslash is replaced below
		if k[0] == '"' || k[0] == '\\' {
			k = "k" + k[1:]
		}
		switch rnd.IntN(6) {
		case 0:
			m[k] = rnd.Int64N(1<<54) - 1<<53
		case 1:
			m[k] = rnd.IntN(2) == 0
		case 2:
			m[k] = nil
		case 3:
			if depth > 0 {
				m[k] = randomPlain(rnd, depth-1)
				continue
			}
			fallthrough
		default:
			b := make([]byte, rnd.IntN(12))
			for j := range b {
				for b[j] = byte(0x20 + rnd.IntN(95)); b[j] == '"' || b[j] == '\\'; b[j] = byte(0x20 + rnd.IntN(95)) {
				}
			}
			m[k] = string(b)
		}
	}
	return m
}
