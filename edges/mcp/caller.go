package mcp

import (
	"context"
	"encoding/json"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// The methods the edge governs; the SDK answers the others (initialize,
// ping, …) alone.
const (
	methodListTools = "tools/list"
	methodCallTool  = "tools/call"
)

// MetaDPoPProof is the params._meta key of a tools/call's proof of
// possession: a chio.dpop_proof.v1 object (dpop.ToolProof) signed by the
// capability's subject key, naming the call's Chio server id and tool name
// (a listed tool's _meta.chio) and the hash of its arguments. Over stdio
// it is the only proof a call can bring; over HTTP it may replace the
// request's DPoP header for that call.
const MetaDPoPProof = "chio/dpop_proof"

// caller is who a request acts for. The transport puts it in the request's
// context, which the SDK hands to every method handler: that is how the
// capability reaches tools/call with no session.
type caller struct {
	token string
	// id is the authenticated capability, set when the transport
	// identified the request as a whole; nil when govern identifies each
	// message (stdio, where a long session may outlive its token, and an
	// HTTP batch whose calls each bring their own tool proof).
	id *kernel.Identity
	// proof is the request's proof of possession (an HTTP request's DPoP
	// proof), nil for a bearer token: one request, one *kernel.Proof,
	// shared by every call of the request that brings none of its own.
	proof *kernel.Proof
	// ownProof: proof is this call's own tool proof, already admitted.
	ownProof bool
	// held: the token is the process's own (stdio): what names no tool
	// call is answered under kernel.Held, each call under its tool proof.
	held bool
	// refused, set by the HTTP transport, learns of a call refused for
	// its proof, which a one-message request answers with 401.
	refused *proofRefusal
}

// proofRefusal is the failed check of a call refused for its proof.
type proofRefusal struct {
	mu    sync.Mutex
	check dpop.Check
}

func (p *proofRefusal) set(c dpop.Check) {
	if p == nil || c == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.check = c
}

func (p *proofRefusal) get() dpop.Check {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.check
}

type callerKey struct{}

func withCaller(ctx context.Context, c *caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerFrom(ctx context.Context) (*caller, bool) {
	c, ok := ctx.Value(callerKey{}).(*caller)
	return c, ok && c != nil
}

// toolProof is the chio.dpop_proof.v1 under MetaDPoPProof, as JSON; nil
// when the call brings none. Whatever it holds is the kernel's to judge.
func toolProof(meta sdk.Meta) json.RawMessage {
	v, ok := meta[MetaDPoPProof]
	if !ok {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil || len(raw) == 0 {
		return json.RawMessage(`""`) // refused as malformed
	}
	return raw
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
			id, proof, dec := e.identifyMessage(ctx, c, method, req)
			if dec != nil {
				return nil, e.refusedRPC(ctx, c.token, proof, method, req, dec)
			}
			c = &caller{token: c.token, id: id, proof: proof, ownProof: method == methodCallTool, held: c.held, refused: c.refused}
			ctx = withCaller(ctx, c)
		}
		// Brings the SDK server's tools up to the registry's, so that a
		// tool registered since the last request answers tools/call.
		t := e.tools()
		if method == methodListTools {
			return e.listTools(t, c.id, req)
		}
		return next(ctx, method, req)
	}
}

// identifyMessage authenticates one message of a caller the transport
// did not identify as a whole. A tools/call brings its own proof (its
// tool proof, else the request's) and is admitted: its decision settles
// the proof's one-time claim. Anything else is identified under the
// request's proof or, for the process's own token (stdio), held.
func (e *Edge) identifyMessage(ctx context.Context, c *caller, method string, req sdk.Request) (*kernel.Identity, *kernel.Proof, *kernel.Decision) {
	if cr, ok := req.(*sdk.CallToolRequest); ok && method == methodCallTool && cr.Params != nil {
		proof := c.proof
		if raw := toolProof(cr.Params.Meta); raw != nil {
			proof = e.callProof(raw, cr.Params.Name, cr.Params.Arguments)
		}
		id, dec := e.admit(ctx, c.token, proof)
		return id, proof, dec
	}
	if c.held {
		id, dec := e.kernel.Held(c.token)
		return id, c.proof, dec
	}
	id, dec := e.kernel.Identify(ctx, c.token, c.proof)
	return id, c.proof, dec
}

// admit authenticates a tools/call about to be dispatched: kernel.Admit,
// which leaves the proof's claim to the call's decision write. A
// simulation dispatches nothing, so its proof is spent here.
func (e *Edge) admit(ctx context.Context, token string, proof *kernel.Proof) (*kernel.Identity, *kernel.Decision) {
	if e.opts.simulate {
		return e.kernel.Identify(ctx, token, proof)
	}
	return e.kernel.Admit(ctx, token, proof)
}

// refusedRPC is the JSON-RPC error of a request whose capability the kernel
// refused; a tools/call naming a listed tool gets its deny receipt first.
func (e *Edge) refusedRPC(ctx context.Context, token string, proof *kernel.Proof, method string, req sdk.Request, dec *kernel.Decision) error {
	var calls []toolCall
	if cr, ok := req.(*sdk.CallToolRequest); ok && method == methodCallTool && cr.Params != nil {
		calls = append(calls, toolCall{name: cr.Params.Name, args: cr.Params.Arguments, requestID: stampedID(cr.Params.Meta)})
	}
	data, err := e.refuse(ctx, token, proof, calls, dec)
	if err != nil {
		return rpcError(CodeNotRecorded, "chio: the refusal could not be recorded: "+err.Error(), nil)
	}
	if c, ok := callerFrom(ctx); ok {
		c.refused.set(dec.DPoPCheck())
	}
	return refusedError(dec, data)
}

// callProof is the Proof of a tools/call's own tool proof raw, bound to
// the call it names (kernel.Proof.Request) when that resolves to a served
// tool: whoever consults the kernel first (Admit, or Identify in
// simulation, where nothing is decided) checks that it names this call;
// the dispatch checks it again.
func (e *Edge) callProof(raw json.RawMessage, name string, args json.RawMessage) *kernel.Proof {
	p := &kernel.Proof{Tool: raw}
	if b, ok := e.tools().lookup(name); ok {
		if a, err := arguments(args); err == nil {
			p.Request = &dpop.Call{ToolServer: b.entry.Manifest.ServerID, ToolName: b.entry.Tool.Name, Arguments: a}
		}
	}
	return p
}
