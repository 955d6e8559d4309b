package tools

import (
	"errors"
	"strings"
	"testing"
)

// Replace swaps a server's tools: added ones resolve, removed ones are
// unknown, every tool can go, and only the registered server may replace.
func TestReplace(t *testing.T) {
	exp := Exposure{Protocol: "a2a", ExposeAll: true}
	srv := fake("srv", manifest("srv", tool("a", ""), tool("b", "")), "a", "b")
	reg := NewRegistry()
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		tools   []string
		s       Server
		wantErr string
		want    string
	}{
		{"add c, drop a", []string{"b", "c"}, srv, "", "srv/b srv/c"},
		{"every tool gone", nil, srv, "", ""},
		{"every tool gone again", nil, srv, "", ""},
		{"another server takes over a server with no tools", []string{"x"}, fake("srv", nil), "registered with another server", ""},
		{"back again", []string{"a"}, srv, "", "srv/a"},
		{"another server under the id", []string{"x"}, fake("srv", nil), "registered with another server", "srv/a"},
		{"unknown id", []string{"x"}, fake("nope", nil), "not registered", "srv/a"},
		{"tools and manifest disagree", []string{"q"}, nil, "does not list", "srv/a"},
	}
	for _, st := range steps {
		s := st.s
		if s == nil {
			s = fake("srv", manifest("srv", tool("q", "")), "z")
		} else if f := s.(*fakeServer); f.manifest == nil || f == srv {
			var defs = manifest(f.id)
			for _, n := range st.tools {
				defs.Tools = append(defs.Tools, tool(n, ""))
			}
			f.manifest, f.tools = defs, st.tools
		}
		err := reg.Replace(s)
		if st.wantErr == "" && err != nil || st.wantErr != "" && (err == nil || !strings.Contains(err.Error(), st.wantErr)) {
			t.Fatalf("%s: err %v, want %q", st.name, err, st.wantErr)
		}
		if got := strings.Join(names(reg.Exposed(exp)), " "); got != st.want {
			t.Fatalf("%s: exposed %q, want %q", st.name, got, st.want)
		}
	}
	if _, err := reg.ResolveTool(exp, "c"); !errors.Is(err, ErrUnknownTool) {
		t.Fatalf("a removed tool resolves: %v", err)
	}
}
