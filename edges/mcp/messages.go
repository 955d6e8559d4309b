package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// MaxBatchMessages bounds the messages of one JSON-RPC batch (which the
// SDK accepts under protocol versions before 2025-06-18): every call of a
// batch is dispatched, all under one request and one proof.
const MaxBatchMessages = 64

// maxSafeID is the largest magnitude of a numeric request id: the SDK
// holds ids as float64, so a larger one would be answered and recorded
// as another number.
const maxSafeID = 1<<53 - 1

// message is one JSON-RPC message, its members undecoded.
type message map[string]json.RawMessage

// incoming is a body (an HTTP request's, one stdio line) as the edge read
// it before the SDK does.
type incoming struct {
	msgs  []message
	batch bool
	// refusal, when set, is the answer to a body that must not reach the
	// SDK; msgs is then nil, so nothing of it is recorded either.
	refusal *jsonrpc.Error
	// id is the id to answer refusal with: the request's own when it is
	// unambiguous, else null.
	id json.RawMessage
}

// readMessages reads one JSON-RPC message or a batch of them with
// strictjson, so that the edge, the SDK and the record cannot read a
// request differently: a repeated or case-variant member (the SDK keeps
// the last, or matches "name" but not "Name"), invalid UTF-8 and the
// rest strictjson refuses is answered -32602 (invalid params) when it lies
// within a message's params, else -32600 or -32700 (see strictRefusal). A
// batch is refused past MaxBatchMessages, and a numeric id the SDK cannot
// keep exact (see checkID) is refused too.
func readMessages(body []byte) incoming {
	null := json.RawMessage("null")
	if err := strictjson.Valid(body); err != nil {
		werr, id := strictRefusal(body, err)
		return incoming{refusal: werr, id: id}
	}
	t := bytes.TrimSpace(body)
	in := incoming{id: null}
	notRPC := rpcError(codeInvalidRequest, "chio: the body is neither a JSON-RPC message nor a batch of them", nil)
	switch t[0] {
	case '[':
		in.batch = true
		if json.Unmarshal(t, &in.msgs) != nil || len(in.msgs) == 0 {
			return incoming{refusal: notRPC, id: null, batch: true}
		}
		if len(in.msgs) > MaxBatchMessages {
			return incoming{refusal: rpcError(codeInvalidRequest, fmt.Sprintf(
				"chio: a batch of %d messages: at most %d are served in one", len(in.msgs), MaxBatchMessages), nil), id: null, batch: true}
		}
	case '{':
		var m message
		if json.Unmarshal(t, &m) != nil {
			return incoming{refusal: notRPC, id: null}
		}
		in.msgs = []message{m}
	default:
		return incoming{refusal: notRPC, id: null}
	}
	for _, m := range in.msgs {
		raw, ok := m["id"]
		if !ok {
			continue
		}
		if why := checkID(raw); why != "" {
			out := incoming{refusal: rpcError(codeInvalidRequest, "chio: "+why, nil), id: null, batch: in.batch}
			if !in.batch {
				out.id = raw // answered as sent, which the SDK could not do
			}
			return out
		}
	}
	return in
}

// checkID says why a request id cannot be served exactly, or "". A
// number must be an integer of at most maxSafeID in magnitude, written
// plainly: the SDK reads ids as float64 and answers them as integers, so
// 9007199254740993 would come back as 9007199254740992 and 1.5 as 1.
// Strings and null pass; other types are the SDK's to refuse.
func checkID(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || (t[0] != '-' && (t[0] < '0' || t[0] > '9')) {
		return ""
	}
	if _, ok := safeInteger(string(t)); !ok {
		return fmt.Sprintf("a numeric request id must be an integer of at most %d in magnitude, without fraction or "+
			"exponent, to be answered and recorded exactly: send a larger one as a string", maxSafeID)
	}
	return ""
}

// safeInteger reads s, a JSON number, as an integer of at most maxSafeID
// in magnitude written plainly (no fraction, exponent, leading zero or
// negative zero).
func safeInteger(s string) (int64, bool) {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') || s == "-0" {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxSafeID || n < -maxSafeID {
		return 0, false
	}
	return n, true
}

