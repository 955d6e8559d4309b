package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestNegotiateVersion(t *testing.T) {
	for _, tc := range []struct {
		header, query string
		want          Version
		fail          bool
	}{
		{"", "", V03, false},
		{"  ", "", V03, false},
		{"1.0", "", V10, false},
		{" 1.0 ", "", V10, false},
		{"0.3", "", V03, false},
		{"", "1.0", V10, false},
		{"0.3", "1.0", V03, false}, // the header wins
		{"99.0", "", "", true},
		{"1.0.0", "", "", true},
		{"1", "", "", true},
		{"0.3.0", "", "", true},
		{"", "2.0", "", true},
	} {
		got, e := NegotiateVersion(tc.header, tc.query)
		if tc.fail {
			if e == nil || e.Code != CodeVersionNotSupported {
				t.Errorf("%q/%q: want -32009, got %v %v", tc.header, tc.query, got, e)
			}
			continue
		}
		if e != nil || got != tc.want {
			t.Errorf("%q/%q: got %v %v, want %v", tc.header, tc.query, got, e, tc.want)
		}
	}
}

func TestLookupMethod(t *testing.T) {
	for _, tc := range []struct {
		name       string
		negotiated Version
		op         Operation
		version    Version
	}{
		{"SendMessage", V10, OpSendMessage, V10},
		{"SendMessage", V03, OpSendMessage, V10}, // 1.0 client without the header
		{"SendStreamingMessage", V10, OpSendStreamingMessage, V10},
		{"GetTask", V10, OpGetTask, V10},
		{"ListTasks", V10, OpListTasks, V10},
		{"CancelTask", V10, OpCancelTask, V10},
		{"SubscribeToTask", V10, OpSubscribeToTask, V10},
		{"GetExtendedAgentCard", V10, OpGetExtendedAgentCard, V10},
		{"CreateTaskPushNotificationConfig", V10, OpCreatePushConfig, V10},
		{"GetTaskPushNotificationConfig", V10, OpGetPushConfig, V10},
		{"ListTaskPushNotificationConfigs", V10, OpListPushConfigs, V10},
		{"DeleteTaskPushNotificationConfig", V10, OpDeletePushConfig, V10},
		{"message/send", V03, OpSendMessage, V03},
		{"message/send", V10, OpSendMessage, V03}, // a 0.3 name gets 0.3 shapes
		{"tasks/send", V03, OpSendMessage, V03},
		{"message/stream", V03, OpSendStreamingMessage, V03},
		{"tasks/get", V03, OpGetTask, V03},
		{"tasks/list", V03, OpListTasks, V03},
		{"tasks/cancel", V03, OpCancelTask, V03},
		{"tasks/resubscribe", V03, OpSubscribeToTask, V03},
		{"tasks/pushNotificationConfig/set", V03, OpCreatePushConfig, V03},
		{"tasks/pushNotificationConfig/get", V03, OpGetPushConfig, V03},
		{"tasks/pushNotificationConfig/list", V03, OpListPushConfigs, V03},
		{"tasks/pushNotificationConfig/delete", V03, OpDeletePushConfig, V03},
		{"agent/getAuthenticatedExtendedCard", V03, OpGetExtendedAgentCard, V03},
		{"task/get", V03, OpGetTask, V03},
		{"task/get", V10, OpGetTask, V10},
		{"task/cancel", V10, OpCancelTask, V10},
		{"task/cancel", "", OpCancelTask, V03},
		{"message/send", VHelloStdio, OpSendMessage, VHelloStdio},
		{"task/get", VHelloStdio, OpGetTask, VHelloStdio},
		{"SendMessage", VHelloStdio, OpSendMessage, VHelloStdio},
	} {
		m, ok := LookupMethod(tc.name, tc.negotiated)
		if !ok || m.Op != tc.op || m.Version != tc.version || m.Name != tc.name {
			t.Errorf("%s (%s): got %+v %v", tc.name, tc.negotiated, m, ok)
		}
	}
	for _, name := range []string{"", "sendMessage", "Message/Send", "tasks/get/", "foo", "rpc.discover"} {
		if _, ok := LookupMethod(name, V10); ok {
			t.Errorf("%q resolved", name)
		}
	}
	if !OpSubscribeToTask.Streaming() || OpGetTask.Streaming() || !OpListPushConfigs.PushConfig() || OpListTasks.PushConfig() {
		t.Error("operation predicates")
	}
}

