package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
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
