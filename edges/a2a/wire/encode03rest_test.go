package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2apb/v0/pbjson"
)

// rest03Task is sampleTask with every optional member set: part, message
// and artifact metadata, extensions, reference task ids (which 0.3 REST
// cannot carry) and a zero-byte file.
func rest03Task() *Task {
	t := sampleTask()
	t.History[0].Metadata = map[string]any{"trace": "x", "n": float64(2)}
	t.History[0].Extensions = []string{"urn:ext:a"}
	t.History[0].ReferenceTaskIDs = []string{"t0"}
	t.History = append(t.History, Message{MessageID: "m1b", ContextID: "c1", TaskID: "t1", Role: RoleAgent,
		Parts: []Part{{Text: strp("with meta"), Metadata: map[string]any{"lang": "en"}}}})
	a := &t.Artifacts[0]
	a.Description = "the result"
	a.Metadata = map[string]any{"size": float64(5)}
	a.Extensions = []string{"urn:ext:b"}
	a.Parts = append(a.Parts, RawPart(nil, "application/octet-stream", "empty.bin"),
		Part{Data: json.RawMessage(`"s"`), Metadata: map[string]any{"keep": true}})
	return t
}

const golden03REST = `{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_COMPLETED","message":{"messageId":"m2","role":"ROLE_AGENT","content":[{"text":"done"}]},"timestamp":"2026-03-12T09:04:05.123Z"},` +
	`"artifacts":[{"artifactId":"a1","name":"result","parts":[{"text":"hi <b>"},{"data":{"data":{"k":1}}},{"data":{"data":{"value":[1,2]}},"metadata":{"data_part_compat":true}},{"file":{"fileWithBytes":"ZUhsNg==","mimeType":"text/plain","name":"x.txt"}},{"file":{"fileWithUri":"https://example.com/o.txt","mimeType":"text/plain"}}]}],` +
	`"history":[{"messageId":"m1","contextId":"c1","taskId":"t1","role":"ROLE_USER","content":[{"text":"hello"}]}],"metadata":{"chio":{"receiptId":"r1"}}}`

