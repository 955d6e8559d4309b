package acp

import (
	"bytes"
	"context"
	"encoding/json"
)

// process answers one JSON-RPC message (a request, a notification or a
// batch) under the connection's credential; nil when nothing is to be
// answered (notifications only). A batch is answered as a batch, its
// requests in order, every one under the same credential (one HTTP
// request, one proof).
func (e *Edge) process(ctx context.Context, conn credential, msg []byte) any {
	msg = bytes.TrimSpace(msg)
	if !json.Valid(msg) {
		return errorResponse(nil, rpcErr(CodeParseError, nil, "parse error: the message is not valid JSON"))
	}
	if msg[0] != '[' {
		// A nil *response must become a nil interface: nothing to answer.
		if r := e.one(ctx, conn, msg); r != nil {
			return r
		}
		return nil
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(msg, &batch); err != nil || len(batch) == 0 {
		return errorResponse(nil, rpcErr(CodeInvalidRequest, nil, "invalid request: an empty batch"))
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

// one answers a single message; nil for a notification.
func (e *Edge) one(ctx context.Context, conn credential, msg json.RawMessage) *response {
	r, bad := decodeRequest(msg)
	if bad != nil {
		return bad
	}
	return e.handle(ctx, conn, r)
}
