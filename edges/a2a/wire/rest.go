package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The HTTP+JSON (REST) binding, as pure functions: MatchREST resolves a
// method and path, DecodeRESTRequest builds the same params the JSON-RPC
// decoders return, EncodeRESTError renders AIP-193 error bodies.
//
// 1.0 is served at the mount point (/message:send, /tasks/{id}, …), each path
// optionally under a one-segment tenant prefix (/{tenant}/message:send);
// 0.3 is served under /v1 (/v1/message:send, …, /v1/card). "v1" is therefore
// never a 1.0 tenant, and a tenant equal to a 1.0 top-level segment (tasks,
// message:send, …) is shadowed wherever the un-prefixed reading matches.

// RESTResponseContentType is the Content-Type of every non-streaming REST
// answer, errors included: a2a-go decodes an error body only when the type
// starts with application/json, and the conformance kit requires it too.
const RESTResponseContentType = "application/json"

// RESTRoute is a resolved REST request.
type RESTRoute struct {
	Op Operation
	// Version is the dialect of the request and the response: V10 for root
	// paths, V03 for /v1 paths.
	Version Version
	// Method is the HTTP method matched.
	Method string
	// Pattern is the matched template, such as "/{tenant}/tasks/{id}:cancel";
	// it has low cardinality, for logs and metrics.
	Pattern string
	// Tenant, TaskID and ConfigID are the percent-decoded path parameters
	// ("" where the path has none).
	Tenant   string
	TaskID   string
	ConfigID string
	// Allow lists the methods the path accepts. MatchREST sets it only when
	// the path exists but the method does not fit: answer 405 with an Allow
	// header (EncodeRESTUnmatched does both cases).
	Allow []string
}

// restShape is a path matched without regard to the method.
type restShape struct {
	pattern  string
	ops      []restMethodOp // in Allow order
	taskID   string
	configID string
}

type restMethodOp struct {
	method string
	op     Operation
}

// MatchREST resolves an HTTP method and a path relative to the binding's
// mount point. Pass the escaped path (r.URL.EscapedPath() minus the mount
// prefix, without the query): segments are split on "/" and then
// percent-decoded, so an id may contain an encoded "/" or ":" (an id ending
// in ":cancel" must encode its colon). The leading "/" is optional.
//
// It reports false when nothing matched. Then r.Allow is non-empty if the
// path exists under other methods (405), and empty otherwise (404). A path
// with an empty segment (a trailing or doubled slash, an empty id as in
// /tasks/:cancel) or with a malformed percent escape does not match: such
// a path names no resource, so it is a 404 rather than InvalidParams.
func MatchREST(method, path string) (RESTRoute, bool) {
	path = strings.TrimPrefix(path, "/")
	if path == "" {
		return RESTRoute{}, false
	}
	segs := strings.Split(path, "/")
	for _, s := range segs {
		if s == "" {
			return RESTRoute{}, false
		}
	}
	type reading struct {
		shape   restShape
		version Version
		prefix  string
		tenant  string
	}
	var readings []reading
	if segs[0] == "v1" {
		if sh, ok := matchRESTShape(segs[1:], V03); ok {
			readings = append(readings, reading{sh, V03, "/v1", ""})
		}
	} else {
		if sh, ok := matchRESTShape(segs, V10); ok {
			readings = append(readings, reading{sh, V10, "", ""})
		}
		if tenant, err := url.PathUnescape(segs[0]); err == nil && tenant != "" && len(segs) > 1 {
			if sh, ok := matchRESTShape(segs[1:], V10); ok {
				readings = append(readings, reading{sh, V10, "/{tenant}", tenant})
			}
		}
	}
	// The first reading that accepts the method wins: the un-prefixed one
	// (GET /tasks/tasks is task "tasks"), else the tenant one (POST
	// /tasks/message:send is a send for tenant "tasks", not a 405 for
	// task "message:send").
	for _, rd := range readings {
		for _, mo := range rd.shape.ops {
			if mo.method == method {
				return RESTRoute{Op: mo.op, Version: rd.version, Method: method,
					Pattern: rd.prefix + rd.shape.pattern, Tenant: rd.tenant,
					TaskID: rd.shape.taskID, ConfigID: rd.shape.configID}, true
			}
		}
	}
	if len(readings) == 0 {
		return RESTRoute{}, false
	}
	first := readings[0]
	r := RESTRoute{Version: first.version, Method: method, Pattern: first.prefix + first.shape.pattern}
	for _, mo := range first.shape.ops {
		r.Allow = append(r.Allow, mo.method)
	}
	return r, false
}

