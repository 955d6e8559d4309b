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
	token string
	// proof is the call's proof of possession: its own tool proof
	// (params._meta.chioDpopProof), else its HTTP request's; nil for a
	// bearer token.
	proof *kernel.Proof
	// held: token is the stdio session's own.
	held      bool
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
	// DPoPCheck names the failed check of a refused proof of possession.
	DPoPCheck string `json:"dpopCheck,omitempty"`
}

// identify authenticates c's capability, with its proof, with the
// kernel. A tool/invoke is admitted (its decision write settles the
// proof's one-time claim); anything else is identified (the claim settled
// now), or, for the stdio session's own token without a proof, held. A
// refused tool/invoke naming a published capability gets its deny receipt
// first: a call turned away for its credential is still on the record.
func (e *Edge) identify(ctx context.Context, c *call) *Error {
	if c.token == "" {
		return rpcErr(CodeUnauthorized, Refused{Decision: DecisionDeny, Reason: "no capability presented"},
			"chio: a chio.capability.v1 token is required (the connection's, or params._meta.chioCapability)")
	}
	var id *kernel.Identity
	var dec *kernel.Decision
	switch {
	case c.method == MethodInvoke:
		id, dec = e.kernel.Admit(ctx, c.token, c.proof)
	case c.held && c.proof == nil:
		id, dec = e.kernel.Held(c.token)
	default:
		id, dec = e.kernel.Identify(ctx, c.token, c.proof)
	}
	if dec == nil {
		c.id = id
		return nil
	}
	data := refusedData(dec, "")
	if c.method == MethodInvoke {
		rid, err := e.refuseInvoke(ctx, c, dec)
		if err != nil {
			return rpcErr(CodeNotRecorded, data, "chio: the refusal could not be recorded: %v", err)
		}
		data.ReceiptID = rid
	}
	return unauthorized(dec, data)
}

// refusedData is the error data of a refused capability or proof.
func refusedData(dec *kernel.Decision, receiptID string) Refused {
	return Refused{Decision: DecisionDeny, Guard: dec.Guard, Reason: dec.Reason, ReceiptID: receiptID, DPoPCheck: string(dec.DPoPCheck())}
}

// unauthorized is the error of a capability or proof the kernel refused;
// over HTTP, a single request refused for its proof is answered 401.
func unauthorized(dec *kernel.Decision, data Refused) *Error {
	e := rpcErr(CodeUnauthorized, data, "chio: capability refused at %s: %s", dec.Guard, dec.Reason)
	e.check = dec.DPoPCheck()
	return e
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
