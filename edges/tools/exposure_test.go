package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// tool builds a definition with the given metadata (a JSON object).
func tool(name, metadata string) schemas.ToolDefinition {
	d := def(`{"type":"object"}`)
	d.Name = name
	if metadata != "" {
		if err := json.Unmarshal([]byte(metadata), &d.Metadata); err != nil {
			panic(fmt.Sprintf("test metadata %s: %v", metadata, err))
		}
	}
	return d
}

func manifest(serverID string, tools ...schemas.ToolDefinition) *schemas.ToolManifest {
	return &schemas.ToolManifest{
		Schema: schemas.ManifestSchema, ServerID: serverID, Name: serverID, Version: "1.0.0", Tools: tools,
	}
}

func names(entries []*Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Manifest.ServerID + "/" + e.Tool.Name
	}
	return out
}

func exposureRegistry(t *testing.T) *Registry {
	t.Helper()
	r := NewRegistry()
	for _, m := range []*schemas.ToolManifest{
		manifest("pricing",
			tool("quote", `{"a2a.expose":true,"a2a.tier":"partner"}`),
			tool("public_quote", `{"a2a.expose":true,"a2a.tier":"public","acp.expose":true}`),
			tool("hidden", ``),
			tool("string_true", `{"a2a.expose":"true"}`),
			tool("one", `{"a2a.expose":1}`),
			tool("null", `{"a2a.expose":null}`),
			tool("expose_false", `{"a2a.expose":false}`),
			tool("acp_only", `{"acp.expose":true}`),
			tool("tier_not_string", `{"a2a.expose":true,"a2a.tier":["partner"]}`),
			tool("chio.admin", `{"a2a.expose":true}`),
			tool("chio::ledger", `{"a2a.expose":true}`),
			tool("chio_internal_gc", `{"a2a.expose":true}`),
			tool("$sys", `{"a2a.expose":true}`),
			tool("CHIO.upper", `{"a2a.expose":true}`),
			tool(" chio.spaced", `{"a2a.expose":true}`),
			tool("ops::restart", `{"a2a.expose":true}`),
			tool("chiosearch", `{"a2a.expose":true}`), // not internal: no separator
		),
		manifest("chio.kernel", tool("status", `{"a2a.expose":true}`)),
		manifest("weather", tool("forecast", `{"a2a.expose":true}`), tool("quote", `{"a2a.expose":true,"a2a.tier":"partner"}`)),
		manifest("echo", tool("say", `{"a2a.expose":true}`)),
		manifest("echo2", tool("say", `{"a2a.expose":false}`)),
	} {
		if err := r.AddManifest(m); err != nil {
			t.Fatalf("AddManifest(%s): %v", m.ServerID, err)
		}
	}
	return r
}

