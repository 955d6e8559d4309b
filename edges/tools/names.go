package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// NameRule is an outward protocol's rule for tool names: the characters
// it allows, the longest name, and how much of a digest name the server
// part may take.
type NameRule struct {
	Allowed   func(rune) bool
	MaxLen    int
	MaxServer int
	DigestHex int
}

// DigestName is the stable name of a tool whose own name the protocol
// cannot carry: "<server>__<tool>_<digest>", every character the rule
// refuses replaced by "_", the server part and then the whole cut to fit,
// and the digest the first hex digits of SHA-256 over "server\x00tool".
// It depends on the pair alone, so every replica maps alike.
func (r NameRule) DigestName(server, tool string) string {
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:])[:r.DigestHex]
	s := r.sanitize(server)
	if len(s) > r.MaxServer {
		s = s[:r.MaxServer]
	}
	readable := s + "__" + r.sanitize(tool)
	if room := r.MaxLen - len(suffix); len(readable) > room {
		readable = readable[:room]
	}
	return readable + suffix
}

// sanitize replaces every character the rule refuses with "_".
func (r NameRule) sanitize(s string) string {
	var b strings.Builder
	for _, c := range s {
		if r.Allowed(c) {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// WordChar reports whether c is in [a-zA-Z0-9_-]: the characters of a tool
// name that MCP clients and the OpenAI function API both accept.
func WordChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// AllowsByte reports whether the byte c may stand in a name. A byte of a
// multi-byte character is refused, so the byte-wise functions below suit
// rules of ASCII characters only.
func (r NameRule) AllowsByte(c byte) bool {
	return c < utf8.RuneSelf && r.Allowed(rune(c))
}

// Valid reports whether s is a name as it is: 1 to MaxLen bytes, each one
// the rule allows.
func (r NameRule) Valid(s string) bool {
	if s == "" || len(s) > r.MaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !r.AllowsByte(s[i]) {
			return false
		}
	}
	return true
}

// SanitizeBytes is the first n bytes of s with every byte the rule refuses
// replaced by "_". Unlike DigestName it works byte by byte, so a character
// of several bytes becomes as many "_": names already derived this way
// must not change.
func (r NameRule) SanitizeBytes(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	b := []byte(s)
	for i, c := range b {
		if !r.AllowsByte(c) {
			b[i] = '_'
		}
	}
	return string(b)
}
