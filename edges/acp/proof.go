package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// RequestServer is the tool_server a chio.dpop_proof.v1 names when it is
// presented for a request that runs no tool of its own (tool/stream,
// tool/cancel, session/list_capabilities, session/request_permission).
const RequestServer = "acp"

// RequestArguments are what such a proof's action_hash covers: the
// request's params object with its "_meta" member (exactly that name)
// removed; {} when params are absent or null. action_hash is then, as for
// any tool proof, the lowercase hex SHA-256 of the RFC 8785 (JCS) form of
// that object (dpop.ActionHash), so a client computes it before it adds
// the proof to _meta.
func RequestArguments(params json.RawMessage) (json.RawMessage, error) {
	t := bytes.TrimSpace(params)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return json.RawMessage("{}"), nil
	}
	// Read strictly first: decoding into a map keeps the last of two equal
	// members, so two different requests could otherwise hash alike.
	var m map[string]json.RawMessage
	if err := strictjson.Unmarshal(t, &m); err != nil {
		return nil, fmt.Errorf("read params: %w", err)
	}
	if m == nil {
		return nil, errors.New("params must be a JSON object")
	}
	if _, err := schemas.CanonicalizeJSON(t); err != nil {
		return nil, fmt.Errorf("params have no RFC 8785 form: %w", err)
	}
	delete(m, "_meta")
	return json.Marshal(m)
}

// RequestProof is the chio.dpop_proof.v1 a client signs for a request
// that runs no tool of its own: tool_server RequestServer, tool_name the
// method exactly as the request names it ("tool/cancel", or
// "_chio/tool/cancel" when sent under that name), action_hash over
// RequestArguments(params). It goes in params._meta.chioDpopProof. A
// tool/invoke's or tool/resume's proof names the tool call instead
// (s.ToolProof with the capability's server id, tool name and arguments;
// for a resume, the task's).
func RequestProof(s *dpop.Signer, method string, params json.RawMessage) (*dpop.ToolProof, error) {
	args, err := RequestArguments(params)
	if err != nil {
		return nil, err
	}
	return s.ToolProof(RequestServer, method, args)
}

// requestCall is the operation a tool proof presented with a request
// that runs no tool must name (kernel.Proof.Request).
func requestCall(method string, params json.RawMessage) (*dpop.Call, *Error) {
	args, err := RequestArguments(params)
	if err != nil {
		return nil, rpcErr(CodeInvalidParams, nil, "invalid params: %v", err)
	}
	return &dpop.Call{ToolServer: RequestServer, ToolName: method, Arguments: args}, nil
}

// RetryAfterSeconds is the Retry-After of a 503 answering a call whose
// proof could not be checked because the replay state is unreachable.
const RetryAfterSeconds = 1

var retryAfter = strconv.Itoa(RetryAfterSeconds)