// matchRESTShape matches the segments after any prefix. The 1.0 and 0.3
// trees are the same except for the extended card (1.0 /extendedAgentCard,
// 0.3 /v1/card).
func matchRESTShape(segs []string, v Version) (restShape, bool) {
	const (
		get, post, del = http.MethodGet, http.MethodPost, http.MethodDelete
	)
	switch len(segs) {
	case 1:
		switch s := segs[0]; {
		case s == "message:send":
			return restShape{pattern: "/message:send", ops: []restMethodOp{{post, OpSendMessage}}}, true
		case s == "message:stream":
			return restShape{pattern: "/message:stream", ops: []restMethodOp{{post, OpSendStreamingMessage}}}, true
		case s == "tasks":
			return restShape{pattern: "/tasks", ops: []restMethodOp{{get, OpListTasks}}}, true
		case s == "extendedAgentCard" && v == V10, s == "card" && v == V03:
			return restShape{pattern: "/" + s, ops: []restMethodOp{{get, OpGetExtendedAgentCard}}}, true
		}
	case 2:
		if segs[0] != "tasks" {
			break
		}
		// The action suffix is matched before decoding, so an id whose own
		// text ends in ":cancel" can still be fetched with an encoded colon.
		raw, sh := segs[1], restShape{}
		switch {
		case strings.HasSuffix(raw, ":cancel"):
			raw = strings.TrimSuffix(raw, ":cancel")
			sh = restShape{pattern: "/tasks/{id}:cancel", ops: []restMethodOp{{post, OpCancelTask}}}
		case strings.HasSuffix(raw, ":subscribe"):
			// The proto says GET, the spec text and the conformance kit POST.
			raw = strings.TrimSuffix(raw, ":subscribe")
			sh = restShape{pattern: "/tasks/{id}:subscribe", ops: []restMethodOp{{get, OpSubscribeToTask}, {post, OpSubscribeToTask}}}
		default:
			sh = restShape{pattern: "/tasks/{id}", ops: []restMethodOp{{get, OpGetTask}}}
		}
		id, ok := restSegment(raw)
		if !ok {
			break
		}
		sh.taskID = id
		return sh, true
	case 3, 4:
		if segs[0] != "tasks" || segs[2] != "pushNotificationConfigs" {
			break
		}
		taskID, ok := restSegment(segs[1])
		if !ok {
			break
		}
		if len(segs) == 3 {
			return restShape{pattern: "/tasks/{taskId}/pushNotificationConfigs", taskID: taskID,
				ops: []restMethodOp{{get, OpListPushConfigs}, {post, OpCreatePushConfig}}}, true
		}
		configID, ok := restSegment(segs[3])
		if !ok {
			break
		}
		return restShape{pattern: "/tasks/{taskId}/pushNotificationConfigs/{id}", taskID: taskID, configID: configID,
			ops: []restMethodOp{{del, OpDeletePushConfig}, {get, OpGetPushConfig}}}, true
	}
	return restShape{}, false
}

// restSegment percent-decodes one path segment; empty or malformed fails.
func restSegment(raw string) (string, bool) {
	s, err := url.PathUnescape(raw)
	if err != nil || s == "" {
		return "", false
	}
	return s, true
}

