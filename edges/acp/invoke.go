package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// invokeParams are tool/invoke's and tool/stream's.
type invokeParams struct {
	CapabilityID string          `json:"capabilityId"`
	Arguments    json.RawMessage `json:"arguments"`
}

// Verdict is the data of the error of a call that reached the kernel and
// did not succeed.
type Verdict struct {
	ReceiptID string `json:"receiptId,omitempty"`
	Decision  string `json:"decision"`
	Guard     string `json:"guard,omitempty"`
	Reason    string `json:"reason"`
	Task      *Task  `json:"task,omitempty"`
}

// Verdict decisions besides allow and deny.
const (
	DecisionToolError = "tool_error"
	DecisionError     = "error"
)

// invokeResult is tool/invoke's answer.
type invokeResult struct {
	Result    json.RawMessage `json:"result"`
	ReceiptID string          `json:"receiptId"`
}

// invoke runs a governed call. A capability not published on this edge
// never reaches the kernel; one published but not granted does, so that
// its denial is on the record.
func (e *Edge) invoke(ctx context.Context, c *call) (any, *Error) {
	b, args, perr := e.callParams(c)
	if perr != nil {
		return nil, perr
	}
	if perr := e.permitted(ctx, c, b, args, ""); perr != nil {
		return nil, perr
	}
	// The decision and outcome are recorded even if the client goes away.
	res, err := e.dispatch.Do(context.WithoutCancel(ctx), e.dispatchCall(c, b, args, ""))
	out, rerr := e.outcome(res, err)
	if rerr != nil {
		return nil, rerr
	}
	return invokeResult{Result: out, ReceiptID: res.ReceiptID}, nil
}

// permitted enforces the permission model on a call about to run: a
// capability that requires permission runs only when the caller's
// capability grants it explicitly (explicitGrant), whatever
// session/request_permission was or was not asked. A refusal is recorded
// with its deny receipt.
func (e *Edge) permitted(ctx context.Context, c *call, b *binding, args json.RawMessage, taskID string) *Error {
	if !b.cap.RequiresPermission || e.explicitGrant(c, b.entry) {
		return nil
	}
	reason := "the capability requires permission: the caller's capability must grant the tool by name with the invoke operation"
	dec := &kernel.Decision{Allow: false, Guard: "acp_permission", Reason: reason, CapabilityID: c.id.CapabilityID, GrantIndex: -1,
		PolicyHash: e.kernel.Policy().Hash, Subject: c.id.Subject}
	data := Refused{Decision: DecisionDeny, Guard: dec.Guard, Reason: reason}
	res, err := e.dispatch.Refuse(context.WithoutCancel(ctx), e.dispatchCall(c, b, args, taskID), dec)
	if err != nil {
		return rpcErr(CodeNotRecorded, data, "chio: the refusal could not be recorded: %v", err)
	}
	data.ReceiptID = res.ReceiptID
	return rpcErr(CodeDenied, data, "chio: denied at %s: %s", dec.Guard, reason)
}

// callParams reads tool/invoke's and tool/stream's params.
func (e *Edge) callParams(c *call) (*binding, json.RawMessage, *Error) {
	var p invokeParams
	if perr := params(c.params, &p); perr != nil {
		return nil, nil, perr
	}
	if p.CapabilityID == "" {
		return nil, nil, rpcErr(CodeInvalidParams, nil, "invalid params: capabilityId is required")
	}
	b, ok := e.table().byID[p.CapabilityID]
	if !ok {
		return nil, nil, rpcErr(CodeInvalidParams, nil, "unknown capability %q", p.CapabilityID)
	}
	args, err := arguments(p.Arguments)
	if err != nil {
		return nil, nil, rpcErr(CodeInvalidParams, nil, "invalid arguments for capability %q: %v", p.CapabilityID, err)
	}
	return b, args, nil
}

// dispatchCall is the dispatcher's call of b; taskID is set for a
// deferred task's resume.
func (e *Edge) dispatchCall(c *call, b *binding, args json.RawMessage, taskID string) dispatch.Call {
	m := map[string]any{"method": c.method, "capability_id": b.cap.ID}
	if c.requestID != nil {
		m["request_id"] = c.requestID
	}
	if taskID != "" {
		m["task_id"] = taskID
	}
	return dispatch.Call{Token: c.token, Proof: c.proof, ServerID: b.entry.Manifest.ServerID, ToolName: b.entry.Tool.Name,
		Arguments: args, Exposure: &e.opts.exposure, Stream: taskID != "" && b.stream, TaskID: taskID,
		Metadata: map[string]any{"protocol": "acp", "acp": m}}
}

// outcome is a dispatched call's result, or the error that answers it.
func (e *Edge) outcome(res *dispatch.Result, err error) (json.RawMessage, *Error) {
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		return nil, rpcErr(CodeInvalidParams, nil, "invalid arguments: %v", err)
	case err != nil:
		return nil, rpcErr(CodeNotRecorded, Verdict{Decision: DecisionError, Reason: err.Error()},
			"chio: the call could not be recorded, so it did not run: %v", err)
	}
	if res.Ran && !res.OutcomeDurable {
		e.log.Warn("acp: outcome not recorded: the ledger will mark the call incomplete", "receipt_id", res.ReceiptID)
	}
	switch {
	case res.Decision.DPoPCheck() != "":
		// Refused for its proof (a tool proof for another call, a proof
		// used before): a refused credential, on the record.
		return nil, unauthorized(res.Decision, refusedData(res.Decision, res.ReceiptID))
	case !res.Decision.Allow:
		return nil, rpcErr(CodeDenied, Verdict{ReceiptID: res.ReceiptID, Decision: DecisionDeny, Guard: res.Decision.Guard,
			Reason: res.Decision.Reason}, "chio: denied at %s: %s", res.Decision.Guard, res.Decision.Reason)
	case res.ToolErr != nil:
		reason := schemas.TruncateText(res.ToolErr.Error())
		return nil, rpcErr(CodeToolFailed, Verdict{ReceiptID: res.ReceiptID, Decision: DecisionToolError, Reason: reason},
			"chio: the tool failed: %s", reason)
	case res.Chunks != nil:
		return collected(res.Chunks), nil
	case res.Output == nil:
		return json.RawMessage("null"), nil
	}
	return res.Output, nil
}

// collected is a streamed call's chunks, returned together: the profile
// has no incremental updates (its fidelity caveat says so).
func collected(chunks []tools.Chunk) json.RawMessage {
	data := make([]json.RawMessage, 0, len(chunks))
	for _, ch := range chunks {
		data = append(data, ch.Data)
	}
	raw, err := json.Marshal(map[string]any{"chunks": data})
	if err != nil {
		// Chunks are JSON the server produced; one that is not cannot be
		// passed on.
		return json.RawMessage(`{"chunks":[]}`)
	}
	return raw
}

// arguments are a call's arguments: absent or null means none ({});
// anything but an object is refused. The dispatcher bounds and
// canonicalizes the object.
func arguments(raw json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return json.RawMessage("{}"), nil
	}
	if t[0] != '{' {
		return nil, errors.New("arguments must be a JSON object")
	}
	return t, nil
}
