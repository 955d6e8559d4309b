package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func helloCard() *AgentCard {
	return &AgentCard{
		Name:                 "chio-a2a-edge",
		Description:          "Chio-governed tools exposed as A2A skills",
		Version:              "0.1.0",
		SupportedInterfaces:  JSONRPCInterfaces("https://edge.example.com/a2a"),
		Capabilities:         AgentCapabilities{Streaming: false},
		SecuritySchemes:      map[string]SecurityScheme{"chioCapability": BearerScheme("", "Chio capability token")},
		SecurityRequirements: []map[string][]string{{"chioCapability": nil}},
		DefaultInputModes:    []string{"text/plain", "application/json"},
		DefaultOutputModes:   []string{"text/plain", "application/json"},
		Skills: []AgentSkill{{
			ID: "hello_task", Name: "hello_task", Description: "Return a collated greeting",
			InputModes:     []string{"text/plain"},
			BridgeFidelity: &BridgeFidelity{Kind: "adapted", Caveats: []string{"stream chunks are collated"}},
		}},
	}
}

func TestEncodeAgentCardGolden(t *testing.T) {
	got, err := EncodeAgentCard(helloCard())
	if err != nil {
		t.Fatal(err)
	}
	ext := `"extensions":[{"uri":"https://chio.dev/a2a/extensions/bridge-fidelity/v1","description":"Chio bridge fidelity: how faithfully each skill carries its governed tool (lossless, or adapted with caveats); params.bridgeFidelity maps skill ids to ratings",` +
		`"params":{"bridgeFidelity":{"hello_task":{"kind":"adapted","caveats":["stream chunks are collated"]}}}}]`
	want := `{"name":"chio-a2a-edge","description":"Chio-governed tools exposed as A2A skills","version":"0.1.0",` +
		`"supportedInterfaces":[{"url":"https://edge.example.com/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"https://edge.example.com/a2a","protocolBinding":"JSONRPC","protocolVersion":"0.3"}],` +
		`"capabilities":{"streaming":false,"pushNotifications":false,"extendedAgentCard":false,` + ext + `},` +
		`"securitySchemes":{"chioCapability":{"type":"http","scheme":"bearer","description":"Chio capability token","httpAuthSecurityScheme":{"scheme":"Bearer","description":"Chio capability token"}}},` +
		`"securityRequirements":[{"schemes":{"chioCapability":[]}}],` +
		`"defaultInputModes":["text/plain","application/json"],"defaultOutputModes":["text/plain","application/json"],` +
		`"skills":[{"id":"hello_task","name":"hello_task","description":"Return a collated greeting","tags":[],"inputModes":["text/plain"],"bridgeFidelity":{"kind":"adapted","caveats":["stream chunks are collated"]}}],` +
		`"url":"https://edge.example.com/a2a","protocolVersion":"0.3","preferredTransport":"JSONRPC","additionalInterfaces":[{"url":"https://edge.example.com/a2a","transport":"JSONRPC"}],` +
		`"security":[{"chioCapability":[]}]}`
	if string(got) != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}

	got, err = EncodeAgentCard10(helloCard())
	if err != nil {
		t.Fatal(err)
	}
	want = `{"name":"chio-a2a-edge","description":"Chio-governed tools exposed as A2A skills","version":"0.1.0",` +
		`"supportedInterfaces":[{"url":"https://edge.example.com/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"https://edge.example.com/a2a","protocolBinding":"JSONRPC","protocolVersion":"0.3"}],` +
		`"capabilities":{"streaming":false,"pushNotifications":false,"extendedAgentCard":false,` + ext + `},` +
		`"securitySchemes":{"chioCapability":{"httpAuthSecurityScheme":{"scheme":"Bearer","description":"Chio capability token"}}},` +
		`"securityRequirements":[{"schemes":{"chioCapability":[]}}],` +
		`"defaultInputModes":["text/plain","application/json"],"defaultOutputModes":["text/plain","application/json"],` +
		`"skills":[{"id":"hello_task","name":"hello_task","description":"Return a collated greeting","tags":[],"inputModes":["text/plain"]}]}`
	if string(got) != want {
		t.Errorf("1.0:\n got %s\nwant %s", got, want)
	}
	for _, v := range []Version{V10, V03} {
		a, _ := EncodeAgentCardFor(helloCard(), v)
		b, _ := map[Version]func(*AgentCard) ([]byte, error){V10: EncodeAgentCard10, V03: EncodeAgentCard}[v](helloCard())
		if string(a) != string(b) {
			t.Errorf("EncodeAgentCardFor(%s) is not its encoder", v)
		}
	}
}

