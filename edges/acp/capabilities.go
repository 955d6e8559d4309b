package acp

import (
	"slices"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// Capability is a tool as ACP sees it (bridges spec, capability mapping).
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
	for _, b := range e.caps {
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
	b, ok := e.byID[p.CapabilityID]
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

// explicitGrant reports whether the token of c, which the kernel has
// validated (identify), is a root token (not delegated) with a grant
// naming en's server and tool exactly, not "*", with the invoke operation. Chio has no separate permission
// operation: naming the tool in the grant is the explicit act of the
// issuer that a wildcard is not.
func (e *Edge) explicitGrant(c *call, en *tools.Entry) bool {
	raw, err := schemas.DecodeCapabilityText(c.token)
	if err != nil {
		return false
	}
	tok, err := schemas.ParseCapability(raw)
	// The kernel verified the token it identified; the id check keeps a
	// token decoded differently from granting anything here.
	if err != nil || tok.ID != c.id.CapabilityID {
		return false
	}
	// Only the issuer's own grant is explicit: a holder of a wildcard
	// grant could otherwise delegate to itself a child naming the tool.
	if len(c.id.Lineage) > 1 {
		return false
	}
	for _, g := range tok.Scope.Grants {
		if g.ServerID == en.Manifest.ServerID && g.ToolName == en.Tool.Name && slices.Contains(g.Operations, schemas.OpInvoke) {
			return true
		}
	}
	return false
}
