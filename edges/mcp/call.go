package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
)

// handle is b's tools/call handler. govern has identified the caller. A
// tool its capability does not grant is not listed to it, but a call to
// it still goes to the kernel: the denial is on the record, like every
// call's (simulation, which records nothing, answers it as unknown).
//
// The call is decided under its own tool proof (params._meta
// MetaDPoPProof) if it brings one, else under its request's proof. A
// call refused for its proof is answered as a refused capability (the
// JSON-RPC error, with its deny receipt), not as a tool result.
func (e *Edge) handle(b *binding) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		c, ok := callerFrom(ctx)
		if !ok || c.id == nil {
			return nil, rpcError(codeInternal, "chio: the call carries no identified capability (fail closed)", nil)
		}
		args, err := arguments(req.Params.Arguments)
		if err != nil {
			return nil, invalidArguments(b.name, err)
		}
		proof := c.proof
		if raw := toolProof(req.Params.Meta); raw != nil && !c.ownProof {
			proof = e.callProof(raw, req.Params.Name, req.Params.Arguments)
		}
		if e.opts.simulate {
			if proof != c.proof {
				// Nothing is dispatched: the call's own proof is checked
				// (and spent) here.
				if _, dec := e.kernel.Identify(ctx, c.token, proof); dec != nil {
					return nil, e.refusedRPC(ctx, c.token, proof, methodCallTool, req, dec)
				}
			}
			if !c.id.Invokes(b.entry) {
				return nil, unknownTool(b.name)
			}
			return e.simulate(ctx, b, args)
		}
		// The decision and outcome are recorded even if the client goes away.
		requestID := stampedID(req.Params.Meta)
		out, err := e.dispatch.Do(context.WithoutCancel(ctx), e.call(c.token, proof, b, args, requestID))
		if err == nil {
			if check := out.Decision.DPoPCheck(); check != "" {
				c.refused.set(check)
				return nil, refusedError(out.Decision, refusedData(out.Decision,
					[]Refusal{{RequestID: requestID, ReceiptRef: out.ReceiptID}}))
			}
		}
		return e.result(b, out, err)
	}
}

// call is the dispatcher's call of b.
func (e *Edge) call(token string, proof *kernel.Proof, b *binding, args json.RawMessage, requestID any) dispatch.Call {
	m := map[string]any{"tool": b.name}
	if requestID != nil {
		m["request_id"] = requestID
	}
	return dispatch.Call{Token: token, Proof: proof, ServerID: b.entry.Manifest.ServerID, ToolName: b.entry.Tool.Name,
		Arguments: args, Exposure: &e.opts.exposure, Metadata: map[string]any{"protocol": "mcp", "mcp": m}}
}

// arguments are a call's arguments: absent or null means none ({}), as
// clients send for a tool without parameters; anything but an object is
// refused. The dispatcher bounds and canonicalizes the object.
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