func TestEncode03RESTGolden(t *testing.T) {
	got, err := EncodeTask(V03REST, sampleTask())
	if err != nil || string(got) != golden03REST {
		t.Errorf("task:\n got %s, %v\nwant %s", got, err, golden03REST)
	}
	msg := &Message{MessageID: "m", Role: RoleAgent, Parts: []Part{TextPart("x")}}
	task := &Task{ID: "t", ContextID: "c", Status: TaskStatus{State: StateCanceled}}
	status := &StatusUpdate{TaskID: "t", ContextID: "c", Status: TaskStatus{State: StateInputRequired}}
	working := &StatusUpdate{TaskID: "t", ContextID: "c", Status: TaskStatus{State: StateWorking}}
	art := &ArtifactUpdate{TaskID: "t", ContextID: "c", Artifact: Artifact{ArtifactID: "a", Parts: []Part{TextPart("y")}},
		Append: true, LastChunk: true}
	auth := &PushConfig{ID: "p", TaskID: "t", URL: "https://h/x", Token: "k", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}, Tenant: "dropped"}
	for _, tc := range []struct {
		name string
		enc  func() (json.RawMessage, error)
		want string
	}{
		{"send task", func() (json.RawMessage, error) { return EncodeSendResult(V03REST, task, nil) },
			`{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_CANCELLED"}}}`},
		{"send message", func() (json.RawMessage, error) { return EncodeSendResult(V03REST, nil, msg) },
			`{"message":{"messageId":"m","role":"ROLE_AGENT","content":[{"text":"x"}]}}`},
		{"message", func() (json.RawMessage, error) { return EncodeMessage(V03REST, &Message{Role: RoleUser}) },
			`{"messageId":"","role":"ROLE_USER","content":[]}`},
		{"unknown state", func() (json.RawMessage, error) {
			return EncodeTask(V03REST, &Task{ID: "t", Status: TaskStatus{State: StateUnknown}})
		}, `{"id":"t","contextId":"","status":{"state":"TASK_STATE_UNSPECIFIED"}}`},
		{"event task", func() (json.RawMessage, error) { return EncodeStreamEvent(V03REST, &StreamEvent{Task: task}) },
			`{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_CANCELLED"}}}`},
		{"event message", func() (json.RawMessage, error) { return EncodeStreamEvent(V03REST, &StreamEvent{Message: msg}) },
			`{"message":{"messageId":"m","role":"ROLE_AGENT","content":[{"text":"x"}]}}`},
		{"event status", func() (json.RawMessage, error) { return EncodeStreamEvent(V03REST, &StreamEvent{Status: status}) },
			`{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_INPUT_REQUIRED"},"final":true}}`},
		{"event working", func() (json.RawMessage, error) { return EncodeStreamEvent(V03REST, &StreamEvent{Status: working}) },
			`{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"},"final":false}}`},
		{"event artifact", func() (json.RawMessage, error) { return EncodeStreamEvent(V03REST, &StreamEvent{Artifact: art}) },
			`{"artifactUpdate":{"taskId":"t","contextId":"c","artifact":{"artifactId":"a","parts":[{"text":"y"}]},"append":true,"lastChunk":true}}`},
		{"artifact", func() (json.RawMessage, error) { return EncodeArtifact(V03REST, &art.Artifact) },
			`{"artifactId":"a","parts":[{"text":"y"}]}`},
		{"list tasks empty", func() (json.RawMessage, error) { return EncodeListTasksResult(V03REST, nil) },
			`{"tasks":[],"nextPageToken":"","totalSize":0}`},
		{"list tasks", func() (json.RawMessage, error) {
			return EncodeListTasksResult(V03REST, &ListTasksResult{Tasks: []Task{*task}, NextPageToken: "n", PageSize: 1, TotalSize: 3})
		}, `{"tasks":[{"id":"t","contextId":"c","status":{"state":"TASK_STATE_CANCELLED"}}],"nextPageToken":"n","totalSize":3}`},
		{"push config", func() (json.RawMessage, error) { return EncodePushConfig(V03REST, auth) },
			`{"name":"tasks/t/pushNotificationConfigs/p","pushNotificationConfig":{"id":"p","url":"https://h/x","token":"k","authentication":{"schemes":["Bearer"],"credentials":"s"}}}`},
		{"push config list", func() (json.RawMessage, error) {
			return EncodePushConfigList(V03REST, []PushConfig{{ID: "p", TaskID: "t", URL: "https://h/x"}}, "n")
		}, `{"configs":[{"name":"tasks/t/pushNotificationConfigs/p","pushNotificationConfig":{"id":"p","url":"https://h/x"}}],"nextPageToken":"n"}`},
		{"push config list empty", func() (json.RawMessage, error) { return EncodePushConfigList(V03REST, nil, "") },
			`{"configs":[],"nextPageToken":""}`},
	} {
		got, err := tc.enc()
		if err != nil || string(got) != tc.want {
			t.Errorf("%s:\n got %s, %v\nwant %s", tc.name, got, err, tc.want)
		}
	}
	// The JSON-RPC 0.3 shapes are untouched.
	if got, _ := EncodeTask(V03, sampleTask()); string(got) != golden03 {
		t.Errorf("V03 changed:\n got %s\nwant %s", got, golden03)
	}
}

func TestEncode03RESTInvalid(t *testing.T) {
	bad := []func() (json.RawMessage, error){
		func() (json.RawMessage, error) { return EncodeTask(V03REST, nil) },
		func() (json.RawMessage, error) { return EncodeTask(V03REST, &Task{Status: TaskStatus{State: "nope"}}) },
		func() (json.RawMessage, error) { return EncodeMessage(V03REST, &Message{Role: "robot"}) },
		func() (json.RawMessage, error) {
			return EncodeMessage(V03REST, &Message{Role: RoleUser, Parts: []Part{{}}})
		},
		func() (json.RawMessage, error) {
			return EncodeMessage(V03REST, &Message{Role: RoleUser, Parts: []Part{{Data: json.RawMessage(`{`)}}})
		},
		func() (json.RawMessage, error) { return EncodeSendResult(V03REST, nil, nil) },
		func() (json.RawMessage, error) { return EncodeStreamEvent(V03REST, &StreamEvent{}) },
		func() (json.RawMessage, error) {
			return EncodeStreamEvent(V03REST, &StreamEvent{Status: &StatusUpdate{Status: TaskStatus{State: "x"}}})
		},
		func() (json.RawMessage, error) { return EncodeArtifact(V03REST, nil) },
		func() (json.RawMessage, error) { return EncodePushConfig(V03REST, &PushConfig{TaskID: "t"}) },
		func() (json.RawMessage, error) {
			return EncodePushConfigList(V03REST, []PushConfig{{TaskID: "t", URL: "https://h/", Auth: &PushAuth{}}}, "")
		},
		func() (json.RawMessage, error) {
			return EncodeListTasksResult(V03REST, &ListTasksResult{Tasks: []Task{{Status: TaskStatus{State: "x"}}}})
		},
	}
	for i, f := range bad {
		if b, err := f(); !errors.Is(err, errInvalid) || b != nil {
			t.Errorf("%d: %s %v", i, b, err)
		}
	}
}

