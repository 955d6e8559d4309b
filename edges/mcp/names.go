package mcp

import (
	"log/slog"
	"regexp"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/tools"
)

// toolNameRE is MCP's rule for a tool name (SEP-986).
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// FitsMCP reports whether name is usable as an MCP tool name as is.
func FitsMCP(name string) bool { return toolNameRE.MatchString(name) }

// Bounds of a digest name: the whole, the server's share, and the digest
// that keeps it unique however its readable part was cut.
const (
	maxToolName   = 128
	maxServerPart = 40
	digestLen     = 10
)

// QualifiedName is "<server>__<tool>", the name of a tool whose own name
// another exposed server also has.
func QualifiedName(server, tool string) string { return server + "__" + tool }

// DigestName is the name of a tool neither its own name nor QualifiedName
// can serve: "<server>__<tool>_<digest>", each part with every character
// outside MCP's rule replaced by "_", cut to fit, and the digest the first
// hex digits of SHA-256 over "server\x00tool".
func DigestName(server, tool string) string { return nameRule().DigestName(server, tool) }

// nameRule is the protocol's name rule.
func nameRule() tools.NameRule {
	return tools.NameRule{MaxLen: maxToolName, MaxServer: maxServerPart, DigestHex: digestLen, Allowed: func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
	}}
}

// binding is one listed tool under its MCP name.
type binding struct {
	name  string
	entry *tools.Entry
	tool  *sdk.Tool // its tools/list entry
}

// bindTools names the exposed tools whose definitions MCP can carry,
// in registry order. A tool keeps its own name when that fits and is
// unique; else it gets QualifiedName, or DigestName when that does not fit
// or equals another tool's name. A name still shared after that (a digest
// collision, or a tool named like another's digest name) answers for no
// tool: all its tools are left off, logged.
func bindTools(entries []*tools.Entry, log *slog.Logger) []*binding {
	var bound []*binding
	own := map[string]int{}
	for _, en := range entries {
		def, err := definition(en)
		if err != nil {
			log.Warn("mcp: tool left off this surface", "server_id", en.Manifest.ServerID, "tool_name", en.Tool.Name, "err", err)
			continue
		}
		bound = append(bound, &binding{name: en.Tool.Name, entry: en, tool: def})
		own[en.Tool.Name]++
	}
	mapped := map[*binding]bool{}
	for _, b := range bound {
		if FitsMCP(b.name) && own[b.name] == 1 {
			continue
		}
		server, tool := b.entry.Manifest.ServerID, b.entry.Tool.Name
		b.name, mapped[b] = QualifiedName(server, tool), true
		if !FitsMCP(b.name) {
			b.name = DigestName(server, tool)
		}
	}
	count := func() map[string]int {
		c := map[string]int{}
		for _, b := range bound {
			c[b.name]++
		}
		return c
	}
	seen := count()
	for _, b := range bound {
		if mapped[b] && seen[b.name] > 1 {
			b.name = DigestName(b.entry.Manifest.ServerID, b.entry.Tool.Name)
		}
	}
	seen = count()
	var out []*binding
	for _, b := range bound {
		if seen[b.name] > 1 {
			log.Warn("mcp: tool name answers for several tools: all of them are left off this surface",
				"mcp_name", b.name, "server_id", b.entry.Manifest.ServerID, "tool_name", b.entry.Tool.Name)
			continue
		}
		b.tool.Name = b.name
		out = append(out, b)
	}
	return out
}
