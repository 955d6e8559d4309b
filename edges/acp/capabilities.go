package acp

import (
	"github.com/chio-ledger/chio/edges/tools"
)

// Capability is a tool as ACP sees it.
type Capability struct {
	ID                 string            `json:"id"`
	Name               string            `json:"name"`
	Description        string            `json:"description"`
	Category           tools.ACPCategory `json:"category"`
	RequiresPermission bool              `json:"requiresPermission"`
	BridgeFidelity     tools.Fidelity    `json:"bridgeFidelity"`
}

// Permission decisions.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// listCapabilities answers the published capabilities c's capability may
// invoke: one it may not is not shown, as on the other edges.
func (e *Edge) listCapabilities(c *call) any {
	out := []Capability{}
	for _, b := range e.table().caps {
		if c.id.Invokes(b.entry) {
			out = append(out, b.cap)
		}
	}
	return map[string]any{"capabilities": out}
}

// permissionParams are session/request_permission's.
type permissionParams struct {
	CapabilityID string `json:"capabilityId"`
}

// requestPermission evaluates permission, fail closed: a capability that
// is unknown or not listed to the caller is denied; one that requires
// permission is denied unless the caller's capability grants it
// explicitly (explicitGrant); any other is allowed.
func (e *Edge) requestPermission(c *call) (any, *Error) {
	var p permissionParams
	if perr := params(c.params, &p); perr != nil {
		return nil, perr
	}
	answer := func(decision, reason string) (any, *Error) {
		return map[string]any{"decision": decision, "reason": reason}, nil
	}
	b, ok := e.table().byID[p.CapabilityID]
	if !ok || !c.id.Invokes(b.entry) {
		return answer(DecisionDeny, "unknown capability")
	}
	if !b.cap.RequiresPermission {
		return answer(DecisionAllow, "the capability requires no permission and the caller's capability grants it")
	}
	if !e.explicitGrant(c, b.entry) {
		return answer(DecisionDeny, "the capability requires permission: the caller's capability must grant the tool by name with the invoke operation")
	}
	return answer(DecisionAllow, "the caller's capability grants the tool by name")
}

// explicitGrant reports whether the caller's capability, which the
// kernel has validated (identify), names en's tool in a root grant
// (kernel.Identity.NamesTool). Chio has no separate permission operation:
// naming the tool is the explicit act of the issuer that a wildcard is not.
func (e *Edge) explicitGrant(c *call, en *tools.Entry) bool {
	return c.id.NamesTool(en.Manifest.ServerID, en.Tool.Name)
}