// The expected a2a-go values, built from the model without the encoder.

var sdkStates = map[TaskState]sdk.TaskState{
	StateSubmitted: sdk.TaskStateSubmitted, StateWorking: sdk.TaskStateWorking, StateCompleted: sdk.TaskStateCompleted,
	StateFailed: sdk.TaskStateFailed, StateCanceled: sdk.TaskStateCanceled, StateInputRequired: sdk.TaskStateInputRequired,
	StateRejected: sdk.TaskStateRejected, StateAuthRequired: sdk.TaskStateAuthRequired, StateUnknown: sdk.TaskStateUnspecified,
}

// sdkParts is what a2a-go's pbjson reads back. It does not undo the
// data_part_compat wrapping (its gRPC and JSON-RPC 0.3 layers do), so a
// non-object value arrives as {"value": v} with the marker in metadata.
func sdkParts(t *testing.T, ps []Part) sdk.ContentParts {
	t.Helper()
	if len(ps) == 0 {
		return nil
	}
	out := make(sdk.ContentParts, 0, len(ps))
	for _, p := range ps {
		q := &sdk.Part{Metadata: p.Metadata}
		switch p.Kind() {
		case PartText:
			q.Content = sdk.Text(*p.Text)
		case PartData:
			var v any
			if err := json.Unmarshal(p.Data, &v); err != nil {
				t.Fatal(err)
			}
			if _, ok := v.(map[string]any); !ok {
				v = map[string]any{"value": v}
				q.Metadata = map[string]any{dataPartCompatKey: true}
				for k, val := range p.Metadata {
					q.Metadata[k] = val
				}
			}
			q.Content = sdk.Data{Value: v}
		case PartRaw:
			q.MediaType, q.Filename = p.MediaType, p.Filename
			if len(p.Raw) > 0 { // pbjson reads an empty fileWithBytes as no content
				q.Content = sdk.Raw(p.Raw)
			}
		case PartURL:
			q.Content, q.MediaType, q.Filename = sdk.URL(p.URL), p.MediaType, p.Filename
		}
		out = append(out, q)
	}
	return out
}

func sdkMessage(t *testing.T, m *Message) *sdk.Message {
	if m == nil {
		return nil
	}
	role := sdk.MessageRoleUser
	if m.Role == RoleAgent {
		role = sdk.MessageRoleAgent
	}
	// ReferenceTaskIDs has no field in the 0.3 proto.
	return &sdk.Message{ID: m.MessageID, ContextID: m.ContextID, TaskID: sdk.TaskID(m.TaskID), Role: role,
		Parts: sdkParts(t, m.Parts), Metadata: m.Metadata, Extensions: m.Extensions}
}

func sdkStatus(t *testing.T, s TaskStatus) sdk.TaskStatus {
	st := sdk.TaskStatus{State: sdkStates[s.State], Message: sdkMessage(t, s.Message)}
	if !s.Timestamp.IsZero() {
		ts := s.Timestamp.UTC().Truncate(time.Millisecond)
		st.Timestamp = &ts
	}
	return st
}

func sdkArtifact(t *testing.T, a *Artifact) *sdk.Artifact {
	return &sdk.Artifact{ID: sdk.ArtifactID(a.ArtifactID), Name: a.Name, Description: a.Description,
		Parts: sdkParts(t, a.Parts), Metadata: a.Metadata, Extensions: a.Extensions}
}

func sdkTask(t *testing.T, tk *Task) *sdk.Task {
	out := &sdk.Task{ID: sdk.TaskID(tk.ID), ContextID: tk.ContextID, Status: sdkStatus(t, tk.Status), Metadata: tk.Metadata}
	for i := range tk.Artifacts {
		out.Artifacts = append(out.Artifacts, sdkArtifact(t, &tk.Artifacts[i]))
	}
	for i := range tk.History {
		out.History = append(out.History, sdkMessage(t, &tk.History[i]))
	}
	return out
}

