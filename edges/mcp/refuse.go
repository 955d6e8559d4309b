package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// toolCall is a tools/call as the transport read it.
type toolCall struct {
	name      string
	args      json.RawMessage
	requestID any // the JSON-RPC id, when known
	// proof is its params._meta tool proof (MetaDPoPProof), if any.
	proof json.RawMessage
}

// Refusal is the deny receipt of a tools/call whose capability the kernel
// refused.
type Refusal struct {
	RequestID  any    `json:"request_id,omitempty"`
	ReceiptRef string `json:"receipt_ref"`
}

// Refused is the data of the error answering a refused capability.
type Refused struct {
	Decision string `json:"decision"`
	Denied   bool   `json:"denied"`
	Guard    string `json:"guard"`
	Reason   string `json:"reason"`
	// DPoPCheck names the failed check of a refused proof of possession.
	DPoPCheck string    `json:"dpop_check,omitempty"`
	Receipts  []Refusal `json:"receipts"`
}

// refusedData is the error data of dec with the deny receipts refs.
func refusedData(dec *kernel.Decision, refs []Refusal) *Refused {
	return &Refused{Decision: DecisionDeny, Denied: true, Guard: dec.Guard, Reason: dec.Reason,
		DPoPCheck: string(dec.DPoPCheck()), Receipts: refs}
}

// refusedMessage names the failed step of a refused capability.
func refusedMessage(dec *kernel.Decision) string {
	if dec.DPoPCheck() == dpop.CheckState {
		return "chio: the proof could not be checked, so nothing ran; retry: " + dec.Reason
	}
	return fmt.Sprintf("chio: capability refused at %s: %s", dec.Guard, dec.Reason)
}

// refusedError is the JSON-RPC error of a capability or proof the kernel
// refused: CodeUnauthorized, but for a proof that could not be checked
// because the replay state is unreachable, a server condition the client
// may retry (codeInternal; over HTTP a 503 with Retry-After).
func refusedError(dec *kernel.Decision, data any) *jsonrpc.Error {
	if dec.DPoPCheck() == dpop.CheckState {
		return rpcError(codeInternal, refusedMessage(dec), data)
	}
	return rpcError(CodeUnauthorized, refusedMessage(dec), data)
}

// RetryAfterSeconds is the Retry-After of a 503 answering a request whose
// proof could not be checked because the replay state is unreachable.
const RetryAfterSeconds = 1

// setProofStatus sets the headers of an HTTP answer refusing a proof for
// check and returns its status: 503 with Retry-After when the replay
// state is unreachable, else 401 with the DPoP challenge (and bearer's,
// where a bearer token could have done).
func setProofStatus(h http.Header, check dpop.Check, bearer string) int {
	if check == dpop.CheckState {
		h.Set("Retry-After", strconv.Itoa(RetryAfterSeconds))
		return http.StatusServiceUnavailable
	}
	dpop.SetChallenge(h, check, bearer)
	return http.StatusUnauthorized
}

// refuse records a deny receipt for each call that names a listed tool
// with object arguments, on dec, the kernel's refusal of token with proof
// (kernel.Identify or Admit): a call turned away for its credential is
// still on the record. Nothing runs. The other calls never
// reached the kernel and get none; in simulation mode nothing is recorded
// at all.
func (e *Edge) refuse(ctx context.Context, token string, proof *kernel.Proof, calls []toolCall, dec *kernel.Decision) (*Refused, error) {
	out := refusedData(dec, []Refusal{})
	if e.opts.simulate {
		return out, nil
	}
	ctx = context.WithoutCancel(ctx) // the receipts must be written
	t := e.tools()
	for _, c := range calls {
		b, ok := t.lookup(c.name)
		if !ok {
			continue
		}
		args, err := arguments(c.args)
		if err != nil {
			continue
		}
		r, err := e.dispatch.Refuse(ctx, e.call(token, proof, b, args, c.requestID), dec)
		switch {
		case errors.Is(err, dispatch.ErrBadArguments):
			continue
		case err != nil:
			return out, fmt.Errorf("record the refusal of tool %q: %w", c.name, err)
		}
		out.Receipts = append(out.Receipts, Refusal{RequestID: c.requestID, ReceiptRef: r.ReceiptID})
	}
	return out, nil
}
