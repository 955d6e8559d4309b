package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestDecodePartForms(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Part
	}{
		{"1.0 text", `{"text":"hi"}`, TextPart("hi")},
		{"1.0 text with meta", `{"text":"hi","mediaType":"text/plain","metadata":{"a":"b"}}`,
			Part{Text: strp("hi"), MediaType: "text/plain", Metadata: map[string]any{"a": "b"}}},
		{"1.0 empty text", `{"text":""}`, TextPart("")},
		{"1.0 data object", `{"data":{"k":1}}`, DataPart(json.RawMessage(`{"k":1}`))},
		{"1.0 data array", `{"data":[1]}`, DataPart(json.RawMessage(`[1]`))},
		{"1.0 data string", `{"data":"s"}`, DataPart(json.RawMessage(`"s"`))},
		{"1.0 data null", `{"data":null}`, DataPart(json.RawMessage(`null`))},
		{"1.0 raw", `{"raw":"eHl6","filename":"x.txt","mediaType":"text/plain"}`, RawPart([]byte("xyz"), "text/plain", "x.txt")},
		{"1.0 raw url-safe unpadded", `{"raw":"-_8"}`, RawPart([]byte{0xfb, 0xff}, "", "")},
		{"1.0 raw empty", `{"raw":""}`, RawPart([]byte{}, "", "")},
		{"1.0 url", `{"url":"https://e/x","mediaType":"image/png"}`, URLPart("https://e/x", "image/png", "")},
		{"1.0 null members ignored", `{"text":"a","raw":null,"url":null}`, TextPart("a")},
		{"0.3 text", `{"kind":"text","text":"hi"}`, TextPart("hi")},
		{"0.3 data", `{"kind":"data","data":{"k":true}}`, DataPart(json.RawMessage(`{"k":true}`))},
		{"0.3 data compat", `{"kind":"data","data":{"value":[1]},"metadata":{"data_part_compat":true}}`, DataPart(json.RawMessage(`[1]`))},
		{"0.3 data compat keeps other meta", `{"kind":"data","data":{"value":2},"metadata":{"data_part_compat":true,"x":"y"}}`,
			Part{Data: json.RawMessage(`2`), Metadata: map[string]any{"x": "y"}}},
		{"0.3 file bytes", `{"kind":"file","file":{"bytes":"eHl6","mimeType":"text/plain","name":"x.txt"}}`, RawPart([]byte("xyz"), "text/plain", "x.txt")},
		{"0.3 file uri", `{"kind":"file","file":{"uri":"https://e/x"}}`, URLPart("https://e/x", "", "")},
		{"hello text", `{"type":"text","text":"world"}`, TextPart("world")},
		{"hello data", `{"type":"data","data":{"message":"m"}}`, DataPart(json.RawMessage(`{"message":"m"}`))},
		{"kind and type agree", `{"kind":"text","type":"text","text":"a"}`, TextPart("a")},
		{"unknown members ignored", `{"text":"a","x":{"y":[]}}`, TextPart("a")},
	} {
		got, e := DecodePart(json.RawMessage(tc.in), "p")
		if e != nil {
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestDecodePartErrors(t *testing.T) {
	for _, tc := range []struct{ in, field string }{
		{`"text"`, "p"},
		{`[]`, "p"},
		{`{}`, "p"},
		{`{"text":1}`, "p.text"},
		{`{"text":"a","url":"u"}`, "p"},
		{`{"text":"a","data":1}`, "p"},
		{`{"raw":"!!"}`, "p.raw"},
		{`{"raw":5}`, "p.raw"},
		{`{"url":""}`, "p.url"},
		{`{"mediaType":7,"text":"a"}`, "p.mediaType"},
		{`{"metadata":[],"text":"a"}`, "p.metadata"},
		{`{"kind":"text"}`, "p.text"},
		{`{"kind":"image","text":"a"}`, "p.kind"},
		{`{"type":"video"}`, "p.type"},
		{`{"kind":3}`, "p.kind"},
		{`{"kind":"text","type":"data","text":"a"}`, "p.kind"},
		{`{"kind":"data"}`, "p.data"},
		{`{"kind":"file"}`, "p.file"},
		{`{"kind":"file","file":"x"}`, "p.file"},
		{`{"kind":"file","file":{}}`, "p.file"},
		{`{"kind":"file","file":{"bytes":"eHl6","uri":"u"}}`, "p.file"},
		{`{"kind":"file","file":{"bytes":"%%"}}`, "p.file.bytes"},
		{`{"kind":"file","file":{"uri":""}}`, "p.file.uri"},
		{`{"kind":"file","file":{"uri":"u","mimeType":1}}`, "p.file.mimeType"},
	} {
		_, e := DecodePart(json.RawMessage(tc.in), "p")
		if e == nil {
			t.Errorf("%s: no error", tc.in)
			continue
		}
		if e.Code != CodeInvalidParams || violationField(e) != tc.field {
			t.Errorf("%s: got %d %q (%s), want -32602 %q", tc.in, e.Code, violationField(e), e.Message, tc.field)
		}
	}
}

func TestDecodeMessage(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Message
	}{
		{"1.0", `{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}],"contextId":"c","taskId":"t","extensions":["u"],"referenceTaskIds":["r"],"metadata":{"n":1}}`,
			Message{MessageID: "m1", ContextID: "c", TaskID: "t", Role: RoleUser, Parts: []Part{TextPart("hi")},
				Extensions: []string{"u"}, ReferenceTaskIDs: []string{"r"}, Metadata: map[string]any{"n": json.Number("1")}}},
		{"0.3", `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}`,
			Message{MessageID: "m1", Role: RoleUser, Parts: []Part{TextPart("hi")}}},
		{"hello", `{"role":"user","parts":[{"type":"text","text":"world"}]}`,
			Message{Role: RoleUser, Parts: []Part{TextPart("world")}}},
		{"agent", `{"role":"ROLE_AGENT","parts":[{"data":1}]}`,
			Message{Role: RoleAgent, Parts: []Part{DataPart(json.RawMessage("1"))}}},
		{"null optionals", `{"role":"agent","parts":[{"text":""}],"metadata":null,"contextId":null}`,
			Message{Role: RoleAgent, Parts: []Part{TextPart("")}}},
	} {
		got, e := DecodeMessage(json.RawMessage(tc.in))
		if e != nil {
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, *got, tc.want)
		}
	}
}

