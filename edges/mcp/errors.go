package mcp

import (
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// JSON-RPC error codes of Chio's own refusals, in the range JSON-RPC
// leaves to servers.
const (
	// CodeUnauthorized: no capability, or one the kernel refused.
	CodeUnauthorized = -32001
	// CodeForbidden: a cross-site browser request under the dev capability.
	CodeForbidden = -32003
	// CodeNotRecorded: the refusal of a call could not be made durable.
	CodeNotRecorded = -32004
)

// The standard codes the edge answers.
const (
	codeParseError     = jsonrpc.CodeParseError
	codeInvalidRequest = jsonrpc.CodeInvalidRequest
	codeMethodNotFound = jsonrpc.CodeMethodNotFound
	codeInvalidParams  = jsonrpc.CodeInvalidParams
	codeInternal       = jsonrpc.CodeInternalError
)

// rpcError is a JSON-RPC error; data, when not nil, is its data member.
func rpcError(code int64, msg string, data any) *jsonrpc.Error {
	e := &jsonrpc.Error{Code: code, Message: msg}
	if data != nil {
		if raw, err := json.Marshal(data); err == nil {
			e.Data = raw
		}
	}
	return e
}

// unknownTool is MCP's answer to a tool it does not list. A tool hidden
// from the caller's capability gets the same, so a caller cannot probe
// for tools it may not call.
func unknownTool(name string) *jsonrpc.Error {
	return rpcError(codeInvalidParams, fmt.Sprintf("unknown tool %q", name), nil)
}

// invalidArguments is the answer to arguments that are not a JSON object
// the dispatcher accepts; nothing reached the kernel.
func invalidArguments(name string, err error) *jsonrpc.Error {
	return rpcError(codeInvalidParams, fmt.Sprintf("invalid arguments for tool %q: %v", name, err), nil)
}
