package wire

import (
	"encoding/json"
	"time"
)

// Operation is what a JSON-RPC method asks for, independent of its name.
type Operation int

// Operations.
const (
	OpSendMessage Operation = iota + 1
	OpSendStreamingMessage
	OpGetTask
	OpListTasks
	OpCancelTask
	OpSubscribeToTask
	OpGetExtendedAgentCard
	OpCreatePushConfig
	OpGetPushConfig
	OpListPushConfigs
	OpDeletePushConfig
)

var opNames = map[Operation]string{
	OpSendMessage:          "SendMessage",
	OpSendStreamingMessage: "SendStreamingMessage",
	OpGetTask:              "GetTask",
	OpListTasks:            "ListTasks",
	OpCancelTask:           "CancelTask",
	OpSubscribeToTask:      "SubscribeToTask",
	OpGetExtendedAgentCard: "GetExtendedAgentCard",
	OpCreatePushConfig:     "CreateTaskPushNotificationConfig",
	OpGetPushConfig:        "GetTaskPushNotificationConfig",
	OpListPushConfigs:      "ListTaskPushNotificationConfigs",
	OpDeletePushConfig:     "DeleteTaskPushNotificationConfig",
}

// String is the operation's 1.0 method name.
func (op Operation) String() string {
	if s, ok := opNames[op]; ok {
		return s
	}
	return "Operation(?)"
}

// Streaming reports whether the operation answers with an SSE stream.
func (op Operation) Streaming() bool {
	return op == OpSendStreamingMessage || op == OpSubscribeToTask
}

// PushConfig reports whether the operation manages push-notification configs
// (all answered PushNotSupported while push is off).
func (op Operation) PushConfig() bool {
	return op >= OpCreatePushConfig && op <= OpDeletePushConfig
}

// Method is a resolved JSON-RPC method.
type Method struct {
	// Name is the method name as received.
	Name string
	Op   Operation
	// Dialect is the dialect the name belongs to: V10, V03, or "" for
	// Chio's dialect-neutral task/get and task/cancel.
	Dialect Version
	// Version is the dialect to encode the response in (see LookupMethod).
	Version Version
}

type methodEntry struct {
	op      Operation
	dialect Version
}

var methodTable = map[string]methodEntry{
	// A2A 1.0.
	"SendMessage":                      {OpSendMessage, V10},
	"SendStreamingMessage":             {OpSendStreamingMessage, V10},
	"GetTask":                          {OpGetTask, V10},
	"ListTasks":                        {OpListTasks, V10},
	"CancelTask":                       {OpCancelTask, V10},
	"SubscribeToTask":                  {OpSubscribeToTask, V10},
	"GetExtendedAgentCard":             {OpGetExtendedAgentCard, V10},
	"CreateTaskPushNotificationConfig": {OpCreatePushConfig, V10},
	"GetTaskPushNotificationConfig":    {OpGetPushConfig, V10},
	"ListTaskPushNotificationConfigs":  {OpListPushConfigs, V10},
	"DeleteTaskPushNotificationConfig": {OpDeletePushConfig, V10},
	// A2A 0.3, plus the pre-0.3 alias tasks/send.
	"message/send":                        {OpSendMessage, V03},
	"tasks/send":                          {OpSendMessage, V03},
	"message/stream":                      {OpSendStreamingMessage, V03},
	"tasks/get":                           {OpGetTask, V03},
	"tasks/list":                          {OpListTasks, V03},
	"tasks/cancel":                        {OpCancelTask, V03},
	"tasks/resubscribe":                   {OpSubscribeToTask, V03},
	"agent/getAuthenticatedExtendedCard":  {OpGetExtendedAgentCard, V03},
	"tasks/pushNotificationConfig/set":    {OpCreatePushConfig, V03},
	"tasks/pushNotificationConfig/get":    {OpGetPushConfig, V03},
	"tasks/pushNotificationConfig/list":   {OpListPushConfigs, V03},
	"tasks/pushNotificationConfig/delete": {OpDeletePushConfig, V03},
	// Chio's hello-a2a names; params {"taskId": …}.
	"task/get":    {OpGetTask, ""},
	"task/cancel": {OpCancelTask, ""},
}

// LookupMethod resolves a method name (exact, case-sensitive) given the
// negotiated version. Names of both dialects are accepted whatever was
// negotiated, and Method.Version is the dialect the response must use:
//   - negotiated VHelloStdio: always VHelloStdio (the stdio loop has one dialect);
//   - a 1.0 name: V10, a 0.3 name: V03, even if the A2A-Version header
//     disagrees, because the sender of a name can only parse that name's
//     dialect (a 1.0 client that forgot the header still gets 1.0 shapes);
//   - task/get, task/cancel: the negotiated version (0.3 when absent).
//
// An unknown name reports false; answer MethodNotFound (-32601).
func LookupMethod(name string, negotiated Version) (Method, bool) {
	e, ok := methodTable[name]
	if !ok {
		return Method{}, false
	}
	m := Method{Name: name, Op: e.op, Dialect: e.dialect, Version: e.dialect}
	switch {
	case negotiated == VHelloStdio:
		m.Version = VHelloStdio
	case e.dialect != "":
	case negotiated == V10:
		m.Version = V10
	default:
		m.Version = V03
	}
	return m, true
}

