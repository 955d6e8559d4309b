package acp

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
)

// call is one governed request: who makes it and what it says.
type call struct {
	token     string
	method    string // canonical
	params    json.RawMessage
	requestID any
	id        *kernel.Identity // set by identify
}

// Refused is the data of the error answering a capability the kernel
// refused; ReceiptID names the deny receipt of a refused tool/invoke.
type Refused struct {
	Decision  string `json:"decision"`
	Guard     string `json:"guard,omitempty"`
	Reason    string `json:"reason"`
	ReceiptID string `json:"receiptId,omitempty"`
}

// identify authenticates c's capability with the kernel. A refused
// tool/invoke naming a published capability gets its deny receipt first:
// a call turned away for its credential is still on the record.
func (e *Edge) identify(ctx context.Context, c *call) *Error {
	if c.token == "" {
		return rpcErr(CodeUnauthorized, Refused{Decision: DecisionDeny, Reason: "no capability presented"},
			"chio: a chio.capability.v1 token is required (the connection's, or params._meta.chioCapability)")
	}
	id, dec := e.kernel.Identify(ctx, c.token, nil)
	if dec == nil {
		c.id = id
		return nil
	}
	data := Refused{Decision: DecisionDeny, Guard: dec.Guard, Reason: dec.Reason}
	if c.method == MethodInvoke {
		rid, err := e.refuseInvoke(ctx, c, dec)
		if err != nil {
			return rpcErr(CodeNotRecorded, data, "chio: the refusal could not be recorded: %v", err)
		}
		data.ReceiptID = rid
	}
	return rpcErr(CodeUnauthorized, data, "chio: capability refused at %s: %s", dec.Guard, dec.Reason)
}

// refuseInvoke records the deny receipt of a refused tool/invoke; "" when
// the call names no published capability or has bad arguments (it never
// reached the kernel).
func (e *Edge) refuseInvoke(ctx context.Context, c *call, dec *kernel.Decision) (string, error) {
	var p invokeParams
	if params(c.params, &p) != nil {
		return "", nil
	}
	b, ok := e.byID[p.CapabilityID]
	if !ok {
		return "", nil
	}
	args, err := arguments(p.Arguments)
	if err != nil {
		return "", nil
	}
	res, err := e.dispatch.Refuse(context.WithoutCancel(ctx), e.dispatchCall(c, b, args, ""), dec)
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		return "", nil
	case err != nil:
		return "", err
	}
	return res.ReceiptID, nil
}