// DecodeRESTRequest builds the params of a matched route from its path
// parameters, query and body, returning the same types as
// Method.DecodeParams: *SendParams (send, stream), *GetTaskParams,
// *ListTasksParams, *CancelTaskParams (cancel, subscribe),
// *CreatePushConfigParams, *GetPushConfigParams, *ListPushConfigsParams,
// *DeletePushConfigParams, or nil for the extended card (whose tenant is
// r.Tenant).
//
// The body is the proto request minus the path-bound fields, which the path
// overrides: it is read for send, stream, cancel (optional metadata) and
// create-config, and ignored elsewhere (GET, DELETE, and subscribe, whose
// request has no body fields). An empty body reads as {}, so a send without
// one fails on the missing message. Over MaxRequestBytes it is
// InvalidRequest; invalid JSON is ParseError; JSON that is not an object is
// InvalidRequest.
//
// Query parameters are camelCase (snake_case is accepted too); repeated
// keys and comma-separated values are allowed as long as they agree, and
// bad values are InvalidParams naming the parameter. GetTask reads
// historyLength; ListTasks contextId, status (TASK_STATE_WORKING or
// working; the 0.3 proto's TASK_STATE_CANCELLED too), pageSize, pageToken,
// historyLength, statusTimestampAfter (a2a-go's clients send
// lastUpdatedAfter, accepted as an alias) and includeArtifacts (true or
// false); ListPushConfigs pageSize and pageToken.
//
// 0.3 bodies are ProtoJSON of the 0.3 gRPC proto, as a2a-go's a2av0 and the
// Python SDK send them, and are rewritten to the JSON-RPC 0.3 shapes first:
// message "content" becomes "parts", file parts {fileWithUri|fileWithBytes}
// become kind parts (fileWithBytes carries base64 of the base64 text, as
// those SDKs double-encode; a single encoding is accepted when the decoded
// text is not base64 itself), DataPart {"data":{"data":v}} unwraps to v,
// configuration "pushNotification" becomes "pushNotificationConfig", and a
// create body {parent, configId, config: {name, pushNotificationConfig}} is
// unwrapped. Field paths in errors use the JSON-RPC names.
func DecodeRESTRequest(r RESTRoute, query url.Values, body []byte) (any, *Error) {
	if len(body) > MaxRequestBytes {
		return nil, InvalidRequest(fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes))
	}
	var v any
	var e *Error
	switch r.Op {
	case OpSendMessage, OpSendStreamingMessage:
		v, e = decodeRESTSend(r, body)
	case OpGetTask:
		o := restObject{"id": restString(r.TaskID)}
		if e = o.fromQuery(query, "historyLength", true, "history_length"); e != nil {
			return nil, e
		}
		o.setTenant(r.Tenant)
		v, e = DecodeGetTaskParams(o.raw())
	case OpListTasks:
		v, e = decodeRESTListTasks(r, query)
	case OpCancelTask:
		o, be := restBody(body)
		if be != nil {
			return nil, be
		}
		delete(o, "taskId")
		o["id"] = restString(r.TaskID)
		o.setTenant(r.Tenant)
		v, e = DecodeCancelTaskParams(o.raw())
	case OpSubscribeToTask:
		v = &CancelTaskParams{ID: r.TaskID, Tenant: r.Tenant}
	case OpCreatePushConfig:
		v, e = decodeRESTCreatePush(r, body)
	case OpGetPushConfig:
		v = &GetPushConfigParams{TaskID: r.TaskID, ID: r.ConfigID, Tenant: r.Tenant}
	case OpDeletePushConfig:
		v = &DeletePushConfigParams{TaskID: r.TaskID, ID: r.ConfigID, Tenant: r.Tenant}
	case OpListPushConfigs:
		o := restObject{}
		if r.Version == V10 {
			o["taskId"] = restString(r.TaskID)
		} else {
			o["id"] = restString(r.TaskID)
		}
		if e = o.fromQuery(query, "pageSize", true, "page_size"); e != nil {
			return nil, e
		}
		if e = o.fromQuery(query, "pageToken", false, "page_token"); e != nil {
			return nil, e
		}
		o.setTenant(r.Tenant)
		v, e = DecodeListPushConfigsParams(o.raw(), r.Version)
	case OpGetExtendedAgentCard:
		return nil, nil
	default:
		return nil, InternalError("REST route was not matched")
	}
	if e != nil {
		return nil, e // an untyped nil, not a nil pointer in an interface
	}
	return v, nil
}

// restObject is a JSON object under construction, members kept raw.
type restObject map[string]json.RawMessage

func (o restObject) raw() json.RawMessage {
	b, err := marshal(map[string]json.RawMessage(o))
	if err != nil { // unreachable: every member is valid JSON
		return json.RawMessage("{}")
	}
	return b
}

