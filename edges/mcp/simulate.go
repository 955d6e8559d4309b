package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// Simulator is a tool server that can answer a call without performing it
// (the OpenAPI bridge: the request it would send). Simulation mode
// (WithSimulation) calls it instead of the dispatcher.
type Simulator interface {
	Simulate(ctx context.Context, inv tools.Invocation) (json.RawMessage, error)
}

// BridgeModeSimulation is the "bridgeMode" member of every simulated
// result's structuredContent.
const BridgeModeSimulation = "simulation"

// simulate answers a call in simulation mode: no kernel decision (it would
// charge budgets), no event, no receipt; the capability's grant has been
// checked already.
func (e *Edge) simulate(ctx context.Context, b *binding, args json.RawMessage) (*sdk.CallToolResult, error) {
	v := Verdict{ServerID: b.entry.Manifest.ServerID, ToolName: b.entry.Tool.Name, Simulation: true}
	sim, ok := b.entry.Server.(Simulator)
	if !ok {
		v.Decision = DecisionUnsupported
		v.Reason = fmt.Sprintf("simulation is unsupported by tool server %q: nothing ran", v.ServerID)
		return failed(v), nil
	}
	// The same bounds and canonical form as a governed call's arguments.
	if len(args) > schemas.MaxParametersBytes {
		return nil, invalidArguments(b.name, fmt.Errorf("%d bytes, over %d", len(args), schemas.MaxParametersBytes))
	}
	canon, err := schemas.CanonicalizeJSON(args)
	if err != nil {
		return nil, invalidArguments(b.name, err)
	}
	inv := tools.Invocation{ID: uuid.Must(uuid.NewV7()).String(), ServerID: v.ServerID, ToolName: v.ToolName, Arguments: canon}
	out, err := sim.Simulate(ctx, inv)
	if err != nil {
		v.Decision, v.Reason = DecisionToolError, "the simulation failed: "+schemas.TruncateText(err.Error())
		return failed(v), nil
	}
	v.Decision = DecisionSimulated
	res, rerr := succeeded(v, out, map[string]any{"bridgeMode": BridgeModeSimulation})
	if rerr != nil {
		v.Decision, v.Reason = DecisionToolError, "the simulation's output is not JSON: "+rerr.Error()
		return failed(v), nil
	}
	return res, nil
}
