package a2aadapter

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/chio-ledger/chio/edges/tools"
)

// maxToolName is the longest tool name: what MCP and OpenAI clients accept.
const maxToolName = 64

// nameRule is the tool name rule of skills: [a-zA-Z0-9_-]{1,64}.
var nameRule = tools.NameRule{Allowed: tools.WordChar, MaxLen: maxToolName}

// toolName is the tool name of a skill id: the id itself when it is 1 to 64
// of [a-zA-Z0-9_-], else the id with every other byte replaced by "_",
// shortened, and suffixed with "-" and 8 hex digits of its SHA-256, so that
// the name is stable across discoveries and two ids never share one.
func toolName(skillID string) string {
	if nameRule.Valid(skillID) {
		return skillID
	}
	sum := sha256.Sum256([]byte(skillID))
	suffix := "-" + hex.EncodeToString(sum[:4])
	return nameRule.SanitizeBytes(skillID, maxToolName-len(suffix)) + suffix
}

func validToolName(s string) bool { return nameRule.Valid(s) }
