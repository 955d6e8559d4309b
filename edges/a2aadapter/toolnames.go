package a2aadapter

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxToolName is the longest tool name: what MCP and OpenAI clients accept.
const maxToolName = 64

// toolName is the tool name of a skill id: the id itself when it is 1 to 64
// of [a-zA-Z0-9_-], else the id with every other byte replaced by "_",
// shortened, and suffixed with "-" and 8 hex digits of its SHA-256, so that
// the name is stable across discoveries and two ids never share one.
func toolName(skillID string) string {
	if validToolName(skillID) {
		return skillID
	}
	sum := sha256.Sum256([]byte(skillID))
	suffix := "-" + hex.EncodeToString(sum[:4])
	var b strings.Builder
	for i := 0; i < len(skillID) && b.Len() < maxToolName-len(suffix); i++ {
		if c := skillID[i]; nameByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String() + suffix
}

func validToolName(s string) bool {
	if s == "" || len(s) > maxToolName {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
