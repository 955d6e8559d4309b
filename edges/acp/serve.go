package acp

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// MaxBatch bounds the requests of one JSON-RPC batch. A larger batch is
// refused whole (CodeInvalidRequest) before any of it runs: one POST must
// not start unbounded work.
const MaxBatch = 128

// CodeCanceled answers a request of a batch that never started because
// its client went away (over HTTP the answer is never read; over stdio
// every request read is answered). ACP's code for a cancelled request.
const CodeCanceled = -32800

// process answers one JSON-RPC message (a request, a notification or a
// batch) under the connection's credential; nil when nothing is to be
// answered (notifications only). The message is read with strictjson
// first: one that it refuses (a repeated or case-variant member anywhere,
// nesting past its depth, invalid UTF-8, data after the value) is a parse
// error and nothing of it is read further. A batch is answered as a
// batch, its requests in order, every one under the same credential (one
// HTTP request, one proof). Once ctx is done no further request starts;
// one that has started finishes, and is recorded, whatever ctx.
func (e *Edge) process(ctx context.Context, conn credential, msg []byte) any {
	msg = bytes.TrimSpace(msg)
	if err := strictjson.Valid(msg); err != nil {
		return errorResponse(nil, rpcErr(CodeParseError, nil, "parse error: %v", err))
	}
	if msg[0] != '[' {
		// A nil *response must become a nil interface: nothing to answer.
		if r := e.one(ctx, conn, msg); r != nil {
			return r
		}
		return nil
	}
	var batch []json.RawMessage
	// Already read strictly above: this only splits it.
	if err := json.Unmarshal(msg, &batch); err != nil || len(batch) == 0 {
		return errorResponse(nil, rpcErr(CodeInvalidRequest, nil, "invalid request: an empty batch"))
	}
	if len(batch) > MaxBatch {
		return errorResponse(nil, rpcErr(CodeInvalidRequest, nil, "invalid request: a batch of %d requests, over %d", len(batch), MaxBatch))
	}
	out := []*response{}
	for _, m := range batch {
		if r := e.one(ctx, conn, m); r != nil {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// one answers a single message; nil for a notification. It does not
// start once ctx is done; once started it runs to its end under a context
// the client's leaving does not cancel, so that a call is never cut
// between its decision and its outcome, nor refused for the client's
// leaving.
func (e *Edge) one(ctx context.Context, conn credential, msg json.RawMessage) *response {
	r, bad := decodeRequest(msg)
	if bad != nil {
		return bad
	}
	if ctx.Err() != nil {
		if r.notification() {
			return nil
		}
		return errorResponse(r.ID, rpcErr(CodeCanceled, nil, "chio: not started: the client went away first"))
	}
	return e.handle(context.WithoutCancel(ctx), conn, r)
}
