package openai

import (
	"log/slog"
	"regexp"

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
func MappedName(server, tool string) string { return nameRule().DigestName(server, tool) }

// nameRule is the protocol's name rule.
func nameRule() tools.NameRule {
	return tools.NameRule{MaxLen: maxFunctionName, MaxServer: maxServerPart, DigestHex: mappedHashLen, Allowed: func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
	}}
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
// computed once from the exposed tools and never changes, so it is safe
// for concurrent reads; the Adapter builds a new one when the registry
// changes.
type Names struct {
	ordered    []*Binding
	byFunction map[string]*Binding
}

// NewNames names entries (sorted as tools.Registry.Exposed sorts them). A
// tool keeps its own name when that fits OpenAI's rule and no other entry
// would answer to it; otherwise it gets MappedName. So two servers with a
// tool of the same name both get mapped names naming their server, rather
// than one silently winning. No function name ever answers for two tools:
// a collision left after mapping (two mapped names equal, which takes a
// digest collision) drops both tools from the table, logged on log (nil
// for slog.Default()).
func NewNames(entries []*tools.Entry, log *slog.Logger) *Names {
	if log == nil {
		log = slog.Default()
	}
	count := map[string]int{}
	for _, en := range entries {
		count[en.Tool.Name]++
	}
	var bound []*Binding
	for _, en := range entries {
		b := &Binding{Function: en.Tool.Name, Entry: en}
		if !FitsOpenAI(b.Function) || count[b.Function] > 1 {
			b.Function, b.Mapped = MappedName(en.Manifest.ServerID, en.Tool.Name), true
		}
		bound = append(bound, b)
	}
	// A mapped name that equals another tool's own name (only a tool named
	// after the mapping's shape could) maps that tool too: its digest
	// differs. That new mapped name may in turn equal a third tool's own
	// name, so repeat until nothing changes. Each pass that changes
	// anything maps at least one more tool and a mapped name never changes
	// again, so len(bound) passes reach the fixed point.
	for range len(bound) {
		mapped := map[string]bool{}
		for _, b := range bound {
			if b.Mapped {
				mapped[b.Function] = true
			}
		}
		changed := false
		for _, o := range bound {
			if !o.Mapped && mapped[o.Function] {
				o.Function, o.Mapped = MappedName(o.Entry.Manifest.ServerID, o.Entry.Tool.Name), true
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	return uniqueNames(bound, log)
}

// uniqueNames builds the table from bindings, dropping every binding whose
// function name another binding also has: a call by that name could reach
// either tool, so it reaches neither.
func uniqueNames(bound []*Binding, log *slog.Logger) *Names {
	count := make(map[string]int, len(bound))
	for _, b := range bound {
		count[b.Function]++
	}
	n := &Names{byFunction: make(map[string]*Binding, len(bound))}
	for _, b := range bound {
		if count[b.Function] > 1 {
			log.Warn("openai: function name answers for several tools: all of them are left off this surface",
				"function_name", b.Function, "server_id", b.Entry.Manifest.ServerID, "tool_name", b.Entry.Tool.Name)
			continue
		}
		n.ordered = append(n.ordered, b)
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
