package mcp

import (
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/schemas"
)

// The decisions a result's _meta.chio.decision takes.
const (
	DecisionAllow       = "allow"
	DecisionDeny        = "deny"
	DecisionToolError   = "tool_error"
	DecisionError       = "error"
	DecisionSimulated   = "simulated"
	DecisionUnsupported = "unsupported"
)

// Verdict is a CallToolResult's _meta.chio.
type Verdict struct {
	// ReceiptRef is the call's receipt id, when the call has a receipt.
	ReceiptRef string `json:"receipt_ref,omitempty"`
	Decision   string `json:"decision"`
	Denied     bool   `json:"denied,omitempty"`
	Guard      string `json:"guard,omitempty"`
	Reason     string `json:"reason,omitempty"`
	ServerID   string `json:"server_id"`
	ToolName   string `json:"tool_name"`
	// Simulation marks an answer of simulation mode: nothing ran, nothing
	// was recorded.
	Simulation bool `json:"simulation,omitempty"`
}

// result turns the dispatcher's answer into the call's result.
func (e *Edge) result(b *binding, out *dispatch.Result, err error) (*sdk.CallToolResult, error) {
	v := Verdict{ServerID: b.entry.Manifest.ServerID, ToolName: b.entry.Tool.Name}
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		return nil, invalidArguments(b.name, err)
	case err != nil:
		// No durable decision: no receipt, and no tool ran.
		e.log.Error("mcp: call not recorded", "tool", b.name, "err", err)
		v.Decision, v.Reason = DecisionError, "the call could not be recorded, so it did not run: "+err.Error()
		return failed(v), nil
	}
	v.ReceiptRef = out.ReceiptID
	if out.Ran && !out.OutcomeDurable {
		e.log.Warn("mcp: outcome not recorded: the ledger will mark the call incomplete", "receipt_id", out.ReceiptID)
	}
	switch {
	case !out.Decision.Allow:
		v.Decision, v.Denied, v.Guard = DecisionDeny, true, out.Decision.Guard
		v.Reason = fmt.Sprintf("denied at %s: %s", out.Decision.Guard, out.Decision.Reason)
		return failed(v), nil
	case out.ToolErr != nil:
		v.Decision, v.Reason = DecisionToolError, "the tool failed: "+schemas.TruncateText(out.ToolErr.Error())
		return failed(v), nil
	}
	v.Decision = DecisionAllow
	return succeeded(v, out.Output, nil)
}

// failed is an isError result whose text is the verdict's reason.
func failed(v Verdict) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "chio: " + v.Reason}},
		Meta: sdk.Meta{"chio": v}}
}

// succeeded is the result of a tool's output: structuredContent (extra
// members added to it, if any), and its JSON as the text content, as MCP
// asks of a tool with structured output.
func succeeded(v Verdict, output json.RawMessage, extra map[string]any) (*sdk.CallToolResult, error) {
	sc, err := structured(output, extra)
	if err != nil {
		return nil, rpcError(codeInternal, fmt.Sprintf("chio: encode the result of tool %q: %v", v.ToolName, err), nil)
	}
	return &sdk.CallToolResult{IsError: httpFailure(sc), StructuredContent: sc,
		Content: []sdk.Content{&sdk.TextContent{Text: string(sc)}}, Meta: sdk.Meta{"chio": v}}, nil
}

// structured is the structuredContent of a tool output: the output itself
// when it is an object, else {"result": output}; extra members are set on
// the object.
func structured(output json.RawMessage, extra map[string]any) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(output, &obj) != nil || obj == nil {
		if len(output) == 0 {
			output = json.RawMessage("null")
		}
		obj = map[string]json.RawMessage{"result": output}
	} else if len(extra) == 0 {
		return output, nil
	}
	for k, val := range extra {
		raw, err := json.Marshal(val)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", k, err)
		}
		obj[k] = raw
	}
	return json.Marshal(obj)
}

// httpFailure reports an output of an HTTP API that answered with an
// error status: {"httpStatus": 4xx or 5xx, …}.
func httpFailure(sc json.RawMessage) bool {
	var r struct {
		HTTPStatus *float64 `json:"httpStatus"`
	}
	return json.Unmarshal(sc, &r) == nil && r.HTTPStatus != nil && *r.HTTPStatus >= 400
}
