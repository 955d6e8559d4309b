package wire

import (
	"encoding/json"
	"strconv"
)

// StatusUpdate is a TaskStatusUpdateEvent.
type StatusUpdate struct {
	TaskID    string
	ContextID string
	Status    TaskStatus
	Metadata  map[string]any
}

// ArtifactUpdate is a TaskArtifactUpdateEvent: a whole artifact, or one
// chunk of it (Append adds its parts to the artifact with the same id).
type ArtifactUpdate struct {
	TaskID    string
	ContextID string
	Artifact  Artifact
	Append    bool
	LastChunk bool
	Metadata  map[string]any
}

// StreamEvent is one StreamResponse: exactly one member is set.
type StreamEvent struct {
	Task     *Task
	Message  *Message
	Status   *StatusUpdate
	Artifact *ArtifactUpdate
}

type statusUpdateWire struct {
	Kind      string         `json:"kind,omitempty"` // 0.3 only
	TaskID    string         `json:"taskId"`
	ContextID string         `json:"contextId"`
	Status    status10       `json:"status"`
	Final     *bool          `json:"final,omitempty"` // 0.3 only
	Metadata  map[string]any `json:"metadata,omitempty"`
}

type artifactUpdateWire struct {
	Kind      string         `json:"kind,omitempty"` // 0.3 only
	TaskID    string         `json:"taskId"`
	ContextID string         `json:"contextId"`
	Artifact  artifactWire   `json:"artifact"`
	Append    bool           `json:"append,omitempty"`
	LastChunk bool           `json:"lastChunk,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`
}

// EncodeStreamEvent encodes ev as a StreamResponse in dialect v: 1.0 wraps
// the member ({"statusUpdate":…}); 0.3 sends the object itself with its
// "kind" ("task", "message", "status-update" with "final", "artifact-update").
// 0.3's final is true on a terminal or interrupted status, the states that
// end a stream. V03REST wraps the member like 1.0 and adds 0.3's final to a
// statusUpdate. The hello-a2a profile does not stream.
func EncodeStreamEvent(v Version, ev *StreamEvent) (json.RawMessage, error) {
	return DialectOf(v).EncodeStreamEvent(ev)
}

func (d jsonDialect) EncodeStreamEvent(ev *StreamEvent) (json.RawMessage, error) {
	v := d.v
	if v != V10 && v != V03 {
		return nil, invalid("dialect %q has no stream events", v)
	}
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
		inner, err = taskWire(v, ev.Task)
	case ev.Message != nil:
		member = "message"
		inner, err = messageWire(v, ev.Message)
	case ev.Status != nil:
		member = "statusUpdate"
		inner, err = statusUpdateToWire(v, ev.Status)
	default:
		member = "artifactUpdate"
		inner, err = artifactUpdateToWire(v, ev.Artifact)
	}
	if err != nil {
		return nil, err
	}
	if v == V03 {
		return marshal(inner)
	}
	return marshal(map[string]any{member: inner})
}

// oneStreamMember reports whether ev has exactly one member set.
func oneStreamMember(ev *StreamEvent) bool {
	return ev != nil && count(ev.Task != nil, ev.Message != nil, ev.Status != nil, ev.Artifact != nil) == 1
}

func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func statusUpdateToWire(v Version, u *StatusUpdate) (any, error) {
	st := status10{}
	var err error
	if st.State, err = encodeState(v, u.Status.State); err != nil {
		return nil, err
	}
	if !u.Status.Timestamp.IsZero() {
		st.Timestamp = formatTime(u.Status.Timestamp)
	}
	if u.Status.Message != nil {
		if st.Message, err = messageWire(v, u.Status.Message); err != nil {
			return nil, err
		}
	}
	w := statusUpdateWire{TaskID: u.TaskID, ContextID: u.ContextID, Status: st, Metadata: u.Metadata}
	if v == V03 {
		final := u.Status.State.Terminal() || u.Status.State.Interrupted()
		w.Kind, w.Final = "status-update", &final
	}
	return w, nil
}

func artifactUpdateToWire(v Version, u *ArtifactUpdate) (any, error) {
	arts, err := artifactsWire(v, []Artifact{u.Artifact})
	if err != nil {
		return nil, err
	}
	w := artifactUpdateWire{TaskID: u.TaskID, ContextID: u.ContextID, Artifact: arts[0],
		Append: u.Append, LastChunk: u.LastChunk, Metadata: u.Metadata}
	if v == V03 {
		w.Kind = "artifact-update"
	}
	return w, nil
}

// EncodeArtifact encodes one artifact in dialect v.
func EncodeArtifact(v Version, a *Artifact) (json.RawMessage, error) {
	return DialectOf(v).EncodeArtifact(a)
}

func (d jsonDialect) EncodeArtifact(a *Artifact) (json.RawMessage, error) {
	if err := knownVersion(d.v); err != nil {
		return nil, err
	}
	arts, err := artifactsWire(d.v, []Artifact{*a})
	if err != nil {
		return nil, err
	}
	return marshal(arts[0])
}

// DecodeArtifact decodes one artifact in either dialect.
func DecodeArtifact(raw json.RawMessage) (*Artifact, *Error) { return decodeArtifact(raw, "artifact") }

