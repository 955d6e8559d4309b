package wire

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// The V03REST dialect: results of the A2A 0.3 HTTP+JSON binding (/v1/…).
//
// 0.3's REST binding is the HTTP transcoding of the 0.3 gRPC service, so its
// bodies are ProtoJSON of the proto at spec tag v0.3.0 (package a2a.v1), the
// shapes a2a-go's a2av0 REST transport (a2apb/v0/pbjson) and the Python
// SDK's RestTransport (json_format.ParseDict, which rejects unknown members)
// decode:
//
//   - Message {messageId, contextId?, taskId?, role: ROLE_USER | ROLE_AGENT,
//     content: [Part], metadata?, extensions?}. The 0.3 proto has no
//     referenceTaskIds, so Message.ReferenceTaskIDs is not emitted.
//   - Part {text} | {file: {fileWithUri | fileWithBytes, mimeType?, name?}} |
//     {data: {data: {…}}}, each with metadata?. fileWithBytes is base64 of the
//     base64 text of the content, as those SDKs double-encode (the proto field
//     is bytes holding the 0.3 JSON model's base64 string). DataPart.data is
//     a google.protobuf.Struct, so a value that is not an object is wrapped as
//     {"value": v} and the part's metadata gets data_part_compat: true, as in
//     the JSON-RPC 0.3 dialect. mediaType and filename of text and data parts
//     have no 0.3 field and are dropped.
//   - Task {id, contextId, status: {state, message?, timestamp?}, artifacts?,
//     history?, metadata?}. States are TASK_STATE_*, with the proto's
//     TASK_STATE_CANCELLED (two Ls) for canceled and TASK_STATE_UNSPECIFIED
//     for unknown. status.message is the proto field update, whose json_name
//     is "message".
//   - Artifact {artifactId, name?, description?, parts, metadata?,
//     extensions?} with parts as above.
//   - SendMessageResponse {task} | {message} (the oneof member msg has
//     json_name "message").
//   - StreamResponse {task} | {message} | {statusUpdate: {taskId, contextId,
//     status, final, metadata?}} | {artifactUpdate: {taskId, contextId,
//     artifact, append?, lastChunk?, metadata?}}. final follows the JSON-RPC
//     0.3 rule: true on a terminal or interrupted state.
//   - TaskPushNotificationConfig {name: "tasks/{taskId}/pushNotificationConfigs/{id}",
//     pushNotificationConfig: {id?, url, token?, authentication?: {schemes:
//     [scheme], credentials?}}}; ids are put into the name unescaped, as
//     a2a-go builds and splits it on "/".
//   - ListTaskPushNotificationConfigResponse {configs, nextPageToken}.
//   - ListTasks, which spec v0.3.0 does not define for REST: the AIP-158
//     ListTasksResponse of later 0.3 protos (a2a-go v0.3.15) {tasks,
//     nextPageToken, totalSize}, which a2a-go's a2av0 client decodes;
//     pageSize has no field there and is dropped.
//
// Times are RFC 3339 in UTC with milliseconds, like the other dialects.

// ResultVersion is the dialect to encode r's results in: V03REST for the 0.3
// routes under /v1, r.Version otherwise. DecodeRESTRequest keeps using
// r.Version, and errors use EncodeRESTError whatever the version.
func (r RESTRoute) ResultVersion() Version {
	if r.Version == V03 {
		return V03REST
	}
	return r.Version
}

type message03REST struct {
	MessageID  string         `json:"messageId"`
	ContextID  string         `json:"contextId,omitempty"`
	TaskID     string         `json:"taskId,omitempty"`
	Role       string         `json:"role"`
	Content    []any          `json:"content"`
	Metadata   map[string]any `json:"metadata,omitempty"`
	Extensions []string       `json:"extensions,omitempty"`
}

type part03REST struct {
	Text     *string        `json:"text,omitempty"`
	File     *file03REST    `json:"file,omitempty"`
	Data     *data03REST    `json:"data,omitempty"`
	Metadata map[string]any `json:"metadata,omitempty"`
}

type file03REST struct {
	FileWithURI   string  `json:"fileWithUri,omitempty"`
	FileWithBytes *string `json:"fileWithBytes,omitempty"` // present even for empty content
	MimeType      string  `json:"mimeType,omitempty"`
	Name          string  `json:"name,omitempty"`
}

type data03REST struct {
	Data json.RawMessage `json:"data"`
}