// a2aSchema compiles the 1.0 JSON schema the conformance kit validates
// cards with, resolving its "lf.a2a.v1.X.jsonschema.json" references to
// its own definitions as the kit does (unknown ones accept any object).
func a2aSchema(t *testing.T, definition string) *jsonschema.Schema {
	t.Helper()
	raw, err := os.ReadFile("testdata/a2a-1.0.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	defs := doc["definitions"].(map[string]any)
	refs := map[string]string{}
	for name := range defs {
		camel := strings.ReplaceAll(name, " ", "")
		refs["lf.a2a.v1."+camel+".jsonschema.json"] = name
		refs["google.protobuf."+camel+".jsonschema.json"] = name
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				if name, ok := refs[r]; ok {
					x["$ref"] = "#/definitions/" + strings.ReplaceAll(name, " ", "%20")
				} else {
					delete(x, "$ref")
				}
			}
			for k, e := range x {
				x[k] = walk(e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	walk(doc)
	delete(doc, "$schema")
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("a2a.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("a2a.json#/definitions/" + strings.ReplaceAll(definition, " ", "%20"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ValidateCard10 reports whether card passes the kit's CARD-STRUCT-001
// schema check.
func validateCard10(t *testing.T, card []byte) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(card))
	if err != nil {
		t.Fatal(err)
	}
	return a2aSchema(t, "Agent Card").Validate(doc)
}

// The 1.0 card passes the 1.0 schema; the 0.3-compatible one does not (its
// 0.3 members are additional properties), which is why 1.0 clients get the
// former.
func TestAgentCard10Schema(t *testing.T) {
	open := helloCard()
	open.SecurityRequirements, open.SecuritySchemes = nil, nil
	open.Provider = &AgentProvider{Organization: "chio", URL: "https://chio.dev"}
	open.Capabilities.Extensions = []AgentExtension{{URI: "urn:x", Required: true, Params: map[string]any{"a": 1}}}
	open.Skills = append(open.Skills, AgentSkill{ID: "plain", Name: "plain", Examples: []string{"hi"}, Tags: []string{"t"}})
	for _, c := range []*AgentCard{open, {SupportedInterfaces: JSONRPCInterfaces("http://x/a2a")}} {
		b, err := EncodeAgentCard10(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := validateCard10(t, b); err != nil {
			t.Errorf("1.0 card fails the 1.0 schema: %v\n%s", err, b)
		}
		assertNoNull(t, b)
	}
	// Signed: the signatures member is in the schema too.
	signed, _ := EncodeAgentCard10(open)
	signed = append(signed[:len(signed)-1], `,"signatures":[{"protected":"e30","signature":"AA"}]}`...)
	if err := validateCard10(t, signed); err != nil {
		t.Errorf("signed 1.0 card: %v", err)
	}
	dual, _ := EncodeAgentCard(open)
	if err := validateCard10(t, dual); err == nil || !strings.Contains(err.Error(), "additional properties") {
		t.Errorf("the 0.3-compatible card passes the 1.0 schema? %v", err)
	}
	// The a2a-go shape of a security requirement is not the schema's: the
	// reason an edge declares none unless it enforces one.
	if err := validateCard10(t, mustEncode10(t, helloCard())); err == nil || !strings.Contains(err.Error(), "securityRequirements") {
		t.Errorf("a2a-go requirement shape: %v", err)
	}
}

func mustEncode10(t *testing.T, c *AgentCard) []byte {
	t.Helper()
	b, err := EncodeAgentCard10(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEncodeAgentCardNoNulls(t *testing.T) {
	minimal := &AgentCard{SupportedInterfaces: []AgentInterface{{URL: "stdio://", ProtocolBinding: "json-rpc-stdio", ProtocolVersion: "1.0"}},
		Skills: []AgentSkill{{ID: "s"}}}
	for _, c := range []*AgentCard{minimal, helloCard()} {
		b, err := EncodeAgentCard(c)
		if err != nil {
			t.Fatal(err)
		}
		assertNoNull(t, b)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"supportedInterfaces", "defaultInputModes", "defaultOutputModes", "skills", "additionalInterfaces"} {
			if jsonKind(m[k]) != 'a' {
				t.Errorf("%s is %s, want an array", k, m[k])
			}
		}
		for _, k := range []string{"url", "protocolVersion", "preferredTransport", "name", "description", "version", "capabilities"} {
			if _, ok := m[k]; !ok {
				t.Errorf("missing %s", k)
			}
		}
	}
	// Without a 0.3 interface the first one stands in for the 0.3 fields.
	b, _ := EncodeAgentCard(minimal)
	var m struct {
		URL                string `json:"url"`
		PreferredTransport string `json:"preferredTransport"`
	}
	if json.Unmarshal(b, &m) != nil || m.URL != "stdio://" || m.PreferredTransport != "json-rpc-stdio" {
		t.Errorf("fallback interface: %s", b)
	}
}

func TestEncodeAgentCardErrors(t *testing.T) {
	if _, err := EncodeAgentCard(nil); err == nil {
		t.Error("nil card")
	}
	if _, err := EncodeAgentCard(&AgentCard{}); err == nil {
		t.Error("card without interfaces")
	}
	c := helloCard()
	c.SecuritySchemes = map[string]SecurityScheme{"x": {}}
	if _, err := EncodeAgentCard(c); err == nil {
		t.Error("empty scheme")
	}
}
