package tools

import (
	"strings"
	"testing"
)

// legacyNameByte, legacyValid and legacySanitize are the byte-wise name
// functions the A2A adapter and the OpenAPI bridge had before they used
// NameRule; the names they derived are kept, so the two must agree.
func legacyNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func legacyValid(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !legacyNameByte(s[i]) {
			return false
		}
	}
	return true
}

func legacySanitize(s string, n int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < n; i++ {
		if c := s[i]; legacyNameByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func TestNameRuleBytewiseMatchesLegacy(t *testing.T) {
	r := NameRule{Allowed: WordChar, MaxLen: 64}
	for c := 0; c < 256; c++ {
		if got, want := r.AllowsByte(byte(c)), legacyNameByte(byte(c)); got != want {
			t.Fatalf("AllowsByte(%#x) = %v, legacy %v", c, got, want)
		}
	}
	long := strings.Repeat("a", 64)
	for _, s := range []string{
		"", "echo", "Deep_research-2", long, long + "a", "research.deep v2", strings.Repeat("x.", 40),
		"a.b", "a/b", "a b", strings.Repeat("ü", 40), "résumé", "\xff\xfe", "get_pets_petId", "/pets/{petId}", "a\x00b",
	} {
		if got, want := r.Valid(s), legacyValid(s); got != want {
			t.Errorf("Valid(%q) = %v, legacy %v", s, got, want)
		}
		for _, n := range []int{0, 5, 55, 64, 200} {
			if got, want := r.SanitizeBytes(s, n), legacySanitize(s, n); got != want {
				t.Errorf("SanitizeBytes(%q, %d) = %q, legacy %q", s, n, got, want)
			}
		}
	}
}
