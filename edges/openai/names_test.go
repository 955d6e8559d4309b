package openai

import (
	"bytes"
	"log/slog"
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
	}, nil)
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
	n := NewNames([]*tools.Entry{entry("a", "x.y"), entry("b", shadow)}, nil)
	b1, ok1 := n.Resolve(shadow)
	b2, ok2 := n.Resolve(MappedName("b", shadow))
	if !ok1 || b1.Entry.Manifest.ServerID != "a" || !ok2 || b2.Entry.Manifest.ServerID != "b" {
		t.Fatalf("%+v %v %+v %v", b1, ok1, b2, ok2)
	}
}

// A chain of shadowing names: z's mapped name is y's own name, and y's
// mapped name is x's own name. Remapping y must remap x too, so every
// tool keeps a name of its own.
func TestNamesShadowChain(t *testing.T) {
	zName := MappedName("z", "x.y")
	yName := MappedName("y", zName)
	xName := MappedName("x", yName)
	n := NewNames([]*tools.Entry{entry("x", yName), entry("y", zName), entry("z", "x.y")}, nil)
	if len(n.All()) != 3 {
		t.Fatalf("%d bindings", len(n.All()))
	}
	seen := map[string]bool{}
	for _, b := range n.All() {
		if seen[b.Function] {
			t.Fatalf("%q names two tools", b.Function)
		}
		seen[b.Function] = true
	}
	for fn, server := range map[string]string{zName: "z", yName: "y", xName: "x"} {
		b, ok := n.Resolve(fn)
		if !ok || b.Entry.Manifest.ServerID != server || !b.Mapped {
			t.Errorf("Resolve(%q) = %+v, %v: want server %s", fn, b, ok, server)
		}
	}
}

// A name left answering for two tools (a digest collision) drops both,
// with a warning, rather than letting one silently win.
func TestNamesCollisionDropsBoth(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	a, b, c := entry("a", "t1"), entry("b", "t2"), entry("c", "ok")
	n := uniqueNames([]*Binding{
		{Function: "same_name_0123456789", Entry: a, Mapped: true},
		{Function: "ok", Entry: c},
		{Function: "same_name_0123456789", Entry: b, Mapped: true},
	}, log)
	if _, ok := n.Resolve("same_name_0123456789"); ok {
		t.Error("a colliding name still resolves")
	}
	if len(n.All()) != 1 || n.All()[0].Entry != c {
		t.Errorf("bindings %+v", n.All())
	}
	if out := logged.String(); strings.Count(out, "level=WARN") != 2 || !strings.Contains(out, "server_id=a") || !strings.Contains(out, "server_id=b") {
		t.Errorf("log %q", out)
	}
}
