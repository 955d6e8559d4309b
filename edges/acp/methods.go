package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The methods of Chio's ACP profile and ACP's handshake.
const (
	MethodInitialize        = "initialize"
	MethodListCapabilities  = "session/list_capabilities"
	MethodRequestPermission = "session/request_permission"
	MethodInvoke            = "tool/invoke"
	MethodStream            = "tool/stream"
	MethodResume            = "tool/resume"
	MethodCancel            = "tool/cancel"
)

// ExtensionPrefix names the profile's methods as ACP extension methods:
// "_chio/tool/invoke" is "tool/invoke".
const ExtensionPrefix = "_chio/"

// ProtocolVersion is the ACP protocol version initialize answers.
const ProtocolVersion = 1

// canonical is the profile's name of method, without the extension
// prefix ("" when it is not one of the profile's).
func canonical(method string) string {
	m := strings.TrimPrefix(method, ExtensionPrefix)
	switch m {
	case MethodInitialize, MethodListCapabilities, MethodRequestPermission, MethodInvoke, MethodStream, MethodResume, MethodCancel:
		return m
	}
	return ""
}

// meta is the part of every method's params the edge reads first: a
// capability riding in _meta overrides the connection's for that call,
// and a proof of possession riding there is the call's own.
type meta struct {
	Meta json.RawMessage `json:"_meta"`
}

// metaMembers are the members of _meta the edge reads.
type metaMembers struct {
	ChioCapability string `json:"chioCapability"`
	// ChioDPoPProof is a chio.dpop_proof.v1 (MetaDPoPProof).
	ChioDPoPProof json.RawMessage `json:"chioDpopProof"`
}

// readMeta reads params._meta, strictly and by exact names (object).
func readMeta(p json.RawMessage) (metaMembers, *Error) {
	var m meta
	var mm metaMembers
	if perr := params(p, &m); perr != nil {
		return mm, perr
	}
	t := bytes.TrimSpace(m.Meta)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return mm, nil
	}
	if t[0] != '{' {
		return mm, rpcErr(CodeInvalidParams, nil, "invalid params: _meta must be a JSON object")
	}
	if err := object(t, &mm); err != nil {
		return mm, rpcErr(CodeInvalidParams, nil, "invalid params: _meta: %v", err)
	}
	return mm, nil
}

// MetaDPoPProof is the params._meta member that carries a call's proof
// of possession: a chio.dpop_proof.v1 object (dpop.ToolProof) signed by
// the capability's subject key, naming the call's tool (its server id and
// tool name, as the receipt does) and the hash of its arguments, or, for a
// method that runs no tool of its own, the request (RequestProof). It sits
// beside chioCapability; over stdio it is the only proof a call can bring,
// over HTTP it may replace the request's DPoP header for that call.
const MetaDPoPProof = "chioDpopProof"

// credential is what a connection presents: its capability (the HTTP
// request's, the stdio session's, or the dev capability) and the proof of
// possession of its subject key, if any.
type credential struct {
	token string
	// proof is an HTTP request's DPoP proof: one *kernel.Proof for the
	// request, shared by every message of it that acts under token.
	proof *kernel.Proof
	// held: token is the process's own (stdio), checked at start; a
	// message that only reads what the token states acts under it without
	// a proof (statesOnly).
	held bool
	// invalid: the HTTP request's proof presentation is wrong in form
	// (proof carries the refusal), so no message under token is honoured.
	invalid bool
}

// handle answers one request under the connection's credential; nil for
// a notification, which is handled and never answered.
func (e *Edge) handle(ctx context.Context, conn credential, r *request) *response {
	result, rerr := e.route(ctx, conn, r)
	if r.notification() {
		return nil
	}
	if rerr != nil {
		return errorResponse(r.ID, rerr)
	}
	if result == nil {
		result = struct{}{}
	}
	return &response{JSONRPC: "2.0", ID: r.ID, Result: result}
}

