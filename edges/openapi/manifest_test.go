package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// mustBuild loads testdata/file and builds it.
func mustBuild(t *testing.T, file string, cfg Config) *Bridge {
	t.Helper()
	s, err := Load(context.Background(), "testdata/"+file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hex8 is the collision suffix of an operation, computed here independently
// of names.go.
func hex8(op string) string {
	sum := sha256.Sum256([]byte(op))
	return hex.EncodeToString(sum[:])[:8]
}

// manifestSchema compiles the repository's chio.manifest.v1 JSON Schema.
func manifestSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := schemas.FS.ReadFile("jsonschema/manifest.v1.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("https://chio.dev/schemas/manifest.v1.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("https://chio.dev/schemas/manifest.v1.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBuildManifest(t *testing.T) {
	schema := manifestSchema(t)
	tests := []struct {
		file    string
		tools   []string
		skipped []string // "METHOD path"
	}{
		{
			file: "zoo-3.0.yaml",
			tools: []string{
				"listAnimals",
				"post_animals_" + hex8("POST /animals"), // its derived name is /feeding's operationId
				"get_animals_id",                        // its operationId does not fit
				"renameAnimal", "removeAnimal",
				"get_animals_id_" + hex8("GET /animals_id"), // collides with GET /animals/{id}
				"post_animals",
			},
			skipped: []string{"POST /forms"},
		},
		{
			file:  "catalog-3.1.json",
			tools: []string{"listItems", "createItem", "get_items_sku", "putItem", "head_items_sku", "options_items_sku"},
		},
		{
			file:  "petstore-expanded.yaml",
			tools: []string{"findPets", "addPet", "get_pets_id", "deletePet"},
		},
		{
			file: "httpbin.yaml",
			tools: []string{"get_anything_path", "post_anything_path", "bearer", "bytes", "delay", "httpDelete",
				"httpGet", "headers", "httpPost", "redirectTo", "status"},
		},
	}
	for _, tt := range tests {
		for _, outputs := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/outputs=%v", tt.file, outputs), func(t *testing.T) {
				b := mustBuild(t, tt.file, Config{ServerID: "srv-" + tt.file, OutputSchemas: outputs})
				m := b.Manifest()
				var names []string
				for _, tool := range m.Tools {
					names = append(names, tool.Name)
					if !validToolName(tool.Name) {
						t.Errorf("tool name %q is not [a-zA-Z0-9_-]{1,64}", tool.Name)
					}
					if (len(tool.OutputSchema) > 0) != outputs {
						t.Errorf("%s: output_schema present = %v, want %v", tool.Name, len(tool.OutputSchema) > 0, outputs)
					}
				}
				if !slices.Equal(names, tt.tools) {
					t.Errorf("tools = %q\nwant    %q", names, tt.tools)
				}
				var skipped []string
				for _, s := range b.Skipped() {
					skipped = append(skipped, s.Method+" "+s.Path)
				}
				if !slices.Equal(skipped, tt.skipped) {
					t.Errorf("skipped = %q, want %q", skipped, tt.skipped)
				}
				// The repository's own checks: Validate, the strict parser and
				// the manifest's JSON Schema.
				if err := m.Validate(); err != nil {
					t.Errorf("Validate: %v", err)
				}
				raw, err := json.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := schemas.ParseManifest(raw); err != nil {
					t.Errorf("ParseManifest: %v", err)
				}
				doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				if err := schema.Validate(doc); err != nil {
					t.Errorf("manifest.v1 schema: %v", err)
				}
				// Every tool schema is itself a valid draft 2020-12 schema.
				for _, tool := range m.Tools {
					for _, s := range []json.RawMessage{tool.InputSchema, tool.OutputSchema} {
						if len(s) == 0 {
							continue
						}
						if _, err := compileInputSchema(tool.Name, s); err != nil {
							t.Errorf("%s: schema does not compile: %v", tool.Name, err)
						}
					}
				}
				// Manifest returns a copy.
				m.Tools[0].Name = "changed"
				m.Tools[0].Metadata[MetaMethod] = json.RawMessage(`"X"`)
				if again := b.Manifest(); again.Tools[0].Name == "changed" || string(again.Tools[0].Metadata[MetaMethod]) == `"X"` {
					t.Error("changing the returned manifest changed the bridge's")
				}
			})
		}
	}
}