// setTenant lets the path's tenant override the body's.
func (o restObject) setTenant(tenant string) {
	if tenant != "" {
		o["tenant"] = restString(tenant)
	}
}

// fromQuery copies the query parameter name (or an alias) into o as a JSON
// string, for the JSON-RPC decoders to parse; they accept decimal strings
// for integers and name the member in errors, which is the parameter's
// name. split allows comma-separated values, for parameters whose values
// cannot contain commas.
func (o restObject) fromQuery(q url.Values, name string, split bool, aliases ...string) *Error {
	s, ok, e := queryValue(q, name, split, aliases...)
	if e != nil || !ok {
		return e
	}
	o[name] = restString(s)
	return nil
}

func restString(s string) json.RawMessage {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// queryValue returns the one value given for name and its aliases. Empty
// values are ignored; several different values are InvalidParams.
func queryValue(q url.Values, name string, split bool, aliases ...string) (string, bool, *Error) {
	var got string
	n := 0
	for _, key := range append([]string{name}, aliases...) {
		for _, raw := range q[key] {
			vals := []string{raw}
			if split {
				vals = strings.Split(raw, ",")
			}
			for _, s := range vals {
				if split {
					s = strings.TrimSpace(s)
				}
				switch {
				case s == "":
				case n == 0:
					got, n = s, 1
				case s != got:
					return "", false, fieldError(name, "takes one value, got %q and %q", got, s)
				}
			}
		}
	}
	return got, n > 0, nil
}

func decodeRESTListTasks(r RESTRoute, q url.Values) (*ListTasksParams, *Error) {
	o := restObject{}
	for _, p := range []struct {
		name    string
		split   bool
		aliases []string
	}{
		{"contextId", false, []string{"context_id"}},
		{"pageSize", true, []string{"page_size"}},
		{"pageToken", false, []string{"page_token"}},
		{"historyLength", true, []string{"history_length"}},
	} {
		if e := o.fromQuery(q, p.name, p.split, p.aliases...); e != nil {
			return nil, e
		}
	}
	status, ok, e := queryValue(q, "status", true)
	if e != nil {
		return nil, e
	}
	if ok {
		if status == "TASK_STATE_CANCELLED" { // the 0.3 proto's spelling
			status = stateTo10[StateCanceled]
		}
		o["status"] = restString(status)
	}
	ts, ok, e := queryValue(q, "statusTimestampAfter", false, "status_timestamp_after", "lastUpdatedAfter")
	if e != nil {
		return nil, e
	}
	if ok {
		// An unescaped "+" in the zone offset arrives as a space.
		o["statusTimestampAfter"] = restString(strings.ReplaceAll(ts, " ", "+"))
	}
	inc, ok, e := queryValue(q, "includeArtifacts", true, "include_artifacts")
	if e != nil {
		return nil, e
	}
	if ok {
		b, err := strconv.ParseBool(inc)
		if err != nil {
			return nil, fieldError("includeArtifacts", "must be true or false, not %q", inc)
		}
		o["includeArtifacts"] = json.RawMessage(strconv.FormatBool(b))
	}
	o.setTenant(r.Tenant)
	return DecodeListTasksParams(o.raw())
}

// restBody decodes a request body that must be a JSON object; empty or null
// is {}.
func restBody(body []byte) (restObject, *Error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return restObject{}, nil
	}
	if e := strictDocument(trimmed, "request body"); e != nil {
		return nil, e
	}
	if jsonKind(trimmed) != 'o' {
		return nil, InvalidRequest("request body must be a JSON object")
	}
	var o restObject
	if err := json.Unmarshal(trimmed, &o); err != nil {
		return nil, InvalidRequest("request body must be a JSON object")
	}
	return o, nil
}

func decodeRESTSend(r RESTRoute, body []byte) (*SendParams, *Error) {
	o, e := restBody(body)
	if e != nil {
		return nil, e
	}
	if r.Version == V03 {
		if e := normalize03Send(o); e != nil {
			return nil, e
		}
	}
	o.setTenant(r.Tenant)
	return DecodeSendParams(o.raw())
}