// strictRefusal is the JSON-RPC error answering body, which strictjson
// refused with err, and the id to answer it with. A refusal inside a
// message's params is -32602 (invalid params); a repeated member or too
// deep a nesting elsewhere is -32600 (JSON, but no request the edge
// serves); anything else (bad syntax, bad encoding, data after the
// value) is -32700. The request's id is answered when the body is one
// object with exactly one member named id (in any case), itself valid,
// and the refusal lies within the object: the client can then tell which
// request was refused. The message gives the offset, never the input.
func strictRefusal(body []byte, err error) (*jsonrpc.Error, json.RawMessage) {
	id := json.RawMessage("null")
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return rpcError(codeParseError, "chio: the body is not JSON: "+err.Error(), nil), id
	}
	code, what := int64(codeParseError), "chio: the body is not JSON the edge accepts"
	if errors.Is(err, strictjson.ErrDuplicateMember) || errors.Is(err, strictjson.ErrDepth) {
		code, what = codeInvalidRequest, "chio: the body is no JSON-RPC request the edge accepts"
	}
	members, end, ok := envelope(body)
	if !ok || int64(se.Offset) >= end {
		return rpcError(code, what+": "+se.Error(), nil), id
	}
	ids := 0
	for _, m := range members {
		if strings.EqualFold(m.name, "id") {
			ids++
			if v := bytes.TrimSpace(body[m.start:m.end]); strictjson.Valid(v) == nil && (v[0] == '"' || checkID(v) == "") {
				id = append(json.RawMessage(nil), v...)
			}
		}
		if m.name == "params" && int64(se.Offset) >= m.start && int64(se.Offset) < m.end {
			code, what = codeInvalidParams, "chio: invalid params"
		}
	}
	if ids != 1 || !(id[0] == '"' || id[0] == '-' || (id[0] >= '0' && id[0] <= '9')) {
		id = json.RawMessage("null")
	}
	return rpcError(code, what+": "+se.Error(), nil), id
}

// member is one member of a top-level object: its name as encoding/json
// decodes it and the byte span of its value.
type member struct {
	name       string
	start, end int64
}

// envelope lists the members of body read as one object, and the offset
// just past it; ok is false when body is no object. It only locates a
// strictjson refusal, so it checks nothing: it skips strings and counts
// brackets, at no depth limit, in one pass.
func envelope(body []byte) (members []member, end int64, ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, 0, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return nil, int64(i + 1), true
	}
	for {
		j, ok := skipString(body, i)
		if !ok {
			return nil, 0, false
		}
		var name string
		_ = json.Unmarshal(body[i:j], &name) // escapes decoded, as the SDK decodes them
		i = skipSpace(body, j)
		if i >= len(body) || body[i] != ':' {
			return nil, 0, false
		}
		start := i + 1
		if i, ok = skipValue(body, start); !ok {
			return nil, 0, false
		}
		members = append(members, member{name: name, start: int64(start), end: int64(i)})
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return members, int64(i + 1), true
		default:
			return nil, 0, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString is the offset past the string at b[i].
func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue is the offset of the ',' or '}' that ends the member value
// starting at b[i].
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			j, ok := skipString(b, i)
			if !ok {
				return 0, false
			}
			i = j
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i, b[i] == '}'
			}
			depth--
		case ',':
			if depth == 0 {
				return i, true
			}
		}
		i++
	}
	return 0, false
}

func (m message) method() string {
	s, _ := jsonString(m["method"])
	return s
}

// object reads a member of m that is a JSON object; nil when absent or
// not an object. Its members are matched exactly, as the SDK matches them.
func object(raw json.RawMessage) map[string]json.RawMessage {
	var obj map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &obj) != nil {
		return nil
	}
	return obj
}

// toolCall is m read as a tools/call request, if it is one naming a tool.
// m has passed readMessages, so its params are strict JSON; they are read
// with exact member names, as the SDK reads them.
func (m message) toolCall() (toolCall, bool) {
	if _, ok := m["id"]; !ok || m.method() != methodCallTool {
		return toolCall{}, false
	}
	p := object(m["params"])
	name, _ := jsonString(p["name"])
	if p == nil || name == "" {
		return toolCall{}, false
	}
	meta := object(p["_meta"]) // not an object: the SDK refuses the call
	return toolCall{name: name, args: p["arguments"], requestID: decodeID(m["id"]), proof: meta[MetaDPoPProof]}, true
}

// request reports whether m is a request (a method and an id).
func (m message) request() bool {
	_, id := m["id"]
	return id && m.method() != ""
}

// decodeID is a raw JSON-RPC id as a string or an int64 (the id has
// passed checkID, so a number is an integer kept exactly), or nil.
func decodeID(raw json.RawMessage) any {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return nil
	}
	if t[0] == '"' {
		s, ok := jsonString(t)
		if !ok {
			return nil
		}
		return s
	}
	if n, ok := safeInteger(string(t)); ok {
		return n
	}
	return nil
}

// marshal is JSON without HTML escaping, so re-encoded messages keep
// their strings' bytes.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