func TestDecodeSendParams(t *testing.T) {
	five := 5
	for _, tc := range []struct {
		name, in string
		want     SendParams
	}{
		{"1.0", `{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]},"configuration":{"returnImmediately":true,"historyLength":5,"acceptedOutputModes":["text/plain"],"taskPushNotificationConfig":{"url":"u"}},"tenant":"t","metadata":{"chio":{"targetSkillId":"s"}}}`,
			SendParams{Message: Message{MessageID: "m", Role: RoleUser, Parts: []Part{TextPart("hi")}},
				Configuration: SendConfiguration{ReturnImmediately: true, HistoryLength: &five, AcceptedOutputModes: []string{"text/plain"}, PushConfig: json.RawMessage(`{"url":"u"}`)},
				Tenant:        "t", Metadata: map[string]any{"chio": map[string]any{"targetSkillId": "s"}}}},
		{"0.3 non-blocking", `{"message":{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"blocking":false,"pushNotificationConfig":{"url":"u"}}}`,
			SendParams{Message: Message{MessageID: "m", Role: RoleUser, Parts: []Part{TextPart("hi")}},
				Configuration: SendConfiguration{ReturnImmediately: true, PushConfig: json.RawMessage(`{"url":"u"}`)}}},
		{"0.3 blocking", `{"message":{"role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"blocking":true}}`,
			SendParams{Message: Message{Role: RoleUser, Parts: []Part{TextPart("hi")}}}},
		{"hello", `{"message":{"role":"user","parts":[{"type":"text","text":"world"}]}}`,
			SendParams{Message: Message{Role: RoleUser, Parts: []Part{TextPart("world")}}}},
		{"history as string", `{"message":{"role":"user","parts":[{"text":"a"}]},"configuration":{"historyLength":"5"}}`,
			SendParams{Message: Message{Role: RoleUser, Parts: []Part{TextPart("a")}}, Configuration: SendConfiguration{HistoryLength: &five}}},
	} {
		got, e := DecodeSendParams(json.RawMessage(tc.in))
		if e != nil {
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, *got, tc.want)
		}
	}
}

func TestParamErrors(t *testing.T) {
	msg := `"message":{"role":"user","parts":[{"text":"a"}]}`
	for _, tc := range []struct {
		decode func(json.RawMessage) *Error
		in     string
		field  string
	}{
		{sendErr, ``, "message"},
		{sendErr, `[]`, "params"},
		{sendErr, `{}`, "message"},
		{sendErr, `{"message":"hi"}`, "message"},
		{sendErr, `{"message":{"role":"user","parts":"hi"}}`, "message.parts"},
		{sendErr, `{` + msg + `,"configuration":[]}`, "configuration"},
		{sendErr, `{` + msg + `,"configuration":{"blocking":"no"}}`, "configuration.blocking"},
		{sendErr, `{` + msg + `,"configuration":{"returnImmediately":1}}`, "configuration.returnImmediately"},
		{sendErr, `{` + msg + `,"configuration":{"returnImmediately":true,"blocking":true}}`, "configuration.blocking"},
		{sendErr, `{` + msg + `,"configuration":{"historyLength":-1}}`, "configuration.historyLength"},
		{sendErr, `{` + msg + `,"configuration":{"historyLength":1.5}}`, "configuration.historyLength"},
		{sendErr, `{` + msg + `,"configuration":{"historyLength":1e20}}`, "configuration.historyLength"},
		{sendErr, `{` + msg + `,"configuration":{"acceptedOutputModes":"text"}}`, "configuration.acceptedOutputModes"},
		{sendErr, `{` + msg + `,"configuration":{"taskPushNotificationConfig":"u"}}`, "configuration.taskPushNotificationConfig"},
		{sendErr, `{` + msg + `,"tenant":1}`, "tenant"},
		{sendErr, `{` + msg + `,"metadata":[]}`, "metadata"},
		{getErr, `{}`, "id"},
		{getErr, `{"id":1}`, "id"},
		{getErr, `{"taskId":true}`, "taskId"},
		{getErr, `{"id":"a","taskId":"b"}`, "taskId"},
		{getErr, `{"id":"a","historyLength":"x"}`, "historyLength"},
		{getErr, `{"id":"a","historyLength":-2}`, "historyLength"},
		{cancelErr, `{"id":""}`, "id"},
		{cancelErr, `{"id":"a","metadata":5}`, "metadata"},
		{listErr, `{"pageSize":0.5}`, "pageSize"},
		{listErr, `{"pageSize":101}`, "pageSize"},
		{listErr, `{"pageSize":-1}`, "pageSize"},
		{listErr, `{"status":"TASK_STATE_DONE"}`, "status"},
		{listErr, `{"status":3}`, "status"},
		{listErr, `{"statusTimestampAfter":"yesterday"}`, "statusTimestampAfter"},
		{listErr, `{"includeArtifacts":"yes"}`, "includeArtifacts"},
		{listErr, `{"contextId":[]}`, "contextId"},
		{listErr, `{"historyLength":-1}`, "historyLength"},
		{listErr, `"x"`, "params"},
	} {
		e := tc.decode(json.RawMessage(tc.in))
		if e == nil {
			t.Errorf("%s: no error", tc.in)
			continue
		}
		if e.Code != CodeInvalidParams || violationField(e) != tc.field {
			t.Errorf("%s: got %d %q (%s), want -32602 %q", tc.in, e.Code, violationField(e), e.Message, tc.field)
		}
	}
}

