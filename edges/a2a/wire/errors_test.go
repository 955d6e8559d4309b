package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestErrorConstructors(t *testing.T) {
	for _, tc := range []struct {
		e                  *Error
		code               int
		reason             string
		status, statusV100 int
	}{
		{ParseError(""), -32700, "PARSE_ERROR", 400, 400},
		{InvalidRequest(""), -32600, "INVALID_REQUEST", 400, 400},
		{MethodNotFound("x"), -32601, "METHOD_NOT_FOUND", 404, 404},
		{InvalidParams("bad"), -32602, "INVALID_PARAMS", 400, 400},
		{InternalError(""), -32603, "INTERNAL_ERROR", 500, 500},
		{TaskNotFound("t"), -32001, "TASK_NOT_FOUND", 404, 404},
		{TaskNotCancelable("t", StateCompleted), -32002, "TASK_NOT_CANCELABLE", 400, 409},
		{PushNotSupported(), -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", 400, 400},
		{UnsupportedOperation(""), -32004, "UNSUPPORTED_OPERATION", 400, 400},
		{ContentTypeNotSupported("application/x"), -32005, "CONTENT_TYPE_NOT_SUPPORTED", 400, 415},
		{InvalidAgentResponse(""), -32006, "INVALID_AGENT_RESPONSE", 500, 502},
		{ExtendedCardNotConfigured(), -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED", 400, 400},
		{ExtensionSupportRequired("urn:x"), -32008, "EXTENSION_SUPPORT_REQUIRED", 400, 400},
		{VersionNotSupported("9"), -32009, "VERSION_NOT_SUPPORTED", 400, 400},
		{Unauthenticated(""), -31401, "UNAUTHENTICATED", 401, 401},
		{PermissionDenied(""), -31403, "PERMISSION_DENIED", 403, 403},
	} {
		name := fmt.Sprint(tc.code)
		if tc.e.Code != tc.code || tc.e.Reason() != tc.reason || tc.e.Message == "" {
			t.Errorf("%s: got %d %q %q", name, tc.e.Code, tc.e.Reason(), tc.e.Message)
		}
		if tc.e.HTTPStatus() != tc.status || tc.e.HTTPStatusV100() != tc.statusV100 {
			t.Errorf("%s: HTTP %d / %d", name, tc.e.HTTPStatus(), tc.e.HTTPStatusV100())
		}
		b, err := json.Marshal(tc.e)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatal(err)
		}
		if len(obj) != 3 || obj["code"] == nil || obj["message"] == nil || obj["data"] == nil {
			t.Errorf("%s: members %s", name, b)
		}
		// data is an array of typed details whose first is the ErrorInfo.
		var data []struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
			Domain string `json:"domain"`
		}
		if err := json.Unmarshal(obj["data"], &data); err != nil || len(data) == 0 ||
			data[0].Type != TypeErrorInfo || data[0].Reason != tc.reason || data[0].Domain != ErrorDomain {
			t.Errorf("%s: data %s", name, obj["data"])
		}
	}
}

func TestErrorIsError(t *testing.T) {
	var err error = fmt.Errorf("get: %w", TaskNotFound("t"))
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeTaskNotFound {
		t.Errorf("errors.As: %v", err)
	}
	var nilErr *Error
	if nilErr.Error() != "<nil>" || nilErr.HTTPStatus() != 500 || nilErr.Reason() != "" {
		t.Error("nil *Error methods")
	}
	if (&Error{Code: 1}).HTTPStatus() != 500 {
		t.Error("unknown code status")
	}
}

// Unavailable is -32603 on the wire, 503 over HTTP, with Retry-After in
// whole seconds (at least one), and keeps RetryAfter out of the JSON.
func TestUnavailable(t *testing.T) {
	e := Unavailable("replay state down", 1500*time.Millisecond, "dpopCheck", "state_unavailable")
	if e.Code != CodeInternal || e.HTTPStatus() != 503 || e.HTTPStatusV100() != 503 || e.RetryAfterSeconds() != "2" {
		t.Fatalf("%+v %d %d %s", e, e.HTTPStatus(), e.HTTPStatusV100(), e.RetryAfterSeconds())
	}
	if Unavailable("x", 0).RetryAfterSeconds() != "1" {
		t.Fatal("a zero delay is not one second")
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	if len(m) != 3 || m["code"] != float64(CodeInternal) || !strings.Contains(string(b), "state_unavailable") {
		t.Fatalf("%s", b)
	}
	if InternalError("x").HTTPStatus() != 500 {
		t.Fatal("an internal error is not 500")
	}
}
