package wire

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

const (
	golden10 = `{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_COMPLETED","message":{"messageId":"m2","role":"ROLE_AGENT","parts":[{"text":"done"}]},"timestamp":"2026-03-12T09:04:05.123Z"},` +
		`"artifacts":[{"artifactId":"a1","name":"result","parts":[{"text":"hi <b>"},{"data":{"k":1}},{"data":[1,2]},{"raw":"eHl6","mediaType":"text/plain","filename":"x.txt"},{"url":"https://example.com/o.txt","mediaType":"text/plain"}]}],` +
		`"history":[{"messageId":"m1","contextId":"c1","taskId":"t1","role":"ROLE_USER","parts":[{"text":"hello"}]}],"metadata":{"chio":{"receiptId":"r1"}}}`
	golden03 = `{"kind":"task","id":"t1","contextId":"c1","status":{"state":"completed","message":{"kind":"message","messageId":"m2","role":"agent","parts":[{"kind":"text","text":"done"}]},"timestamp":"2026-03-12T09:04:05.123Z"},` +
		`"artifacts":[{"artifactId":"a1","name":"result","parts":[{"kind":"text","text":"hi <b>"},{"kind":"data","data":{"k":1}},{"kind":"data","data":{"value":[1,2]},"metadata":{"data_part_compat":true}},{"kind":"file","file":{"bytes":"eHl6","mimeType":"text/plain","name":"x.txt"}},{"kind":"file","file":{"uri":"https://example.com/o.txt","mimeType":"text/plain"}}]}],` +
		`"history":[{"kind":"message","messageId":"m1","contextId":"c1","taskId":"t1","role":"user","parts":[{"kind":"text","text":"hello"}]}],"metadata":{"chio":{"receiptId":"r1"}}}`
	goldenHello = `{"id":"t1","contextId":"c1","status":"completed","message":{"messageId":"m2","role":"agent","parts":[{"type":"text","text":"done"}]},"timestamp":"2026-03-12T09:04:05.123Z",` +
		`"artifacts":[{"artifactId":"a1","name":"result","parts":[{"type":"text","text":"hi <b>"},{"type":"data","data":{"k":1}},{"type":"data","data":[1,2]},{"type":"file","file":{"bytes":"eHl6","mimeType":"text/plain","name":"x.txt"}},{"type":"file","file":{"uri":"https://example.com/o.txt","mimeType":"text/plain"}}]}],` +
		`"history":[{"messageId":"m1","contextId":"c1","taskId":"t1","role":"user","parts":[{"type":"text","text":"hello"}]}],"metadata":{"chio":{"receiptId":"r1"}}}`
)

func TestEncodeTaskGolden(t *testing.T) {
	for _, tc := range []struct {
		v    Version
		want string
	}{{V10, golden10}, {V03, golden03}, {VHelloStdio, goldenHello}} {
		got, err := EncodeTask(tc.v, sampleTask())
		if err != nil {
			t.Fatalf("%s: %v", tc.v, err)
		}
		if string(got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.v, got, tc.want)
		}
	}
}

// TestRoundTrip decodes each dialect's encoding and re-encodes it to the
// same bytes, in every dialect.
func TestRoundTrip(t *testing.T) {
	for _, from := range []Version{V10, V03, VHelloStdio} {
		enc, err := EncodeTask(from, sampleTask())
		if err != nil {
			t.Fatal(err)
		}
		task, e := DecodeTask(enc)
		if e != nil {
			t.Fatalf("decode %s: %v", from, e)
		}
		again, err := EncodeTask(from, task)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(enc) {
			t.Errorf("%s round trip:\n got %s\nwant %s", from, again, enc)
		}
		for _, to := range []Version{V10, V03} {
			want, _ := EncodeTask(to, sampleTask())
			got, _ := EncodeTask(to, task)
			if string(got) != string(want) {
				t.Errorf("%s→%s:\n got %s\nwant %s", from, to, got, want)
			}
		}
	}
}

func TestEncodeSendResult(t *testing.T) {
	msg := &Message{MessageID: "m", Role: RoleAgent, Parts: []Part{TextPart("x")}}
	task := &Task{ID: "t", ContextID: "c", Status: TaskStatus{State: StateInputRequired}}
	for _, tc := range []struct {
		v    Version
		task *Task
		msg  *Message
		want string
	}{
		{V10, task, nil, `{"task":{"id":"t","contextId":"c","status":{"state":"TASK_STATE_INPUT_REQUIRED"}}}`},
		{V10, nil, msg, `{"message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"x"}]}}`},
		{V03, task, nil, `{"kind":"task","id":"t","contextId":"c","status":{"state":"input-required"}}`},
		{V03, nil, msg, `{"kind":"message","messageId":"m","role":"agent","parts":[{"kind":"text","text":"x"}]}`},
		{VHelloStdio, task, nil, `{"id":"t","contextId":"c","status":"input-required"}`},
		{VHelloStdio, nil, msg, `{"messageId":"m","role":"agent","parts":[{"type":"text","text":"x"}]}`},
	} {
		got, err := EncodeSendResult(tc.v, tc.task, tc.msg)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: got %s, %v; want %s", tc.v, got, err, tc.want)
		}
	}
	if _, err := EncodeSendResult(V10, nil, nil); !errors.Is(err, errInvalid) {
		t.Errorf("neither task nor message: %v", err)
	}
	if _, err := EncodeSendResult(V10, task, msg); !errors.Is(err, errInvalid) {
		t.Errorf("both task and message: %v", err)
	}
}

