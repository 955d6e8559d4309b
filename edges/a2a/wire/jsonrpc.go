package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MaxRequestBytes bounds a JSON-RPC request body. The server must stop
// reading there (http.MaxBytesReader) and answer InvalidRequest; DecodeRequest
// enforces it too.
const MaxRequestBytes = 1 << 20

// Request is a decoded JSON-RPC 2.0 request.
type Request struct {
	// ID is the id exactly as sent (a JSON string, number or null), or nil
	// for a notification.
	ID     json.RawMessage
	Method string
	// Params is the raw params object or array, or nil when absent.
	Params json.RawMessage
	// IsNotification is true when the id member is absent (an explicit
	// null id is a request, not a notification). JSON-RPC says notifications
	// get no response.
	IsNotification bool
}

// ResponseID is the id to answer with: the request's id, or null when the
// request is nil, a notification, or its id could not be read. It is safe on
// a nil *Request, so it serves the error path of DecodeRequest too.
func (r *Request) ResponseID() json.RawMessage {
	if r == nil || len(r.ID) == 0 {
		return json.RawMessage("null")
	}
	return r.ID
}

// DecodeRequest decodes one JSON-RPC 2.0 request. Errors:
//   - -32700 when body is not a single valid JSON value (including trailing
//     garbage after the object, invalid UTF-8 and lone surrogates);
//   - -32600 when body exceeds MaxRequestBytes, repeats a member name in
//     some object (exactly, as a case variant or through an escape), nests
//     deeper than strictjson.MaxDepth, is a batch (a JSON array:
//     batch requests are not supported), is not an object, lacks
//     "jsonrpc":"2.0", lacks a non-empty string method, has an id that is not
//     a string, number or null, or has params that are not an object or an
//     array (null params read as absent).
//
// On an error the returned *Request is non-nil only when the id could be
// read, so that the error response can echo it; answer with
// req.ResponseID() either way.
func DecodeRequest(body []byte) (*Request, *Error) {
	if len(body) > MaxRequestBytes {
		return nil, InvalidRequest(fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes))
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, ParseError("empty request body")
	}
	if e := strictDocument(trimmed, "request body"); e != nil {
		return nil, e
	}
	switch trimmed[0] {
	case '[':
		return nil, InvalidRequest("batch requests are not supported; send one request object per call")
	case '{':
	default:
		return nil, InvalidRequest("request must be a JSON object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &obj); err != nil {
		return nil, ParseError("request body is not valid JSON")
	}

	// Read the id first so later envelope errors can echo it.
	var req *Request
	idRaw, hasID := obj["id"]
	if hasID {
		switch jsonKind(idRaw) {
		case 's', 'n', '0':
			req = &Request{ID: idRaw}
		default:
			return nil, InvalidRequest("id must be a string, a number or null")
		}
	} else {
		req = &Request{IsNotification: true}
	}

	var version string
	if raw, ok := obj["jsonrpc"]; !ok || jsonKind(raw) != 's' || json.Unmarshal(raw, &version) != nil || version != "2.0" {
		return req, InvalidRequest(`"jsonrpc" must be the string "2.0"`)
	}
	raw, ok := obj["method"]
	if !ok || jsonKind(raw) != 's' || json.Unmarshal(raw, &req.Method) != nil {
		return req, InvalidRequest(`"method" must be a string`)
	}
	if req.Method == "" {
		return req, InvalidRequest(`"method" must not be empty`)
	}
	if p, ok := obj["params"]; ok {
		switch jsonKind(p) {
		case 'o', 'a':
			req.Params = p
		case '0':
			// null params read as absent, as ProtoJSON treats null members.
		default:
			return req, InvalidRequest(`"params" must be an object or an array`)
		}
	}
	return req, nil
}

// jsonKind classifies a valid JSON value by its first byte: 'o' object,
// 'a' array, 's' string, 'n' number, 'b' boolean, '0' null, 0 otherwise.
func jsonKind(raw []byte) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	switch c := raw[0]; {
	case c == '{':
		return 'o'
	case c == '[':
		return 'a'
	case c == '"':
		return 's'
	case c == '-' || (c >= '0' && c <= '9'):
		return 'n'
	case c == 't' || c == 'f':
		return 'b'
	case c == 'n':
		return '0'
	}
	return 0
}

// responseID returns id when it is a valid JSON string, number or null, and
// null otherwise, so a bad id from the caller cannot corrupt the response.
func responseID(id json.RawMessage) json.RawMessage {
	id = bytes.TrimSpace(id)
	if len(id) == 0 || !json.Valid(id) {
		return json.RawMessage("null")
	}
	switch jsonKind(id) {
	case 's', 'n', '0':
		return id
	}
	return json.RawMessage("null")
}

// EncodeResult returns the success response {"jsonrpc":"2.0","id":…,"result":…}.
// result is typically the json.RawMessage of an Encode* function. If result
// cannot be marshalled the response is an InternalError instead, so the
// caller always has bytes to send.
func EncodeResult(id json.RawMessage, result any) []byte {
	type response struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}
	if result == nil {
		result = json.RawMessage("null")
	}
	b, err := marshal(response{"2.0", responseID(id), result})
	if err != nil {
		return EncodeError(id, InternalError("the result could not be encoded"))
	}
	return b
}

// EncodeError returns the error response {"jsonrpc":"2.0","id":…,"error":{…}}.
// A nil e becomes an InternalError; data that cannot be marshalled is dropped.
func EncodeError(id json.RawMessage, e *Error) []byte {
	type response struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *Error          `json:"error"`
	}
	if e == nil {
		e = InternalError("")
	}
	b, err := marshal(response{"2.0", responseID(id), e})
	if err != nil {
		b, _ = marshal(response{"2.0", responseID(id), &Error{Code: e.Code, Message: e.Message}})
	}
	return b
}
