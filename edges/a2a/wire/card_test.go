package wire

import (
	"encoding/json"
	"testing"
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
	want := `{"name":"chio-a2a-edge","description":"Chio-governed tools exposed as A2A skills","version":"0.1.0",` +
		`"supportedInterfaces":[{"url":"https://edge.example.com/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"https://edge.example.com/a2a","protocolBinding":"JSONRPC","protocolVersion":"0.3"}],` +
		`"capabilities":{"streaming":false,"pushNotifications":false,"extendedAgentCard":false},` +
		`"securitySchemes":{"chioCapability":{"type":"http","scheme":"bearer","description":"Chio capability token","httpAuthSecurityScheme":{"scheme":"Bearer","description":"Chio capability token"}}},` +
		`"securityRequirements":[{"schemes":{"chioCapability":[]}}],` +
		`"defaultInputModes":["text/plain","application/json"],"defaultOutputModes":["text/plain","application/json"],` +
		`"skills":[{"id":"hello_task","name":"hello_task","description":"Return a collated greeting","tags":[],"inputModes":["text/plain"],"bridgeFidelity":{"kind":"adapted","caveats":["stream chunks are collated"]}}],` +
		`"url":"https://edge.example.com/a2a","protocolVersion":"0.3","preferredTransport":"JSONRPC","additionalInterfaces":[{"url":"https://edge.example.com/a2a","transport":"JSONRPC"}],` +
		`"security":[{"chioCapability":[]}],"supportsAuthenticatedExtendedCard":false}`
	if string(got) != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
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
