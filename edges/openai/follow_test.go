package openai

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
)

// The adapter follows the registry while it runs: a server registered
// later, and a tool a Replace adds, are listed and run; a tool a Replace
// withdraws is neither listed nor run.
func TestFollowsRegistry(t *testing.T) {
	f := start(t)
	dyn := &testServer{id: "dyn-srv", names: []string{"alpha"}}
	if err := f.reg.Register(dyn); err != nil {
		t.Fatal(err)
	}
	tok := capability(t, "cap-dyn", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), "dyn-srv", "late-srv")
	steps := []struct {
		name     string
		change   func() error
		listed   []string
		callable []string
		refused  []string
	}{
		{"registered after start", func() error { return nil }, []string{"alpha"}, []string{"alpha"}, []string{"beta", "late_tool"}},
		{"server registered", func() error {
			return f.reg.Register(&testServer{id: "late-srv", names: []string{"late_tool"}})
		}, []string{"alpha", "late_tool"}, []string{"late_tool"}, []string{"beta"}},
		{"tool added by Replace", func() error {
			dyn.names = []string{"alpha", "beta"}
			return f.reg.Replace(dyn)
		}, []string{"alpha", "beta", "late_tool"}, []string{"alpha", "beta"}, nil},
		{"tool withdrawn by Replace", func() error {
			dyn.names = []string{"beta"}
			return f.reg.Replace(dyn)
		}, []string{"beta", "late_tool"}, []string{"beta"}, []string{"alpha"}},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		code, _, body := do(t, http.MethodGet, f.url+ToolsPath, tok, nil)
		var list struct {
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil {
			t.Fatalf("%s: list: %d %v %s", s.name, code, err, body)
		}
		var got []string
		for _, tl := range list.Tools {
			got = append(got, tl.Function.Name)
		}
		if !slices.Equal(got, s.listed) {
			t.Errorf("%s: listed %v, want %v", s.name, got, s.listed)
		}
		want := map[string]string{}
		var calls []oa.ChatCompletionMessageToolCallUnionParam
		for _, group := range []struct {
			names    []string
			decision string
		}{{s.callable, DecisionAllow}, {s.refused, DecisionUnknownFunction}} {
			for _, n := range group.names {
				want[n] = group.decision
				calls = append(calls, oa.ChatCompletionMessageToolCallUnionParam{OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{
					ID: "call_" + n, Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: n, Arguments: `{"path":"/tmp/x"}`}}})
			}
		}
		code, _, body = do(t, http.MethodPost, f.url+ToolCallsPath, tok, mustJSON(t, oa.ChatCompletionAssistantMessageParam{ToolCalls: calls}))
		var ans chatAnswer
		if err := json.Unmarshal(body, &ans); code != http.StatusOK || err != nil || len(ans.Messages) != len(calls) {
			t.Fatalf("%s: calls: %d %v %s", s.name, code, err, body)
		}
		for i, raw := range ans.Messages {
			var c chioOf
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			n := calls[i].OfFunction.Function.Name
			if c.Chio.Decision != want[n] {
				t.Errorf("%s: call %s: %s, want %s", s.name, n, raw, want[n])
			}
		}
	}
}