func TestExposed(t *testing.T) {
	r := exposureRegistry(t)
	cases := []struct {
		name string
		e    Exposure
		want []string
	}{
		{"a2a opt-in only", Exposure{Protocol: "a2a"},
			[]string{"echo/say", "pricing/chiosearch", "pricing/ops::restart", "pricing/public_quote", "pricing/quote", "pricing/tier_not_string", "weather/forecast", "weather/quote"}},
		{"acp reads acp.expose", Exposure{Protocol: "acp"},
			[]string{"pricing/acp_only", "pricing/public_quote"}},
		{"tier partner", Exposure{Protocol: "a2a", Tier: "partner"},
			[]string{"pricing/quote", "weather/quote"}},
		{"tier public", Exposure{Protocol: "a2a", Tier: "public"}, []string{"pricing/public_quote"}},
		{"tier nobody has", Exposure{Protocol: "a2a", Tier: "ops"}, nil},
		{"acp tier reads acp.tier", Exposure{Protocol: "acp", Tier: "public"}, nil},
		{"expose all keeps the hard floor", Exposure{Protocol: "a2a", ExposeAll: true},
			[]string{"echo/say", "echo2/say", "pricing/acp_only", "pricing/chiosearch", "pricing/expose_false", "pricing/hidden", "pricing/null", "pricing/one", "pricing/ops::restart", "pricing/public_quote", "pricing/quote", "pricing/string_true", "pricing/tier_not_string", "weather/forecast", "weather/quote"}},
		{"expose all keeps the tier filter", Exposure{Protocol: "a2a", ExposeAll: true, Tier: "partner"},
			[]string{"pricing/quote", "weather/quote"}},
		{"custom internal prefixes", Exposure{Protocol: "a2a", InternalPrefixes: []string{"ops::", "", "WEATHER"}},
			[]string{"echo/say", "pricing/chiosearch", "pricing/public_quote", "pricing/quote", "pricing/tier_not_string"}},
		{"empty protocol fails closed", Exposure{ExposeAll: true}, nil},
		{"dotted protocol fails closed", Exposure{Protocol: "a2a.x", ExposeAll: true}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := names(r.Exposed(c.e)); !slices.Equal(got, c.want) {
				t.Errorf("Exposed = %q\nwant      %q", got, c.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	r := exposureRegistry(t)
	a2a := Exposure{Protocol: "a2a"}
	cases := []struct {
		name           string
		e              Exposure
		server, tool   string
		wantErr        error
		wantServerTool string
	}{
		{"exposed", a2a, "pricing", "quote", nil, "pricing/quote"},
		{"hidden", a2a, "pricing", "hidden", ErrNotExposed, ""},
		{"string true", a2a, "pricing", "string_true", ErrNotExposed, ""},
		{"wrong protocol", Exposure{Protocol: "acp"}, "pricing", "quote", ErrNotExposed, ""},
		{"wrong tier", Exposure{Protocol: "a2a", Tier: "public"}, "pricing", "quote", ErrNotExposed, ""},
		{"unknown tool", a2a, "pricing", "nope", ErrUnknownTool, ""},
		{"unknown server", a2a, "nope", "quote", ErrUnknownTool, ""},
		{"internal tool", a2a, "pricing", "chio.admin", ErrInternalTool, ""},
		{"internal tool, expose all", Exposure{Protocol: "a2a", ExposeAll: true}, "pricing", "chio::ledger", ErrInternalTool, ""},
		{"internal upper case", Exposure{Protocol: "a2a", ExposeAll: true}, "pricing", "CHIO.upper", ErrInternalTool, ""},
		{"internal leading space", Exposure{Protocol: "a2a", ExposeAll: true}, "pricing", " chio.spaced", ErrInternalTool, ""},
		{"internal dollar", Exposure{Protocol: "a2a", ExposeAll: true}, "pricing", "$sys", ErrInternalTool, ""},
		{"internal server, expose all", Exposure{Protocol: "a2a", ExposeAll: true}, "chio.kernel", "status", ErrInternalTool, ""},
		{"internal even when unknown", a2a, "chio_internal", "whatever", ErrInternalTool, ""},
		{"custom prefix", Exposure{Protocol: "a2a", InternalPrefixes: []string{"ops::"}}, "pricing", "ops::restart", ErrInternalTool, ""},
		{"invalid exposure", Exposure{}, "pricing", "quote", ErrNotExposed, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			en, err := r.Resolve(c.e, c.server, c.tool)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || en != nil {
					t.Fatalf("Resolve = %v, %v; want %v", en, err, c.wantErr)
				}
				for _, other := range []error{ErrNotExposed, ErrUnknownTool, ErrInternalTool} {
					if other != c.wantErr && errors.Is(err, other) {
						t.Errorf("error %v also matches %v; the errors must stay distinct", err, other)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if got := en.Manifest.ServerID + "/" + en.Tool.Name; got != c.wantServerTool {
				t.Errorf("Resolve = %s, want %s", got, c.wantServerTool)
			}
		})
	}
}

func TestResolveInternalMessage(t *testing.T) {
	_, err := exposureRegistry(t).Resolve(Exposure{Protocol: "a2a"}, "pricing", "chio.admin")
	if err == nil || !strings.Contains(err.Error(), "internal namespace") {
		t.Errorf("error %v does not say internal namespace", err)
	}
}

func TestResolveTool(t *testing.T) {
	r := exposureRegistry(t)
	a2a := Exposure{Protocol: "a2a"}
	cases := []struct {
		name       string
		e          Exposure
		tool       string
		wantErr    error
		wantServer string
	}{
		{"unique", a2a, "forecast", nil, "weather"},
		{"one of two servers hides it", a2a, "say", nil, "echo"},
		{"ambiguous", a2a, "quote", ErrAmbiguousTool, ""},
		{"ambiguous under expose all", Exposure{Protocol: "a2a", ExposeAll: true}, "say", ErrAmbiguousTool, ""},
		{"tier disambiguates nothing", Exposure{Protocol: "a2a", Tier: "partner"}, "quote", ErrAmbiguousTool, ""},
		{"internal prefix disambiguates", Exposure{Protocol: "a2a", InternalPrefixes: []string{"weather"}}, "quote", nil, "pricing"},
		{"hidden", a2a, "hidden", ErrNotExposed, ""},
		{"unknown", a2a, "nope", ErrUnknownTool, ""},
		{"internal name", a2a, "chio.admin", ErrInternalTool, ""},
		{"internal name even if unknown", a2a, "$nothing", ErrInternalTool, ""},
		{"only on an internal server", Exposure{Protocol: "a2a", ExposeAll: true}, "status", ErrInternalTool, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			en, err := r.ResolveTool(c.e, c.tool)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || en != nil {
					t.Fatalf("ResolveTool = %v, %v; want %v", en, err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ResolveTool: %v", err)
			}
			if en.Manifest.ServerID != c.wantServer || en.Tool.Name != c.tool {
				t.Errorf("ResolveTool = %s/%s, want %s/%s", en.Manifest.ServerID, en.Tool.Name, c.wantServer, c.tool)
			}
		})
	}
	_, err := r.ResolveTool(a2a, "quote")
	if err == nil || !strings.Contains(err.Error(), `"pricing" "weather"`) {
		t.Errorf("ambiguity error %v does not name the servers", err)
	}
}

func TestHardFloorPrefixesIsFresh(t *testing.T) {
	p := HardFloorPrefixes()
	p[0] = "x"
	if HardFloorPrefixes()[0] == "x" {
		t.Fatal("HardFloorPrefixes shares its slice")
	}
	e := Exposure{Protocol: "a2a"}
	for _, name := range []string{"chio.x", "chio::x", "chio_internal", "chio_internal_x", "$x", "Chio.X", "\tchio.x"} {
		if !e.IsInternal(name) {
			t.Errorf("IsInternal(%q) = false", name)
		}
	}
	for _, name := range []string{"chio", "chiox", "my.chio.x", "x$", ""} {
		if e.IsInternal(name) {
			t.Errorf("IsInternal(%q) = true", name)
		}
	}
}