// toolOf finds a tool definition by name.
func toolOf(t *testing.T, m *schemas.ToolManifest, name string) *schemas.ToolDefinition {
	t.Helper()
	for i := range m.Tools {
		if m.Tools[i].Name == name {
			return &m.Tools[i]
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

func TestToolDefinitions(t *testing.T) {
	zoo := mustBuild(t, "zoo-3.0.yaml", Config{ServerID: "zoo"}).Manifest()
	catalog := mustBuild(t, "catalog-3.1.json", Config{ServerID: "catalog"}).Manifest()
	petstore := mustBuild(t, "petstore-expanded.yaml", Config{ServerID: "pets"}).Manifest()
	ann := func(readOnly, destructive, idempotent, approval bool) schemas.ToolAnnotations {
		return schemas.ToolAnnotations{ReadOnly: readOnly, Destructive: destructive, Idempotent: idempotent, RequiresApproval: approval}
	}
	tests := []struct {
		m           *schemas.ToolManifest
		tool        string
		description string
		side        bool
		annotations schemas.ToolAnnotations
		deny        bool
		required    []string
		props       []string
		meta        map[string]string // extra metadata expected, raw JSON
	}{
		{
			m: zoo, tool: "listAnimals", description: "List animals\n\nReturns every animal, filtered.",
			annotations: ann(true, false, true, false),
			props:       []string{"X-Trace", "limit", "session", "tags"}, // Accept is ignored
			meta:        map[string]string{MetaMethod: `"GET"`, MetaPath: `"/animals"`},
		},
		{
			m: zoo, tool: "post_animals_" + hex8("POST /animals"), description: "Add an animal", side: true, deny: true,
			required: []string{"body"}, props: []string{"body"},
		},
		{
			m: zoo, tool: "get_animals_id", description: "GET /animals/{id}",
			annotations: ann(true, false, true, false),
			required:    []string{"id"}, props: []string{"id", "query.id"}, // the query id is keyed by location
		},
		{
			m: zoo, tool: "removeAnimal", description: "DELETE /animals/{id}", side: true, deny: true,
			annotations: ann(false, true, true, true), required: []string{"id"}, props: []string{"id"},
			meta: map[string]string{"x-chio-approval-required": `true`, "x-chio-sensitivity": `"restricted"`, "x-chio-budget-limit": `100`},
		},
		{
			// x-chio-side-effects: false makes a PATCH read-only and allowed by wildcard grants.
			m: zoo, tool: "renameAnimal", description: "PATCH /animals/{id}",
			annotations: ann(true, false, false, false), required: []string{"body", "id"}, props: []string{"body", "id"},
			meta: map[string]string{"x-chio-side-effects": `false`},
		},
		{
			m: catalog, tool: "createItem", description: "POST /items", side: true, deny: true,
			required: []string{"body"}, props: []string{"body"},
		},
		{
			m: catalog, tool: "head_items_sku", description: "HEAD /items/{sku}",
			annotations: ann(true, false, true, false), required: []string{"sku"}, props: []string{"sku"},
		},
		{
			m: catalog, tool: "putItem", description: "PUT /items/{sku}", side: true, deny: true,
			annotations: ann(false, false, true, false), required: []string{"body", "sku"}, props: []string{"body", "sku"},
		},
		{
			m: petstore, tool: "deletePet", description: "deletes a single pet based on the ID supplied", side: true, deny: true,
			annotations: ann(false, true, true, false), required: []string{"id"}, props: []string{"id"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			def := toolOf(t, tt.m, tt.tool)
			if def.Description != tt.description {
				t.Errorf("description = %q, want %q", def.Description, tt.description)
			}
			if def.HasSideEffects != tt.side {
				t.Errorf("has_side_effects = %v, want %v", def.HasSideEffects, tt.side)
			}
			if def.Annotations == nil || *def.Annotations != tt.annotations {
				t.Errorf("annotations = %+v, want %+v", def.Annotations, tt.annotations)
			}
			en := &tools.Entry{Manifest: tt.m, Tool: def}
			if en.DenyByDefault() != tt.deny {
				t.Errorf("deny by default = %v, want %v", en.DenyByDefault(), tt.deny)
			}
			var in struct {
				Type                 string                     `json:"type"`
				Properties           map[string]json.RawMessage `json:"properties"`
				Required             []string                   `json:"required"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			}
			if err := json.Unmarshal(def.InputSchema, &in); err != nil {
				t.Fatal(err)
			}
			props := slices.Sorted(maps.Keys(in.Properties))
			if in.Type != "object" || in.AdditionalProperties == nil || *in.AdditionalProperties {
				t.Errorf("input schema is not a closed object: %s", def.InputSchema)
			}
			if !slices.Equal(props, tt.props) || !slices.Equal(in.Required, tt.required) {
				t.Errorf("properties, required = %q, %q; want %q, %q", props, in.Required, tt.props, tt.required)
			}
			for _, k := range []string{MetaMCPExpose, MetaOpenAIExpose} {
				if string(def.Metadata[k]) != "true" {
					t.Errorf("metadata %s = %s, want true", k, def.Metadata[k])
				}
			}
			for k, want := range tt.meta {
				if got := string(def.Metadata[k]); got != want {
					t.Errorf("metadata %s = %s, want %s", k, got, want)
				}
			}
			if _, err := tools.ReadHints(def); err != nil {
				t.Errorf("ReadHints: %v", err)
			}
		})
	}
	// x-chio-publish: false leaves the operation out.
	for _, tool := range zoo.Tools {
		if tool.Name == "animalPhoto" || strings.Contains(tool.Name, "photo") {
			t.Errorf("unpublished operation became tool %s", tool.Name)
		}
	}
}

func TestSchemaConversion(t *testing.T) {
	zoo := mustBuild(t, "zoo-3.0.yaml", Config{ServerID: "zoo", OutputSchemas: true}).Manifest()
	catalog := mustBuild(t, "catalog-3.1.json", Config{ServerID: "catalog", OutputSchemas: true}).Manifest()
	tests := []struct {
		name string
		raw  json.RawMessage
		path []string // keys into the schema
		want string   // compact JSON
	}{
		// 3.0: nullable joins the type, boolean exclusiveMaximum becomes the bound.
		{"3.0 nullable integer with exclusive bound", toolOf(t, zoo, "listAnimals").InputSchema,
			[]string{"properties", "limit"},
			`{"description":"how many to return","exclusiveMaximum":100,"minimum":1,"type":["integer","null"]}`},
		// 3.0: nullable enum gains null; example becomes examples; a property
		// named "nullable" is a property, not a keyword; the recursive
		// component is referenced through $defs.
		{"3.0 component in $defs", toolOf(t, zoo, "post_animals_"+hex8("POST /animals")).InputSchema,
			[]string{"$defs", "NewAnimal"},
			`{"properties":{"friends":{"items":{"$ref":"#/$defs/NewAnimal"},"type":"array"},` +
				`"kind":{"enum":["dog","cat",null],"type":["string","null"]},"name":{"examples":["Rex"],"type":"string"},` +
				`"nullable":{"description":"a property named like the 3.0 keyword","type":"boolean"}},"required":["name"],"type":"object"}`},
		{"3.0 request body ref", toolOf(t, zoo, "post_animals_"+hex8("POST /animals")).InputSchema,
			[]string{"properties", "body"}, `{"$ref":"#/$defs/NewAnimal","description":"the animal to add"}`},
		{"3.0 text body", toolOf(t, zoo, "renameAnimal").InputSchema,
			[]string{"properties", "body"}, `{"type":"string"}`},
		// 3.1 schemas pass through: type arrays, numeric exclusiveMinimum, const.
		{"3.1 component", toolOf(t, catalog, "createItem").InputSchema,
			[]string{"$defs", "Item", "properties", "price"}, `{"exclusiveMinimum":0,"type":["number","null"]}`},
		{"3.1 parameter ref", toolOf(t, catalog, "listItems").InputSchema,
			[]string{"properties", "q"}, `{"description":"full-text query","type":["string","null"]}`},
		// Output schemas: the envelope with the 200 (else 201) schema under body.
		{"output 200", toolOf(t, zoo, "listAnimals").OutputSchema,
			[]string{"then", "properties", "body"}, `{"items":{"$ref":"#/$defs/Animal"},"type":"array"}`},
		{"output 200 only for 200", toolOf(t, zoo, "listAnimals").OutputSchema,
			[]string{"if", "properties", "httpStatus"}, `{"const":200}`},
		{"any other answer unconstrained", toolOf(t, zoo, "listAnimals").OutputSchema,
			[]string{"properties", "body"}, `{}`},
		{"output 201 before 202", toolOf(t, catalog, "createItem").OutputSchema,
			[]string{"then", "properties", "body"}, `{"$ref":"#/$defs/Item"}`},
		{"output without a schema", toolOf(t, catalog, "putItem").OutputSchema,
			[]string{"properties", "body"}, `{}`},
		{"output envelope", toolOf(t, catalog, "putItem").OutputSchema,
			[]string{"required"}, `["httpStatus","method","path","body"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v any
			if err := json.Unmarshal(tt.raw, &v); err != nil {
				t.Fatal(err)
			}
			for _, k := range tt.path {
				m, ok := v.(map[string]any)
				if !ok {
					t.Fatalf("no %q in %s", k, tt.raw)
				}
				v = m[k]
			}
			got, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestFrom30(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"nullable without type", `{"allOf":[{"$ref":"#/$defs/A"}],"nullable":true}`, `{"anyOf":[{"allOf":[{"$ref":"#/$defs/A"}]},{"type":"null"}]}`},
		{"nullable false dropped", `{"type":"string","nullable":false}`, `{"type":"string"}`},
		{"exclusive minimum", `{"minimum":0,"exclusiveMinimum":true}`, `{"exclusiveMinimum":0}`},
		{"exclusive false", `{"maximum":9,"exclusiveMaximum":false}`, `{"maximum":9}`},
		{"example kept when examples exist", `{"example":1,"examples":[2]}`, `{"examples":[2]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal([]byte(tt.in), &m); err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(from30(m))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("from30(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestDerivedName(t *testing.T) {
	long := "/" + strings.Repeat("segment/", 12) + "{id}"
	tests := []struct {
		method, path, want string
	}{
		{"GET", "/pets/{petId}", "get_pets_petId"},
		{"GET", "/", "get"},
		{"DELETE", "/v1.0/user-profiles/{id}", "delete_v1_0_user-profiles_id"},
		{"PUT", "/a__b//c.json", "put_a_b_c_json"},
		{"POST", "/caf\u00e9/{x}", "post_caf_x"},
		{"GET", long, ("get" + strings.Repeat("_segment", 12))[:55] + "_" + hex8("GET "+long)},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			got := derivedName(tt.method, tt.path)
			if got != tt.want {
				t.Errorf("derivedName = %q, want %q", got, tt.want)
			}
			if !validToolName(got) {
				t.Errorf("%q is not a valid tool name", got)
			}
		})
	}
}

func TestAssignNames(t *testing.T) {
	op := func(method, path, id string) *candidate {
		return &candidate{method: method, path: path, op: &openapi3.Operation{OperationID: id}}
	}
	sum16 := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])[:16]
	}
	tests := []struct {
		name string
		ops  []*candidate
		want []string
	}{
		{"operationIds win", []*candidate{op("GET", "/a", "listA"), op("POST", "/a", "")}, []string{"listA", "post_a"}},
		{"paths differing in punctuation", []*candidate{op("GET", "/a.b", ""), op("GET", "/a_b", "")},
			[]string{"get_a_b", "get_a_b_" + hex8("GET /a_b")}},
		{"an operationId takes a later derived name", []*candidate{op("GET", "/x", ""), op("POST", "/y", "get_x")},
			[]string{"get_x_" + hex8("GET /x"), "get_x"}},
		{"duplicate operationId", []*candidate{op("GET", "/a", "same"), op("GET", "/b", "same")}, []string{"same", "get_b"}},
		{"operationId that does not fit", []*candidate{op("GET", "/a", "list all"), op("GET", "/b", strings.Repeat("x", 65))},
			[]string{"get_a", "get_b"}},
		{"suffixed name taken too", []*candidate{op("GET", "/x", ""), op("GET", "/y", "get_x"), op("GET", "/z", "get_x_"+hex8("GET /x"))},
			[]string{"get_x_" + sum16("GET /x"), "get_x", "get_x_" + hex8("GET /x")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := assignNames(tt.ops); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range tt.ops {
				got = append(got, c.tool)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("names = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDescriptionCap(t *testing.T) {
	long := strings.Repeat("é", 600)
	c := &candidate{method: "GET", path: "/x", op: &openapi3.Operation{Summary: "  short  ", Description: long}}
	d := description(c)
	if n := utf8.RuneCountInString(d); n != schemas.MaxToolDescription || !strings.HasPrefix(d, "short\n\néé") || !strings.HasSuffix(d, "…") {
		t.Errorf("description has %d characters: %q…", n, d[:20])
	}
	pets := mustBuild(t, "petstore-expanded.yaml", Config{ServerID: "pets"}).Manifest()
	if n := utf8.RuneCountInString(toolOf(t, pets, "findPets").Description); n != schemas.MaxToolDescription {
		t.Errorf("findPets description has %d characters, want the cap %d", n, schemas.MaxToolDescription)
	}
}

func TestBuildErrors(t *testing.T) {
	ctx := context.Background()
	parse := func(doc string) *Spec {
		t.Helper()
		s, err := Parse(ctx, []byte(doc), "inline")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	unpublished, err := Load(ctx, "testdata/unpublished.yaml")
	if err != nil {
		t.Fatal(err)
	}
	badExt, err := Load(ctx, "testdata/bad-extension.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const head = "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n"
	tests := []struct {
		name    string
		spec    *Spec
		cfg     Config
		wantErr error
		wantMsg string
	}{
		{name: "nothing publishable", spec: unpublished, cfg: Config{ServerID: "s"}, wantErr: ErrNoOperations, wantMsg: "multipart/form-data"},
		{name: "no paths", spec: parse(head + "  {}\n"), cfg: Config{ServerID: "s"}, wantErr: ErrNoOperations},
		{name: "3.1 without paths", spec: parse("openapi: 3.1.0\ninfo: {title: x, version: '1'}\nwebhooks: {}\n"), cfg: Config{ServerID: "s"}, wantErr: ErrNoOperations},
		{name: "null path item", spec: parse(head + "  /a: null\n"), cfg: Config{ServerID: "s"}, wantErr: ErrNoOperations},
		{name: "only TRACE", spec: parse(head + "  /a:\n    trace:\n      responses: {'200': {description: ok}}\n"), cfg: Config{ServerID: "s"}, wantErr: ErrNoOperations},
		{name: "x-chio-publish not a boolean", spec: badExt, cfg: Config{ServerID: "s"}, wantMsg: "x-chio-publish must be a boolean"},
		{name: "x-chio-side-effects not a boolean", spec: parse(head + "  /a:\n    get:\n      x-chio-side-effects: 1\n      responses: {'200': {description: ok}}\n"),
			cfg: Config{ServerID: "s"}, wantMsg: "x-chio-side-effects must be a boolean"},
		{name: "no server id", spec: unpublished, cfg: Config{}, wantMsg: "server id is required"},
		{name: "nil spec", cfg: Config{ServerID: "s"}, wantMsg: "spec is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Build(tt.spec, tt.cfg)
			if err == nil {
				t.Fatalf("Build succeeded with %d tools", len(b.Routes()))
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %v, want it to mention %q", err, tt.wantMsg)
			}
		})
	}
}

// TestRegistry registers the bridge's server in the edges' registry: the
// manifest passes its checks, and exposure follows the metadata.
func TestRegistry(t *testing.T) {
	b := mustBuild(t, "zoo-3.0.yaml", Config{ServerID: "zoo"})
	srv, err := NewServer(b, Upstream{})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := reg.Register(srv); err != nil {
		t.Fatalf("Register: %v", err)
	}
	for _, protocol := range []string{"mcp", "openai"} {
		exposed := reg.Exposed(tools.Exposure{Protocol: protocol})
		if len(exposed) != len(b.Routes()) {
			t.Errorf("%s exposes %d tools, want %d", protocol, len(exposed), len(b.Routes()))
		}
	}
	if n := len(reg.Exposed(tools.Exposure{Protocol: "a2a"})); n != 0 {
		t.Errorf("a2a exposes %d tools, want none (not opted in)", n)
	}
	for _, rt := range b.Routes() {
		en, ok := reg.Tool("zoo", rt.Tool)
		if !ok {
			t.Fatalf("tool %s not registered", rt.Tool)
		}
		want := rt.SideEffects || en.Tool.Annotations.RequiresApproval
		if en.DenyByDefault() != want {
			t.Errorf("%s: deny by default = %v, want %v", rt.Tool, en.DenyByDefault(), want)
		}
		if got, ok := b.Route(rt.Tool); !ok || !reflect.DeepEqual(got, rt) {
			t.Errorf("Route(%s) does not return its route", rt.Tool)
		}
	}
}
