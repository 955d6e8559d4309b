package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeRequestOK(t *testing.T) {
	for _, tc := range []struct {
		in, id, method, params string
		notification           bool
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"a":1}}`, `1`, "SendMessage", `{"a":1}`, false},
		{`{"jsonrpc":"2.0","id":"abc","method":"tasks/get","params":[]}`, `"abc"`, "tasks/get", `[]`, false},
		{` {"jsonrpc":"2.0","id":-1.5e3,"method":"m"} `, `-1.5e3`, "m", ``, false},
		{`{"jsonrpc":"2.0","id":null,"method":"m"}`, `null`, "m", ``, false},
		{`{"jsonrpc":"2.0","method":"m","params":{}}`, ``, "m", `{}`, true},
		{`{"method":"m","jsonrpc":"2.0","id":"\u00e9","extra":true}`, `"\u00e9"`, "m", ``, false},
		{`{"jsonrpc":"2.0","id":7,"method":"GetExtendedAgentCard","params":null}`, `7`, "GetExtendedAgentCard", ``, false},
	} {
		req, e := DecodeRequest([]byte(tc.in))
		if e != nil {
			t.Errorf("%s: %v", tc.in, e)
			continue
		}
		if string(req.ID) != tc.id || req.Method != tc.method || string(req.Params) != tc.params || req.IsNotification != tc.notification {
			t.Errorf("%s: got id %s method %q params %s notification %v", tc.in, req.ID, req.Method, req.Params, req.IsNotification)
		}
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		code     int
		echoID   string // the id the error response carries
	}{
		{"not JSON", `hello`, CodeParseError, "null"},
		{"empty", ``, CodeParseError, "null"},
		{"whitespace", " \n", CodeParseError, "null"},
		{"truncated", `{"jsonrpc":"2.0","id":1,"method":"m"`, CodeParseError, "null"},
		{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"m"} x`, CodeParseError, "null"},
		{"two objects", `{"jsonrpc":"2.0","id":1,"method":"m"}{}`, CodeParseError, "null"},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, CodeInvalidRequest, "null"},
		{"empty batch", `[]`, CodeInvalidRequest, "null"},
		{"string", `"x"`, CodeInvalidRequest, "null"},
		{"number", `1`, CodeInvalidRequest, "null"},
		{"null", `null`, CodeInvalidRequest, "null"},
		{"missing jsonrpc", `{"id":1,"method":"m"}`, CodeInvalidRequest, "1"},
		{"wrong jsonrpc", `{"jsonrpc":"1.0","id":1,"method":"m"}`, CodeInvalidRequest, "1"},
		{"numeric jsonrpc", `{"jsonrpc":2.0,"id":1,"method":"m"}`, CodeInvalidRequest, "1"},
		{"missing method", `{"jsonrpc":"2.0","id":"a"}`, CodeInvalidRequest, `"a"`},
		{"numeric method", `{"jsonrpc":"2.0","id":1,"method":5}`, CodeInvalidRequest, "1"},
		{"null method", `{"jsonrpc":"2.0","id":1,"method":null}`, CodeInvalidRequest, "1"},
		{"empty method", `{"jsonrpc":"2.0","id":1,"method":""}`, CodeInvalidRequest, "1"},
		{"id object", `{"jsonrpc":"2.0","id":{},"method":"m"}`, CodeInvalidRequest, "null"},
		{"id array", `{"jsonrpc":"2.0","id":[1],"method":"m"}`, CodeInvalidRequest, "null"},
		{"id bool", `{"jsonrpc":"2.0","id":true,"method":"m"}`, CodeInvalidRequest, "null"},
		{"params string", `{"jsonrpc":"2.0","id":1,"method":"m","params":"x"}`, CodeInvalidRequest, "1"},
		{"params number", `{"jsonrpc":"2.0","id":1,"method":"m","params":3}`, CodeInvalidRequest, "1"},
		{"params bool", `{"jsonrpc":"2.0","id":1,"method":"m","params":false}`, CodeInvalidRequest, "1"},
		{"oversize", `{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":"` + strings.Repeat("a", MaxRequestBytes) + `"}}`, CodeInvalidRequest, "null"},
	} {
		req, e := DecodeRequest([]byte(tc.in))
		if e == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if e.Code != tc.code {
			t.Errorf("%s: code %d (%s), want %d", tc.name, e.Code, e.Message, tc.code)
		}
		if got := string(req.ResponseID()); got != tc.echoID {
			t.Errorf("%s: response id %s, want %s", tc.name, got, tc.echoID)
		}
	}
	_, e := DecodeRequest([]byte(`[1]`))
	if !strings.Contains(e.Message, "batch requests are not supported") {
		t.Errorf("batch message %q", e.Message)
	}
}

