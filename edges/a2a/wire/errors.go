package wire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// JSON-RPC and A2A error codes.
const (
	CodeParseError                = -32700
	CodeInvalidRequest            = -32600
	CodeMethodNotFound            = -32601
	CodeInvalidParams             = -32602
	CodeInternal                  = -32603
	CodeTaskNotFound              = -32001
	CodeTaskNotCancelable         = -32002
	CodePushNotSupported          = -32003
	CodeUnsupportedOperation      = -32004
	CodeContentTypeNotSupported   = -32005
	CodeInvalidAgentResponse      = -32006
	CodeExtendedCardNotConfigured = -32007
	CodeExtensionSupportRequired  = -32008
	CodeVersionNotSupported       = -32009
	// CodeGenerationMismatch is the A2A 1.1 draft's
	// TaskGenerationMismatchError (gRPC ABORTED, HTTP 409).
	CodeGenerationMismatch = -32010
	// Not in the spec; a2a-go maps them to its ErrUnauthenticated and
	// ErrUnauthorized and to HTTP 401/403.
	CodeUnauthenticated  = -31401
	CodePermissionDenied = -31403
	// CodeResourceExhausted is not in the spec either: a caller holds as
	// many streams as it may (HTTP 429, gRPC RESOURCE_EXHAUSTED).
	CodeResourceExhausted = -31429
)

// ErrorDomain is the ErrorInfo domain of every error this package builds.
const ErrorDomain = "a2a-protocol.org"

// Type URLs of the typed details in Error.Data.
const (
	TypeErrorInfo  = "type.googleapis.com/google.rpc.ErrorInfo"
	TypeBadRequest = "type.googleapis.com/google.rpc.BadRequest"
)

// Error is a JSON-RPC error object. It marshals to exactly code, message and
// data (data omitted when nil), as the conformance kit's schema demands.
//
// Data must be nil or a JSON array of typed details (ProtoJSON Any objects):
// a2a-go clients decode data as such an array and fail on anything else. The
// constructors always set a []any holding an ErrorInfo and, for invalid
// params with known fields, a BadRequest.
type Error struct {
	Code    int
	Message string
	Data    any
	// RetryAfter, when positive, makes the error a server condition
	// expected to pass (Unavailable): HTTP 503 with Retry-After, gRPC
	// UNAVAILABLE. It is not part of the JSON-RPC error object.
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("a2a error %d: %s", e.Code, e.Message)
}

// MarshalJSON emits only code, message and data.
func (e *Error) MarshalJSON() ([]byte, error) {
	if e == nil {
		return []byte("null"), nil
	}
	type wireError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    any    `json:"data,omitempty"`
	}
	return marshal(wireError{e.Code, e.Message, e.Data})
}