// DecodeParams decodes params with the decoder for m.Op and returns
// *SendParams (send, stream), *GetTaskParams (get), *ListTasksParams (list),
// *CancelTaskParams (cancel, subscribe), *CreatePushConfigParams,
// *GetPushConfigParams, *ListPushConfigsParams or *DeletePushConfigParams
// (the push-config methods, read in the shapes of m.Dialect), or nil for
// the extended card, which takes no params. On an error the value is nil.
func (m Method) DecodeParams(params json.RawMessage) (any, *Error) {
	var v any
	var e *Error
	switch m.Op {
	case OpSendMessage, OpSendStreamingMessage:
		v, e = DecodeSendParams(params)
	case OpGetTask:
		v, e = DecodeGetTaskParams(params)
	case OpListTasks:
		v, e = DecodeListTasksParams(params)
	case OpCancelTask, OpSubscribeToTask:
		v, e = DecodeCancelTaskParams(params)
	case OpCreatePushConfig:
		v, e = DecodeCreatePushConfigParams(params, m.Dialect)
	case OpGetPushConfig:
		v, e = DecodeGetPushConfigParams(params, m.Dialect)
	case OpListPushConfigs:
		v, e = DecodeListPushConfigsParams(params, m.Dialect)
	case OpDeletePushConfig:
		v, e = DecodeDeletePushConfigParams(params, m.Dialect)
	}
	if e != nil {
		return nil, e // an untyped nil, not a nil pointer in an interface
	}
	return v, nil
}

// paramsObject decodes params, which must be an object; absent params are
// an empty object.
func paramsObject(params json.RawMessage) (obj, *Error) {
	if len(params) == 0 || jsonKind(params) == '0' {
		return obj{m: map[string]json.RawMessage{}}, nil
	}
	if jsonKind(params) != 'o' {
		return obj{}, fieldError("params", "must be a JSON object")
	}
	return object(params, "")
}

// SendParams are the params of SendMessage / message/send (and the streaming
// variants).
type SendParams struct {
	Message       Message
	Configuration SendConfiguration
	Metadata      map[string]any
	Tenant        string
}

// SendConfiguration is 1.0 SendMessageConfiguration / 0.3 MessageSendConfiguration.
type SendConfiguration struct {
	AcceptedOutputModes []string
	// HistoryLength nil means the server default; 0 means no history.
	HistoryLength *int
	// ReturnImmediately is 1.0 returnImmediately, or 0.3 blocking=false.
	// The default (false) blocks until the task is terminal or interrupted.
	ReturnImmediately bool
	// PushConfig is the raw 1.0 taskPushNotificationConfig or 0.3
	// pushNotificationConfig, nil when absent.
	PushConfig json.RawMessage
	// IfGenerationMatch is the A2A 1.1 draft's ifGenerationMatch (see
	// generation.go), nil when absent.
	IfGenerationMatch *int64
}

// DecodeSendParams decodes {message, configuration, metadata, tenant}.
// message is required. Contradicting returnImmediately and blocking, or a
// negative historyLength, are InvalidParams.
func DecodeSendParams(params json.RawMessage) (*SendParams, *Error) {
	o, e := paramsObject(params)
	if e != nil {
		return nil, e
	}
	raw, ok := o.get("message")
	if !ok {
		return nil, fieldError("message", "is required")
	}
	msg, e := decodeMessage(raw, "message")
	if e != nil {
		return nil, e
	}
	p := &SendParams{Message: *msg}
	if p.Tenant, e = o.str("tenant"); e != nil {
		return nil, e
	}
	if p.Metadata, e = o.metadata("metadata"); e != nil {
		return nil, e
	}
	craw, ok := o.get("configuration")
	if !ok {
		return p, nil
	}
	c, e := object(craw, "configuration")
	if e != nil {
		return nil, e
	}
	cfg := &p.Configuration
	if cfg.AcceptedOutputModes, e = c.strings("acceptedOutputModes"); e != nil {
		return nil, e
	}
	if cfg.HistoryLength, e = c.integer("historyLength"); e != nil {
		return nil, e
	}
	if cfg.HistoryLength != nil && *cfg.HistoryLength < 0 {
		return nil, fieldError(c.field("historyLength"), "must not be negative")
	}
	ri, hasRI, e := c.boolean("returnImmediately")
	if e != nil {
		return nil, e
	}
	blocking, hasBlocking, e := c.boolean("blocking")
	if e != nil {
		return nil, e
	}
	if hasRI && hasBlocking && ri == blocking {
		return nil, fieldError(c.field("blocking"), "contradicts returnImmediately")
	}
	cfg.ReturnImmediately = ri || (hasBlocking && !blocking)
	if cfg.IfGenerationMatch, e = c.int64Field("ifGenerationMatch"); e != nil {
		return nil, e
	}
	for _, name := range []string{"taskPushNotificationConfig", "pushNotificationConfig"} {
		if raw, ok := c.get(name); ok {
			if jsonKind(raw) != 'o' {
				return nil, fieldError(c.field(name), "must be a JSON object")
			}
			cfg.PushConfig = raw
		}
	}
	return p, nil
}

