package openapi

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestCompileTools(t *testing.T) {
	cand := func(tool, input string) *candidate {
		return &candidate{method: "GET", path: "/" + tool, tool: tool, input: json.RawMessage(input), route: &Route{Tool: tool}}
	}
	const good = `{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"$defs":{"A":{"type":"integer"}}}`
	tests := []struct {
		name    string
		cands   []*candidate
		kept    []string
		skipped []string
	}{
		{"all compile together", []*candidate{cand("one", good), cand("two", `{"type":"object"}`)}, []string{"one", "two"}, nil},
		{"a bad schema is left out alone", []*candidate{cand("one", good), cand("bad", `{"type":"object","properties":{"a":{"minLength":"x"}}}`), cand("two", good)},
			[]string{"one", "two"}, []string{"GET /bad"}},
		{"a dangling reference", []*candidate{cand("dangling", `{"properties":{"a":{"$ref":"#/$defs/Missing"}}}`), cand("one", good)},
			[]string{"one"}, []string{"GET /dangling"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, skipped := compileTools(tt.cands)
			var names, skippedOps []string
			for _, c := range kept {
				names = append(names, c.tool)
				if c.route.schema == nil {
					t.Errorf("%s kept without a compiled schema", c.tool)
				}
			}
			for _, s := range skipped {
				skippedOps = append(skippedOps, s.Method+" "+s.Path)
			}
			if !slices.Equal(names, tt.kept) || !slices.Equal(skippedOps, tt.skipped) {
				t.Fatalf("kept %q, skipped %q; want %q, %q", names, skippedOps, tt.kept, tt.skipped)
			}
			// The compiled schemas validate: "a" must be an integer.
			for _, c := range kept {
				c.route.keys = map[string]bool{"a": true}
				_, err := c.route.arguments(json.RawMessage(`{"a":"x"}`))
				if strings.Contains(string(c.input), `"A"`) && err == nil {
					t.Errorf("%s accepted a string for an integer", c.tool)
				}
			}
		})
	}
}