func sendErr(p json.RawMessage) *Error   { _, e := DecodeSendParams(p); return e }
func getErr(p json.RawMessage) *Error    { _, e := DecodeGetTaskParams(p); return e }
func cancelErr(p json.RawMessage) *Error { _, e := DecodeCancelTaskParams(p); return e }
func listErr(p json.RawMessage) *Error   { _, e := DecodeListTasksParams(p); return e }

func TestDecodeTaskParams(t *testing.T) {
	zero := 0
	g, e := DecodeGetTaskParams(json.RawMessage(`{"id":"t1","historyLength":0,"tenant":"x"}`))
	if e != nil || !reflect.DeepEqual(*g, GetTaskParams{ID: "t1", HistoryLength: &zero, Tenant: "x"}) {
		t.Errorf("GetTask: %+v %v", g, e)
	}
	g, e = DecodeGetTaskParams(json.RawMessage(`{"taskId":"a2a-task-2"}`))
	if e != nil || g.ID != "a2a-task-2" || g.HistoryLength != nil {
		t.Errorf("task/get: %+v %v", g, e)
	}
	c, e := DecodeCancelTaskParams(json.RawMessage(`{"id":"t","taskId":"t","metadata":{"why":"x"}}`))
	if e != nil || c.ID != "t" || c.Metadata["why"] != "x" {
		t.Errorf("cancel: %+v %v", c, e)
	}
}

func TestDecodeListTasksParams(t *testing.T) {
	after := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	working, two := StateWorking, 2
	for _, tc := range []struct {
		in   string
		want ListTasksParams
	}{
		{``, ListTasksParams{PageSize: 50}},
		{`{}`, ListTasksParams{PageSize: 50}},
		{`{"pageSize":0}`, ListTasksParams{PageSize: 50}},
		{`{"pageSize":1}`, ListTasksParams{PageSize: 1}},
		{`{"pageSize":"100"}`, ListTasksParams{PageSize: 100}},
		{`{"status":"TASK_STATE_UNSPECIFIED"}`, ListTasksParams{PageSize: 50}},
		{`{"contextId":"c","status":"TASK_STATE_WORKING","pageToken":"p","historyLength":2,"statusTimestampAfter":"2026-01-02T03:04:05.6Z","includeArtifacts":true,"tenant":"x"}`,
			ListTasksParams{ContextID: "c", Status: &working, PageSize: 50, PageToken: "p", HistoryLength: &two, StatusTimestampAfter: &after, IncludeArtifacts: true, Tenant: "x"}},
		{`{"status":"working"}`, ListTasksParams{Status: &working, PageSize: 50}},
	} {
		got, e := DecodeListTasksParams(json.RawMessage(tc.in))
		if e != nil {
			t.Errorf("%s: %v", tc.in, e)
			continue
		}
		if got.StatusTimestampAfter != nil && tc.want.StatusTimestampAfter != nil && got.StatusTimestampAfter.Equal(*tc.want.StatusTimestampAfter) {
			got.StatusTimestampAfter = tc.want.StatusTimestampAfter
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.in, *got, tc.want)
		}
	}
}

func TestMethodDecodeParams(t *testing.T) {
	for name, want := range map[string]any{
		"message/send":         &SendParams{},
		"SendStreamingMessage": &SendParams{},
		"task/get":             &GetTaskParams{},
		"tasks/list":           &ListTasksParams{},
		"CancelTask":           &CancelTaskParams{},
		"tasks/resubscribe":    &CancelTaskParams{},
	} {
		m, _ := LookupMethod(name, V03)
		got, e := m.DecodeParams(json.RawMessage(`{"id":"t","message":{"role":"user","parts":[{"text":"a"}]}}`))
		if e != nil || reflect.TypeOf(got) != reflect.TypeOf(want) {
			t.Errorf("%s: %T %v", name, got, e)
		}
	}
	m, _ := LookupMethod("GetExtendedAgentCard", V10)
	if got, e := m.DecodeParams(nil); got != nil || e != nil {
		t.Errorf("card params: %v %v", got, e)
	}
}