func sdkPushConfig(c *PushConfig) *sdk.PushConfig {
	out := &sdk.PushConfig{TaskID: sdk.TaskID(c.TaskID), ID: c.ID, URL: c.URL, Token: c.Token}
	if c.Auth != nil {
		out.Auth = &sdk.PushAuthInfo{Scheme: c.Auth.Scheme, Credentials: c.Auth.Credentials}
	}
	return out
}

// sameSDK compares a2a-go values, timestamps by instant.
func sameSDK(got, want any) bool {
	norm := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			return "unmarshalable: " + err.Error()
		}
		return string(b)
	}
	return norm(got) == norm(want) && reflect.TypeOf(got) == reflect.TypeOf(want)
}

// strictly decodes b into v, refusing members v does not have: pbjson's
// structs mirror the 0.3 proto, and the Python SDK's ParseDict refuses
// unknown members too.
func strictly(t *testing.T, name string, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Errorf("%s: not the 0.3 proto's shape: %v\n%s", name, err, b)
	}
}

func rest03Events() []StreamEvent {
	tk := rest03Task()
	return []StreamEvent{
		{Task: &Task{ID: "t1", ContextID: "c1", Status: TaskStatus{State: StateSubmitted}, History: tk.History[:1]}},
		{Message: &tk.History[1]},
		{Status: &StatusUpdate{TaskID: "t1", ContextID: "c1", Metadata: map[string]any{"step": float64(1)},
			Status: TaskStatus{State: StateWorking, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC),
				Message: &Message{MessageID: "s1", Role: RoleAgent, Parts: []Part{TextPart("busy")}}}}},
		{Artifact: &ArtifactUpdate{TaskID: "t1", ContextID: "c1", Artifact: tk.Artifacts[0], Append: true, LastChunk: true,
			Metadata: map[string]any{"chunk": float64(2)}}},
		{Status: &StatusUpdate{TaskID: "t1", ContextID: "c1", Status: TaskStatus{State: StateCanceled}}},
	}
}

func sdkEvent(t *testing.T, ev *StreamEvent) sdk.Event {
	switch {
	case ev.Task != nil:
		return sdkTask(t, ev.Task)
	case ev.Message != nil:
		return sdkMessage(t, ev.Message)
	case ev.Status != nil:
		return &sdk.TaskStatusUpdateEvent{TaskID: sdk.TaskID(ev.Status.TaskID), ContextID: ev.Status.ContextID,
			Status: sdkStatus(t, ev.Status.Status), Metadata: ev.Status.Metadata}
	}
	u := ev.Artifact
	return &sdk.TaskArtifactUpdateEvent{TaskID: sdk.TaskID(u.TaskID), ContextID: u.ContextID, Artifact: sdkArtifact(t, &u.Artifact),
		Append: u.Append, LastChunk: u.LastChunk, Metadata: u.Metadata}
}

