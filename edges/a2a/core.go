package a2a

import (
	"context"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// The core: the operations every binding (JSON-RPC, REST, gRPC, stdio) calls
// with decoded params (do, and openStream in stream.go), given the
// per-request state a binding builds (rpcCall). The core never sees HTTP,
// echo, gRPC or JSON-RPC ids; it answers with results encoded in the
// request's wire.Dialect, or a *wire.Error the binding frames.

// rpcCall is one decoded call with its context.
type rpcCall struct {
	caller caller
	// negotiated is the A2A-Version a JSON-RPC request negotiated, which
	// LookupMethod resolves its method name with (V03 on the stdio profile).
	negotiated wire.Version
	// dialect encodes the call's results, chosen once per request by its
	// binding: the method name's version (VHelloStdio on the stdio
	// profile) for JSON-RPC, the route's for REST, V10 for gRPC.
	dialect wire.Dialect
	stdio   bool
	origin  string // the HTTP origin the request came to, for cards ("" off HTTP)
	// remote is the host the request came from ("" on stdio): whom an
	// unauthenticated caller's streams count against (streamKey).
	remote string
}

// do runs one non-streaming operation with decoded params; both bindings
// (JSON-RPC and REST) come here.
func (e *Edge) do(ctx context.Context, rc rpcCall, op wire.Operation, params any) (any, *wire.Error) {
	callFrom(ctx).setTask(taskIDOf(params))
	switch {
	case op.PushConfig():
		return e.pushConfigOp(ctx, rc, op, params)
	case op == wire.OpGetExtendedAgentCard:
		return e.extendedCard(ctx, rc)
	}
	switch p := params.(type) {
	case *wire.SendParams:
		return e.send(ctx, rc, p, op == wire.OpSendStreamingMessage)
	case *wire.GetTaskParams:
		return e.getTask(ctx, rc, p)
	case *wire.ListTasksParams:
		return e.listTasks(ctx, rc, p)
	case *wire.CancelTaskParams:
		return e.cancelTask(ctx, rc, p)
	}
	return nil, wire.MethodNotFound(op.String())
}
