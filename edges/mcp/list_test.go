package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/tools"
)

// The official client, over both the sessionless protocol (server/discover)
// and the legacy initialize handshake, sees the server's info, the tools
// capability and exactly the exposed tools its capability may call.
func TestInitializeAndListTools(t *testing.T) {
	f := start(t)
	cases := []struct {
		name, version, token string
		want                 []string
	}{
		{"full, default protocol", "", fullToken(t), allNames},
		{"full, 2025-11-25", "2025-11-25", fullToken(t), allNames},
		{"full, 2025-03-26", "2025-03-26", fullToken(t), allNames},
		{"one server", "2025-11-25", valid(t, "cap-twin", "twin-srv"), []string{"twin-srv__echo"}},
		{"one server, default protocol", "", valid(t, "cap-sim", "sim-srv"), []string{"create_pet"}},
		{"no grant", "2025-11-25", valid(t, "cap-none", "elsewhere"), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := mustConnect(t, f.url, c.token, c.version)
			init := cs.InitializeResult()
			if init.ServerInfo == nil || init.ServerInfo.Name != "chio-test" || init.ServerInfo.Version != "1.2.3" ||
				init.Capabilities == nil || init.Capabilities.Tools == nil {
				t.Fatalf("initialize: %+v", init)
			}
			res, err := cs.ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tl := range res.Tools {
				got = append(got, tl.Name)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("tools %v, want %v", got, c.want)
			}
		})
	}
}

// Each listed tool carries the manifest's description, schemas, hints and
// its Chio names.
func TestToolDefinitions(t *testing.T) {
	f := start(t)
	cs := mustConnect(t, f.url, fullToken(t), "2025-11-25")
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		byName[tl.Name] = tl
	}
	js := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// canon is a JSON text as the client's map decoding orders it.
	canon := func(s string) string {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return js(v)
	}
	cases := []struct {
		name, description, input, output, annotations, server, tool string
	}{
		{"read", "read a file", pathSchema, `{"type":"object"}`, `{"idempotentHint":true,"readOnlyHint":true}`, "files-srv", "read"},
		{"files-srv__echo", "echo", pathSchema, `null`, `null`, "files-srv", "echo"},
		{"twin-srv__echo", "echo too", pathSchema, `null`, `null`, "twin-srv", "echo"},
		{"explode", "fails", `{"type":"object"}`, `null`, `{"destructiveHint":true,"idempotentHint":false,"readOnlyHint":false}`, "files-srv", "explode"},
		{"create_pet", "adds a pet", `{"type":"object"}`, `null`, `{"idempotentHint":false,"readOnlyHint":false}`, "sim-srv", "create_pet"},
	}
	for _, c := range cases {
		tl, ok := byName[c.name]
		if !ok {
			t.Errorf("%s not listed", c.name)
			continue
		}
		if tl.Description != c.description || js(tl.InputSchema) != canon(c.input) || js(tl.OutputSchema) != canon(c.output) ||
			js(tl.Annotations) != canon(c.annotations) {
			t.Errorf("%s: %s", c.name, js(tl))
		}
		if m, ok := tl.Meta["chio"].(map[string]any); !ok || m["server_id"] != c.server || m["tool_name"] != c.tool {
			t.Errorf("%s: _meta %v", c.name, tl.Meta)
		}
	}
	// The Chio names map back.
	if n, ok := f.edge.Name("twin-srv", "echo"); !ok || n != "twin-srv__echo" {
		t.Errorf("Name: %q %v", n, ok)
	}
	for _, hidden := range [][2]string{{"files-srv", "secret"}, {"files-srv", "bad_schema"}} {
		if _, ok := f.edge.Name(hidden[0], hidden[1]); ok {
			t.Errorf("%v is listed", hidden)
		}
	}
	// Every tool is on the one page; a cursor names no other page.
	_, err = cs.ListTools(context.Background(), &sdk.ListToolsParams{Cursor: "page-2"})
	if code := rpcCode(err); code != codeInvalidParams {
		t.Errorf("cursor: %v", err)
	}
}

// WithExposure widens or narrows what is listed; the hard floor and the
// schemas MCP cannot carry still apply.
func TestExposure(t *testing.T) {
	cases := []struct {
		name     string
		exposure tools.Exposure
		want     []string
	}{
		{"expose all", tools.Exposure{Protocol: "mcp", ExposeAll: true},
			[]string{"files-srv__echo", "explode", "http_fail", "read", "scalar", "secret", "create_pet", "twin-srv__echo"}},
		{"another protocol's opt-in", tools.Exposure{Protocol: "a2a"}, nil},
		{"internal prefix", tools.Exposure{Protocol: "mcp", InternalPrefixes: []string{"twin-"}},
			[]string{"echo", "explode", "http_fail", "read", "scalar", "create_pet"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := start(t, WithExposure(c.exposure))
			res, err := mustConnect(t, f.url, fullToken(t), "").ListTools(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tl := range res.Tools {
				got = append(got, tl.Name)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("tools %v, want %v", got, c.want)
			}
		})
	}
}