// TestEncode03RESTInA2AGo decodes V03REST bytes with a2a-go's own 0.3 REST
// decoders (a2apb/v0/pbjson, which its a2av0 REST transport uses) and
// checks the values survive; each body must also decode strictly into the
// 0.3 proto mirror.
func TestEncode03RESTInA2AGo(t *testing.T) {
	tk := rest03Task()
	b, err := EncodeTask(V03REST, tk)
	if err != nil {
		t.Fatal(err)
	}
	strictly(t, "task", b, &pbjson.Task{})
	if bytes.Contains(b, []byte(`"kind"`)) || bytes.Contains(b, []byte(`referenceTaskIds`)) || bytes.Contains(b, []byte(`"parts":[{"kind"`)) {
		t.Errorf("JSON-RPC members in %s", b)
	}
	if got, err := pbjson.FromProtoTask(b); err != nil || !sameSDK(got, sdkTask(t, tk)) {
		t.Errorf("task:\n got %s %v\nwant %s", mustMarshal(got), err, mustMarshal(sdkTask(t, tk)))
	}

	for _, st := range []TaskState{StateSubmitted, StateWorking, StateCompleted, StateFailed, StateCanceled,
		StateInputRequired, StateRejected, StateAuthRequired, StateUnknown} {
		b, err := EncodeTask(V03REST, &Task{ID: "t", ContextID: "c", Status: TaskStatus{State: st}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := pbjson.FromProtoTask(b); err != nil || got.Status.State != sdkStates[st] {
			t.Errorf("state %s: %s read as %+v %v", st, b, got, err)
		}
	}

	for _, send := range []struct {
		task *Task
		msg  *Message
		want sdk.SendMessageResult
	}{{tk, nil, sdkTask(t, tk)}, {nil, &tk.History[0], sdkMessage(t, &tk.History[0])}} {
		b, err := EncodeSendResult(V03REST, send.task, send.msg)
		if err != nil {
			t.Fatal(err)
		}
		strictly(t, "send result", b, &pbjson.SendMessageResponse{})
		if got, err := pbjson.FromProtoSendMessageResponse(b); err != nil || !sameSDK(got, send.want) {
			t.Errorf("send result:\n got %s %v\nwant %s", mustMarshal(got), err, mustMarshal(send.want))
		}
	}

	b, err = EncodeMessage(V03REST, &tk.History[0])
	if err != nil {
		t.Fatal(err)
	}
	strictly(t, "message", b, &pbjson.Message{})
	var pm pbjson.Message
	_ = json.Unmarshal(b, &pm)
	if pm.Role != pbjson.RoleUser || len(pm.Content) != 1 || pm.Content[0].Text == nil || *pm.Content[0].Text != "hello" ||
		pm.Metadata["trace"] != "x" || !reflect.DeepEqual(pm.Extensions, []string{"urn:ext:a"}) {
		t.Errorf("message: %s", b)
	}

	b, err = EncodeArtifact(V03REST, &tk.Artifacts[0])
	if err != nil {
		t.Fatal(err)
	}
	strictly(t, "artifact", b, &pbjson.Artifact{})
	// An artifact alone has no pbjson entry point: read it as an update's.
	ev, err := pbjson.FromProtoStreamEvent([]byte(`{"artifactUpdate":{"artifact":` + string(b) + `}}`))
	if au, ok := ev.(*sdk.TaskArtifactUpdateEvent); err != nil || !ok || !sameSDK(au.Artifact, sdkArtifact(t, &tk.Artifacts[0])) {
		t.Errorf("artifact:\n got %s %v\nwant %s", mustMarshal(ev), err, mustMarshal(sdkArtifact(t, &tk.Artifacts[0])))
	}

	for i, ev := range rest03Events() {
		b, err := EncodeStreamEvent(V03REST, &ev)
		if err != nil {
			t.Fatal(err)
		}
		strictly(t, "event", b, &pbjson.StreamResponse{})
		got, err := pbjson.FromProtoStreamEvent(b)
		if want := sdkEvent(t, &ev); err != nil || !sameSDK(got, want) {
			t.Errorf("event %d:\n got %s %v\nwant %s", i, mustMarshal(got), err, mustMarshal(want))
		}
		var raw pbjson.StreamResponse
		_ = json.Unmarshal(b, &raw)
		if ev.Status != nil && raw.StatusUpdate.Final != (ev.Status.Status.State == StateCanceled) {
			t.Errorf("event %d: final %v", i, raw.StatusUpdate.Final)
		}
	}

	list := &ListTasksResult{Tasks: []Task{*tk, {ID: "t2", ContextID: "c2", Status: TaskStatus{State: StateCanceled}}},
		NextPageToken: "next", PageSize: 2, TotalSize: 9}
	b, err = EncodeListTasksResult(V03REST, list)
	if err != nil {
		t.Fatal(err)
	}
	gotList, err := pbjson.FromProtoListTasksResponse(b)
	wantList := &sdk.ListTasksResponse{Tasks: []*sdk.Task{sdkTask(t, &list.Tasks[0]), sdkTask(t, &list.Tasks[1])}, NextPageToken: "next"}
	if err != nil || !sameSDK(gotList, wantList) {
		t.Errorf("list tasks:\n got %s %v\nwant %s", mustMarshal(gotList), err, mustMarshal(wantList))
	}

	cfgs := []PushConfig{
		{ID: "c1", TaskID: "t1", URL: "https://h/x", Token: "tok", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}},
		{ID: "c2", TaskID: "t1", URL: "https://h/y"},
	}
	for i := range cfgs {
		b, err := EncodePushConfig(V03REST, &cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		strictly(t, "push config", b, &pbjson.TaskPushNotificationConfig{})
		if got, err := pbjson.FromProtoPushConfigResponse(b); err != nil || !reflect.DeepEqual(got, sdkPushConfig(&cfgs[i])) {
			t.Errorf("push config %d: %+v %v", i, got, err)
		}
	}
	b, err = EncodePushConfigList(V03REST, cfgs, "")
	if err != nil {
		t.Fatal(err)
	}
	// The task id comes from each name, not from the request's.
	if got, err := pbjson.FromProtoListPushConfigsResponse(b, "other"); err != nil ||
		!reflect.DeepEqual(got, []*sdk.PushConfig{sdkPushConfig(&cfgs[0]), sdkPushConfig(&cfgs[1])}) {
		t.Errorf("push config list: %s %v", mustMarshal(got), err)
	}
}

// TestEncode03RESTOverA2AGoTransport runs a2a-go's 0.3 REST client (a2av0)
// against a server that answers every /v1 route with V03REST encodings,
// SSE streams included, and AIP-193 errors.
func TestEncode03RESTOverA2AGoTransport(t *testing.T) {
	tk := rest03Task()
	cfg := PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x", Token: "tok", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}}
	events := rest03Events()
	var fail *Error // answered instead of the result when set
	var sendMessage bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		route, ok := MatchREST(req.Method, strings.TrimPrefix(req.URL.EscapedPath(), "/a2a"))
		if !ok || route.ResultVersion() != V03REST {
			t.Errorf("unrouted %s %s: %+v", req.Method, req.URL, route)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		if fail != nil {
			status, b := EncodeRESTError(fail)
			w.Header().Set("Content-Type", RESTResponseContentType)
			w.WriteHeader(status)
			_, _ = w.Write(b)
			return
		}
		v := route.ResultVersion()
		var b json.RawMessage
		var err error
		switch route.Op {
		case OpSendStreamingMessage, OpSubscribeToTask:
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, SSEKeepAlive)
			for i := range events {
				b, err := EncodeStreamEvent(v, &events[i])
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = w.Write(SSEFrame(SSEEventID(7, i), b))
			}
			if route.Op == OpSubscribeToTask { // an error inside the stream
				_, b := EncodeRESTError(TaskNotFound(route.TaskID))
				_, _ = w.Write(SSEFrame("", b))
			}
			return
		case OpSendMessage:
			if sendMessage {
				b, err = EncodeSendResult(v, nil, &tk.History[1])
			} else {
				b, err = EncodeSendResult(v, tk, nil)
			}
		case OpGetTask, OpCancelTask:
			b, err = EncodeTask(v, tk)
		case OpListTasks:
			b, err = EncodeListTasksResult(v, &ListTasksResult{Tasks: []Task{*tk}, NextPageToken: "n", TotalSize: 4})
		case OpCreatePushConfig, OpGetPushConfig:
			b, err = EncodePushConfig(v, &cfg)
		case OpListPushConfigs:
			b, err = EncodePushConfigList(v, []PushConfig{cfg}, "")
		case OpDeletePushConfig:
			w.WriteHeader(http.StatusNoContent)
			return
		default:
			w.WriteHeader(http.StatusNotImplemented)
			return
		}
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", RESTResponseContentType)
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)

	tr, err := a2av0.NewRESTTransport(a2av0.RESTTransportConfig{URL: srv.URL + "/a2a", Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wantTask := sdkTask(t, tk)
	req := &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("hi"))}

	res, err := tr.SendMessage(ctx, nil, req)
	if err != nil || !sameSDK(res, wantTask) {
		t.Errorf("send → task:\n got %s %v\nwant %s", mustMarshal(res), err, mustMarshal(wantTask))
	}
	sendMessage = true
	res, err = tr.SendMessage(ctx, nil, req)
	if want := sdkMessage(t, &tk.History[1]); err != nil || !sameSDK(res, want) {
		t.Errorf("send → message:\n got %s %v\nwant %s", mustMarshal(res), err, mustMarshal(want))
	}
	got, err := tr.GetTask(ctx, nil, &sdk.GetTaskRequest{ID: "t1"})
	if err != nil || !sameSDK(got, wantTask) {
		t.Errorf("get:\n got %s %v", mustMarshal(got), err)
	}
	got, err = tr.CancelTask(ctx, nil, &sdk.CancelTaskRequest{ID: "t1"})
	if err != nil || !sameSDK(got, wantTask) {
		t.Errorf("cancel:\n got %s %v", mustMarshal(got), err)
	}
	list, err := tr.ListTasks(ctx, nil, &sdk.ListTasksRequest{PageSize: 1})
	if want := (&sdk.ListTasksResponse{Tasks: []*sdk.Task{wantTask}, NextPageToken: "n"}); err != nil || !sameSDK(list, want) {
		t.Errorf("list:\n got %s %v", mustMarshal(list), err)
	}
	wantCfg := sdkPushConfig(&cfg)
	pc, err := tr.CreateTaskPushConfig(ctx, nil, &sdk.PushConfig{TaskID: "t1", ID: "c1", URL: "https://h/x"})
	if err != nil || !reflect.DeepEqual(pc, wantCfg) {
		t.Errorf("create config: %+v %v", pc, err)
	}
	pc, err = tr.GetTaskPushConfig(ctx, nil, &sdk.GetTaskPushConfigRequest{TaskID: "t1", ID: "c1"})
	if err != nil || !reflect.DeepEqual(pc, wantCfg) {
		t.Errorf("get config: %+v %v", pc, err)
	}
	pcs, err := tr.ListTaskPushConfigs(ctx, nil, &sdk.ListTaskPushConfigRequest{TaskID: "t1"})
	if err != nil || !reflect.DeepEqual(pcs, []*sdk.PushConfig{wantCfg}) {
		t.Errorf("list configs: %s %v", mustMarshal(pcs), err)
	}
	if err := tr.DeleteTaskPushConfig(ctx, nil, &sdk.DeleteTaskPushConfigRequest{TaskID: "t1", ID: "c1"}); err != nil {
		t.Errorf("delete config: %v", err)
	}

	collect := func(seq func(func(sdk.Event, error) bool)) ([]sdk.Event, error) {
		var evs []sdk.Event
		var last error
		seq(func(ev sdk.Event, err error) bool {
			if err != nil {
				last = err
				return false
			}
			evs = append(evs, ev)
			return true
		})
		return evs, last
	}
	var want []sdk.Event
	for i := range events {
		want = append(want, sdkEvent(t, &events[i]))
	}
	evs, err := collect(tr.SendStreamingMessage(ctx, nil, req))
	if err != nil || !sameSDK(evs, want) {
		t.Errorf("stream:\n got %s %v\nwant %s", mustMarshal(evs), err, mustMarshal(want))
	}
	evs, err = collect(tr.SubscribeToTask(ctx, nil, &sdk.SubscribeToTaskRequest{ID: "t1"}))
	if !errors.Is(err, sdk.ErrTaskNotFound) || !sameSDK(evs, want) {
		t.Errorf("subscribe: %d events, %v", len(evs), err)
	}

	// Errors on /v1 are EncodeRESTError's AIP-193 bodies: a2av0 reads them
	// with the same ErrorInfo-reason mapping as the 1.0 client.
	for _, tc := range []struct {
		e    *Error
		want error
	}{
		{TaskNotFound("t1"), sdk.ErrTaskNotFound},
		{TaskNotCancelable("t1", StateCompleted), sdk.ErrTaskNotCancelable},
		{PushNotSupported(), sdk.ErrPushNotificationNotSupported},
		{UnsupportedOperation("no"), sdk.ErrUnsupportedOperation},
		{InvalidParams("", FieldViolation{Field: "id", Description: "is required"}), sdk.ErrInvalidParams},
		{ContentTypeNotSupported("text/x"), sdk.ErrUnsupportedContentType},
		{ExtendedCardNotConfigured(), sdk.ErrExtendedCardNotConfigured},
		{Unauthenticated(""), sdk.ErrUnauthenticated},
		{PermissionDenied(""), sdk.ErrUnauthorized},
		{InternalError("boom"), sdk.ErrInternalError},
	} {
		fail = tc.e
		if _, err := tr.CancelTask(ctx, nil, &sdk.CancelTaskRequest{ID: "t1"}); !errors.Is(err, tc.want) {
			t.Errorf("%d: a2av0 read %v, want %v", tc.e.Code, err, tc.want)
		}
		if _, err := tr.GetTaskPushConfig(ctx, nil, &sdk.GetTaskPushConfigRequest{TaskID: "t1", ID: "c1"}); !errors.Is(err, tc.want) {
			t.Errorf("%d (config): a2av0 read %v, want %v", tc.e.Code, err, tc.want)
		}
	}
}
