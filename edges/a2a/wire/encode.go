package wire

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// State spellings per dialect. 0.3 and hello-a2a use the TaskState values.
var stateTo10 = map[TaskState]string{
	StateSubmitted:     "TASK_STATE_SUBMITTED",
	StateWorking:       "TASK_STATE_WORKING",
	StateCompleted:     "TASK_STATE_COMPLETED",
	StateFailed:        "TASK_STATE_FAILED",
	StateCanceled:      "TASK_STATE_CANCELED",
	StateInputRequired: "TASK_STATE_INPUT_REQUIRED",
	StateRejected:      "TASK_STATE_REJECTED",
	StateAuthRequired:  "TASK_STATE_AUTH_REQUIRED",
	StateUnknown:       "TASK_STATE_UNSPECIFIED",
}

// timeLayout is RFC 3339 with milliseconds; times are converted to UTC first
// so the zone is always "Z".
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// errInvalid marks a canonical value that cannot be put on the wire; it is a
// bug in the caller, not in the peer.
var errInvalid = errors.New("wire: invalid value")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errInvalid, fmt.Sprintf(format, args...))
}

func knownVersion(v Version) error {
	switch v {
	case V03, V10, VHelloStdio:
		return nil
	}
	return invalid("unknown dialect %q", v)
}

// EncodeTask encodes t as a Task object in dialect v: 1.0 ProtoJSON, 0.3 with
// "kind":"task", or the hello-a2a profile (status as a plain state string; a
// terminal task's status message as "message", a non-terminal one's text as
// "statusMessage"). It fails only on an invalid model (unknown state or
// role, a part without exactly one content, unmarshalable metadata).
// V03REST (0.3 ProtoJSON for the /v1 routes) is described in encode03rest.go.
func EncodeTask(v Version, t *Task) (json.RawMessage, error) { return DialectOf(v).EncodeTask(t) }

// EncodeMessage encodes m as a Message object in dialect v.
func EncodeMessage(v Version, m *Message) (json.RawMessage, error) {
	return DialectOf(v).EncodeMessage(m)
}

// EncodeSendResult encodes the result of SendMessage / message/send: exactly
// one of task and msg must be non-nil. 1.0 and V03REST wrap it ({"task":…}
// or {"message":…}); 0.3 and hello-a2a return the object itself (0.3 with
// its "kind").
func EncodeSendResult(v Version, task *Task, msg *Message) (json.RawMessage, error) {
	return DialectOf(v).EncodeSendResult(task, msg)
}

// EncodeListTasksResult encodes a ListTasks result: tasks (never null),
// nextPageToken ("" on the last page), pageSize and totalSize, with each task
// in dialect v. V03REST emits {tasks, nextPageToken, totalSize}, without
// pageSize, which its proto lacks.
func EncodeListTasksResult(v Version, r *ListTasksResult) (json.RawMessage, error) {
	return DialectOf(v).EncodeListTasksResult(r)
}

