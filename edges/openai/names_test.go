package openai

import (
	"strings"
	"testing"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

func entry(server, tool string) *tools.Entry {
	m := &schemas.ToolManifest{ServerID: server, Tools: []schemas.ToolDefinition{{Name: tool}}}
	return &tools.Entry{Manifest: m, Tool: &m.Tools[0]}
}

func TestMappedNameFitsAndIsStable(t *testing.T) {
	cases := [][2]string{
		{"fs", "read_file"}, {"fs", "fs.read_file"}, {"srv", "ünïcode tool"},
		{strings.Repeat("s", 300), strings.Repeat("t", 300)}, {"a/b", "c::d"},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		n := MappedName(c[0], c[1])
		if !FitsOpenAI(n) {
			t.Errorf("MappedName(%q, %q) = %q does not fit OpenAI's rule", c[0], c[1], n)
		}
		if n != MappedName(c[0], c[1]) {
			t.Errorf("MappedName(%q, %q) is not stable", c[0], c[1])
		}
		if seen[n] {
			t.Errorf("MappedName(%q, %q) = %q twice", c[0], c[1], n)
		}
		seen[n] = true
	}
	// The readable part names the server and the tool.
	if n := MappedName("fs", "fs.read_file"); !strings.HasPrefix(n, "fs__fs_read_file_") {
		t.Errorf("MappedName = %q", n)
	}
	// A cut never makes two long names equal.
	long := strings.Repeat("x", 80)
	if MappedName("s", long+"a") == MappedName("s", long+"b") {
		t.Error("long names collide")
	}
}

func TestNamesDirectMappedAndDuplicates(t *testing.T) {
	n := NewNames([]*tools.Entry{
		entry("a", "echo"), entry("a", "get_weather"), entry("a", "fs.read"), entry("b", "echo"),
	})
	want := map[string]struct {
		server, tool string
		mapped       bool
	}{
		"get_weather":              {"a", "get_weather", false},
		MappedName("a", "fs.read"): {"a", "fs.read", true},
		MappedName("a", "echo"):    {"a", "echo", true}, // two servers: both mapped, naming theirs
		MappedName("b", "echo"):    {"b", "echo", true},
	}
	if len(n.All()) != len(want) {
		t.Fatalf("%d bindings", len(n.All()))
	}
	for fn, w := range want {
		b, ok := n.Resolve(fn)
		if !ok || b.Entry.Manifest.ServerID != w.server || b.Entry.Tool.Name != w.tool || b.Mapped != w.mapped {
			t.Errorf("Resolve(%q) = %+v, %v", fn, b, ok)
		}
	}
	for _, fn := range []string{"echo", "fs.read", "fs_read", ""} {
		if _, ok := n.Resolve(fn); ok {
			t.Errorf("Resolve(%q) found a tool", fn)
		}
	}
}

// A tool whose own name is another tool's mapped name is mapped too, so no
// name answers for two tools.
func TestNamesShadowedDirectName(t *testing.T) {
	shadow := MappedName("a", "x.y")
	n := NewNames([]*tools.Entry{entry("a", "x.y"), entry("b", shadow)})
	b1, ok1 := n.Resolve(shadow)
	b2, ok2 := n.Resolve(MappedName("b", shadow))
	if !ok1 || b1.Entry.Manifest.ServerID != "a" || !ok2 || b2.Entry.Manifest.ServerID != "b" {
		t.Fatalf("%+v %v %+v %v", b1, ok1, b2, ok2)
	}
}
