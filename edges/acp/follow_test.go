package acp

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// otherServer is a testServer under another server id.
type otherServer struct {
	*testServer
	id string
}

func (s otherServer) ServerID() string { return s.id }
func (s otherServer) Manifest() *schemas.ToolManifest {
	m := s.testServer.Manifest()
	m.ServerID, m.Name = s.id, s.id
	return m
}

// dynTool is a published tool of the servers the follow test changes.
func dynTool(name string) schemas.ToolDefinition {
	return schemas.ToolDefinition{Name: name, Description: name, InputSchema: json.RawMessage(pathSchema),
		Metadata: exposed, Annotations: readOnly()}
}

// The edge follows the registry while it runs: a server registered later,
// and a tool a Replace adds, are published and invocable; a tool a Replace
// withdraws is neither published nor invoked.
func TestFollowsRegistry(t *testing.T) {
	dyn := &testServer{defs: []schemas.ToolDefinition{dynTool("alpha")}}
	f := startWith(t, dyn)
	tok := token(t, "cap-dyn", agentKey, grant("*"),
		schemas.ToolGrant{ServerID: "late-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}})
	steps := []struct {
		name     string
		change   func() error
		listed   []string
		callable []string
		refused  []string
	}{
		{"as started", func() error { return nil }, []string{"alpha"}, []string{"alpha"}, []string{"beta", "late_tool"}},
		{"server registered", func() error {
			return f.reg.Register(otherServer{&testServer{defs: []schemas.ToolDefinition{dynTool("late_tool")}}, "late-srv"})
		}, []string{"alpha", "late_tool"}, []string{"late_tool"}, []string{"beta"}},
		{"tool added by Replace", func() error {
			dyn.defs = []schemas.ToolDefinition{dynTool("alpha"), dynTool("beta")}
			return f.reg.Replace(dyn)
		}, []string{"alpha", "beta", "late_tool"}, []string{"alpha", "beta"}, nil},
		{"tool withdrawn by Replace", func() error {
			dyn.defs = []schemas.ToolDefinition{dynTool("beta")}
			return f.reg.Replace(dyn)
		}, []string{"beta", "late_tool"}, []string{"beta"}, []string{"alpha"}},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var list struct {
			Capabilities []Capability `json:"capabilities"`
		}
		ok(t, f.call(t, tok, MethodListCapabilities, map[string]any{}), &list)
		var got []string
		for _, c := range list.Capabilities {
			got = append(got, c.ID)
		}
		if !slices.Equal(got, s.listed) {
			t.Errorf("%s: published %v, want %v", s.name, got, s.listed)
		}
		for _, name := range s.callable {
			var res struct {
				Result map[string]any `json:"result"`
			}
			ok(t, f.call(t, tok, MethodInvoke, map[string]any{"capabilityId": name, "arguments": map[string]any{"path": "/tmp/x"}}), &res)
			if res.Result["tool"] != name {
				t.Errorf("%s: invoke %s: %v", s.name, name, res.Result)
			}
		}
		for _, name := range s.refused {
			a := f.call(t, tok, MethodInvoke, map[string]any{"capabilityId": name, "arguments": map[string]any{}})
			if a.code() != CodeInvalidParams {
				t.Errorf("%s: invoke %s: code %d (%v), want unknown capability", s.name, name, a.code(), a.Error)
			}
		}
	}
}