func (d jsonDialect) EncodeTask(t *Task) (json.RawMessage, error) {
	if err := knownVersion(d.v); err != nil {
		return nil, err
	}
	w, err := taskWire(d.v, t)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

func (d jsonDialect) EncodeMessage(m *Message) (json.RawMessage, error) {
	if err := knownVersion(d.v); err != nil {
		return nil, err
	}
	w, err := messageWire(d.v, m)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

func (d jsonDialect) EncodeSendResult(task *Task, msg *Message) (json.RawMessage, error) {
	if (task == nil) == (msg == nil) {
		return nil, invalid("a send result needs exactly one of task and message")
	}
	var inner json.RawMessage
	var err error
	if task != nil {
		inner, err = d.EncodeTask(task)
	} else {
		inner, err = d.EncodeMessage(msg)
	}
	if err != nil || d.v != V10 {
		return inner, err
	}
	if task != nil {
		return marshal(struct {
			Task json.RawMessage `json:"task"`
		}{inner})
	}
	return marshal(struct {
		Message json.RawMessage `json:"message"`
	}{inner})
}

func (d jsonDialect) EncodeListTasksResult(r *ListTasksResult) (json.RawMessage, error) {
	if err := knownVersion(d.v); err != nil {
		return nil, err
	}
	if r == nil {
		r = &ListTasksResult{}
	}
	tasks := make([]any, 0, len(r.Tasks))
	for i := range r.Tasks {
		w, err := taskWire(d.v, &r.Tasks[i])
		if err != nil {
			return nil, fmt.Errorf("tasks[%d]: %w", i, err)
		}
		tasks = append(tasks, w)
	}
	return marshal(struct {
		Tasks         []any  `json:"tasks"`
		NextPageToken string `json:"nextPageToken"`
		PageSize      int    `json:"pageSize"`
		TotalSize     int    `json:"totalSize"`
	}{tasks, r.NextPageToken, r.PageSize, r.TotalSize})
}

// Wire structs. Field order is the emitted order.

type task10 struct {
	ID        string         `json:"id"`
	ContextID string         `json:"contextId,omitempty"`
	Status    status10       `json:"status"`
	Artifacts []artifactWire `json:"artifacts,omitempty"`
	History   []any          `json:"history,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type status10 struct {
	State     string `json:"state"`
	Message   any    `json:"message,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
}

type task03 struct {
	Kind      string         `json:"kind"`
	ID        string         `json:"id"`
	ContextID string         `json:"contextId"`
	Status    status10       `json:"status"`
	Artifacts []artifactWire `json:"artifacts,omitempty"`
	History   []any          `json:"history,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type taskHello struct {
	ID            string         `json:"id"`
	ContextID     string         `json:"contextId,omitempty"`
	Status        string         `json:"status"`
	StatusMessage string         `json:"statusMessage,omitempty"`
	Message       any            `json:"message,omitempty"`
	Timestamp     string         `json:"timestamp,omitempty"`
	Artifacts     []artifactWire `json:"artifacts,omitempty"`
	History       []any          `json:"history,omitempty"`
	Metadata      map[string]any `json:"metadata,omitempty"`
}

type message10 struct {
	Kind             string         `json:"kind,omitempty"` // 0.3 only
	MessageID        string         `json:"messageId"`
	ContextID        string         `json:"contextId,omitempty"`
	TaskID           string         `json:"taskId,omitempty"`
	Role             string         `json:"role"`
	Parts            []any          `json:"parts"`
	Metadata         map[string]any `json:"metadata,omitempty"`
	Extensions       []string       `json:"extensions,omitempty"`
	ReferenceTaskIDs []string       `json:"referenceTaskIds,omitempty"`
}

type messageHello struct {
	MessageID string         `json:"messageId,omitempty"`
	ContextID string         `json:"contextId,omitempty"`
	TaskID    string         `json:"taskId,omitempty"`
	Role      string         `json:"role"`
	Parts     []any          `json:"parts"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type artifactWire struct {
	ArtifactID  string         `json:"artifactId"`
	Name        string         `json:"name,omitempty"`
	Description string         `json:"description,omitempty"`
	Parts       []any          `json:"parts"`
	Metadata    map[string]any `json:"metadata,omitempty"`
	Extensions  []string       `json:"extensions,omitempty"`
}

type part10 struct {
	Text      *string         `json:"text,omitempty"`
	Raw       *string         `json:"raw,omitempty"`
	URL       *string         `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	Metadata  map[string]any  `json:"metadata,omitempty"`
}

// part03 is a 0.3 part; hello-a2a uses the same members under "type".
type part03 struct {
	Kind     string          `json:"kind,omitempty"`
	Type     string          `json:"type,omitempty"`
	Text     *string         `json:"text,omitempty"`
	File     *file03         `json:"file,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	Metadata map[string]any  `json:"metadata,omitempty"`
}

type file03 struct {
	Bytes    *string `json:"bytes,omitempty"`
	URI      string  `json:"uri,omitempty"`
	MimeType string  `json:"mimeType,omitempty"`
	Name     string  `json:"name,omitempty"`
}

// dataPartCompatKey marks a 0.3 data part whose non-object value was wrapped
// as {"value": …}, because 0.3 data must be an object. a2a-go uses the same
// marker, so both sides unwrap it.
const dataPartCompatKey = "data_part_compat"

func taskWire(v Version, t *Task) (any, error) {
	if t == nil {
		return nil, invalid("nil task")
	}
	arts, err := artifactsWire(v, t.Artifacts)
	if err != nil {
		return nil, err
	}
	hist, err := messagesWire(v, t.History, "history")
	if err != nil {
		return nil, err
	}
	ts := ""
	if !t.Status.Timestamp.IsZero() {
		ts = formatTime(t.Status.Timestamp)
	}
	if v == VHelloStdio {
		if !t.Status.State.Valid() {
			return nil, invalid("task state %q", t.Status.State)
		}
		w := taskHello{ID: t.ID, ContextID: t.ContextID, Status: string(t.Status.State),
			Timestamp: ts, Artifacts: arts, History: hist, Metadata: t.Metadata}
		if m := t.Status.Message; m != nil {
			msg, err := messageWire(v, m)
			if err != nil {
				return nil, fmt.Errorf("status.message: %w", err)
			}
			if t.Status.State.Terminal() {
				w.Message = msg
			} else {
				w.StatusMessage = joinText(m.Parts, " ")
			}
		}
		return w, nil
	}
	st := status10{Timestamp: ts}
	if st.State, err = encodeState(v, t.Status.State); err != nil {
		return nil, err
	}
	if t.Status.Message != nil {
		if st.Message, err = messageWire(v, t.Status.Message); err != nil {
			return nil, fmt.Errorf("status.message: %w", err)
		}
	}
	if v == V03 {
		return task03{Kind: "task", ID: t.ID, ContextID: t.ContextID, Status: st,
			Artifacts: arts, History: hist, Metadata: t.Metadata}, nil
	}
	return task10{ID: t.ID, ContextID: t.ContextID, Status: st,
		Artifacts: arts, History: hist, Metadata: t.Metadata}, nil
}

func encodeState(v Version, s TaskState) (string, error) {
	w, ok := stateTo10[s]
	if !ok {
		return "", invalid("task state %q", s)
	}
	if v == V10 {
		return w, nil
	}
	return string(s), nil
}

func messagesWire(v Version, ms []Message, field string) ([]any, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]any, 0, len(ms))
	for i := range ms {
		w, err := messageWire(v, &ms[i])
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		out = append(out, w)
	}
	return out, nil
}

func artifactsWire(v Version, as []Artifact) ([]artifactWire, error) {
	if len(as) == 0 {
		return nil, nil
	}
	out := make([]artifactWire, 0, len(as))
	for i, a := range as {
		parts, err := partsWire(v, a.Parts)
		if err != nil {
			return nil, fmt.Errorf("artifacts[%d]: %w", i, err)
		}
		out = append(out, artifactWire{ArtifactID: a.ArtifactID, Name: a.Name, Description: a.Description,
			Parts: parts, Metadata: a.Metadata, Extensions: a.Extensions})
	}
	return out, nil
}

func messageWire(v Version, m *Message) (any, error) {
	if m == nil {
		return nil, invalid("nil message")
	}
	var role string
	switch {
	case m.Role == RoleUser && v == V10:
		role = "ROLE_USER"
	case m.Role == RoleAgent && v == V10:
		role = "ROLE_AGENT"
	case m.Role == RoleUser || m.Role == RoleAgent:
		role = string(m.Role)
	default:
		return nil, invalid("message role %q", m.Role)
	}
	parts, err := partsWire(v, m.Parts)
	if err != nil {
		return nil, err
	}
	if v == VHelloStdio {
		return messageHello{MessageID: m.MessageID, ContextID: m.ContextID, TaskID: m.TaskID,
			Role: role, Parts: parts, Metadata: m.Metadata}, nil
	}
	w := message10{MessageID: m.MessageID, ContextID: m.ContextID, TaskID: m.TaskID, Role: role,
		Parts: parts, Metadata: m.Metadata, Extensions: m.Extensions, ReferenceTaskIDs: m.ReferenceTaskIDs}
	if v == V03 {
		w.Kind = "message"
	}
	return w, nil
}

// partsWire never returns nil, so required parts arrays are [] rather than null.
func partsWire(v Version, ps []Part) ([]any, error) {
	out := make([]any, 0, len(ps))
	for i := range ps {
		w, err := partWire(v, &ps[i])
		if err != nil {
			return nil, fmt.Errorf("parts[%d]: %w", i, err)
		}
		out = append(out, w)
	}
	return out, nil
}

func partWire(v Version, p *Part) (any, error) {
	kind := p.Kind()
	if kind == PartInvalid {
		return nil, invalid("a part needs exactly one of text, data, raw and url")
	}
	if kind == PartData && !json.Valid(p.Data) {
		return nil, invalid("data part holds invalid JSON")
	}
	if v == V10 {
		w := part10{MediaType: p.MediaType, Filename: p.Filename, Metadata: p.Metadata}
		switch kind {
		case PartText:
			w.Text = p.Text
		case PartData:
			w.Data = p.Data
		case PartRaw:
			s := base64.StdEncoding.EncodeToString(p.Raw)
			w.Raw = &s
		case PartURL:
			u := p.URL
			w.URL = &u
		}
		return w, nil
	}
	w := part03{Metadata: p.Metadata}
	var disc string
	switch kind {
	case PartText:
		disc, w.Text = "text", p.Text
	case PartData:
		disc, w.Data = "data", p.Data
		if v == V03 && jsonKind(p.Data) != 'o' {
			w.Data = append(append(json.RawMessage(`{"value":`), p.Data...), '}')
			meta := make(map[string]any, len(p.Metadata)+1)
			for k, val := range p.Metadata {
				meta[k] = val
			}
			meta[dataPartCompatKey] = true
			w.Metadata = meta
		}
	case PartRaw:
		s := base64.StdEncoding.EncodeToString(p.Raw)
		disc, w.File = "file", &file03{Bytes: &s, MimeType: p.MediaType, Name: p.Filename}
	case PartURL:
		disc, w.File = "file", &file03{URI: p.URL, MimeType: p.MediaType, Name: p.Filename}
	}
	if v == VHelloStdio {
		w.Type = disc
	} else {
		w.Kind = disc
	}
	return w, nil
}

// joinText concatenates the text parts of ps with sep.
func joinText(ps []Part, sep string) string {
	var texts []string
	for _, p := range ps {
		if p.Text != nil {
			texts = append(texts, *p.Text)
		}
	}
	return strings.Join(texts, sep)
}