// TestHelloProfile pins the shapes the hello-a2a smoke script asserts on.
func TestHelloProfile(t *testing.T) {
	working := &Task{ID: "a2a-task-2", Status: TaskStatus{State: StateWorking,
		Message: &Message{Role: RoleAgent, Parts: []Part{TextPart("Task accepted for authoritative deferred execution.")}}},
		Metadata: map[string]any{"chio": map[string]any{"receiptId": nil, "receiptPending": true}}}
	got, err := EncodeTask(VHelloStdio, working)
	want := `{"id":"a2a-task-2","status":"working","statusMessage":"Task accepted for authoritative deferred execution.","metadata":{"chio":{"receiptId":null,"receiptPending":true}}}`
	if err != nil || string(got) != want {
		t.Errorf("working:\n got %s, %v\nwant %s", got, err, want)
	}
	done := &Task{ID: "a2a-task-2", Status: TaskStatus{State: StateCompleted,
		Message: &Message{Role: RoleAgent, Parts: []Part{TextPart("hello from a2a, world"), TextPart("stream complete")}}}}
	got, err = EncodeTask(VHelloStdio, done)
	want = `{"id":"a2a-task-2","status":"completed","message":{"role":"agent","parts":[{"type":"text","text":"hello from a2a, world"},{"type":"text","text":"stream complete"}]}}`
	if err != nil || string(got) != want {
		t.Errorf("completed:\n got %s, %v\nwant %s", got, err, want)
	}
}

func TestEncodeListTasksResult(t *testing.T) {
	for _, tc := range []struct {
		v    Version
		r    *ListTasksResult
		want string
	}{
		{V10, nil, `{"tasks":[],"nextPageToken":"","pageSize":0,"totalSize":0}`},
		{V10, &ListTasksResult{PageSize: 50}, `{"tasks":[],"nextPageToken":"","pageSize":50,"totalSize":0}`},
		{V03, &ListTasksResult{Tasks: []Task{{ID: "t", ContextID: "c", Status: TaskStatus{State: StateCanceled}}}, NextPageToken: "n", PageSize: 1, TotalSize: 2},
			`{"tasks":[{"kind":"task","id":"t","contextId":"c","status":{"state":"canceled"}}],"nextPageToken":"n","pageSize":1,"totalSize":2}`},
		{V10, &ListTasksResult{Tasks: []Task{{ID: "t", Status: TaskStatus{State: StateUnknown}}}},
			`{"tasks":[{"id":"t","status":{"state":"TASK_STATE_UNSPECIFIED"}}],"nextPageToken":"","pageSize":0,"totalSize":0}`},
	} {
		got, err := EncodeListTasksResult(tc.v, tc.r)
		if err != nil || string(got) != tc.want {
			t.Errorf("got %s, %v; want %s", got, err, tc.want)
		}
	}
}

func TestEncodeRequiredArraysNeverNull(t *testing.T) {
	// A message and an artifact without parts still emit "parts":[].
	task := &Task{ID: "t", Status: TaskStatus{State: StateWorking, Message: &Message{Role: RoleAgent}},
		Artifacts: []Artifact{{ArtifactID: "a"}}}
	for _, v := range []Version{V10, V03, VHelloStdio} {
		b, err := EncodeTask(v, task)
		if err != nil {
			t.Fatal(err)
		}
		assertNoNull(t, b)
	}
}

func TestEncodeTimestamp(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("Y", -7*3600))
	if got := formatTime(ts); got != "2026-01-02T10:04:05.000Z" {
		t.Errorf("got %s", got)
	}
}

func TestEncodeInvalidModel(t *testing.T) {
	for name, task := range map[string]*Task{
		"nil":          nil,
		"bad state":    {ID: "t", Status: TaskStatus{State: "done"}},
		"empty part":   {ID: "t", Status: TaskStatus{State: StateWorking}, Artifacts: []Artifact{{Parts: []Part{{}}}}},
		"two contents": {ID: "t", Status: TaskStatus{State: StateWorking}, Artifacts: []Artifact{{Parts: []Part{{Text: strp("a"), URL: "u"}}}}},
		"bad data":     {ID: "t", Status: TaskStatus{State: StateWorking}, Artifacts: []Artifact{{Parts: []Part{{Data: json.RawMessage("{")}}}}},
		"bad role":     {ID: "t", Status: TaskStatus{State: StateWorking, Message: &Message{Role: "bot"}}},
		"bad metadata": {ID: "t", Status: TaskStatus{State: StateWorking}, Metadata: map[string]any{"f": func() {}}},
	} {
		for _, v := range []Version{V10, V03, VHelloStdio} {
			if _, err := EncodeTask(v, task); err == nil {
				t.Errorf("%s/%s: no error", name, v)
			}
		}
	}
	if _, err := EncodeTask("2.0", sampleTask()); !errors.Is(err, errInvalid) {
		t.Errorf("unknown dialect: %v", err)
	}
}

// assertNoNull fails if any value in the JSON document b is null.
func assertNoNull(t *testing.T, b []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case nil:
			t.Errorf("null at %s in %s", path, b)
		case map[string]any:
			for k, c := range x {
				walk(path+"."+k, c)
			}
		case []any:
			for _, c := range x {
				walk(path+"[]", c)
			}
		}
	}
	walk("$", v)
}
