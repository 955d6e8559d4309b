package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// fakeServer is a Server whose manifest and tool list are set by the test.
type fakeServer struct {
	Running
	id       string
	manifest *schemas.ToolManifest
	tools    []string
}

func (f *fakeServer) Manifest() *schemas.ToolManifest { return f.manifest }
func (f *fakeServer) ServerID() string                { return f.id }
func (f *fakeServer) ToolNames() []string             { return f.tools }

func (f *fakeServer) Invoke(ctx context.Context, inv Invocation) (json.RawMessage, error) {
	return json.RawMessage(`"` + inv.ServerID + "/" + inv.ToolName + "/" + inv.ID + `"`), nil
}

func (f *fakeServer) InvokeStream(ctx context.Context, inv Invocation, emit func(Chunk) error) error {
	return emit(Chunk{Data: inv.Arguments})
}

func fake(id string, m *schemas.ToolManifest, tools ...string) *fakeServer {
	return &fakeServer{id: id, manifest: m, tools: tools}
}

func TestRegister(t *testing.T) {
	good := func() *schemas.ToolManifest { return manifest("srv", tool("a", ""), tool("b", "")) }
	bad := good()
	bad.Version = ""
	cases := []struct {
		name    string
		s       Server
		wantErr string
	}{
		{"good", fake("srv", good(), "b", "a"), ""},
		{"nil server", nil, "server is nil"},
		{"nil manifest", fake("srv", nil, "a"), "manifest is nil"},
		{"invalid manifest", fake("srv", bad, "a", "b"), "name and version are required"},
		{"server id mismatch", fake("other", good(), "a", "b"), `manifest server_id is "srv"`},
		{"extra tool", fake("srv", good(), "a", "b", "c"), `tool "c" that its manifest does not list`},
		{"missing tool", fake("srv", good(), "a"), `manifest lists tool "b"`},
		{"tool twice", fake("srv", good(), "a", "a", "b"), `tool "a" twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := NewRegistry().Register(c.s)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("Register: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("Register error = %v, want one containing %q", err, c.wantErr)
			}
		})
	}
}

func TestRegisterDuplicates(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(fake("srv", manifest("srv", tool("a", "")), "a")); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(fake("srv", manifest("srv", tool("b", "")), "b")); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate Register error = %v", err)
	}
	if err := r.AddManifest(manifest("srv", tool("c", ""))); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("duplicate AddManifest error = %v", err)
	}
	if _, ok := r.Tool("srv", "b"); ok {
		t.Error("a refused registration left a tool behind")
	}
	if err := r.AddManifest(nil); err == nil {
		t.Error("AddManifest(nil) succeeded")
	}
	if err := r.AddManifest(&schemas.ToolManifest{}); err == nil {
		t.Error("AddManifest of an invalid manifest succeeded")
	}
}

func TestRegistryDispatch(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(fake("srv", manifest("srv", tool("a", "")), "a")); err != nil {
		t.Fatal(err)
	}
	if err := r.AddManifest(manifest("remote", tool("b", `{"a2a.expose":true}`))); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	en, ok := r.Tool("srv", "a")
	if !ok {
		t.Fatal("Tool(srv, a) missing")
	}
	if out, err := en.Invoke(ctx, "rcpt-1", json.RawMessage(`{}`)); err != nil || string(out) != `"srv/a/rcpt-1"` {
		t.Errorf("Invoke = %s, %v", out, err)
	}
	if _, ok := r.Tool("srv", "b"); ok {
		t.Error("Tool(srv, b) found a tool of another server")
	}

	remote, err := r.Resolve(Exposure{Protocol: "a2a"}, "remote", "b")
	if err != nil {
		t.Fatalf("Resolve manifest-only tool: %v", err)
	}
	if remote.Server != nil {
		t.Error("manifest-only entry has a server")
	}
	if _, err := remote.Invoke(ctx, "rcpt-2", nil); !errors.Is(err, ErrNoServer) {
		t.Errorf("Invoke = %v, want ErrNoServer", err)
	}
	if err := remote.InvokeStream(ctx, "rcpt-2", nil, func(Chunk) error { return nil }); !errors.Is(err, ErrNoServer) {
		t.Errorf("InvokeStream = %v, want ErrNoServer", err)
	}
	if err := remote.Cancel(ctx, "rcpt-2"); !errors.Is(err, ErrNoServer) {
		t.Errorf("Cancel = %v, want ErrNoServer", err)
	}
}

// The registry keeps its own copy: changing the manifest afterwards changes
// neither the tools nor their exposure.
func TestRegistryCopiesManifest(t *testing.T) {
	m := manifest("srv", tool("a", `{"a2a.expose":false}`))
	r := NewRegistry()
	if err := r.AddManifest(m); err != nil {
		t.Fatal(err)
	}
	m.Tools[0].Name = "chio.renamed"
	m.Tools[0].Metadata["a2a.expose"] = json.RawMessage(`true`)
	m.Tools[0].InputSchema[0] = '['
	en, ok := r.Tool("srv", "a")
	if !ok {
		t.Fatal("tool a disappeared")
	}
	if len(r.Exposed(Exposure{Protocol: "a2a"})) != 0 {
		t.Error("a later metadata change exposed the tool")
	}
	if string(en.Tool.InputSchema) != `{"type":"object"}` {
		t.Errorf("input schema changed to %s", en.Tool.InputSchema)
	}
}

func TestLoadManifestFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"schema":"chio.manifest.v1","server_id":"srv","name":"S","version":"1","tools":[{"name":"a","description":"d","input_schema":{"type":"object"},"has_side_effects":false,"metadata":{"a2a.expose":true}}]}`)
	m, err := LoadManifestFile(good)
	if err != nil {
		t.Fatalf("LoadManifestFile: %v", err)
	}
	if m.ServerID != "srv" || len(m.Tools) != 1 || string(m.Tools[0].Metadata["a2a.expose"]) != "true" {
		t.Errorf("loaded %+v", m)
	}

	cases := map[string]string{
		"missing":       filepath.Join(dir, "missing.json"),
		"not json":      write("bad.json", `{"schema":`),
		"unknown field": write("unknown.json", `{"schema":"chio.manifest.v1","server_id":"srv","name":"S","version":"1","tools":[],"extra":1}`),
		"no tools":      write("empty.json", `{"schema":"chio.manifest.v1","server_id":"srv","name":"S","version":"1","tools":[]}`),
		"directory":     dir,
		"too large":     write("large.json", `{"schema":"`+strings.Repeat("x", MaxManifestBytes)+`"}`),
	}
	for name, path := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := LoadManifestFile(path)
			if err == nil || m != nil {
				t.Fatalf("LoadManifestFile(%s) = %v, %v", path, m, err)
			}
			if !strings.Contains(err.Error(), "load manifest "+path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}