func decodeRESTCreatePush(r RESTRoute, body []byte) (*CreatePushConfigParams, *Error) {
	o, e := restBody(body)
	if e != nil {
		return nil, e
	}
	if r.Version == V10 {
		o["taskId"] = restString(r.TaskID)
		o.setTenant(r.Tenant)
		return DecodeCreatePushConfigParams(o.raw(), V10)
	}
	// 0.3: a2a-go's a2av0 and the Python SDK send the whole
	// CreateTaskPushNotificationConfigRequest {parent, configId, config};
	// the proto's annotation (body: "config") implies the bare
	// TaskPushNotificationConfig {name, pushNotificationConfig}; the
	// JSON-RPC shape {taskId, pushNotificationConfig} is that plus taskId.
	cfgHolder := o
	if raw, ok := o["config"]; ok && jsonKind(raw) == 'o' {
		if cfgHolder, e = restSubObject(raw); e != nil {
			return nil, e
		}
	}
	params := restObject{"taskId": restString(r.TaskID)}
	if raw, ok := cfgHolder["pushNotificationConfig"]; ok && jsonKind(raw) == 'o' {
		cfg, e := restSubObject(raw)
		if e != nil {
			return nil, e
		}
		if id, ok := o["configId"]; ok && jsonKind(id) == 's' && !restHasString(cfg, "id") {
			cfg["id"] = id
		}
		params["pushNotificationConfig"] = cfg.raw()
	} else if ok {
		params["pushNotificationConfig"] = raw // not an object: the decoder names it
	}
	return DecodeCreatePushConfigParams(params.raw(), V03)
}

// restSubObject decodes a member already known to be a JSON object.
func restSubObject(raw json.RawMessage) (restObject, *Error) {
	var o restObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, InvalidRequest("request body must be a JSON object")
	}
	if o == nil {
		o = restObject{}
	}
	return o, nil
}

// restHasString reports whether o[name] is a non-empty JSON string.
func restHasString(o restObject, name string) bool {
	var s string
	return jsonKind(o[name]) == 's' && json.Unmarshal(o[name], &s) == nil && s != ""
}

// normalize03Send rewrites a 0.3 REST send body (ProtoJSON of the 0.3 gRPC
// proto) into the JSON-RPC 0.3 shape that DecodeSendParams reads. Members
// that are not objects are left for the decoder to reject.
func normalize03Send(o restObject) *Error {
	if _, ok := o["message"]; !ok {
		if raw, ok := o["request"]; ok { // the proto field name behind json_name "message"
			o["message"] = raw
			delete(o, "request")
		}
	}
	if raw, ok := o["message"]; ok && jsonKind(raw) == 'o' {
		m, e := restSubObject(raw)
		if e != nil {
			return e
		}
		if jsonKind(m["parts"]) != 'a' {
			if content, ok := m["content"]; ok {
				m["parts"] = content
				delete(m, "content")
			}
		}
		if jsonKind(m["parts"]) == 'a' {
			var items []json.RawMessage
			if err := json.Unmarshal(m["parts"], &items); err == nil {
				for i, it := range items {
					if items[i], e = normalize03Part(it, "message.parts["+strconv.Itoa(i)+"]"); e != nil {
						return e
					}
				}
				b, err := marshal(items)
				if err != nil {
					return InvalidRequest("request body is not valid JSON")
				}
				m["parts"] = b
			}
		}
		o["message"] = m.raw()
	}
	if raw, ok := o["configuration"]; ok && jsonKind(raw) == 'o' {
		c, e := restSubObject(raw)
		if e != nil {
			return e
		}
		if _, has := c["pushNotificationConfig"]; !has {
			if pn, ok := c["pushNotification"]; ok {
				c["pushNotificationConfig"] = pn
				delete(c, "pushNotification")
			}
		}
		o["configuration"] = c.raw()
	}
	return nil
}

