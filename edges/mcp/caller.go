package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/kernel"
)

// The methods the edge governs; the SDK answers the others (initialize,
// ping, …) alone.
const (
	methodListTools = "tools/list"
	methodCallTool  = "tools/call"
)

// caller is who a request acts for. The transport puts it in the request's
// context, which the SDK hands to every method handler: that is how the
// capability reaches tools/call with no session.
type caller struct {
	token string
	// id is the authenticated capability: set by the HTTP transport, which
	// identifies every request; nil over stdio, where govern identifies
	// each request (a long session may outlive its token).
	id *kernel.Identity
}

type callerKey struct{}

func withCaller(ctx context.Context, c *caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerFrom(ctx context.Context) (*caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*caller)
	return c, ok && c != nil
}

// govern authenticates tools/list and tools/call, answers tools/list and
// hands tools/call on with the caller identified.
func (e *Edge) govern(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if method != methodListTools && method != methodCallTool {
			return next(ctx, method, req)
		}
		c, ok := callerFrom(ctx)
		if !ok {
			return nil, rpcError(codeInternal, "chio: the request carries no capability (fail closed)", nil)
		}
		if c.id == nil {
			id, dec := e.kernel.Identify(ctx, c.token, nil)
			if dec != nil {
				return nil, e.refusedRPC(ctx, c.token, method, req, dec)
			}
			c = &caller{token: c.token, id: id}
			ctx = withCaller(ctx, c)
		}
		if method == methodListTools {
			return e.listTools(c.id, req)
		}
		return next(ctx, method, req)
	}
}

// refusedRPC is the JSON-RPC error of a request whose capability the kernel
// refused; a tools/call naming a listed tool gets its deny receipt first.
func (e *Edge) refusedRPC(ctx context.Context, token, method string, req sdk.Request, dec *kernel.Decision) error {
	var calls []toolCall
	if cr, ok := req.(*sdk.CallToolRequest); ok && method == methodCallTool && cr.Params != nil {
		calls = append(calls, toolCall{name: cr.Params.Name, args: cr.Params.Arguments, requestID: stampedID(cr.Params.Meta)})
	}
	data, err := e.refuse(ctx, token, calls, dec)
	if err != nil {
		return rpcError(CodeNotRecorded, "chio: the refusal could not be recorded: "+err.Error(), nil)
	}
	return rpcError(CodeUnauthorized, refusedMessage(dec), data)
}