func (e *Edge) route(ctx context.Context, conn credential, r *request) (any, *Error) {
	method := canonical(r.Method)
	switch method {
	case "":
		return nil, rpcErr(CodeMethodNotFound, nil, "method not found: %q", r.Method)
	case MethodInitialize:
		return e.initialize(), nil
	}
	m, perr := readMeta(r.Params)
	if perr != nil {
		return nil, perr
	}
	c := &call{token: conn.token, proof: conn.proof, held: conn.held, method: method, params: r.Params, requestID: decodeID(r.ID)}
	tok := m.ChioCapability
	own := tok == "" || tok == conn.token
	if !own {
		// The connection's proof and hold are its own token's.
		c.token, c.proof, c.held = tok, nil, false
	}
	if len(m.ChioDPoPProof) > 0 && !(own && conn.invalid) {
		// A presentation refused in form stays refused for its token: a
		// call's own proof does not mend it.
		bound, rerr := e.boundCall(method, r)
		if rerr != nil {
			return nil, rerr
		}
		c.proof = &kernel.Proof{Tool: m.ChioDPoPProof, Request: bound}
	}
	if rerr := e.identify(ctx, c); rerr != nil {
		return nil, rerr
	}
	switch method {
	case MethodListCapabilities:
		return e.listCapabilities(c), nil
	case MethodRequestPermission:
		return e.requestPermission(c)
	case MethodInvoke:
		return e.invoke(ctx, c)
	case MethodStream:
		return e.stream(ctx, c)
	case MethodResume:
		return e.resume(ctx, c)
	default: // MethodCancel
		return e.cancel(ctx, c)
	}
}

// boundCall is the operation a tool proof presented with r must name,
// checked as soon as the proof is (kernel.Proof.Request): for a
// tool/invoke, its tool call (when its capability and arguments resolve;
// otherwise it fails before any effect, and Decide checks the call in any
// case); for a tool/resume, none yet: the task's call, once the task is
// read (resume); for any other method, the request itself (requestCall,
// under the method's name as received).
func (e *Edge) boundCall(method string, r *request) (*dpop.Call, *Error) {
	switch method {
	case MethodInvoke:
		var p invokeParams
		if params(r.Params, &p) != nil {
			return nil, nil
		}
		b, ok := e.table().byID[p.CapabilityID]
		if !ok {
			return nil, nil
		}
		args, err := arguments(p.Arguments)
		if err != nil {
			return nil, nil
		}
		return b.call(args), nil
	case MethodResume:
		return nil, nil
	}
	return requestCall(r.Method, r.Params)
}

// decodeID is a request id as recorded in a decision's metadata.
func decodeID(raw json.RawMessage) any {
	v, err := strictjson.Parse(raw)
	if err != nil {
		return nil
	}
	if n, ok := v.(json.Number); ok {
		// As before strictjson: a number id is recorded as a double
		// (validID admitted only those a double holds).
		f, _ := n.Float64()
		return f
	}
	return v
}

// initialize answers ACP's handshake: protocol version 1, no prompt
// turns nor sessions (this profile governs tool calls, it is not a
// coding agent), no auth methods (the capability is the credential), and
// the profile's methods under _meta so a client can find them.
func (e *Edge) initialize() any {
	methods := []string{}
	for _, m := range []string{MethodListCapabilities, MethodRequestPermission, MethodInvoke, MethodStream, MethodResume, MethodCancel} {
		methods = append(methods, ExtensionPrefix+m)
	}
	return map[string]any{
		"protocolVersion": ProtocolVersion,
		"agentCapabilities": map[string]any{
			"loadSession":        false,
			"promptCapabilities": map[string]any{"image": false, "audio": false, "embeddedContext": false},
			"mcpCapabilities":    map[string]any{"http": false, "sse": false},
			"_meta":              map[string]any{"chio": map[string]any{"profile": "chio.acp.seed", "methods": methods}},
		},
		"agentInfo":   map[string]any{"name": e.opts.name, "version": e.opts.version},
		"authMethods": []any{},
	}
}
