package wire

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2apb/v0/pbjson"
)

func TestMatchREST(t *testing.T) {
	type want struct {
		op                     Operation
		v                      Version
		pattern                string
		tenant, taskID, config string
	}
	for _, tc := range []struct {
		method, path string
		want         want
	}{
		// 1.0 at the mount point.
		{"POST", "/message:send", want{OpSendMessage, V10, "/message:send", "", "", ""}},
		{"POST", "/message:stream", want{OpSendStreamingMessage, V10, "/message:stream", "", "", ""}},
		{"GET", "/tasks/t1", want{OpGetTask, V10, "/tasks/{id}", "", "t1", ""}},
		{"GET", "/tasks", want{OpListTasks, V10, "/tasks", "", "", ""}},
		{"POST", "/tasks/t1:cancel", want{OpCancelTask, V10, "/tasks/{id}:cancel", "", "t1", ""}},
		{"GET", "/tasks/t1:subscribe", want{OpSubscribeToTask, V10, "/tasks/{id}:subscribe", "", "t1", ""}},
		{"POST", "/tasks/t1:subscribe", want{OpSubscribeToTask, V10, "/tasks/{id}:subscribe", "", "t1", ""}},
		{"POST", "/tasks/t1/pushNotificationConfigs", want{OpCreatePushConfig, V10, "/tasks/{taskId}/pushNotificationConfigs", "", "t1", ""}},
		{"GET", "/tasks/t1/pushNotificationConfigs", want{OpListPushConfigs, V10, "/tasks/{taskId}/pushNotificationConfigs", "", "t1", ""}},
		{"GET", "/tasks/t1/pushNotificationConfigs/c1", want{OpGetPushConfig, V10, "/tasks/{taskId}/pushNotificationConfigs/{id}", "", "t1", "c1"}},
		{"DELETE", "/tasks/t1/pushNotificationConfigs/c1", want{OpDeletePushConfig, V10, "/tasks/{taskId}/pushNotificationConfigs/{id}", "", "t1", "c1"}},
		{"GET", "/extendedAgentCard", want{OpGetExtendedAgentCard, V10, "/extendedAgentCard", "", "", ""}},
		{"POST", "message:send", want{OpSendMessage, V10, "/message:send", "", "", ""}}, // leading slash optional
		// 1.0 under a tenant.
		{"POST", "/acme/message:send", want{OpSendMessage, V10, "/{tenant}/message:send", "acme", "", ""}},
		{"POST", "/acme/message:stream", want{OpSendStreamingMessage, V10, "/{tenant}/message:stream", "acme", "", ""}},
		{"GET", "/acme/tasks/t1", want{OpGetTask, V10, "/{tenant}/tasks/{id}", "acme", "t1", ""}},
		{"GET", "/acme/tasks", want{OpListTasks, V10, "/{tenant}/tasks", "acme", "", ""}},
		{"POST", "/acme/tasks/t1:cancel", want{OpCancelTask, V10, "/{tenant}/tasks/{id}:cancel", "acme", "t1", ""}},
		{"GET", "/acme/tasks/t1:subscribe", want{OpSubscribeToTask, V10, "/{tenant}/tasks/{id}:subscribe", "acme", "t1", ""}},
		{"POST", "/acme/tasks/t1:subscribe", want{OpSubscribeToTask, V10, "/{tenant}/tasks/{id}:subscribe", "acme", "t1", ""}},
		{"POST", "/acme/tasks/t1/pushNotificationConfigs", want{OpCreatePushConfig, V10, "/{tenant}/tasks/{taskId}/pushNotificationConfigs", "acme", "t1", ""}},
		{"GET", "/acme/tasks/t1/pushNotificationConfigs", want{OpListPushConfigs, V10, "/{tenant}/tasks/{taskId}/pushNotificationConfigs", "acme", "t1", ""}},
		{"GET", "/acme/tasks/t1/pushNotificationConfigs/c1", want{OpGetPushConfig, V10, "/{tenant}/tasks/{taskId}/pushNotificationConfigs/{id}", "acme", "t1", "c1"}},
		{"DELETE", "/acme/tasks/t1/pushNotificationConfigs/c1", want{OpDeletePushConfig, V10, "/{tenant}/tasks/{taskId}/pushNotificationConfigs/{id}", "acme", "t1", "c1"}},
		{"GET", "/acme/extendedAgentCard", want{OpGetExtendedAgentCard, V10, "/{tenant}/extendedAgentCard", "acme", "", ""}},
		{"GET", "/acme%20corp/tasks", want{OpListTasks, V10, "/{tenant}/tasks", "acme corp", "", ""}},
		// Ambiguous: the un-prefixed reading wins when it fits the method.
		{"GET", "/tasks/tasks", want{OpGetTask, V10, "/tasks/{id}", "", "tasks", ""}},
		{"GET", "/tasks/tasks/x", want{OpGetTask, V10, "/{tenant}/tasks/{id}", "tasks", "x", ""}},
		{"POST", "/tasks/message:send", want{OpSendMessage, V10, "/{tenant}/message:send", "tasks", "", ""}},
		// 0.3 under /v1.
		{"POST", "/v1/message:send", want{OpSendMessage, V03, "/v1/message:send", "", "", ""}},
		{"POST", "/v1/message:stream", want{OpSendStreamingMessage, V03, "/v1/message:stream", "", "", ""}},
		{"GET", "/v1/tasks/t1", want{OpGetTask, V03, "/v1/tasks/{id}", "", "t1", ""}},
		{"GET", "/v1/tasks", want{OpListTasks, V03, "/v1/tasks", "", "", ""}},
		{"POST", "/v1/tasks/t1:cancel", want{OpCancelTask, V03, "/v1/tasks/{id}:cancel", "", "t1", ""}},
		{"GET", "/v1/tasks/t1:subscribe", want{OpSubscribeToTask, V03, "/v1/tasks/{id}:subscribe", "", "t1", ""}},
		{"POST", "/v1/tasks/t1:subscribe", want{OpSubscribeToTask, V03, "/v1/tasks/{id}:subscribe", "", "t1", ""}},
		{"POST", "/v1/tasks/t1/pushNotificationConfigs", want{OpCreatePushConfig, V03, "/v1/tasks/{taskId}/pushNotificationConfigs", "", "t1", ""}},
		{"GET", "/v1/tasks/t1/pushNotificationConfigs", want{OpListPushConfigs, V03, "/v1/tasks/{taskId}/pushNotificationConfigs", "", "t1", ""}},
		{"GET", "/v1/tasks/t1/pushNotificationConfigs/c1", want{OpGetPushConfig, V03, "/v1/tasks/{taskId}/pushNotificationConfigs/{id}", "", "t1", "c1"}},
		{"DELETE", "/v1/tasks/t1/pushNotificationConfigs/c1", want{OpDeletePushConfig, V03, "/v1/tasks/{taskId}/pushNotificationConfigs/{id}", "", "t1", "c1"}},
		{"GET", "/v1/card", want{OpGetExtendedAgentCard, V03, "/v1/card", "", "", ""}},
		// Percent-encoded segments.
		{"GET", "/tasks/a%2Fb", want{OpGetTask, V10, "/tasks/{id}", "", "a/b", ""}},
		{"GET", "/tasks/a%3Acancel", want{OpGetTask, V10, "/tasks/{id}", "", "a:cancel", ""}},
		{"POST", "/tasks/a%3Acancel:cancel", want{OpCancelTask, V10, "/tasks/{id}:cancel", "", "a:cancel", ""}},
		{"POST", "/tasks/t%201:cancel", want{OpCancelTask, V10, "/tasks/{id}:cancel", "", "t 1", ""}},
		{"GET", "/tasks/urn:task:1", want{OpGetTask, V10, "/tasks/{id}", "", "urn:task:1", ""}},
		{"GET", "/tasks/%E2%9C%93/pushNotificationConfigs/c%2B1", want{OpGetPushConfig, V10, "/tasks/{taskId}/pushNotificationConfigs/{id}", "", "✓", "c+1"}},
		{"GET", "/v1/tasks/a%2Fb:subscribe", want{OpSubscribeToTask, V03, "/v1/tasks/{id}:subscribe", "", "a/b", ""}},
		{"GET", "/tasks/t+1", want{OpGetTask, V10, "/tasks/{id}", "", "t+1", ""}}, // "+" is not a space in a path
	} {
		r, ok := MatchREST(tc.method, tc.path)
		got := want{r.Op, r.Version, r.Pattern, r.Tenant, r.TaskID, r.ConfigID}
		if !ok || got != tc.want || r.Method != tc.method || r.Allow != nil {
			t.Errorf("%s %s: got %+v %v, want %+v", tc.method, tc.path, r, ok, tc.want)
		}
	}
}

