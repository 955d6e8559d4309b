package wire

import "encoding/json"

// Dialect encodes the results of one request in one wire dialect. The edge
// chooses it once per request (DialectOf of the version the request's
// binding and method name decide) and encodes every result of that request
// through it, so no encoder asks which dialect it is in. There are two
// implementations: jsonDialect, the JSON-RPC family (V10, V03 and the
// hello-a2a profile VHelloStdio, which share the model encoders of
// encode.go, push.go and stream.go, parameterised by the version), and
// dialect03REST, the 0.3 HTTP+JSON ProtoJSON shapes (encode03rest.go).
//
// The package-level Encode* functions taking a Version are shorthands for
// DialectOf(v).Encode*.
type Dialect interface {
	// Version is the dialect's version; decoders of the request's params
	// and stored push configs still take it.
	Version() Version
	// EncodeTask encodes t as a Task object (see the package function).
	EncodeTask(t *Task) (json.RawMessage, error)
	// EncodeMessage encodes m as a Message object.
	EncodeMessage(m *Message) (json.RawMessage, error)
	// EncodeSendResult encodes the result of SendMessage: exactly one of
	// task and msg must be non-nil.
	EncodeSendResult(task *Task, msg *Message) (json.RawMessage, error)
	// EncodeListTasksResult encodes a ListTasks result.
	EncodeListTasksResult(r *ListTasksResult) (json.RawMessage, error)
	// EncodeStreamEvent encodes ev as a StreamResponse.
	EncodeStreamEvent(ev *StreamEvent) (json.RawMessage, error)
	// EncodeArtifact encodes one artifact.
	EncodeArtifact(a *Artifact) (json.RawMessage, error)
	// EncodePushConfig encodes c as the result of a push config create or get.
	EncodePushConfig(c *PushConfig) (json.RawMessage, error)
	// EncodePushConfigList encodes the result of a push config list.
	EncodePushConfigList(cs []PushConfig, nextPageToken string) (json.RawMessage, error)
	// DeletePushConfigResult is the result of a push config delete: null in
	// JSON-RPC 0.3, {} (google.protobuf.Empty) elsewhere.
	DeletePushConfigResult() json.RawMessage
	// EncodeAgentCard encodes the (extended) agent card for clients of the
	// dialect: the 1.0 card for V10, the 0.3-compatible one otherwise.
	EncodeAgentCard(c *AgentCard) ([]byte, error)
}

// DialectOf is the dialect of version v. An unknown version still gives a
// Dialect, whose encoders fail as the package functions do on it.
func DialectOf(v Version) Dialect {
	if v == V03REST {
		return dialect03REST{}
	}
	return jsonDialect{v}
}

// jsonDialect is a dialect of the JSON-RPC family: V10, V03 or VHelloStdio
// (any other version fails to encode).
type jsonDialect struct{ v Version }

func (d jsonDialect) Version() Version { return d.v }

func (d jsonDialect) DeletePushConfigResult() json.RawMessage {
	if d.v == V03 {
		return json.RawMessage("null") // 0.3's result is null
	}
	return json.RawMessage("{}") // google.protobuf.Empty
}

func (d jsonDialect) EncodeAgentCard(c *AgentCard) ([]byte, error) {
	if d.v == V10 {
		return EncodeAgentCard10(c)
	}
	return EncodeAgentCard(c)
}

var (
	_ Dialect = jsonDialect{}
	_ Dialect = dialect03REST{}
)
