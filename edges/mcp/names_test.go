package mcp

import (
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// entries builds exposed entries from "server/tool" pairs.
func entries(pairs ...[2]string) []*tools.Entry {
	var out []*tools.Entry
	for _, p := range pairs {
		m := &schemas.ToolManifest{ServerID: p[0]}
		m.Tools = []schemas.ToolDefinition{{Name: p[1], InputSchema: json.RawMessage(`{}`)}}
		out = append(out, &tools.Entry{Manifest: m, Tool: &m.Tools[0]})
	}
	return out
}

func TestBindToolNames(t *testing.T) {
	long := strings.Repeat("t", 130)
	cases := []struct {
		name  string
		pairs [][2]string
		want  []string
	}{
		{"own names", [][2]string{{"a", "read"}, {"b", "write"}}, []string{"read", "write"}},
		{"dots and dashes fit", [][2]string{{"a", "fs.read-file"}}, []string{"fs.read-file"}},
		{"shared name", [][2]string{{"a", "echo"}, {"b", "echo"}, {"b", "other"}}, []string{"a__echo", "b__echo", "other"}},
		{"name MCP refuses", [][2]string{{"a", "read file"}}, []string{DigestName("a", "read file")}},
		{"server MCP refuses", [][2]string{{"my srv", "echo"}, {"b", "echo"}}, []string{DigestName("my srv", "echo"), "b__echo"}},
		{"too long", [][2]string{{"a", long}}, []string{DigestName("a", long)}},
		{"qualified name taken by a tool's own name", [][2]string{{"a", "echo"}, {"b", "echo"}, {"c", "a__echo"}},
			[]string{DigestName("a", "echo"), "b__echo", "a__echo"}},
		{"two qualified names alike", [][2]string{{"a__b", "c"}, {"a", "b__c"}, {"x", "c"}, {"y", "b__c"}},
			[]string{DigestName("a__b", "c"), DigestName("a", "b__c"), "x__c", "y__b__c"}},
		{"own name equal to a digest name: both left off", [][2]string{{"a", "read file"}, {"z", DigestName("a", "read file")}}, nil},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range cases {
		var got []string
		for _, b := range bindTools(entries(c.pairs...), log) {
			if !FitsMCP(b.name) || b.tool.Name != b.name {
				t.Errorf("%s: name %q", c.name, b.name)
			}
			got = append(got, b.name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestDigestName(t *testing.T) {
	cases := []struct{ server, tool string }{
		{"a", "b"}, {"srv with spaces", "tool/with/slashes"}, {strings.Repeat("s", 300), strings.Repeat("t", 300)}, {"ü", "ß"},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		n := DigestName(c.server, c.tool)
		if !FitsMCP(n) || n != DigestName(c.server, c.tool) || seen[n] {
			t.Errorf("%q/%q: %q", c.server, c.tool, n)
		}
		seen[n] = true
	}
	// The digest tells apart pairs whose readable parts agree.
	if DigestName("a b", "c") == DigestName("a_b", "c") {
		t.Error("sanitized pairs collide")
	}
}