func TestMatchRESTUnmatched(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		allow        []string // nil: 404
	}{
		{"GET", "", nil},
		{"GET", "/", nil},
		{"GET", "/nope", nil},
		{"GET", "/message", nil},
		{"POST", "/Message:send", nil},
		{"GET", "/tasks/", nil},
		{"GET", "/tasks//x", nil},
		{"POST", "/tasks/:cancel", nil},
		{"GET", "/tasks/t1:subscribe/", nil},
		{"GET", "/tasks/%zz", nil},
		{"GET", "/tasks/t1/pushNotificationConfigs/%", nil},
		{"GET", "/tasks/t1/pushNotificationConfig", nil},
		{"GET", "/tasks/t1/pushNotificationConfigs/c1/x", nil},
		{"GET", "/a/b/tasks", nil}, // tenants are one segment
		{"GET", "/v1", nil},
		{"GET", "/v1/extendedAgentCard", nil}, // 0.3 calls it /v1/card
		{"GET", "/card", nil},                 // 1.0 calls it /extendedAgentCard
		{"GET", "/v1/acme/tasks", nil},        // 0.3 has no tenants
		{"GET", "/%zz/tasks", nil},
		{"DELETE", "/message:send", []string{"POST"}},
		{"GET", "/message:stream", []string{"POST"}},
		{"POST", "/tasks", []string{"GET"}},
		{"POST", "/tasks/t1", []string{"GET"}},
		{"HEAD", "/tasks/t1", []string{"GET"}},
		{"GET", "/tasks/t1:cancel", []string{"POST"}},
		{"DELETE", "/tasks/t1:subscribe", []string{"GET", "POST"}},
		{"PUT", "/tasks/t1/pushNotificationConfigs", []string{"GET", "POST"}},
		{"POST", "/tasks/t1/pushNotificationConfigs/c1", []string{"DELETE", "GET"}},
		{"POST", "/extendedAgentCard", []string{"GET"}},
		{"POST", "/acme/tasks", []string{"GET"}},
		{"PATCH", "/v1/tasks/t1/pushNotificationConfigs/c1", []string{"DELETE", "GET"}},
		{"POST", "/v1/card", []string{"GET"}},
	} {
		r, ok := MatchREST(tc.method, tc.path)
		if ok || !reflect.DeepEqual(r.Allow, tc.allow) || r.Op != 0 {
			t.Errorf("%s %q: got %+v %v, want allow %v", tc.method, tc.path, r, ok, tc.allow)
		}
	}
}

// restCall matches and decodes one request.
func restCall(t *testing.T, method, target, body string) (any, *Error) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := MatchREST(method, u.EscapedPath())
	if !ok {
		t.Fatalf("%s %s did not match", method, target)
	}
	return DecodeRESTRequest(r, u.Query(), []byte(body))
}