func TestEncodeResult(t *testing.T) {
	for _, tc := range []struct {
		id     json.RawMessage
		result any
		want   string
	}{
		{json.RawMessage(`1`), json.RawMessage(`{"task":{}}`), `{"jsonrpc":"2.0","id":1,"result":{"task":{}}}`},
		{json.RawMessage(`"x"`), map[string]int{"a": 1}, `{"jsonrpc":"2.0","id":"x","result":{"a":1}}`},
		{nil, nil, `{"jsonrpc":"2.0","id":null,"result":null}`},
		{json.RawMessage(`1.50`), "a<b", `{"jsonrpc":"2.0","id":1.50,"result":"a<b"}`},
		{json.RawMessage(`{"bad":1}`), 1, `{"jsonrpc":"2.0","id":null,"result":1}`},
		{json.RawMessage(`nonsense`), 1, `{"jsonrpc":"2.0","id":null,"result":1}`},
	} {
		if got := string(EncodeResult(tc.id, tc.result)); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
	// An unencodable result becomes an internal error, not a panic.
	got := EncodeResult(json.RawMessage(`2`), func() {})
	var resp struct {
		ID    int `json:"id"`
		Error struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(got, &resp); err != nil || resp.ID != 2 || resp.Error.Code != CodeInternal {
		t.Errorf("unencodable result: %s", got)
	}
}

func TestEncodeErrorExact(t *testing.T) {
	for _, tc := range []struct {
		id   json.RawMessage
		e    *Error
		want string
	}{
		{json.RawMessage(`3`), TaskNotFound("nope"),
			`{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"task not found","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org","metadata":{"taskId":"nope"}}]}}`},
		{nil, ParseError(""),
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"invalid JSON","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"PARSE_ERROR","domain":"a2a-protocol.org"}]}}`},
		{json.RawMessage(`"r"`), VersionNotSupported("99.0"),
			`{"jsonrpc":"2.0","id":"r","error":{"code":-32009,"message":"A2A version \"99.0\" is not supported; use \"1.0\" or \"0.3\"","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"VERSION_NOT_SUPPORTED","domain":"a2a-protocol.org","metadata":{"version":"99.0"}}]}}`},
		{json.RawMessage(`4`), InvalidParams("", FieldViolation{Field: "pageSize", Description: "must be between 1 and 100"}),
			`{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"invalid params: pageSize: must be between 1 and 100","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INVALID_PARAMS","domain":"a2a-protocol.org"},{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"pageSize","description":"must be between 1 and 100"}]}]}}`},
		{json.RawMessage(`5`), &Error{Code: -32000, Message: "custom"},
			`{"jsonrpc":"2.0","id":5,"error":{"code":-32000,"message":"custom"}}`},
		{json.RawMessage(`6`), &Error{Code: -32000, Message: "bad data", Data: func() {}},
			`{"jsonrpc":"2.0","id":6,"error":{"code":-32000,"message":"bad data"}}`},
		{json.RawMessage(`7`), nil,
			`{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"internal error","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"INTERNAL_ERROR","domain":"a2a-protocol.org"}]}}`},
	} {
		if got := string(EncodeError(tc.id, tc.e)); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}