// GetTaskParams are the params of GetTask / tasks/get / task/get.
type GetTaskParams struct {
	ID            string
	HistoryLength *int
	Metadata      map[string]any
	Tenant        string
}

// taskID reads the task id from "id" (A2A) or "taskId" (Chio's task/get and
// task/cancel); it is required, and the two must agree when both are given.
func taskID(o obj) (string, *Error) {
	id, e := o.str("id")
	if e != nil {
		return "", e
	}
	alt, e := o.str("taskId")
	if e != nil {
		return "", e
	}
	switch {
	case id != "" && alt != "" && id != alt:
		return "", fieldError("taskId", "contradicts id")
	case id == "" && alt == "":
		return "", fieldError("id", "is required")
	case id == "":
		id = alt
	}
	return id, nil
}

// DecodeGetTaskParams decodes {id | taskId, historyLength, metadata, tenant}.
func DecodeGetTaskParams(params json.RawMessage) (*GetTaskParams, *Error) {
	o, e := paramsObject(params)
	if e != nil {
		return nil, e
	}
	p := &GetTaskParams{}
	if p.ID, e = taskID(o); e != nil {
		return nil, e
	}
	if p.HistoryLength, e = o.integer("historyLength"); e != nil {
		return nil, e
	}
	if p.HistoryLength != nil && *p.HistoryLength < 0 {
		return nil, fieldError("historyLength", "must not be negative")
	}
	if p.Metadata, e = o.metadata("metadata"); e != nil {
		return nil, e
	}
	if p.Tenant, e = o.str("tenant"); e != nil {
		return nil, e
	}
	return p, nil
}

// CancelTaskParams are the params of CancelTask / tasks/cancel / task/cancel,
// and of SubscribeToTask / tasks/resubscribe, which have the same shape.
type CancelTaskParams struct {
	ID       string
	Metadata map[string]any
	Tenant   string
}

// DecodeCancelTaskParams decodes {id | taskId, metadata, tenant}.
func DecodeCancelTaskParams(params json.RawMessage) (*CancelTaskParams, *Error) {
	o, e := paramsObject(params)
	if e != nil {
		return nil, e
	}
	p := &CancelTaskParams{}
	if p.ID, e = taskID(o); e != nil {
		return nil, e
	}
	if p.Metadata, e = o.metadata("metadata"); e != nil {
		return nil, e
	}
	if p.Tenant, e = o.str("tenant"); e != nil {
		return nil, e
	}
	return p, nil
}

// ListTasks page sizes.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// ListTasksParams are the params of ListTasks / tasks/list, validated.
type ListTasksParams struct {
	ContextID string
	// Status filters on the current state; nil (or TASK_STATE_UNSPECIFIED
	// on the wire) means any state.
	Status *TaskState
	// PageSize is 1..MaxPageSize, DefaultPageSize when absent or 0.
	PageSize      int
	PageToken     string
	HistoryLength *int
	// StatusTimestampAfter keeps tasks whose status timestamp is >= it.
	StatusTimestampAfter *time.Time
	// IncludeArtifacts false means artifacts are omitted from every task.
	IncludeArtifacts bool
	Tenant           string
}

// DecodeListTasksParams decodes and validates ListTasks params; absent
// params list everything with the defaults.
func DecodeListTasksParams(params json.RawMessage) (*ListTasksParams, *Error) {
	o, e := paramsObject(params)
	if e != nil {
		return nil, e
	}
	p := &ListTasksParams{PageSize: DefaultPageSize}
	if p.ContextID, e = o.str("contextId"); e != nil {
		return nil, e
	}
	if p.Status, e = o.state("status"); e != nil {
		return nil, e
	}
	if p.Status != nil && *p.Status == StateUnknown {
		p.Status = nil
	}
	size, e := o.integer("pageSize")
	if e != nil {
		return nil, e
	}
	if size != nil && *size != 0 {
		if *size < 1 || *size > MaxPageSize {
			return nil, fieldError("pageSize", "must be between 1 and %d", MaxPageSize)
		}
		p.PageSize = *size
	}
	if p.PageToken, e = o.str("pageToken"); e != nil {
		return nil, e
	}
	if p.HistoryLength, e = o.integer("historyLength"); e != nil {
		return nil, e
	}
	if p.HistoryLength != nil && *p.HistoryLength < 0 {
		return nil, fieldError("historyLength", "must not be negative")
	}
	if p.StatusTimestampAfter, e = o.timestamp("statusTimestampAfter"); e != nil {
		return nil, e
	}
	if p.IncludeArtifacts, _, e = o.boolean("includeArtifacts"); e != nil {
		return nil, e
	}
	if p.Tenant, e = o.str("tenant"); e != nil {
		return nil, e
	}
	return p, nil
}