func TestDecodeMessageErrors(t *testing.T) {
	for _, tc := range []struct{ in, field string }{
		{`null`, "message"},
		{`"x"`, "message"},
		{`{"parts":[{"text":"a"}]}`, "message.role"},
		{`{"role":"ROLE_UNSPECIFIED","parts":[{"text":"a"}]}`, "message.role"},
		{`{"role":"USER","parts":[{"text":"a"}]}`, "message.role"},
		{`{"role":1,"parts":[{"text":"a"}]}`, "message.role"},
		{`{"role":"user"}`, "message.parts"},
		{`{"role":"user","parts":[]}`, "message.parts"},
		{`{"role":"user","parts":{}}`, "message.parts"},
		{`{"role":"user","parts":[{"text":"a"},{"text":2}]}`, "message.parts[1].text"},
		{`{"role":"user","parts":[{"text":"a"}],"messageId":5}`, "message.messageId"},
		{`{"role":"user","parts":[{"text":"a"}],"kind":"task"}`, "message.kind"},
		{`{"role":"user","parts":[{"text":"a"}],"extensions":[1]}`, "message.extensions[0]"},
		{`{"role":"user","parts":[{"text":"a"}],"referenceTaskIds":"r"}`, "message.referenceTaskIds"},
		{`{"role":"user","parts":[{"text":"a"}],"metadata":"m"}`, "message.metadata"},
	} {
		_, e := DecodeMessage(json.RawMessage(tc.in))
		if e == nil {
			t.Errorf("%s: no error", tc.in)
			continue
		}
		if e.Code != CodeInvalidParams || violationField(e) != tc.field {
			t.Errorf("%s: got %d %q (%s), want -32602 %q", tc.in, e.Code, violationField(e), e.Message, tc.field)
		}
	}
}

func TestDecodeTaskStates(t *testing.T) {
	for _, in := range []string{
		`{"id":"t","status":{"state":"TASK_STATE_AUTH_REQUIRED"}}`,
		`{"kind":"task","id":"t","contextId":"c","status":{"state":"auth-required"}}`,
		`{"id":"t","status":"auth-required"}`,
	} {
		task, e := DecodeTask(json.RawMessage(in))
		if e != nil || task.Status.State != StateAuthRequired || !task.Status.State.Interrupted() {
			t.Errorf("%s: %+v %v", in, task, e)
		}
	}
	for _, in := range []string{`{"id":"t"}`, `{"id":"t","status":{}}`, `{"id":"t","status":{"state":"done"}}`, `{"id":"t","status":7}`,
		`{"kind":"message","id":"t","status":"working"}`, `{"id":"t","status":"working","artifacts":{}}`,
		`{"id":"t","status":{"state":"working","timestamp":"yesterday"}}`} {
		if _, e := DecodeTask(json.RawMessage(in)); e == nil || e.Code != CodeInvalidParams {
			t.Errorf("%s: want -32602, got %v", in, e)
		}
	}
}

func TestTaskStatePredicates(t *testing.T) {
	terminal := map[TaskState]bool{StateCompleted: true, StateFailed: true, StateCanceled: true, StateRejected: true}
	interrupted := map[TaskState]bool{StateInputRequired: true, StateAuthRequired: true}
	for s := range stateTo10 {
		if s.Terminal() != terminal[s] || s.Interrupted() != interrupted[s] {
			t.Errorf("%s: terminal %v interrupted %v", s, s.Terminal(), s.Interrupted())
		}
		for _, w := range []string{string(s), stateTo10[s]} {
			if got, ok := ParseTaskState(w); !ok || got != s {
				t.Errorf("ParseTaskState(%q) = %q, %v", w, got, ok)
			}
		}
	}
	if _, ok := ParseTaskState("TASK_STATE_DONE"); ok {
		t.Error("unknown state parsed")
	}
}

// violationField returns the first BadRequest field of e, or "".
func violationField(e *Error) string {
	details, _ := e.Data.([]any)
	for _, d := range details {
		if br, ok := d.(BadRequest); ok && len(br.FieldViolations) > 0 {
			return br.FieldViolations[0].Field
		}
	}
	return ""
}
