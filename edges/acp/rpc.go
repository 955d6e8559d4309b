package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Standard JSON-RPC 2.0 codes.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
)

// Chio's own codes, in the range JSON-RPC leaves to servers.
const (
	// CodeUnauthorized: no capability, or one the kernel refused.
	CodeUnauthorized = -32001
	// CodeDenied: the kernel denied the call; data names the receipt.
	CodeDenied = -32002
	// CodeToolFailed: the tool ran and failed; data names the receipt.
	CodeToolFailed = -32003
	// CodeNotRecorded: the call could not be made durable, so it did not run.
	CodeNotRecorded = -32004
	// CodeTaskNotFound: no such task for this caller.
	CodeTaskNotFound = -32005
	// CodeTaskState: the task's state does not allow the method.
	CodeTaskState = -32006
	// CodeForbidden: a cross-site browser request under the dev capability.
	CodeForbidden = -32007
	// CodeResourceExhausted: the caller holds as many live tasks as it
	// may (data names the count and the limit), or the task store holds
	// as many tasks as it may; nothing was stored. Retry once some end.
	CodeResourceExhausted = -32008
)

// Error is a JSON-RPC error object.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
	// check is the failed check of a refused proof of possession.
	check dpop.Check
}

func (e *Error) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

func rpcErr(code int, data any, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Data: data}
}

// request is one JSON-RPC request or notification as read.
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// notification: a request without an id is never answered.
func (r *request) notification() bool { return r.ID == nil }

// response is one JSON-RPC answer.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

func errorResponse(id json.RawMessage, e *Error) *response {
	if id == nil {
		// An answer always has an id; null when the request's is unknown.
		id = json.RawMessage("null")
	}
	return &response{JSONRPC: "2.0", ID: id, Error: e}
}

// decodeRequest reads one message, strictly (see object); an answer that
// is not nil is the error to send instead of handling it.
func decodeRequest(raw json.RawMessage) (*request, *response) {
	var r request
	if err := object(raw, &r); err != nil {
		return nil, errorResponse(nil, rpcErr(CodeInvalidRequest, nil, "invalid request: not a JSON-RPC request object: %v", err))
	}
	if r.JSONRPC != "2.0" || r.Method == "" {
		return nil, errorResponse(validID(r.ID), rpcErr(CodeInvalidRequest, nil, `invalid request: jsonrpc must be "2.0" and method is required`))
	}
	if r.ID != nil && validID(r.ID) == nil {
		return nil, errorResponse(nil, rpcErr(CodeInvalidRequest, nil, "invalid request: id must be a string, a number or null"))
	}
	return &r, nil
}

// validID is id when it may be echoed (a string, a number a double holds,
// or null).
func validID(id json.RawMessage) json.RawMessage {
	v, err := strictjson.Parse(id)
	if err != nil || len(id) == 0 {
		return nil
	}
	switch x := v.(type) {
	case string, nil:
		return id
	case json.Number:
		if _, err := x.Float64(); err == nil {
			return id
		}
	}
	return nil
}

// params decodes p into v (see object); absent or null params are {}.
func params(p json.RawMessage, v any) *Error {
	t := bytes.TrimSpace(p)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil
	}
	if t[0] != '{' {
		return rpcErr(CodeInvalidParams, nil, "invalid params: params must be a JSON object")
	}
	if err := object(t, v); err != nil {
		return rpcErr(CodeInvalidParams, nil, "invalid params: %v", err)
	}
	return nil
}

// object decodes raw, a JSON object read with strictjson, into v, a
// pointer to a struct whose fields are named by json tags. Members are
// matched to fields by exact name: JSON-RPC names are case-sensitive, and
// encoding/json would read "Method" or "_META" as method or _meta, which
// a client hashing or reading its own request does not. A member that is
// a field's name but for case is refused; other members are ignored.
func object(raw []byte, v any) error {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return errors.New("not a JSON object")
	}
	return strictjson.UnmarshalExact(raw, v)
}
