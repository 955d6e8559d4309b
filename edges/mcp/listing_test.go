package mcp

import (
	"encoding/json"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

func TestInputSchema(t *testing.T) {
	cases := []struct{ name, in, want, err string }{
		{"absent", ``, `{"type":"object"}`, ""},
		{"null", `null`, `{"type":"object"}`, ""},
		{"object", `{"type":"object","properties":{"a":{}}}`, `{"type":"object","properties":{"a":{}}}`, ""},
		{"no type", `{"properties":{"a":{}},"x-chio-streaming":true}`, `{"properties":{"a":{}},"type":"object","x-chio-streaming":true}`, ""},
		{"a string", `{"type":"string"}`, "", `type is "string", not "object"`},
		{"several types", `{"type":["object","null"]}`, "", `type is ["object","null"], not "object"`},
		{"not an object", `[1]`, "", "not a JSON object"},
		{"a boolean schema", `true`, "", "not a JSON object"},
	}
	for _, c := range cases {
		got, err := inputSchema(json.RawMessage(c.in))
		if (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) || (err == nil && string(got) != c.want) {
			t.Errorf("%s: %s %v", c.name, got, err)
		}
	}
}

func TestOutputSchema(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"absent", ``, ``},
		{"object", ` {"type":"object","properties":{"httpStatus":{"type":"integer"}}}`, `{"type":"object","properties":{"httpStatus":{"type":"integer"}}}`},
		{"a string: wrapped outputs, so none", `{"type":"string"}`, ``},
		{"no type", `{"properties":{}}`, ``},
	}
	for _, c := range cases {
		if got := outputSchema(json.RawMessage(c.in)); string(got) != c.want {
			t.Errorf("%s: %s", c.name, got)
		}
	}
}

func TestAnnotations(t *testing.T) {
	cases := []struct {
		name string
		def  schemas.ToolDefinition
		want string
	}{
		{"silent manifest", schemas.ToolDefinition{}, `null`},
		{"read-only", schemas.ToolDefinition{Annotations: &schemas.ToolAnnotations{ReadOnly: true, Idempotent: true}},
			`{"idempotentHint":true,"readOnlyHint":true}`},
		{"side effects overrule read-only", schemas.ToolDefinition{HasSideEffects: true, Annotations: &schemas.ToolAnnotations{ReadOnly: true}},
			`{"idempotentHint":false,"readOnlyHint":false}`},
		{"destructive", schemas.ToolDefinition{HasSideEffects: true, Annotations: &schemas.ToolAnnotations{Destructive: true}},
			`{"destructiveHint":true,"idempotentHint":false,"readOnlyHint":false}`},
		{"side effects alone", schemas.ToolDefinition{HasSideEffects: true}, `{"idempotentHint":false,"readOnlyHint":false}`},
		{"destructive but read-only", schemas.ToolDefinition{Annotations: &schemas.ToolAnnotations{ReadOnly: true, Destructive: true}},
			`{"idempotentHint":false,"readOnlyHint":true}`},
	}
	for _, c := range cases {
		got, err := json.Marshal(annotations(&c.def))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %s %v", c.name, got, err)
		}
	}
}

func TestStructured(t *testing.T) {
	cases := []struct {
		name, out string
		extra     map[string]any
		want      string
		httpFail  bool
	}{
		{"object", `{"a":1}`, nil, `{"a":1}`, false},
		{"string", `"hi"`, nil, `{"result":"hi"}`, false},
		{"array", `[1,2]`, nil, `{"result":[1,2]}`, false},
		{"nothing", ``, nil, `{"result":null}`, false},
		{"extra on an object", `{"a":1,"bridgeMode":"live"}`, map[string]any{"bridgeMode": "simulation"}, `{"a":1,"bridgeMode":"simulation"}`, false},
		{"API said 404", `{"httpStatus":404,"body":{}}`, nil, `{"httpStatus":404,"body":{}}`, true},
		{"API said 200", `{"httpStatus":200}`, nil, `{"httpStatus":200}`, false},
		{"status not a number", `{"httpStatus":"500"}`, nil, `{"httpStatus":"500"}`, false},
	}
	for _, c := range cases {
		got, err := structured(json.RawMessage(c.out), c.extra)
		if err != nil || string(got) != c.want || httpFailure(got) != c.httpFail {
			t.Errorf("%s: %s %v", c.name, got, err)
		}
	}
}
