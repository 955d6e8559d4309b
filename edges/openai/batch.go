package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/receiptwait"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The decisions a result's chio.decision takes.
const (
	DecisionAllow            = "allow"
	DecisionDeny             = "deny"
	DecisionToolError        = "tool_error"
	DecisionUnknownFunction  = "unknown_function"
	DecisionInvalidArguments = "invalid_arguments"
	DecisionUnsupported      = "unsupported"
	DecisionError            = "error"
)

// Run executes a batch under token and its request's proof of possession
// (nil for a bearer token; an authenticated caller: see Refuse for one
// the kernel refused): every function call in input order, each through
// the dispatcher, one failure never stopping the next. Every call shares
// the one proof, whose one-time id the kernel claims once. A client that
// goes away stops the calls not yet started (they never reached the
// kernel); a call already started finishes, and its receipt with it.
func (a *Adapter) Run(ctx context.Context, token string, proof *kernel.Proof, b *Batch) []Result {
	results := make([]Result, 0, len(b.Items))
	names := a.table() // one table for the whole batch
	for _, it := range b.Items {
		if ctx.Err() != nil {
			break
		}
		results = append(results, a.runItem(context.WithoutCancel(ctx), names, token, proof, b.Dialect, it))
	}
	return results
}

// runItem runs one item: refused before the kernel when it is not a
// function call, names no exposed tool or has bad arguments.
func (a *Adapter) runItem(ctx context.Context, names *Names, token string, proof *kernel.Proof, d Dialect, it Item) Result {
	call, ch, res := a.prepare(names, d, it)
	if res != nil {
		return *res
	}
	call.Token, call.Proof = token, proof
	started := time.Now()
	out, err := a.dispatch.Do(ctx, call)
	r := a.result(it, ch, out, err)
	if r.Chio.ReceiptRef != "" && a.await.js != nil {
		// A receipt not yet integrated is no failure of the call.
		if sr, err := receiptwait.Await(ctx, a.await.js, call.ServerID, r.Chio.ReceiptRef, started, a.await.max); err == nil {
			r.Chio.Receipt = sr.Receipt
		} else {
			a.log.Warn("openai: receipt not embedded", "receipt_id", r.Chio.ReceiptRef, "err", err)
		}
	}
	return r
}

// prepare checks an item before the kernel and builds its dispatcher call
// and the verdict's tool names, resolving its function in names; a non-nil
// Result is the item's answer (no kernel call).
func (a *Adapter) prepare(names *Names, d Dialect, it Item) (dispatch.Call, Chio, *Result) {
	if !it.IsFunction() {
		return dispatch.Call{}, Chio{}, refused(it, DecisionUnsupported, Chio{},
			fmt.Sprintf("%s items are not run by Chio: only function calls are governed here", it.Type))
	}
	if it.Namespace != "" {
		// Chio lists its tools without a namespace: a namespaced call is
		// for some other tool that happens to share a name.
		return dispatch.Call{}, Chio{}, refused(it, DecisionUnknownFunction, Chio{},
			fmt.Sprintf("unknown function %q in namespace %q: Chio's functions have no namespace", it.Name, it.Namespace))
	}
	bd, ok := names.Resolve(it.Name)
	if !ok {
		// Hidden and internal tools get the same answer as absent ones.
		return dispatch.Call{}, Chio{}, refused(it, DecisionUnknownFunction, Chio{}, fmt.Sprintf("unknown function %q", it.Name))
	}
	ch := Chio{ToolName: bd.Entry.Tool.Name, ServerID: bd.Entry.Manifest.ServerID}
	if bd.Mapped {
		ch.FunctionName = bd.Function
	}
	args, err := parseArguments(it.Arguments)
	if it.BadArguments != "" {
		err = errors.New(it.BadArguments)
	}
	if err != nil {
		return dispatch.Call{}, ch, refused(it, DecisionInvalidArguments, ch, err.Error())
	}
	return dispatch.Call{ServerID: ch.ServerID, ToolName: ch.ToolName, Arguments: args, Exposure: &a.exposure,
		Metadata: callMetadata(d, it, bd)}, ch, nil
}

