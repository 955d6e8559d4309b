package acp

import (
	"encoding/json"
	"testing"

	"github.com/chio-ledger/chio/edges/tools"
)

func TestListCapabilities(t *testing.T) {
	f := start(t)
	var got struct{ Capabilities []Capability }
	ok(t, f.call(t, wildcard(t), MethodListCapabilities, nil), &got)
	byID := map[string]Capability{}
	for _, c := range got.Capabilities {
		if c.ID != c.Name {
			t.Errorf("%s: name %q", c.ID, c.Name)
		}
		byID[c.ID] = c
	}
	cases := []struct {
		id         string
		listed     bool
		category   tools.ACPCategory
		fidelity   tools.FidelityKind
		permission bool
	}{
		{"read_file", true, tools.ACPFilesystem, tools.FidelityLossless, false},
		{"exec_command", true, tools.ACPTerminal, tools.FidelityAdapted, true},
		{"search", true, tools.ACPTool, tools.FidelityAdapted, false},
		{"explode", true, tools.ACPTool, tools.FidelityAdapted, false},
		{"tail_terminal", true, tools.ACPTerminal, tools.FidelityAdapted, false}, // collected streaming
		{"browser_click", false, "", "", false},                                  // browser: withheld
		{"delete_record", false, "", "", false},                                  // generic mutating: withheld
		{"fs_hidden", false, "", "", false},                                      // x-chio-publish: false
		{"secret", false, "", "", false},                                         // not exposed to ACP
	}
	for _, c := range cases {
		t.Run(c.id, func(t *testing.T) {
			got, listed := byID[c.id]
			if listed != c.listed {
				t.Fatalf("listed %v, want %v", listed, c.listed)
			}
			if !listed {
				return
			}
			if got.Category != c.category || got.BridgeFidelity.Kind != c.fidelity || got.RequiresPermission != c.permission {
				t.Errorf("got %+v, want category %s fidelity %s requiresPermission %v", got, c.category, c.fidelity, c.permission)
			}
		})
	}
	if len(byID) != 5 {
		t.Errorf("%d capabilities listed: %v", len(byID), byID)
	}
}

func TestListShowsOnlyGrantedCapabilities(t *testing.T) {
	f := start(t)
	var got struct{ Capabilities []Capability }
	ok(t, f.call(t, token(t, "cap-read", agentKey, grant("read_file")), MethodListCapabilities, nil), &got)
	if len(got.Capabilities) != 1 || got.Capabilities[0].ID != "read_file" {
		t.Fatalf("listed %+v", got.Capabilities)
	}
}

func TestDefaultCategoryAndPermissionConfig(t *testing.T) {
	f := start(t, WithDefaultCategory(tools.ACPTerminal), WithPermissionRequired(true))
	for _, c := range f.edge.Capabilities() {
		if !c.RequiresPermission {
			t.Errorf("%s: requiresPermission false with the config requiring it", c.ID)
		}
		if c.ID == "search" && (c.Category != tools.ACPTerminal || c.BridgeFidelity.Kind != tools.FidelityLossless) {
			t.Errorf("search: %+v, want the default category terminal, lossless", c)
		}
	}
}

func TestRequestPermission(t *testing.T) {
	f := start(t)
	named := token(t, "cap-named", agentKey, grant("exec_command"), grant("read_file"))
	readOnly := token(t, "cap-ro", agentKey, grant("read_file"))
	cases := []struct {
		name, tok, capability, want string
	}{
		{"unknown", wildcard(t), "no_such_tool", DecisionDeny},
		{"withheld browser", wildcard(t), "browser_click", DecisionDeny},
		{"empty", wildcard(t), "", DecisionDeny},
		{"requires permission, wildcard grant", wildcard(t), "exec_command", DecisionDeny},
		{"requires permission, named grant", named, "exec_command", DecisionAllow},
		{"requires permission, not granted", readOnly, "exec_command", DecisionDeny},
		{"read-only", wildcard(t), "read_file", DecisionAllow},
		{"read-only generic", wildcard(t), "search", DecisionAllow},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got struct{ Decision, Reason string }
			ok(t, f.call(t, c.tok, MethodRequestPermission, map[string]any{"capabilityId": c.capability}), &got)
			if got.Decision != c.want {
				t.Errorf("decision %q (%s), want %q", got.Decision, got.Reason, c.want)
			}
		})
	}
}

func TestInitialize(t *testing.T) {
	f := start(t)
	// No capability: the handshake needs none.
	var got struct {
		ProtocolVersion   int            `json:"protocolVersion"`
		AgentCapabilities map[string]any `json:"agentCapabilities"`
		AuthMethods       []any          `json:"authMethods"`
		AgentInfo         struct{ Name, Version string }
	}
	ok(t, f.call(t, "", MethodInitialize, map[string]any{"protocolVersion": 1, "clientCapabilities": map[string]any{}}), &got)
	if got.ProtocolVersion != 1 || got.AgentCapabilities == nil || got.AuthMethods == nil || len(got.AuthMethods) != 0 ||
		got.AgentInfo.Version != "1.2.3" {
		t.Fatalf("initialize: %+v", got)
	}
}

func TestMethodNames(t *testing.T) {
	f := start(t)
	tok := wildcard(t)
	cases := []struct {
		method string
		code   int
	}{
		{"session/list_capabilities", 0},
		{"_chio/session/list_capabilities", 0},
		{"_chio/session/request_permission", 0},
		{"_chio/initialize", 0},
		{"session/prompt", CodeMethodNotFound},
		{"_chio/nope", CodeMethodNotFound},
		{"_chio/", CodeMethodNotFound},
		{"tools/call", CodeMethodNotFound},
	}
	for _, c := range cases {
		t.Run(c.method, func(t *testing.T) {
			if a := f.call(t, tok, c.method, map[string]any{"capabilityId": "read_file"}); a.code() != c.code {
				t.Errorf("code %d, want %d", a.code(), c.code)
			}
		})
	}
}

func TestRefusedCapability(t *testing.T) {
	f := start(t)
	cases := []struct{ name, tok string }{
		{"none", ""},
		{"garbage", "not-a-token"},
		{"untrusted issuer", tokenBy(t, otherKey, "cap-x", agentKey, grant("*"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := f.call(t, "", MethodListCapabilities, map[string]any{"_meta": map[string]any{"chioCapability": c.tok}})
			if a.code() != CodeUnauthorized {
				t.Fatalf("code %d, want %d", a.code(), CodeUnauthorized)
			}
			var r Refused
			if err := json.Unmarshal(a.Error.Data, &r); err != nil || r.Decision != DecisionDeny {
				t.Errorf("data %s", a.Error.Data)
			}
		})
	}
}