func decodeArtifact(raw json.RawMessage, path string) (*Artifact, *Error) {
	ao, e := object(raw, path)
	if e != nil {
		return nil, e
	}
	a := &Artifact{}
	if a.ArtifactID, e = ao.str("artifactId"); e != nil {
		return nil, e
	}
	if a.Name, e = ao.str("name"); e != nil {
		return nil, e
	}
	if a.Description, e = ao.str("description"); e != nil {
		return nil, e
	}
	if a.Parts, e = decodeParts(ao, "parts", false); e != nil {
		return nil, e
	}
	if a.Metadata, e = ao.metadata("metadata"); e != nil {
		return nil, e
	}
	if a.Extensions, e = ao.strings("extensions"); e != nil {
		return nil, e
	}
	return a, nil
}

// DecodeStreamEvent decodes a 1.0 StreamResponse: exactly one of task,
// message, statusUpdate and artifactUpdate. A status update needs a state;
// an artifact update needs an artifact with an id and at least one part.
// taskId and contextId are optional here (A2A-native tools leave them to
// the edge).
func DecodeStreamEvent(raw json.RawMessage) (*StreamEvent, *Error) {
	o, e := object(raw, "event")
	if e != nil {
		return nil, e
	}
	members := 0
	for _, k := range []string{"task", "message", "statusUpdate", "artifactUpdate"} {
		if o.has(k) {
			members++
		}
	}
	if members != 1 {
		return nil, fieldError("event", "must hold exactly one of task, message, statusUpdate, artifactUpdate")
	}
	ev := &StreamEvent{}
	if r, ok := o.get("task"); ok {
		if ev.Task, e = DecodeTask(r); e != nil {
			return nil, e
		}
		return ev, nil
	}
	if r, ok := o.get("message"); ok {
		if ev.Message, e = decodeMessage(r, "event.message"); e != nil {
			return nil, e
		}
		return ev, nil
	}
	if r, ok := o.get("statusUpdate"); ok {
		so, e := object(r, "event.statusUpdate")
		if e != nil {
			return nil, e
		}
		u := &StatusUpdate{}
		if u.TaskID, e = so.str("taskId"); e != nil {
			return nil, e
		}
		if u.ContextID, e = so.str("contextId"); e != nil {
			return nil, e
		}
		sr, ok := so.get("status")
		if !ok {
			return nil, fieldError(so.field("status"), "is required")
		}
		st, e := object(sr, so.field("status"))
		if e != nil {
			return nil, e
		}
		state, e := st.state("state")
		if e != nil {
			return nil, e
		}
		if state == nil || *state == StateUnknown {
			return nil, fieldError(st.field("state"), "is required")
		}
		u.Status.State = *state
		if mr, ok := st.get("message"); ok {
			if u.Status.Message, e = decodeMessage(mr, st.field("message")); e != nil {
				return nil, e
			}
		}
		if ts, e := st.timestamp("timestamp"); e != nil {
			return nil, e
		} else if ts != nil {
			u.Status.Timestamp = *ts
		}
		if u.Metadata, e = so.metadata("metadata"); e != nil {
			return nil, e
		}
		ev.Status = u
		return ev, nil
	}
	r, _ := o.get("artifactUpdate")
	ao, e := object(r, "event.artifactUpdate")
	if e != nil {
		return nil, e
	}
	u := &ArtifactUpdate{}
	if u.TaskID, e = ao.str("taskId"); e != nil {
		return nil, e
	}
	if u.ContextID, e = ao.str("contextId"); e != nil {
		return nil, e
	}
	ar, ok := ao.get("artifact")
	if !ok {
		return nil, fieldError(ao.field("artifact"), "is required")
	}
	a, e := decodeArtifact(ar, ao.field("artifact"))
	if e != nil {
		return nil, e
	}
	if a.ArtifactID == "" {
		return nil, fieldError(ao.field("artifact.artifactId"), "is required")
	}
	if len(a.Parts) == 0 {
		return nil, fieldError(ao.field("artifact.parts"), "must hold at least one part")
	}
	u.Artifact = *a
	for name, dst := range map[string]*bool{"append": &u.Append, "lastChunk": &u.LastChunk} {
		b, _, e := ao.boolean(name)
		if e != nil {
			return nil, e
		}
		*dst = b
	}
	if u.Metadata, e = ao.metadata("metadata"); e != nil {
		return nil, e
	}
	ev.Artifact = u
	return ev, nil
}

// SSEKeepAlive is an SSE comment frame; sent on idle streams, it keeps
// proxies that cut idle connections from closing them.
const SSEKeepAlive = ": keep-alive\n\n"

// SSEFrame is one SSE event carrying data (which must not contain a
// newline: JSON from this package never does), with an optional id.
func SSEFrame(id string, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(id)+16)
	if id != "" {
		b = append(b, "id: "...)
		b = append(b, id...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

// SSEEventID is the id of the i-th event of the commit at stream sequence
// seq: unique and increasing within a task. The edge's streams no longer
// use it: their ids are task generations (GenerationEventID), which a
// resume names in Last-Event-ID.
func SSEEventID(seq uint64, i int) string {
	return strconv.FormatUint(seq, 10) + "." + strconv.Itoa(i)
}