func TestDecodeRESTRequest(t *testing.T) {
	two, zero := 2, 0
	working, canceled := StateWorking, StateCanceled
	after := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))
	hi := Message{MessageID: "m1", Role: RoleUser, Parts: []Part{TextPart("hi")}}
	msg10 := `{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}`
	for _, tc := range []struct {
		name, method, target, body string
		want                       any
	}{
		{"1.0 send", "POST", "/message:send", `{"message":` + msg10 + `,"configuration":{"returnImmediately":true,"historyLength":2},"metadata":{"k":"v"}}`,
			&SendParams{Message: hi, Configuration: SendConfiguration{ReturnImmediately: true, HistoryLength: &two}, Metadata: map[string]any{"k": "v"}}},
		{"1.0 send, tenant from path over body", "POST", "/acme/message:send", `{"tenant":"other","message":` + msg10 + `}`,
			&SendParams{Message: hi, Tenant: "acme"}},
		{"1.0 send, tenant from body", "POST", "/message:send", `{"tenant":"acme","message":` + msg10 + `}`,
			&SendParams{Message: hi, Tenant: "acme"}},
		{"1.0 stream with inline push", "POST", "/message:stream", `{"message":` + msg10 + `,"configuration":{"taskPushNotificationConfig":{"url":"https://h/"}}}`,
			&SendParams{Message: hi, Configuration: SendConfiguration{PushConfig: json.RawMessage(`{"url":"https://h/"}`)}}},
		{"1.0 get", "GET", "/tasks/t1", ``, &GetTaskParams{ID: "t1"}},
		{"1.0 get, history, body ignored", "GET", "/acme/tasks/t1?historyLength=0", `not json`, &GetTaskParams{ID: "t1", HistoryLength: &zero, Tenant: "acme"}},
		{"1.0 get, snake_case history, A2A-Version ignored", "GET", "/tasks/t1?history_length=2&A2A-Version=1.0", ``, &GetTaskParams{ID: "t1", HistoryLength: &two}},
		{"1.0 get, repeated agreeing history", "GET", "/tasks/t1?historyLength=2&historyLength=2,2", ``, &GetTaskParams{ID: "t1", HistoryLength: &two}},
		{"1.0 list defaults", "GET", "/tasks", ``, &ListTasksParams{PageSize: DefaultPageSize}},
		{"1.0 list all parameters", "GET", "/acme/tasks?contextId=c1&status=TASK_STATE_WORKING&pageSize=10&pageToken=p%2C1&historyLength=2&statusTimestampAfter=2026-01-02T03:04:05%2B01:00&includeArtifacts=true", ``,
			&ListTasksParams{ContextID: "c1", Status: &working, PageSize: 10, PageToken: "p,1", HistoryLength: &two, StatusTimestampAfter: &after, IncludeArtifacts: true, Tenant: "acme"}},
		{"1.0 list, unescaped plus in timestamp", "GET", "/tasks?statusTimestampAfter=2026-01-02T03:04:05+01:00", ``,
			&ListTasksParams{PageSize: DefaultPageSize, StatusTimestampAfter: &after}},
		{"1.0 list, a2a-go's lastUpdatedAfter", "GET", "/tasks?lastUpdatedAfter=2026-01-02T02:04:05Z", ``,
			&ListTasksParams{PageSize: DefaultPageSize, StatusTimestampAfter: &after}},
		{"1.0 list, 0.3 spellings", "GET", "/tasks?status=canceled&includeArtifacts=false", ``,
			&ListTasksParams{PageSize: DefaultPageSize, Status: &canceled}},
		{"1.0 list, repeated and comma-separated status", "GET", "/tasks?status=TASK_STATE_WORKING&status=TASK_STATE_WORKING,%20TASK_STATE_WORKING", ``,
			&ListTasksParams{PageSize: DefaultPageSize, Status: &working}},
		{"1.0 list, empty values are absent", "GET", "/tasks?status=&pageSize=&contextId=", ``, &ListTasksParams{PageSize: DefaultPageSize}},
		{"1.0 cancel without body", "POST", "/tasks/t1:cancel", ``, &CancelTaskParams{ID: "t1"}},
		{"1.0 cancel with metadata, path id wins", "POST", "/acme/tasks/t1:cancel", `{"id":"other","taskId":"x","metadata":{"why":"done"}}`,
			&CancelTaskParams{ID: "t1", Tenant: "acme", Metadata: map[string]any{"why": "done"}}},
		{"1.0 cancel with null body", "POST", "/tasks/t1:cancel", `null`, &CancelTaskParams{ID: "t1"}},
		{"1.0 subscribe GET", "GET", "/tasks/t1:subscribe", ``, &CancelTaskParams{ID: "t1"}},
		{"1.0 subscribe POST, body ignored", "POST", "/acme/tasks/t1:subscribe", `{"id":"x"}`, &CancelTaskParams{ID: "t1", Tenant: "acme"}},
		{"1.0 create config", "POST", "/acme/tasks/t1/pushNotificationConfigs", `{"taskId":"ignored","id":"c1","url":"https://h/x","authentication":{"scheme":"Bearer","credentials":"s"}}`,
			&CreatePushConfigParams{Config: PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}, Tenant: "acme"}}},
		{"1.0 get config", "GET", "/tasks/t1/pushNotificationConfigs/c1", ``, &GetPushConfigParams{TaskID: "t1", ID: "c1"}},
		{"1.0 delete config", "DELETE", "/acme/tasks/t1/pushNotificationConfigs/c1", `ignored`, &DeletePushConfigParams{TaskID: "t1", ID: "c1", Tenant: "acme"}},
		{"1.0 list configs", "GET", "/tasks/t1/pushNotificationConfigs?pageSize=5&pageToken=p", ``, &ListPushConfigsParams{TaskID: "t1", PageSize: 5, PageToken: "p"}},
		{"1.0 list configs defaults", "GET", "/acme/tasks/t1/pushNotificationConfigs", ``, &ListPushConfigsParams{TaskID: "t1", PageSize: DefaultPageSize, Tenant: "acme"}},
		{"1.0 extended card", "GET", "/extendedAgentCard", ``, nil},
		// 0.3: ProtoJSON of the 0.3 proto, or the JSON-RPC shapes.
		{"0.3 send, ProtoJSON", "POST", "/v1/message:send", `{"message":{"messageId":"m1","role":"ROLE_USER","content":[{"text":"hi"}]},"configuration":{"blocking":false,"pushNotification":{"url":"https://h/"}}}`,
			&SendParams{Message: hi, Configuration: SendConfiguration{ReturnImmediately: true, PushConfig: json.RawMessage(`{"url":"https://h/"}`)}}},
		{"0.3 send, JSON-RPC shape", "POST", "/v1/message:stream", `{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]},"metadata":{"a":"b"}}`,
			&SendParams{Message: hi, Metadata: map[string]any{"a": "b"}}},
		{"0.3 send, proto field name request", "POST", "/v1/message:send", `{"request":{"messageId":"m1","role":"ROLE_USER","content":[{"text":"hi"}]}}`,
			&SendParams{Message: hi}},
		{"0.3 send, file and data parts", "POST", "/v1/message:send",
			`{"message":{"role":"ROLE_USER","content":[` +
				`{"file":{"fileWithUri":"https://e/x.png","mimeType":"image/png","name":"x.png"}},` +
				`{"file":{"fileWithBytes":"` + base64.StdEncoding.EncodeToString([]byte(base64.StdEncoding.EncodeToString([]byte("xyz")))) + `","mimeType":"text/plain"}},` +
				`{"file":{"fileWithBytes":"` + base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0x10}) + `"}},` +
				`{"data":{"data":{"k":1}}},` +
				`{"data":{"data":[1,2]}},` +
				`{"data":{}},` +
				`{"text":"t","metadata":{"m":true}}]}}`,
			&SendParams{Message: Message{Role: RoleUser, Parts: []Part{
				URLPart("https://e/x.png", "image/png", "x.png"),
				RawPart([]byte("xyz"), "text/plain", ""),
				RawPart([]byte{0xff, 0x00, 0x10}, "", ""), // encoded once
				DataPart(json.RawMessage(`{"k":1}`)),
				DataPart(json.RawMessage(`[1,2]`)),
				DataPart(json.RawMessage(`{}`)),
				{Text: strp("t"), Metadata: map[string]any{"m": true}},
			}}}},
		{"0.3 get", "GET", "/v1/tasks/t1?historyLength=2", ``, &GetTaskParams{ID: "t1", HistoryLength: &two}},
		{"0.3 list, British CANCELLED", "GET", "/v1/tasks?status=TASK_STATE_CANCELLED&pageSize=3", ``, &ListTasksParams{PageSize: 3, Status: &canceled}},
		{"0.3 cancel", "POST", "/v1/tasks/t1:cancel", `{"name":"tasks/t1"}`, &CancelTaskParams{ID: "t1"}},
		{"0.3 subscribe", "GET", "/v1/tasks/t1:subscribe", ``, &CancelTaskParams{ID: "t1"}},
		{"0.3 create, full request", "POST", "/v1/tasks/t1/pushNotificationConfigs",
			`{"parent":"tasks/t1","configId":"c1","config":{"name":"tasks/t1/pushNotificationConfigs/c1","pushNotificationConfig":{"url":"https://h/x","authentication":{"schemes":["Bearer"],"credentials":"s"}}}}`,
			&CreatePushConfigParams{Config: PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}}}},
		{"0.3 create, bare TaskPushNotificationConfig", "POST", "/v1/tasks/t1/pushNotificationConfigs",
			`{"name":"tasks/t1/pushNotificationConfigs/c1","pushNotificationConfig":{"id":"c2","url":"https://h/x"}}`,
			&CreatePushConfigParams{Config: PushConfig{ID: "c2", TaskID: "t1", URL: "https://h/x"}}},
		{"0.3 create, JSON-RPC shape", "POST", "/v1/tasks/t1/pushNotificationConfigs",
			`{"taskId":"other","pushNotificationConfig":{"url":"https://h/x"}}`,
			&CreatePushConfigParams{Config: PushConfig{TaskID: "t1", URL: "https://h/x"}}},
		{"0.3 get config", "GET", "/v1/tasks/t1/pushNotificationConfigs/c1", ``, &GetPushConfigParams{TaskID: "t1", ID: "c1"}},
		{"0.3 list configs", "GET", "/v1/tasks/t1/pushNotificationConfigs?pageSize=2", ``, &ListPushConfigsParams{TaskID: "t1", PageSize: 2}},
		{"0.3 delete config", "DELETE", "/v1/tasks/t1/pushNotificationConfigs/c1", ``, &DeletePushConfigParams{TaskID: "t1", ID: "c1"}},
		{"0.3 card", "GET", "/v1/card", ``, nil},
	} {
		got, e := restCall(t, tc.method, tc.target, tc.body)
		if e != nil {
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if lp, ok := got.(*ListTasksParams); ok && lp.StatusTimestampAfter != nil {
			if w := tc.want.(*ListTasksParams).StatusTimestampAfter; w != nil && lp.StatusTimestampAfter.Equal(*w) {
				lp.StatusTimestampAfter = w
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %#v\nwant %#v", tc.name, got, tc.want)
		}
	}
}

func TestDecodeRESTRequestErrors(t *testing.T) {
	msg := `"message":{"role":"ROLE_USER","parts":[{"text":"a"}]}`
	for _, tc := range []struct {
		name, method, target, body string
		code                       int
		field                      string
	}{
		{"send without body", "POST", "/message:send", ``, CodeInvalidParams, "message"},
		{"send with {}", "POST", "/message:send", `{}`, CodeInvalidParams, "message"},
		{"send with broken JSON", "POST", "/message:send", `{"message":`, CodeParseError, ""},
		{"send with an array body", "POST", "/message:send", `[{` + msg + `}]`, CodeInvalidRequest, ""},
		{"send with a string body", "POST", "/message:send", `"hi"`, CodeInvalidRequest, ""},
		{"send with a bad part", "POST", "/message:send", `{"message":{"role":"ROLE_USER","parts":[{"text":1}]}}`, CodeInvalidParams, "message.parts[0].text"},
		{"send with bad inline push type", "POST", "/message:send", `{` + msg + `,"configuration":{"taskPushNotificationConfig":1}}`, CodeInvalidParams, "configuration.taskPushNotificationConfig"},
		{"send over the size limit", "POST", "/message:send", `{"x":"` + strings.Repeat("a", MaxRequestBytes) + `"}`, CodeInvalidRequest, ""},
		{"get, history not a number", "GET", "/tasks/t1?historyLength=abc", ``, CodeInvalidParams, "historyLength"},
		{"get, negative history", "GET", "/tasks/t1?historyLength=-1", ``, CodeInvalidParams, "historyLength"},
		{"get, conflicting history", "GET", "/tasks/t1?historyLength=1&historyLength=2", ``, CodeInvalidParams, "historyLength"},
		{"get, conflicting history in one value", "GET", "/tasks/t1?historyLength=1,2", ``, CodeInvalidParams, "historyLength"},
		{"get, conflicting history across aliases", "GET", "/tasks/t1?historyLength=1&history_length=2", ``, CodeInvalidParams, "historyLength"},
		{"list, unknown status", "GET", "/tasks?status=TASK_STATE_DONE", ``, CodeInvalidParams, "status"},
		{"list, two statuses", "GET", "/tasks?status=TASK_STATE_WORKING,TASK_STATE_COMPLETED", ``, CodeInvalidParams, "status"},
		{"list, page size 0.5", "GET", "/tasks?pageSize=0.5", ``, CodeInvalidParams, "pageSize"},
		{"list, page size 101", "GET", "/tasks?pageSize=101", ``, CodeInvalidParams, "pageSize"},
		{"list, page size word", "GET", "/tasks?pageSize=ten", ``, CodeInvalidParams, "pageSize"},
		{"list, bad timestamp", "GET", "/tasks?statusTimestampAfter=yesterday", ``, CodeInvalidParams, "statusTimestampAfter"},
		{"list, bad alias timestamp", "GET", "/tasks?lastUpdatedAfter=2026-13-01T00:00:00Z", ``, CodeInvalidParams, "statusTimestampAfter"},
		{"list, bad boolean", "GET", "/tasks?includeArtifacts=yes", ``, CodeInvalidParams, "includeArtifacts"},
		{"list, conflicting booleans", "GET", "/tasks?includeArtifacts=true&include_artifacts=false", ``, CodeInvalidParams, "includeArtifacts"},
		{"list, conflicting contexts", "GET", "/tasks?contextId=a&contextId=b", ``, CodeInvalidParams, "contextId"},
		{"cancel with broken body", "POST", "/tasks/t1:cancel", `{`, CodeParseError, ""},
		{"cancel with bad metadata", "POST", "/tasks/t1:cancel", `{"metadata":[]}`, CodeInvalidParams, "metadata"},
		{"cancel with bad tenant", "POST", "/tasks/t1:cancel", `{"tenant":5}`, CodeInvalidParams, "tenant"},
		{"create without body", "POST", "/tasks/t1/pushNotificationConfigs", ``, CodeInvalidParams, "url"},
		{"create with a non-http url", "POST", "/tasks/t1/pushNotificationConfigs", `{"url":"ftp://h/"}`, CodeInvalidParams, "url"},
		{"create with the 0.3 shape on a 1.0 path", "POST", "/tasks/t1/pushNotificationConfigs", `{"pushNotificationConfig":{"url":"https://h/"}}`, CodeInvalidParams, "url"},
		{"create with a bad scheme", "POST", "/tasks/t1/pushNotificationConfigs", `{"url":"https://h/","authentication":{"scheme":""}}`, CodeInvalidParams, "authentication.scheme"},
		{"list configs, negative page", "GET", "/tasks/t1/pushNotificationConfigs?pageSize=-2", ``, CodeInvalidParams, "pageSize"},
		{"list configs, conflicting tokens", "GET", "/tasks/t1/pushNotificationConfigs?pageToken=a&page_token=b", ``, CodeInvalidParams, "pageToken"},
		{"0.3 send with the wrong part", "POST", "/v1/message:send", `{"message":{"role":"ROLE_USER","content":[{"file":{"fileWithBytes":"!!"}}]}}`, CodeInvalidParams, "message.parts[0].file.fileWithBytes"},
		{"0.3 send with a numeric fileWithBytes", "POST", "/v1/message:send", `{"message":{"role":"ROLE_USER","content":[{"file":{"fileWithBytes":5}}]}}`, CodeInvalidParams, "message.parts[0].file.fileWithBytes"},
		{"0.3 send with a part holding text and file", "POST", "/v1/message:send", `{"message":{"role":"ROLE_USER","content":[{"text":"a","file":{"fileWithUri":"https://e/"}}]}}`, CodeInvalidParams, "message.parts[0]"},
		{"0.3 send with an empty file", "POST", "/v1/message:send", `{"message":{"role":"ROLE_USER","content":[{"file":{}}]}}`, CodeInvalidParams, "message.parts[0].file"},
		{"0.3 send without content", "POST", "/v1/message:send", `{"message":{"role":"ROLE_USER"}}`, CodeInvalidParams, "message.parts"},
		{"0.3 send with a bad push config", "POST", "/v1/message:send", `{` + msg + `,"configuration":{"pushNotification":"x"}}`, CodeInvalidParams, "configuration.pushNotificationConfig"},
		{"0.3 create without config", "POST", "/v1/tasks/t1/pushNotificationConfigs", `{"parent":"tasks/t1"}`, CodeInvalidParams, "pushNotificationConfig"},
		{"0.3 create with a null config", "POST", "/v1/tasks/t1/pushNotificationConfigs", `{"config":{"pushNotificationConfig":null}}`, CodeInvalidParams, "pushNotificationConfig"},
		{"0.3 create with a string config", "POST", "/v1/tasks/t1/pushNotificationConfigs", `{"pushNotificationConfig":"x"}`, CodeInvalidParams, "pushNotificationConfig"},
		{"0.3 create with empty schemes", "POST", "/v1/tasks/t1/pushNotificationConfigs", `{"config":{"pushNotificationConfig":{"url":"https://h/","authentication":{"schemes":[]}}}}`, CodeInvalidParams, "pushNotificationConfig.authentication.schemes"},
	} {
		got, e := restCall(t, tc.method, tc.target, tc.body)
		if e == nil {
			t.Errorf("%s: no error, got %#v", tc.name, got)
			continue
		}
		if got != nil {
			t.Errorf("%s: value %#v with the error", tc.name, got)
		}
		if e.Code != tc.code || violationField(e) != tc.field {
			t.Errorf("%s: got %d %q (%s), want %d %q", tc.name, e.Code, violationField(e), e.Message, tc.code, tc.field)
		}
	}
	if _, e := DecodeRESTRequest(RESTRoute{}, nil, nil); e == nil || e.Code != CodeInternal {
		t.Errorf("zero route: %v", e)
	}
}

func TestRESTContentTypeOK(t *testing.T) {
	for ct, want := range map[string]bool{
		"":                                     true,
		"  ":                                   true,
		"application/json":                     true,
		"Application/JSON":                     true,
		"application/json; charset=utf-8":      true,
		"application/json;charset=UTF-8":       true,
		"application/a2a+json":                 true,
		"application/a2a+json; charset=utf-8":  true,
		"application/a2a+json; version=1.0":    true,
		"application/json; charset=iso-8859-1": false,
		"text/plain":                           false,
		"text/json":                            false,
		"application/problem+json":             false,
		"application/x-www-form-urlencoded":    false,
		"multipart/form-data; boundary=x":      false,
		"application/json; charset":            false,
		"application/":                         false,
	} {
		if got := RESTContentTypeOK(ct); got != want {
			t.Errorf("%q: got %v, want %v", ct, got, want)
		}
	}
}

type restErrorJSON struct {
	Error struct {
		Code    int               `json:"code"`
		Status  string            `json:"status"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details"`
	} `json:"error"`
}

func TestEncodeRESTError(t *testing.T) {
	for _, tc := range []struct {
		e      *Error
		status int
		name   string
		reason string
	}{
		{ParseError(""), 400, "INVALID_ARGUMENT", "PARSE_ERROR"},
		{InvalidRequest(""), 400, "INVALID_ARGUMENT", "INVALID_REQUEST"},
		{MethodNotFound("x"), 404, "NOT_FOUND", "METHOD_NOT_FOUND"},
		{InvalidParams("bad"), 400, "INVALID_ARGUMENT", "INVALID_PARAMS"},
		{InternalError(""), 500, "INTERNAL", "INTERNAL_ERROR"},
		{TaskNotFound("t1"), 404, "NOT_FOUND", "TASK_NOT_FOUND"},
		{TaskNotCancelable("t1", StateCompleted), 409, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE"},
		{PushNotSupported(), 400, "UNIMPLEMENTED", "PUSH_NOTIFICATION_NOT_SUPPORTED"},
		{UnsupportedOperation(""), 400, "UNIMPLEMENTED", "UNSUPPORTED_OPERATION"},
		{ContentTypeNotSupported("text/plain"), 415, "INVALID_ARGUMENT", "CONTENT_TYPE_NOT_SUPPORTED"},
		{InvalidAgentResponse(""), 502, "INTERNAL", "INVALID_AGENT_RESPONSE"},
		{ExtendedCardNotConfigured(), 400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED"},
		{ExtensionSupportRequired("urn:x"), 400, "FAILED_PRECONDITION", "EXTENSION_SUPPORT_REQUIRED"},
		{VersionNotSupported("99.0"), 400, "UNIMPLEMENTED", "VERSION_NOT_SUPPORTED"},
		{Unauthenticated(""), 401, "UNAUTHENTICATED", "UNAUTHENTICATED"},
		{PermissionDenied(""), 403, "PERMISSION_DENIED", "UNAUTHORIZED"},
		{Unavailable("state", time.Second), 503, "UNAVAILABLE", "INTERNAL_ERROR"},
		{nil, 500, "INTERNAL", "INTERNAL_ERROR"},
		{&Error{Code: -32050, Message: "odd"}, 500, "INTERNAL", "INTERNAL_ERROR"},
		{&Error{Code: CodeTaskNotFound, Message: "raw", Data: map[string]any{"x": 1}}, 404, "NOT_FOUND", "TASK_NOT_FOUND"},
	} {
		label := fmt.Sprintf("%v", tc.e)
		status, body := EncodeRESTError(tc.e)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d", label, status, tc.status)
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil || len(top) != 1 || top["error"] == nil {
			t.Errorf("%s: body %s", label, body)
			continue
		}
		var got restErrorJSON
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		g := got.Error
		if g.Code != tc.status || g.Status != tc.name || g.Message == "" || len(g.Details) == 0 {
			t.Errorf("%s: %s", label, body)
			continue
		}
		var info ErrorInfo
		if err := json.Unmarshal(g.Details[0], &info); err != nil || info.Type != TypeErrorInfo || info.Reason != tc.reason || info.Domain != ErrorDomain {
			t.Errorf("%s: first detail %s", label, g.Details[0])
		}
		if tc.e != nil && tc.e.Message != "" && g.Message != tc.e.Message {
			t.Errorf("%s: message %q", label, g.Message)
		}
	}

	// Metadata and field violations survive.
	_, body := EncodeRESTError(TaskNotFound("t<1>"))
	if !strings.Contains(string(body), `"metadata":{"taskId":"t<1>"}`) {
		t.Errorf("task metadata: %s", body)
	}
	_, body = EncodeRESTError(fieldError("message.parts", "is required"))
	var got restErrorJSON
	if err := json.Unmarshal(body, &got); err != nil || len(got.Error.Details) != 2 {
		t.Fatalf("violations: %s", body)
	}
	var br BadRequest
	if err := json.Unmarshal(got.Error.Details[1], &br); err != nil || br.Type != TypeBadRequest ||
		len(br.FieldViolations) != 1 || br.FieldViolations[0].Field != "message.parts" {
		t.Errorf("bad request detail: %s", got.Error.Details[1])
	}
	// A detail that cannot be marshalled is dropped, not the error.
	e := TaskNotFound("t")
	e.Data = append(e.Data.([]any), map[string]any{"f": func() {}})
	if status, body := EncodeRESTError(e); status != 404 || !json.Valid(body) || !strings.Contains(string(body), "TASK_NOT_FOUND") {
		t.Errorf("unmarshalable detail: %d %s", status, body)
	}
}

func TestEncodeRESTUnmatched(t *testing.T) {
	r, ok := MatchREST("DELETE", "/tasks/t1")
	if ok {
		t.Fatal("matched")
	}
	status, body := EncodeRESTUnmatched("DELETE", "/tasks/t1", r)
	var got restErrorJSON
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if status != 405 || got.Error.Code != 405 || got.Error.Status != "UNIMPLEMENTED" || !strings.Contains(got.Error.Message, "use GET") {
		t.Errorf("405: %d %s", status, body)
	}
	r, _ = MatchREST("GET", "/nope")
	status, body = EncodeRESTUnmatched("GET", "/nope", r)
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if status != 404 || got.Error.Code != 404 || got.Error.Status != "NOT_FOUND" || !strings.Contains(string(body), "METHOD_NOT_FOUND") {
		t.Errorf("404: %d %s", status, body)
	}
}

// restServer answers every request with the body its handler picks, as a
// server using this package would, and records what it decoded.
type restServer struct {
	*httptest.Server
	mu    sync.Mutex
	calls []restCapture
}

type restCapture struct {
	route  RESTRoute
	params any
	err    *Error
	ctype  string
}

// newRESTServer mounts the binding at /rest; reply picks the error to send.
func newRESTServer(t *testing.T, reply func(RESTRoute) *Error) *restServer {
	s := &restServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		path := strings.TrimPrefix(req.URL.EscapedPath(), "/rest")
		body, _ := io.ReadAll(req.Body)
		w.Header().Set("Content-Type", RESTResponseContentType)
		route, ok := MatchREST(req.Method, path)
		if !ok {
			status, b := EncodeRESTUnmatched(req.Method, path, route)
			if status == http.StatusMethodNotAllowed {
				w.Header().Set("Allow", strings.Join(route.Allow, ", "))
			}
			w.WriteHeader(status)
			_, _ = w.Write(b)
			return
		}
		c := restCapture{route: route, ctype: req.Header.Get("Content-Type")}
		if !RESTContentTypeOK(c.ctype) {
			c.err = ContentTypeNotSupported(c.ctype)
		} else {
			c.params, c.err = DecodeRESTRequest(route, req.URL.Query(), body)
		}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		s.mu.Unlock()
		e := c.err
		if e == nil {
			e = reply(route)
		}
		status, b := EncodeRESTError(e)
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *restServer) last(t *testing.T) restCapture {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) == 0 {
		t.Fatal("no request reached the server")
	}
	return s.calls[len(s.calls)-1]
}

// TestRESTErrorsInA2AGo decodes EncodeRESTError output with a2a-go v2.4.0's
// own REST client, which maps the ErrorInfo reason back to its sentinels.
func TestRESTErrorsInA2AGo(t *testing.T) {
	cases := []struct {
		e    *Error
		want error
	}{
		{ParseError(""), sdk.ErrParseError},
		{InvalidRequest(""), sdk.ErrInvalidRequest},
		{MethodNotFound("x"), sdk.ErrMethodNotFound},
		{InvalidParams("", FieldViolation{Field: "id", Description: "is required"}), sdk.ErrInvalidParams},
		{InternalError("boom"), sdk.ErrInternalError},
		{TaskNotFound("t1"), sdk.ErrTaskNotFound},
		{TaskNotCancelable("t1", StateCompleted), sdk.ErrTaskNotCancelable},
		{PushNotSupported(), sdk.ErrPushNotificationNotSupported},
		{UnsupportedOperation("no"), sdk.ErrUnsupportedOperation},
		{ContentTypeNotSupported("text/x"), sdk.ErrUnsupportedContentType},
		{InvalidAgentResponse(""), sdk.ErrInvalidAgentResponse},
		{ExtendedCardNotConfigured(), sdk.ErrExtendedCardNotConfigured},
		{ExtensionSupportRequired("urn:x"), sdk.ErrExtensionSupportRequired},
		{VersionNotSupported("9.9"), sdk.ErrVersionNotSupported},
		{Unauthenticated(""), sdk.ErrUnauthenticated},
		{PermissionDenied(""), sdk.ErrUnauthorized},
	}
	var current *Error
	srv := newRESTServer(t, func(RESTRoute) *Error { return current })
	base, _ := url.Parse(srv.URL + "/rest")
	tr := a2aclient.NewRESTTransport(base, srv.Client())
	ctx := context.Background()
	for _, tc := range cases {
		current = tc.e
		_, err := tr.GetTask(ctx, nil, &sdk.GetTaskRequest{ID: "t1"})
		if !errors.Is(err, tc.want) {
			t.Errorf("%d: a2a-go read %v, want %v", tc.e.Code, err, tc.want)
			continue
		}
		if err.Error() != tc.e.Message {
			t.Errorf("%d: message %q, want %q", tc.e.Code, err.Error(), tc.e.Message)
		}
	}
	// ErrorInfo metadata reaches the a2a-go error.
	current = TaskNotFound("t1")
	_, err := tr.GetTask(ctx, nil, &sdk.GetTaskRequest{ID: "t1"})
	var ae *sdk.Error
	if !errors.As(err, &ae) {
		t.Fatalf("not an *a2a.Error: %v", err)
	}
	if meta, _ := ae.ErrorInfo().Value["metadata"].(map[string]string); meta["taskId"] != "t1" {
		t.Errorf("metadata: %+v", ae.ErrorInfo().Value)
	}
	// So does a 405 from EncodeRESTUnmatched: a2a-go sends DELETE only to
	// config paths, so provoke one on a path that exists with another method.
	req, _ := http.NewRequest("PUT", srv.URL+"/rest/tasks/t1", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" || !strings.Contains(string(b), `"reason":"METHOD_NOT_FOUND"`) {
		t.Errorf("405: %d %q %s", resp.StatusCode, resp.Header.Get("Allow"), b)
	}
}

// TestRESTRequestsOfA2AGo routes and decodes the requests a2a-go v2.4.0's
// 1.0 REST client sends for every operation.
func TestRESTRequestsOfA2AGo(t *testing.T) {
	srv := newRESTServer(t, func(r RESTRoute) *Error { return TaskNotFound(r.TaskID) })
	base, _ := url.Parse(srv.URL + "/rest")
	tr := a2aclient.NewRESTTransport(base, srv.Client())
	ctx := context.Background()
	two := 2
	after := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	working := StateWorking
	hi := &sdk.SendMessageRequest{Tenant: "acme", Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("hi")),
		Config: &sdk.SendMessageConfig{ReturnImmediately: true, HistoryLength: &two,
			PushConfig: &sdk.PushConfig{URL: "https://h/x", Auth: &sdk.PushAuthInfo{Scheme: "Bearer", Credentials: "s"}}}}
	drain := func(seq func(func(sdk.Event, error) bool)) error {
		var last error
		seq(func(_ sdk.Event, err error) bool { last = err; return err == nil })
		return last
	}
	for _, tc := range []struct {
		name string
		call func() error
		op   Operation
		want any
	}{
		{"send", func() error { _, err := tr.SendMessage(ctx, nil, hi); return err }, OpSendMessage, nil},
		{"stream", func() error { return drain(tr.SendStreamingMessage(ctx, nil, hi)) }, OpSendStreamingMessage, nil},
		{"get", func() error {
			_, err := tr.GetTask(ctx, nil, &sdk.GetTaskRequest{Tenant: "acme", ID: "t 1:x", HistoryLength: &two})
			return err
		}, OpGetTask, &GetTaskParams{ID: "t 1:x", HistoryLength: &two, Tenant: "acme"}},
		{"list", func() error {
			_, err := tr.ListTasks(ctx, nil, &sdk.ListTasksRequest{ContextID: "c1", Status: sdk.TaskStateWorking, PageSize: 7,
				PageToken: "p", HistoryLength: &two, StatusTimestampAfter: &after, IncludeArtifacts: true})
			return err
		}, OpListTasks, &ListTasksParams{ContextID: "c1", Status: &working, PageSize: 7, PageToken: "p", HistoryLength: &two,
			StatusTimestampAfter: &after, IncludeArtifacts: true}},
		{"cancel", func() error {
			_, err := tr.CancelTask(ctx, nil, &sdk.CancelTaskRequest{ID: "t1"})
			return err
		}, OpCancelTask, &CancelTaskParams{ID: "t1"}},
		{"subscribe", func() error {
			return drain(tr.SubscribeToTask(ctx, nil, &sdk.SubscribeToTaskRequest{Tenant: "acme", ID: "t1"}))
		}, OpSubscribeToTask, &CancelTaskParams{ID: "t1", Tenant: "acme"}},
		{"create config", func() error {
			_, err := tr.CreateTaskPushConfig(ctx, nil, &sdk.PushConfig{TaskID: "t1", ID: "c1", URL: "https://h/x", Token: "k",
				Auth: &sdk.PushAuthInfo{Scheme: "Bearer", Credentials: "s"}})
			return err
		}, OpCreatePushConfig, &CreatePushConfigParams{Config: PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x", Token: "k",
			Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}}}},
		{"get config", func() error {
			_, err := tr.GetTaskPushConfig(ctx, nil, &sdk.GetTaskPushConfigRequest{Tenant: "acme", TaskID: "t1", ID: "c1"})
			return err
		}, OpGetPushConfig, &GetPushConfigParams{TaskID: "t1", ID: "c1", Tenant: "acme"}},
		{"list configs", func() error {
			_, err := tr.ListTaskPushConfigs(ctx, nil, &sdk.ListTaskPushConfigRequest{TaskID: "t1"})
			return err
		}, OpListPushConfigs, &ListPushConfigsParams{TaskID: "t1", PageSize: DefaultPageSize}},
		{"delete config", func() error {
			return tr.DeleteTaskPushConfig(ctx, nil, &sdk.DeleteTaskPushConfigRequest{TaskID: "t1", ID: "c1"})
		}, OpDeletePushConfig, &DeletePushConfigParams{TaskID: "t1", ID: "c1"}},
		{"extended card", func() error {
			_, err := tr.GetExtendedAgentCard(ctx, nil, &sdk.GetExtendedAgentCardRequest{})
			return err
		}, OpGetExtendedAgentCard, nil},
	} {
		if err := tc.call(); !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("%s: client error %v, want task not found", tc.name, err)
			continue
		}
		c := srv.last(t)
		if c.err != nil || c.route.Op != tc.op || c.route.Version != V10 {
			t.Errorf("%s: %+v %v", tc.name, c.route, c.err)
			continue
		}
		if lp, ok := c.params.(*ListTasksParams); ok && lp.StatusTimestampAfter != nil && lp.StatusTimestampAfter.Equal(after) {
			lp.StatusTimestampAfter = &after
		}
		switch tc.op {
		case OpSendMessage, OpSendStreamingMessage:
			sp, _ := c.params.(*SendParams)
			if sp == nil || sp.Tenant != "acme" || sp.Message.Role != RoleUser || joinText(sp.Message.Parts, "") != "hi" ||
				!sp.Configuration.ReturnImmediately || sp.Configuration.HistoryLength == nil || *sp.Configuration.HistoryLength != 2 {
				t.Errorf("%s: %+v", tc.name, sp)
				continue
			}
			pc, e := DecodeInlinePushConfig(sp.Configuration.PushConfig, V10)
			if e != nil || pc == nil || pc.URL != "https://h/x" || pc.Auth == nil || pc.Auth.Scheme != "Bearer" {
				t.Errorf("%s inline push: %+v %v", tc.name, pc, e)
			}
		default:
			if !reflect.DeepEqual(c.params, tc.want) {
				t.Errorf("%s:\n got %#v\nwant %#v", tc.name, c.params, tc.want)
			}
		}
	}
}