type task03REST struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    status10       `json:"status"`
	Artifacts []artifactWire `json:"artifacts,omitempty"`
	History   []any          `json:"history,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type taskPushConfig03REST struct {
	Name                   string                   `json:"name"`
	PushNotificationConfig pushNotificationConfig03 `json:"pushNotificationConfig"`
}

// dialect03REST is the V03REST Dialect: every result in the shapes above.
type dialect03REST struct{}

func (dialect03REST) Version() Version { return V03REST }

// DeletePushConfigResult is google.protobuf.Empty.
func (dialect03REST) DeletePushConfigResult() json.RawMessage { return json.RawMessage("{}") }

// EncodeAgentCard is the 0.3-compatible card, served by GET /v1/card.
func (dialect03REST) EncodeAgentCard(c *AgentCard) ([]byte, error) { return EncodeAgentCard(c) }

func (dialect03REST) EncodeTask(t *Task) (json.RawMessage, error) {
	w, err := task03RESTWire(t)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

func (dialect03REST) EncodeMessage(m *Message) (json.RawMessage, error) {
	w, err := message03RESTWire(m)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

// EncodeSendResult wraps the result like 1.0: {"task":…} or {"message":…}.
func (dialect03REST) EncodeSendResult(task *Task, msg *Message) (json.RawMessage, error) {
	if (task == nil) == (msg == nil) {
		return nil, invalid("a send result needs exactly one of task and message")
	}
	if task != nil {
		w, err := task03RESTWire(task)
		if err != nil {
			return nil, err
		}
		return marshal(map[string]any{"task": w})
	}
	w, err := message03RESTWire(msg)
	if err != nil {
		return nil, err
	}
	return marshal(map[string]any{"message": w})
}

func (dialect03REST) EncodeListTasksResult(r *ListTasksResult) (json.RawMessage, error) {
	if r == nil {
		r = &ListTasksResult{}
	}
	tasks := make([]any, 0, len(r.Tasks))
	for i := range r.Tasks {
		w, err := task03RESTWire(&r.Tasks[i])
		if err != nil {
			return nil, fmt.Errorf("tasks[%d]: %w", i, err)
		}
		tasks = append(tasks, w)
	}
	return marshal(struct {
		Tasks         []any  `json:"tasks"`
		NextPageToken string `json:"nextPageToken"`
		TotalSize     int    `json:"totalSize"`
	}{tasks, r.NextPageToken, r.TotalSize})
}

// EncodeStreamEvent wraps the member like 1.0, with 0.3's final.
func (dialect03REST) EncodeStreamEvent(ev *StreamEvent) (json.RawMessage, error) {
	if !oneStreamMember(ev) {
		return nil, invalid("a stream event needs exactly one member")
	}
	var (
		inner  any
		member string
		err    error
	)
	switch {
	case ev.Task != nil:
		member = "task"
		inner, err = task03RESTWire(ev.Task)
	case ev.Message != nil:
		member = "message"
		inner, err = message03RESTWire(ev.Message)
	case ev.Status != nil:
		member = "statusUpdate"
		inner, err = statusUpdate03RESTWire(ev.Status)
	default:
		member = "artifactUpdate"
		inner, err = artifactUpdate03RESTWire(ev.Artifact)
	}
	if err != nil {
		return nil, err
	}
	return marshal(map[string]any{member: inner})
}

func (dialect03REST) EncodeArtifact(a *Artifact) (json.RawMessage, error) {
	if a == nil {
		return nil, invalid("nil artifact")
	}
	w, err := artifact03RESTWire(a)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

func (dialect03REST) EncodePushConfig(c *PushConfig) (json.RawMessage, error) {
	w, err := pushConfig03RESTWire(c)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

func (dialect03REST) EncodePushConfigList(cs []PushConfig, nextPageToken string) (json.RawMessage, error) {
	items := make([]any, 0, len(cs))
	for i := range cs {
		w, err := pushConfig03RESTWire(&cs[i])
		if err != nil {
			return nil, fmt.Errorf("configs[%d]: %w", i, err)
		}
		items = append(items, w)
	}
	return marshal(struct {
		Configs       []any  `json:"configs"`
		NextPageToken string `json:"nextPageToken"`
	}{items, nextPageToken})
}

func task03RESTWire(t *Task) (any, error) {
	if t == nil {
		return nil, invalid("nil task")
	}
	st, err := status03RESTWire(&t.Status)
	if err != nil {
		return nil, err
	}
	w := task03REST{ID: t.ID, ContextID: t.ContextID, Status: st, Metadata: t.Metadata}
	if len(t.Artifacts) > 0 {
		w.Artifacts = make([]artifactWire, 0, len(t.Artifacts))
		for i := range t.Artifacts {
			a, err := artifact03RESTWire(&t.Artifacts[i])
			if err != nil {
				return nil, fmt.Errorf("artifacts[%d]: %w", i, err)
			}
			w.Artifacts = append(w.Artifacts, a)
		}
	}
	if len(t.History) > 0 {
		w.History = make([]any, 0, len(t.History))
		for i := range t.History {
			m, err := message03RESTWire(&t.History[i])
			if err != nil {
				return nil, fmt.Errorf("history[%d]: %w", i, err)
			}
			w.History = append(w.History, m)
		}
	}
	return w, nil
}

func status03RESTWire(s *TaskStatus) (status10, error) {
	st := status10{}
	var err error
	if st.State, err = encodeState03REST(s.State); err != nil {
		return st, err
	}
	if !s.Timestamp.IsZero() {
		st.Timestamp = formatTime(s.Timestamp)
	}
	if s.Message != nil {
		if st.Message, err = message03RESTWire(s.Message); err != nil {
			return st, fmt.Errorf("status.message: %w", err)
		}
	}
	return st, nil
}

// encodeState03REST spells s as the 0.3 proto's TaskState.
func encodeState03REST(s TaskState) (string, error) {
	if s == StateCanceled {
		return "TASK_STATE_CANCELLED", nil
	}
	w, ok := stateTo10[s]
	if !ok {
		return "", invalid("task state %q", s)
	}
	return w, nil
}

func message03RESTWire(m *Message) (any, error) {
	if m == nil {
		return nil, invalid("nil message")
	}
	var role string
	switch m.Role {
	case RoleUser:
		role = "ROLE_USER"
	case RoleAgent:
		role = "ROLE_AGENT"
	default:
		return nil, invalid("message role %q", m.Role)
	}
	parts, err := parts03RESTWire(m.Parts)
	if err != nil {
		return nil, err
	}
	return message03REST{MessageID: m.MessageID, ContextID: m.ContextID, TaskID: m.TaskID, Role: role,
		Content: parts, Metadata: m.Metadata, Extensions: m.Extensions}, nil
}

func artifact03RESTWire(a *Artifact) (artifactWire, error) {
	parts, err := parts03RESTWire(a.Parts)
	if err != nil {
		return artifactWire{}, err
	}
	return artifactWire{ArtifactID: a.ArtifactID, Name: a.Name, Description: a.Description,
		Parts: parts, Metadata: a.Metadata, Extensions: a.Extensions}, nil
}

// parts03RESTWire never returns nil, so content and parts are [] rather than null.
func parts03RESTWire(ps []Part) ([]any, error) {
	out := make([]any, 0, len(ps))
	for i := range ps {
		w, err := part03RESTWire(&ps[i])
		if err != nil {
			return nil, fmt.Errorf("parts[%d]: %w", i, err)
		}
		out = append(out, w)
	}
	return out, nil
}

func part03RESTWire(p *Part) (any, error) {
	kind := p.Kind()
	if kind == PartInvalid {
		return nil, invalid("a part needs exactly one of text, data, raw and url")
	}
	if kind == PartData && !json.Valid(p.Data) {
		return nil, invalid("data part holds invalid JSON")
	}
	w := part03REST{Metadata: p.Metadata}
	switch kind {
	case PartText:
		w.Text = p.Text
	case PartData:
		data := p.Data
		if jsonKind(data) != 'o' {
			// A Struct must be an object: wrap, and mark it as a2a-go does.
			data = append(append(json.RawMessage(`{"value":`), p.Data...), '}')
			meta := make(map[string]any, len(p.Metadata)+1)
			for k, v := range p.Metadata {
				meta[k] = v
			}
			meta[dataPartCompatKey] = true
			w.Metadata = meta
		}
		w.Data = &data03REST{Data: data}
	case PartRaw:
		inner := base64.StdEncoding.EncodeToString(p.Raw)
		outer := base64.StdEncoding.EncodeToString([]byte(inner))
		w.File = &file03REST{FileWithBytes: &outer, MimeType: p.MediaType, Name: p.Filename}
	case PartURL:
		w.File = &file03REST{FileWithURI: p.URL, MimeType: p.MediaType, Name: p.Filename}
	}
	return w, nil
}

func statusUpdate03RESTWire(u *StatusUpdate) (any, error) {
	st, err := status03RESTWire(&u.Status)
	if err != nil {
		return nil, err
	}
	final := u.Status.State.Terminal() || u.Status.State.Interrupted()
	return statusUpdateWire{TaskID: u.TaskID, ContextID: u.ContextID, Status: st, Final: &final,
		Metadata: u.Metadata}, nil
}

func artifactUpdate03RESTWire(u *ArtifactUpdate) (any, error) {
	a, err := artifact03RESTWire(&u.Artifact)
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	return artifactUpdateWire{TaskID: u.TaskID, ContextID: u.ContextID, Artifact: a,
		Append: u.Append, LastChunk: u.LastChunk, Metadata: u.Metadata}, nil
}

// pushConfig03RESTWire validates c as the other dialects do and names it.
func pushConfig03RESTWire(c *PushConfig) (any, error) {
	w, err := pushConfigWire(V03, c)
	if err != nil {
		return nil, err
	}
	w03, ok := w.(taskPushConfig03)
	if !ok {
		return nil, invalid("push config shape %T", w)
	}
	return taskPushConfig03REST{
		Name:                   "tasks/" + c.TaskID + "/pushNotificationConfigs/" + c.ID,
		PushNotificationConfig: w03.PushNotificationConfig,
	}, nil
}
