package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestResultToParts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Part
	}{
		{`"hello"`, []Part{TextPart("hello")}},
		{`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`, []Part{TextPart("a"), TextPart("b")}},
		{`{"content":[{"type":"text","text":"a"},{"type":"image","data":"x"}],"isError":false}`,
			[]Part{TextPart("a"), DataPart(json.RawMessage(`{"type":"image","data":"x"}`))}},
		{`{"content":[]}`, []Part{DataPart(json.RawMessage(`{"content":[]}`))}},
		{`{"content":"x"}`, []Part{DataPart(json.RawMessage(`{"content":"x"}`))}},
		{`{"type":"text","text":"hello from a2a, world"}`, []Part{TextPart("hello from a2a, world")}},
		{`{"message":"hello from a2a","arguments":{"text":"world"}}`, []Part{DataPart(json.RawMessage(`{"message":"hello from a2a","arguments":{"text":"world"}}`))}},
		{`[1,"a"]`, []Part{DataPart(json.RawMessage(`[1,"a"]`))}},
		{` 42 `, []Part{TextPart("42")}},
		{`1.5e3`, []Part{TextPart("1.5e3")}},
		{`true`, []Part{TextPart("true")}},
		{`null`, []Part{TextPart("null")}},
	} {
		got, err := ResultToParts(json.RawMessage(tc.in))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v, %v", tc.in, got, err)
		}
	}
	for _, in := range []string{``, `{`, `nope`, `1 2`} {
		if _, err := ResultToParts(json.RawMessage(in)); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestPartsToArguments(t *testing.T) {
	skills := []string{"hello", "hello_task", "other"}
	for _, tc := range []struct {
		name  string
		parts []Part
		skill string
		args  string
		ok    bool
	}{
		{"data skill payload", []Part{TextPart("ignored"), DataPart(json.RawMessage(`{"skill":"hello_task","payload":{"text":"x"}}`))}, "hello_task", `{"text":"x"}`, true},
		{"data function_id arguments", []Part{DataPart(json.RawMessage(`{"function_id":"other","arguments":{"n":1}}`))}, "other", `{"n":1}`, true},
		{"data unknown skill", []Part{DataPart(json.RawMessage(`{"skill":"nope"}`))}, "nope", `{}`, true},
		{"text prefix json", []Part{TextPart(`hello_task {"text":"x"}`)}, "hello_task", `{"text":"x"}`, true},
		{"text prefix tight", []Part{TextPart(`  hello{"a":1}`)}, "hello", `{"a":1}`, true},
		{"text bare id", []Part{TextPart("other")}, "other", `{}`, true},
		{"text longer word", []Part{TextPart("otherwise fine")}, "", `{"text":"otherwise fine"}`, false},
		{"text id then prose", []Part{TextPart("hello world")}, "", `{"text":"hello world"}`, false},
		{"text id bad json", []Part{TextPart(`hello_task {"text":}`)}, "", `{"text":"hello_task {\"text\":}"}`, false},
		{"plain text", []Part{TextPart("world")}, "", `{"text":"world"}`, false},
		{"several texts", []Part{TextPart("a"), RawPart([]byte("x"), "", ""), TextPart("b")}, "", `{"text":"a\nb"}`, false},
		{"plain data object", []Part{TextPart("a"), DataPart(json.RawMessage(`{"q":"<x>"}`))}, "", `{"q":"<x>"}`, false},
		{"no parts", nil, "", `{"text":""}`, false},
		{"html stays unescaped", []Part{TextPart("a<b")}, "", `{"text":"a<b"}`, false},
	} {
		skill, args, ok := PartsToArguments(tc.parts, skills)
		if skill != tc.skill || string(args) != tc.args || ok != tc.ok {
			t.Errorf("%s: got %q %s %v", tc.name, skill, args, ok)
		}
	}
}