// callMetadata is the decision event's metadata: the protocol, the call
// id under the dialect's own name and, when mapped, the function name.
func callMetadata(d Dialect, it Item, bd *Binding) map[string]any {
	idKey := "tool_call_id"
	if d == Responses {
		idKey = "call_id"
	}
	o := map[string]any{idKey: it.CallID}
	if bd.Mapped {
		o["function_name"] = bd.Function
	}
	return map[string]any{"protocol": string(d), "openai": o}
}

// parseArguments reads a call's arguments, a JSON string holding an
// object, with strictjson (the dispatcher checks them again). An empty
// string means no arguments ({}), as models send for a function without
// parameters.
func parseArguments(s string) (json.RawMessage, error) {
	raw := bytes.TrimSpace([]byte(s))
	if len(raw) == 0 {
		return json.RawMessage("{}"), nil
	}
	if len(raw) > schemas.MaxParametersBytes {
		return nil, fmt.Errorf("arguments are %d bytes, over %d", len(raw), schemas.MaxParametersBytes)
	}
	if err := strictjson.Valid(raw); err != nil {
		return nil, fmt.Errorf("arguments must be a JSON object (a JSON string holding {…}): %w", err)
	}
	if raw[0] != '{' {
		return nil, errors.New("arguments must be a JSON object (a JSON string holding {…})")
	}
	return raw, nil
}

// result turns the dispatcher's answer into the item's result; ch names
// the tool (prepare's verdict).
func (a *Adapter) result(it Item, ch Chio, out *dispatch.Result, err error) Result {
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		return *refused(it, DecisionInvalidArguments, ch, err.Error())
	case err != nil:
		// No durable decision: no receipt, and no tool ran.
		a.log.Error("openai: call not recorded", "call_id", it.CallID, "err", err)
		return *refused(it, DecisionError, ch, "the call could not be recorded, so it did not run: "+err.Error())
	}
	ch.ReceiptRef = out.ReceiptID
	switch {
	case !out.Decision.Allow:
		r := refused(it, DecisionDeny, ch, fmt.Sprintf("denied at %s: %s", out.Decision.Guard, out.Decision.Reason))
		r.refusal = out.Decision
		return *r
	case out.ToolErr != nil:
		return *refused(it, DecisionToolError, ch, "the tool failed: "+schemas.TruncateText(out.ToolErr.Error()))
	}
	ch.Decision = DecisionAllow
	return Result{Item: it, Output: string(out.Output), Chio: ch}
}

// refused is a denied result whose output is the reason.
func refused(it Item, decision string, ch Chio, reason string) *Result {
	ch.Denied, ch.Decision, ch.Reason = true, decision, reason
	return &Result{Item: it, Output: "chio: " + reason, Chio: ch}
}

// Refusal is the deny receipt of one call of a batch whose capability
// the kernel refused.
type Refusal struct {
	CallID     string `json:"call_id"`
	ReceiptRef string `json:"receipt_ref"`
}

// Refuse records a deny receipt for each function call of a batch that
// names an exposed tool with well-formed arguments, on dec, the kernel's
// refusal of token with proof (kernel.Identify or Admit): a call turned
// away for its credential is still recorded. Nothing runs.
// The other calls never reached the kernel and have none.
func (a *Adapter) Refuse(ctx context.Context, token string, proof *kernel.Proof, b *Batch, dec *kernel.Decision) ([]Refusal, error) {
	ctx = context.WithoutCancel(ctx) // the receipts must be written
	out := []Refusal{}
	names := a.table()
	for _, it := range b.Items {
		call, _, res := a.prepare(names, b.Dialect, it)
		if res != nil {
			continue
		}
		call.Token, call.Proof = token, proof
		r, err := a.dispatch.Refuse(ctx, call, dec)
		switch {
		case errors.Is(err, dispatch.ErrBadArguments):
			continue // arguments the dispatcher refuses never reach the record
		case err != nil:
			return out, fmt.Errorf("record the refusal of call %s: %w", it.CallID, err)
		}
		out = append(out, Refusal{CallID: it.CallID, ReceiptRef: r.ReceiptID})
	}
	return out, nil
}