// normalize03Part rewrites a kindless 0.3 ProtoJSON part: {"file":
// {fileWithUri|fileWithBytes, mimeType, name}} becomes a kind "file" part and
// a DataPart {"data":{"data":v}} becomes {"data":v}. Text parts and parts
// that already carry a kind or type pass through.
func normalize03Part(raw json.RawMessage, path string) (json.RawMessage, *Error) {
	if jsonKind(raw) != 'o' {
		return raw, nil
	}
	p, e := restSubObject(raw)
	if e != nil {
		return nil, e
	}
	if _, ok := p["kind"]; ok {
		return raw, nil
	}
	if _, ok := p["type"]; ok {
		return raw, nil
	}
	if fraw, ok := p["file"]; ok && jsonKind(fraw) == 'o' {
		for _, other := range []string{"text", "data", "raw", "url"} {
			if _, ok := p[other]; ok {
				return nil, fieldError(path, "a part may hold only one of text, file and data")
			}
		}
		f, e := restSubObject(fraw)
		if e != nil {
			return nil, e
		}
		if u, ok := f["fileWithUri"]; ok {
			if _, has := f["uri"]; !has {
				f["uri"] = u
			}
			delete(f, "fileWithUri")
		}
		if b, ok := f["fileWithBytes"]; ok {
			delete(f, "fileWithBytes")
			var outer string
			if jsonKind(b) != 's' || json.Unmarshal(b, &outer) != nil {
				return nil, fieldError(path+".file.fileWithBytes", "must be a base64 string")
			}
			inner, e := decodeBase64(outer, path+".file.fileWithBytes")
			if e != nil {
				return nil, e
			}
			text := string(inner)
			if _, e := decodeBase64(text, ""); e != nil {
				text = base64.StdEncoding.EncodeToString(inner) // a peer that encoded once
			}
			if _, has := f["bytes"]; !has {
				f["bytes"] = restString(text)
			}
		}
		p["kind"] = restString("file")
		p["file"] = f.raw()
		return p.raw(), nil
	}
	if draw, ok := p["data"]; ok && jsonKind(draw) == 'o' {
		d, e := restSubObject(draw)
		if e != nil {
			return nil, e
		}
		if inner, ok := d["data"]; ok && len(d) == 1 {
			p["data"] = inner
			return p.raw(), nil
		}
	}
	return raw, nil
}