// ErrorInfo is a google.rpc.ErrorInfo detail. Metadata values are strings
// because the proto map is map<string,string>.
type ErrorInfo struct {
	Type     string            `json:"@type"`
	Reason   string            `json:"reason"`
	Domain   string            `json:"domain"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// BadRequest is a google.rpc.BadRequest detail.
type BadRequest struct {
	Type            string           `json:"@type"`
	FieldViolations []FieldViolation `json:"fieldViolations"`
}

// FieldViolation names one invalid request field. Field is a path relative
// to the params object, such as "message.parts[0].text".
type FieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// errorMeta is the static description of one code.
type errorMeta struct {
	reason    string
	message   string // default message
	status    int    // HTTP status, v1.0.1 table (a2a-go)
	status100 int    // HTTP status, v1.0.0 table (conformance kit)
}

var errorTable = map[int]errorMeta{
	CodeParseError:                {"PARSE_ERROR", "invalid JSON", 400, 400},
	CodeInvalidRequest:            {"INVALID_REQUEST", "invalid request", 400, 400},
	CodeMethodNotFound:            {"METHOD_NOT_FOUND", "method not found", 404, 404},
	CodeInvalidParams:             {"INVALID_PARAMS", "invalid params", 400, 400},
	CodeInternal:                  {"INTERNAL_ERROR", "internal error", 500, 500},
	CodeTaskNotFound:              {"TASK_NOT_FOUND", "task not found", 404, 404},
	CodeTaskNotCancelable:         {"TASK_NOT_CANCELABLE", "task cannot be canceled", 400, 409},
	CodePushNotSupported:          {"PUSH_NOTIFICATION_NOT_SUPPORTED", "push notifications are not supported", 400, 400},
	CodeUnsupportedOperation:      {"UNSUPPORTED_OPERATION", "this operation is not supported", 400, 400},
	CodeContentTypeNotSupported:   {"CONTENT_TYPE_NOT_SUPPORTED", "content type not supported", 400, 415},
	CodeInvalidAgentResponse:      {"INVALID_AGENT_RESPONSE", "invalid agent response", 500, 502},
	CodeExtendedCardNotConfigured: {"EXTENDED_AGENT_CARD_NOT_CONFIGURED", "extended agent card is not configured", 400, 400},
	CodeExtensionSupportRequired:  {"EXTENSION_SUPPORT_REQUIRED", "a required extension was not requested", 400, 400},
	CodeVersionNotSupported:       {"VERSION_NOT_SUPPORTED", "A2A version not supported", 400, 400},
	CodeGenerationMismatch:        {"TASK_GENERATION_MISMATCH", "task generation mismatch", 409, 409},
	CodeUnauthenticated:           {"UNAUTHENTICATED", "unauthenticated", 401, 401},
	CodePermissionDenied:          {"PERMISSION_DENIED", "permission denied", 403, 403},
	CodeResourceExhausted:         {"RESOURCE_EXHAUSTED", "too many concurrent requests", 429, 429},
}

// HTTPStatus is the REST status for e per the v1.0.1 table, which a2a-go
// follows (TaskNotCancelable 400, ContentTypeNotSupported 400,
// InvalidAgentResponse 500). Unknown codes are 500.
func (e *Error) HTTPStatus() int {
	if e == nil {
		return 500
	}
	if e.RetryAfter > 0 {
		return http.StatusServiceUnavailable
	}
	if m, ok := errorTable[e.Code]; ok {
		return m.status
	}
	return 500
}

// HTTPStatusV100 is the REST status per the v1.0.0 table that the public
// conformance kit checks exactly (409, 415 and 502 where v1.0.1 differs).
func (e *Error) HTTPStatusV100() int {
	if e == nil {
		return 500
	}
	if e.RetryAfter > 0 {
		return http.StatusServiceUnavailable
	}
	if m, ok := errorTable[e.Code]; ok {
		return m.status100
	}
	return 500
}

// Reason is the ErrorInfo reason for e's code ("" for unknown codes).
func (e *Error) Reason() string {
	if e == nil {
		return ""
	}
	return errorTable[e.Code].reason
}

// newError builds an error for code with an ErrorInfo detail. An empty msg
// takes the code's default message; metadata pairs are key, value.
func newError(code int, msg string, meta ...string) *Error {
	m := errorTable[code]
	if msg == "" {
		msg = m.message
	}
	info := ErrorInfo{Type: TypeErrorInfo, Reason: m.reason, Domain: ErrorDomain}
	for i := 0; i+1 < len(meta); i += 2 {
		if meta[i+1] == "" {
			continue
		}
		if info.Metadata == nil {
			info.Metadata = map[string]string{}
		}
		info.Metadata[meta[i]] = meta[i+1]
	}
	return &Error{Code: code, Message: msg, Data: []any{info}}
}

// ParseError (-32700): the body is not valid JSON.
func ParseError(msg string) *Error { return newError(CodeParseError, msg) }

// InvalidRequest (-32600): valid JSON but not a valid JSON-RPC request.
func InvalidRequest(msg string) *Error { return newError(CodeInvalidRequest, msg) }

// MethodNotFound (-32601).
func MethodNotFound(method string) *Error {
	return newError(CodeMethodNotFound, fmt.Sprintf("method not found: %q", method), "method", method)
}

// InvalidParams (-32602). With violations, Data also carries a BadRequest
// naming the fields, and an empty msg is built from the first violation.
func InvalidParams(msg string, violations ...FieldViolation) *Error {
	if msg == "" && len(violations) > 0 {
		msg = fmt.Sprintf("invalid params: %s: %s", violations[0].Field, violations[0].Description)
	}
	e := newError(CodeInvalidParams, msg)
	if details, ok := e.Data.([]any); ok && len(violations) > 0 {
		e.Data = append(details, BadRequest{Type: TypeBadRequest, FieldViolations: violations})
	}
	return e
}

// fieldError is InvalidParams for one field.
func fieldError(field, format string, args ...any) *Error {
	return InvalidParams("", FieldViolation{Field: field, Description: fmt.Sprintf(format, args...)})
}

// InternalError (-32603). Keep msg free of internals a caller must not see.
func InternalError(msg string) *Error { return newError(CodeInternal, msg) }

// Unavailable is a server condition a client should retry after
// retryAfter (at least a second): JSON-RPC has no code of its own for it,
// so it is InternalError (-32603, reason INTERNAL_ERROR) with RetryAfter
// set, which the bindings answer with HTTP 503 and Retry-After, and gRPC
// UNAVAILABLE. Metadata pairs go to the ErrorInfo as for Unauthenticated.
func Unavailable(msg string, retryAfter time.Duration, meta ...string) *Error {
	e := newError(CodeInternal, msg, meta...)
	e.RetryAfter = max(retryAfter, time.Second)
	return e
}

// RetryAfterSeconds is the Retry-After value of an Unavailable error:
// RetryAfter in whole seconds, rounded up.
func (e *Error) RetryAfterSeconds() string {
	return strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10)
}

// TaskNotFound (-32001). Also the answer for another caller's task, so that
// its existence does not leak.
func TaskNotFound(taskID string) *Error {
	return newError(CodeTaskNotFound, "", "taskId", taskID)
}

// TaskNotCancelable (-32002): the task is already terminal.
func TaskNotCancelable(taskID string, state TaskState) *Error {
	return newError(CodeTaskNotCancelable, "", "taskId", taskID, "state", string(state))
}

// PushNotSupported (-32003): every push-config method while push is off.
func PushNotSupported() *Error { return newError(CodePushNotSupported, "") }

// UnsupportedOperation (-32004), e.g. a send to a terminal task or streaming
// while capabilities.streaming is false.
func UnsupportedOperation(msg string) *Error { return newError(CodeUnsupportedOperation, msg) }

// ContentTypeNotSupported (-32005): a part's media type is not accepted.
func ContentTypeNotSupported(mediaType string) *Error {
	return newError(CodeContentTypeNotSupported,
		fmt.Sprintf("content type not supported: %q", mediaType), "mediaType", mediaType)
}

// InvalidAgentResponse (-32006).
func InvalidAgentResponse(msg string) *Error { return newError(CodeInvalidAgentResponse, msg) }

// ExtendedCardNotConfigured (-32007; in 0.3 AuthenticatedExtendedCardNotConfigured).
func ExtendedCardNotConfigured() *Error { return newError(CodeExtendedCardNotConfigured, "") }

// ExtensionSupportRequired (-32008): a required extension is missing from A2A-Extensions.
func ExtensionSupportRequired(uri string) *Error {
	return newError(CodeExtensionSupportRequired,
		fmt.Sprintf("extension %q is required; list it in %s", uri, HeaderExtensions), "extension", uri)
}

// VersionNotSupported (-32009).
func VersionNotSupported(version string) *Error {
	return newError(CodeVersionNotSupported,
		fmt.Sprintf("A2A version %q is not supported; use \"1.0\" or \"0.3\"", version), "version", version)
}

// GenerationMismatch (-32010; HTTP 409, gRPC ABORTED): a send's
// ifGenerationMatch is not the task's generation when the turn would
// start (A2A 1.1 draft TaskGenerationMismatchError). The ErrorInfo carries
// taskId, expectedGeneration and currentGeneration, as the draft's example.
func GenerationMismatch(taskID string, expected, current int64) *Error {
	return newError(CodeGenerationMismatch,
		fmt.Sprintf("task generation mismatch: expected %d but current generation is %d", expected, current),
		"taskId", taskID, "expectedGeneration", strconv.FormatInt(expected, 10), "currentGeneration", strconv.FormatInt(current, 10))
}

// Unauthenticated (-31401; HTTP 401): no or invalid credentials. Metadata
// pairs (key, value) go to the ErrorInfo, e.g. the deny receipt's id.
func Unauthenticated(msg string, meta ...string) *Error {
	return newError(CodeUnauthenticated, msg, meta...)
}

// PermissionDenied (-31403; HTTP 403): valid credentials without the
// needed authority.
func PermissionDenied(msg string, meta ...string) *Error {
	return newError(CodePermissionDenied, msg, meta...)
}

// ResourceExhausted (-31429; HTTP 429, gRPC RESOURCE_EXHAUSTED): the
// caller already holds as many of something (streams) as it may; it may
// retry once one of them ends.
func ResourceExhausted(msg string, meta ...string) *Error {
	return newError(CodeResourceExhausted, msg, meta...)
}

// marshal is json.Marshal without HTML escaping, so text reaches clients as written.
func marshal(v any) ([]byte, error) {
	var b jsonBuffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("wire: encode: %w", err)
	}
	out := b.buf
	if n := len(out); n > 0 && out[n-1] == '\n' {
		out = out[:n-1]
	}
	return out, nil
}

type jsonBuffer struct{ buf []byte }

func (b *jsonBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	return len(p), nil
}