// TestRESTRequestsOfA2AGoV03 does the same for a2a-go's 0.3 REST client
// (a2av0), whose bodies are ProtoJSON of the 0.3 proto.
func TestRESTRequestsOfA2AGoV03(t *testing.T) {
	srv := newRESTServer(t, func(r RESTRoute) *Error { return TaskNotFound(r.TaskID) })
	tr, err := a2av0.NewRESTTransport(a2av0.RESTTransportConfig{URL: srv.URL + "/rest", Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	two := 2
	canceled := StateCanceled
	send := &sdk.SendMessageRequest{
		Message: sdk.NewMessage(sdk.MessageRoleUser,
			sdk.NewTextPart("hi"),
			sdk.NewRawPart([]byte{0, 1, 2, 0xff}),
			sdk.NewFileURLPart("https://e/x.png", "image/png"),
			sdk.NewDataPart(map[string]any{"k": "v"})),
		Config: &sdk.SendMessageConfig{HistoryLength: &two, PushConfig: &sdk.PushConfig{URL: "https://h/x"}},
	}
	for _, tc := range []struct {
		name string
		call func() error
		op   Operation
		want any
	}{
		{"send", func() error { _, err := tr.SendMessage(ctx, nil, send); return err }, OpSendMessage, nil},
		{"get", func() error {
			_, err := tr.GetTask(ctx, nil, &sdk.GetTaskRequest{ID: "t1", HistoryLength: &two})
			return err
		}, OpGetTask, &GetTaskParams{ID: "t1", HistoryLength: &two}},
		{"list", func() error {
			_, err := tr.ListTasks(ctx, nil, &sdk.ListTasksRequest{Status: sdk.TaskStateCanceled, PageSize: 3})
			return err
		}, OpListTasks, &ListTasksParams{Status: &canceled, PageSize: 3}},
		{"cancel", func() error { _, err := tr.CancelTask(ctx, nil, &sdk.CancelTaskRequest{ID: "t1"}); return err },
			OpCancelTask, &CancelTaskParams{ID: "t1"}},
		{"create config", func() error {
			_, err := tr.CreateTaskPushConfig(ctx, nil, &sdk.PushConfig{TaskID: "t1", ID: "c1", URL: "https://h/x",
				Auth: &sdk.PushAuthInfo{Scheme: "Bearer", Credentials: "s"}})
			return err
		}, OpCreatePushConfig, &CreatePushConfigParams{Config: PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x",
			Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}}}},
		{"get config", func() error {
			_, err := tr.GetTaskPushConfig(ctx, nil, &sdk.GetTaskPushConfigRequest{TaskID: "t1", ID: "c1"})
			return err
		}, OpGetPushConfig, &GetPushConfigParams{TaskID: "t1", ID: "c1"}},
		{"list configs", func() error {
			_, err := tr.ListTaskPushConfigs(ctx, nil, &sdk.ListTaskPushConfigRequest{TaskID: "t1", PageSize: 4})
			return err
		}, OpListPushConfigs, &ListPushConfigsParams{TaskID: "t1", PageSize: 4}},
		{"delete config", func() error {
			return tr.DeleteTaskPushConfig(ctx, nil, &sdk.DeleteTaskPushConfigRequest{TaskID: "t1", ID: "c1"})
		}, OpDeletePushConfig, &DeletePushConfigParams{TaskID: "t1", ID: "c1"}},
		{"card", func() error {
			_, err := tr.GetExtendedAgentCard(ctx, nil, &sdk.GetExtendedAgentCardRequest{})
			return err
		},
			OpGetExtendedAgentCard, nil},
	} {
		if err := tc.call(); !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("%s: client error %v, want task not found", tc.name, err)
			continue
		}
		c := srv.last(t)
		if c.err != nil || c.route.Op != tc.op || c.route.Version != V03 {
			t.Errorf("%s: %+v %v", tc.name, c.route, c.err)
			continue
		}
		if tc.op != OpSendMessage {
			if !reflect.DeepEqual(c.params, tc.want) {
				t.Errorf("%s:\n got %#v\nwant %#v", tc.name, c.params, tc.want)
			}
			continue
		}
		sp, _ := c.params.(*SendParams)
		want := []Part{TextPart("hi"), RawPart([]byte{0, 1, 2, 0xff}, "", ""), URLPart("https://e/x.png", "image/png", ""),
			DataPart(json.RawMessage(`{"k":"v"}`))}
		if sp == nil || sp.Message.Role != RoleUser || !reflect.DeepEqual(sp.Message.Parts, want) ||
			sp.Configuration.ReturnImmediately || sp.Configuration.HistoryLength == nil || *sp.Configuration.HistoryLength != 2 {
			t.Errorf("send: %+v", sp)
			continue
		}
		if pc, e := DecodeInlinePushConfig(sp.Configuration.PushConfig, V03); e != nil || pc == nil || pc.URL != "https://h/x" {
			t.Errorf("send inline push: %+v %v", pc, e)
		}
	}

	// The subscribe stream, and a body straight from a2a-go's encoder.
	it := tr.SubscribeToTask(ctx, nil, &sdk.SubscribeToTaskRequest{ID: "t1"})
	it(func(_ sdk.Event, err error) bool {
		if !errors.Is(err, sdk.ErrTaskNotFound) {
			t.Errorf("subscribe: %v", err)
		}
		return false
	})
	if c := srv.last(t); c.route.Op != OpSubscribeToTask || c.route.Method != "GET" || !reflect.DeepEqual(c.params, &CancelTaskParams{ID: "t1"}) {
		t.Errorf("subscribe: %+v", c)
	}
	body, err := pbjson.ToProtoSendMessageRequest(send)
	if err != nil {
		t.Fatal(err)
	}
	if _, e := restCall(t, "POST", "/v1/message:send", string(body)); e != nil {
		t.Errorf("pbjson body: %v\n%s", e, body)
	}
}