// RESTContentTypeOK reports whether a request Content-Type is acceptable:
// application/json or application/a2a+json, with parameters (a charset
// other than UTF-8 is refused, since JSON is UTF-8), or empty, which
// bodiless requests (a2a-go's cancel and subscribe) carry. Answer anything
// else with ContentTypeNotSupported(contentType), which EncodeRESTError
// renders as 415, as the conformance kit expects.
func RESTContentTypeOK(contentType string) bool {
	if strings.TrimSpace(contentType) == "" {
		return true
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || (mt != "application/json" && mt != "application/a2a+json") {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return true
}

// restStatusNames is the AIP-193 "status" per error code: the gRPC code of
// the v1.0.0 table (§2.7 of the reference), the same table version whose
// HTTP column HTTPStatusV100 follows. Codes not in the spec take the
// canonical gRPC code of their HTTP status.
var restStatusNames = map[int]string{
	CodeParseError:                "INVALID_ARGUMENT",
	CodeInvalidRequest:            "INVALID_ARGUMENT",
	CodeMethodNotFound:            "NOT_FOUND",
	CodeInvalidParams:             "INVALID_ARGUMENT",
	CodeInternal:                  "INTERNAL",
	CodeTaskNotFound:              "NOT_FOUND",
	CodeTaskNotCancelable:         "FAILED_PRECONDITION",
	CodePushNotSupported:          "UNIMPLEMENTED",
	CodeUnsupportedOperation:      "UNIMPLEMENTED",
	CodeContentTypeNotSupported:   "INVALID_ARGUMENT",
	CodeInvalidAgentResponse:      "INTERNAL",
	CodeExtendedCardNotConfigured: "FAILED_PRECONDITION",
	CodeExtensionSupportRequired:  "FAILED_PRECONDITION",
	CodeVersionNotSupported:       "UNIMPLEMENTED",
	CodeGenerationMismatch:        "ABORTED",
	CodeUnauthenticated:           "UNAUTHENTICATED",
	CodePermissionDenied:          "PERMISSION_DENIED",
}

// EncodeRESTError renders e as an AIP-193 error (google.rpc.Status JSON):
//
//	{"error":{"code":<HTTP status>,"status":"NOT_FOUND","message":"…",
//	  "details":[{"@type":"…ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org","metadata":{…}}, …]}}
//
// The HTTP status is HTTPStatusV100 (the v1.0.0 table the conformance kit
// checks: 409, 415 and 502 where v1.0.1 says 400, 400, 500); the non-A2A
// codes map to 400 (-32700, -32600, -32602), 404 (-32601, an unknown route;
// see EncodeRESTUnmatched for 405), 500 (-32603 and unknown codes), 401
// (-31401) and 403 (-31403). details start with the ErrorInfo, whose reason
// is what a2a-go and a2a-js clients map back to their errors (a2a-go's REST
// client ignores code and status), followed by e's other typed details
// such as a BadRequest. -31403's reason is written "UNAUTHORIZED", the
// reason a2a-go's REST client maps to a2a.ErrUnauthorized. An Unavailable
// error (RetryAfter set) is 503, status UNAVAILABLE; set Retry-After
// (RetryAfterSeconds) beside it. Send it with
// Content-Type RESTResponseContentType. A nil e is an InternalError.
func EncodeRESTError(e *Error) (status int, body []byte) {
	if e == nil {
		e = InternalError("")
	}
	name, ok := restStatusNames[e.Code]
	switch {
	case e.RetryAfter > 0:
		name = "UNAVAILABLE"
	case !ok:
		name = "INTERNAL"
	}
	return e.HTTPStatusV100(), restErrorBody(e, e.HTTPStatusV100(), name)
}

// EncodeRESTUnmatched answers a request MatchREST did not match: 405
// (status UNIMPLEMENTED, as gRPC transcoders answer a wrong method) when
// r.Allow lists the methods the path does accept, else 404 NOT_FOUND. Both
// carry reason METHOD_NOT_FOUND. On 405 also set the Allow header to
// strings.Join(r.Allow, ", ").
func EncodeRESTUnmatched(method, path string, r RESTRoute) (status int, body []byte) {
	if len(r.Allow) == 0 {
		return EncodeRESTError(newError(CodeMethodNotFound,
			fmt.Sprintf("no A2A REST operation at %s %s", method, path), "method", method, "path", path))
	}
	allow := strings.Join(r.Allow, ", ")
	e := newError(CodeMethodNotFound,
		fmt.Sprintf("%s is not allowed on %s; use %s", method, r.Pattern, allow), "method", method, "allow", allow)
	return http.StatusMethodNotAllowed, restErrorBody(e, http.StatusMethodNotAllowed, "UNIMPLEMENTED")
}

type restStatus struct {
	Code    int    `json:"code"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Details []any  `json:"details"`
}

func restErrorBody(e *Error, status int, name string) []byte {
	msg := e.Message
	if msg == "" {
		msg = errorTable[e.Code].message
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	info := ErrorInfo{Type: TypeErrorInfo, Reason: e.Reason(), Domain: ErrorDomain}
	var rest []any
	if items, ok := e.Data.([]any); ok {
		found := false
		for _, d := range items {
			switch x := d.(type) {
			case nil:
			case ErrorInfo:
				if !found {
					info, found = x, true
				}
			case *ErrorInfo:
				if x != nil && !found {
					info, found = *x, true
				}
			default:
				rest = append(rest, d)
			}
		}
	}
	if info.Type == "" {
		info.Type = TypeErrorInfo
	}
	if info.Domain == "" {
		info.Domain = ErrorDomain
	}
	switch {
	case info.Reason == "":
		info.Reason = "INTERNAL_ERROR"
	case e.Code == CodePermissionDenied && info.Reason == errorTable[CodePermissionDenied].reason:
		info.Reason = "UNAUTHORIZED"
	}
	details := append([]any{info}, rest...)
	type envelope struct {
		Error restStatus `json:"error"`
	}
	b, err := marshal(envelope{restStatus{status, name, msg, details}})
	if err != nil {
		// A caller-supplied detail did not marshal; the ErrorInfo alone still
		// lets clients recognise the error.
		b, _ = marshal(envelope{restStatus{status, name, msg, []any{info}}})
	}
	return b
}
