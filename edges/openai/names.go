package openai

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"

	"github.com/chio-ledger/chio/edges/tools"
)

// functionNameRE is OpenAI's rule for a function name.
var functionNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// FitsOpenAI reports whether name is usable as an OpenAI function name as is.
func FitsOpenAI(name string) bool { return functionNameRE.MatchString(name) }

// maxFunctionName is OpenAI's bound on a function name.
const maxFunctionName = 64

// mappedHashLen is the number of hex digits of the server/tool digest that
// end a mapped name: it keeps mapped names unique however their readable
// part was cut.
const mappedHashLen = 10

// maxServerPart bounds the server's share of a mapped name, so the tool's
// name stays readable.
const maxServerPart = 20

// MappedName is the stable OpenAI name of tool on server when its own name
// cannot be used: "<server>__<tool>_<digest>", each part with every
// character outside [a-zA-Z0-9_-] replaced by "_", cut to fit 64
// characters, and the digest the first hex digits of SHA-256 over
// "server\x00tool". It depends on the pair alone, so every replica and
// every restart maps the same way; the reverse is the Names table.
func MappedName(server, tool string) string {
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	suffix := "_" + hex.EncodeToString(sum[:])[:mappedHashLen]
	s := sanitize(server)
	if len(s) > maxServerPart {
		s = s[:maxServerPart]
	}
	readable := s + "__" + sanitize(tool)
	if room := maxFunctionName - len(suffix); len(readable) > room {
		readable = readable[:room]
	}
	return readable + suffix
}

// sanitize replaces every character OpenAI does not allow with "_".
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// Binding is one exposed tool under its OpenAI function name.
type Binding struct {
	Function string
	Entry    *tools.Entry
	// Mapped reports that Function is not the tool's own name (it does not
	// fit OpenAI's rule, or another exposed server has a tool of the same
	// name); receipts then record Function beside the Chio name.
	Mapped bool
}

// Names maps OpenAI function names to exposed tools and back. It is
// computed once from the exposed tools and never changes: safe for
// concurrent reads.
type Names struct {
	ordered    []*Binding
	byFunction map[string]*Binding
}

// NewNames names entries (sorted as tools.Registry.Exposed sorts them). A
// tool keeps its own name when that fits OpenAI's rule and no other entry
// would answer to it; otherwise it gets MappedName. So two servers with a
// tool of the same name both get mapped names naming their server, rather
// than one silently winning.
func NewNames(entries []*tools.Entry) *Names {
	count := map[string]int{}
	for _, en := range entries {
		count[en.Tool.Name]++
	}
	n := &Names{byFunction: make(map[string]*Binding, len(entries))}
	for _, en := range entries {
		b := &Binding{Function: en.Tool.Name, Entry: en}
		if !FitsOpenAI(b.Function) || count[b.Function] > 1 {
			b.Function, b.Mapped = MappedName(en.Manifest.ServerID, en.Tool.Name), true
		}
		n.ordered = append(n.ordered, b)
	}
	// A mapped name that equals another tool's own name (only a tool named
	// after the mapping's shape could) maps that tool too: its digest
	// differs, so names stay unique and no call can reach the wrong tool.
	for _, b := range n.ordered {
		if !b.Mapped {
			continue
		}
		for _, o := range n.ordered {
			if !o.Mapped && o.Function == b.Function {
				o.Function, o.Mapped = MappedName(o.Entry.Manifest.ServerID, o.Entry.Tool.Name), true
			}
		}
	}
	for _, b := range n.ordered {
		n.byFunction[b.Function] = b
	}
	return n
}

// Resolve is the tool an OpenAI function name calls, if any.
func (n *Names) Resolve(function string) (*Binding, bool) {
	b, ok := n.byFunction[function]
	return b, ok
}

// All lists the bindings in the registry's order (server id, tool name).
func (n *Names) All() []*Binding { return n.ordered }
