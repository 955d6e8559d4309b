package acp

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
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
// now). Over stdio, a call without a proof acts under the session's own
// token without one (kernel.Held) only when it reads what that token
// itself states (statesOnly); any other (a task stored, resumed or
// canceled) needs the proof its token needs, like a tool call. A refused
// tool/invoke or tool/stream naming a published capability, or tool/resume
// of the token's task, gets its deny receipt first: a call turned away for
// its credential is still on the record.
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
	case c.held && c.proof == nil && statesOnly(c.method):
		id, dec = e.kernel.Held(c.token)
	default:
		id, dec = e.kernel.Identify(ctx, c.token, c.proof)
	}
	if dec == nil {
		c.id = id
		return nil
	}
	data := refusedData(dec, "")
	var rid string
	var err error
	switch c.method {
	case MethodInvoke, MethodStream:
		rid, err = e.refuseCall(ctx, c, dec)
	case MethodResume:
		rid, err = e.refuseResume(ctx, c, dec)
	}
	if err != nil {
		return rpcErr(CodeNotRecorded, data, "chio: the refusal could not be recorded: %v", err)
	}
	data.ReceiptID = rid
	return unauthorized(dec, data)
}

// statesOnly reports whether method only reads what the caller's token
// itself states (its grants against the published table), touching no
// state and recording nothing: the stdio session may answer it under its
// own token without a proof. initialize needs no token at all.
func statesOnly(method string) bool {
	return method == MethodListCapabilities || method == MethodRequestPermission
}

// refusedData is the error data of a refused capability or proof.
func refusedData(dec *kernel.Decision, receiptID string) Refused {
	return Refused{Decision: DecisionDeny, Guard: dec.Guard, Reason: dec.Reason, ReceiptID: receiptID, DPoPCheck: string(dec.DPoPCheck())}
}

// unauthorized is the error of a capability or proof the kernel refused;
// over HTTP, a single request refused for its proof is answered 401. A
// proof that could not be checked because the replay state is unreachable
// is a server condition, not the caller's fault: CodeInternal, over HTTP a
// 503 with Retry-After.
func unauthorized(dec *kernel.Decision, data Refused) *Error {
	check := dec.DPoPCheck()
	if check == dpop.CheckState {
		e := rpcErr(CodeInternal, data, "chio: the proof could not be checked, so nothing ran; retry: %s", dec.Reason)
		e.check = check
		return e
	}
	e := rpcErr(CodeUnauthorized, data, "chio: capability refused at %s: %s", dec.Guard, dec.Reason)
	e.check = check
	return e
}

// refuseCall records the deny receipt of a refused tool/invoke or
// tool/stream; "" when the call names no published capability or has bad
// arguments (it never reached the kernel).
func (e *Edge) refuseCall(ctx context.Context, c *call, dec *kernel.Decision) (string, error) {
	var p invokeParams
	if params(c.params, &p) != nil {
		return "", nil
	}
	b, ok := e.table().byID[p.CapabilityID]
	if !ok {
		return "", nil
	}
	args, err := arguments(p.Arguments)
	if err != nil {
		return "", nil
	}
	return e.refuse(ctx, c, b, args, "", dec)
}

// refuseResume records the deny receipt of a refused tool/resume of a
// task of c's token (found under the token's principal, kernel.Held, only
// to name the task's call on the record; the caller learns nothing of the
// task but that receipt); "" when there is no such task or its capability
// is no longer published.
func (e *Edge) refuseResume(ctx context.Context, c *call, dec *kernel.Decision) (string, error) {
	id, hdec := e.kernel.Held(c.token)
	if hdec != nil {
		return "", nil
	}
	held := *c
	held.id = id
	rec, _, rerr := e.loadTask(ctx, &held)
	if rerr != nil {
		return "", nil
	}
	b, ok := e.table().byID[rec.Task.CapabilityID]
	if !ok {
		return "", nil
	}
	return e.refuse(ctx, c, b, rec.Arguments, rec.Task.ID, dec)
}

// refuse records dec, a deny, as the receipt of c's call of b with args.
func (e *Edge) refuse(ctx context.Context, c *call, b *binding, args json.RawMessage, taskID string, dec *kernel.Decision) (string, error) {
	res, err := e.dispatch.Refuse(context.WithoutCancel(ctx), e.dispatchCall(c, b, args, taskID), dec)
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		return "", nil
	case err != nil:
		return "", err
	}
	return res.ReceiptID, nil
}