// FuzzREST feeds arbitrary requests through the matcher, the decoders and
// the error encoder: none may panic, a value and an error never come
// together, and every error body is valid JSON.
func FuzzREST(f *testing.F) {
	for _, s := range [][4]string{
		{"POST", "/message:send", "", `{"message":{"role":"ROLE_USER","parts":[{"text":"hi"}]}}`},
		{"POST", "/v1/message:stream", "", `{"message":{"role":"ROLE_USER","content":[{"file":{"fileWithBytes":"ZUhsNg=="}},{"data":{"data":1}}]},"configuration":{"pushNotification":{"url":"https://h/"}}}`},
		{"GET", "/acme/tasks", "status=TASK_STATE_CANCELLED&pageSize=3,3&lastUpdatedAfter=2026-01-01T00:00:00 01:00", ""},
		{"POST", "/tasks/a%2F:cancel", "", `{"metadata":{"a":[1]}}`},
		{"POST", "/v1/tasks/t/pushNotificationConfigs", "", `{"configId":"c","config":{"pushNotificationConfig":{"url":"https://h/","authentication":{"schemes":["Bearer"]}}}}`},
		{"GET", "/tasks/t/pushNotificationConfigs", "pageSize=-1", ""},
		{"DELETE", "/tasks/t/pushNotificationConfigs/%zz", "", ""},
	} {
		f.Add(s[0], s[1], s[2], []byte(s[3]))
	}
	f.Fuzz(func(t *testing.T, method, path, rawQuery string, body []byte) {
		r, ok := MatchREST(method, path)
		if !ok {
			if status, b := EncodeRESTUnmatched(method, path, r); (status != 404 && status != 405) || !json.Valid(b) {
				t.Fatalf("unmatched: %d %s", status, b)
			}
			return
		}
		q, _ := url.ParseQuery(rawQuery)
		v, e := DecodeRESTRequest(r, q, body)
		if e != nil {
			if v != nil {
				t.Fatalf("value %#v with error %v", v, e)
			}
			if _, b := EncodeRESTError(e); !json.Valid(b) {
				t.Fatalf("error body %s", b)
			}
		}
		if sp, ok := v.(*SendParams); ok {
			_, _ = DecodeInlinePushConfig(sp.Configuration.PushConfig, r.Version)
		}
	})
}
