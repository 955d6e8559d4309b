package acp

import (
	"context"
	"encoding/json"
	"strings"
)

// The seed profile's methods and ACP's handshake.
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
// capability riding in _meta overrides the connection's for that call.
type meta struct {
	Meta struct {
		ChioCapability string `json:"chioCapability"`
	} `json:"_meta"`
}

// handle answers one request under token (the connection's capability);
// nil for a notification, which is handled and never answered.
func (e *Edge) handle(ctx context.Context, token string, r *request) *response {
	result, rerr := e.route(ctx, token, r)
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

func (e *Edge) route(ctx context.Context, token string, r *request) (any, *Error) {
	method := canonical(r.Method)
	switch method {
	case "":
		return nil, rpcErr(CodeMethodNotFound, nil, "method not found: %q", r.Method)
	case MethodInitialize:
		return e.initialize(), nil
	}
	var m meta
	if perr := params(r.Params, &m); perr != nil {
		return nil, perr
	}
	if m.Meta.ChioCapability != "" {
		token = m.Meta.ChioCapability
	}
	c := &call{token: token, method: method, params: r.Params, requestID: decodeID(r.ID)}
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

// decodeID is a request id as recorded in a decision's metadata.
func decodeID(raw json.RawMessage) any {
	var v any
	if raw == nil || json.Unmarshal(raw, &v) != nil {
		return nil
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
