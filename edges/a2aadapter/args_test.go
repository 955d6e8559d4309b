package a2aadapter

import (
	"errors"
	"testing"
)

func TestParseArgs(t *testing.T) {
	all := features{streaming: true, push: true, history: true}
	for _, tc := range []struct {
		name string
		args string
		f    features
		mode string // on success
		want error  // on failure
	}{
		{"text", `{"message":"hi"}`, all, modeSend, nil},
		{"data", `{"data":[1,2,{"x":null}]}`, all, modeSend, nil},
		{"every send field", `{"message":"hi","data":1,"context_id":"c","task_id":"t","reference_task_ids":["r"],"metadata":{"k":1},
			"message_metadata":{"m":2},"history_length":0,"return_immediately":true,"stream":true}`, all, modeSend, nil},
		{"stream false without streaming", `{"message":"hi","stream":false}`, features{}, modeSend, nil},
		{"get_task", `{"get_task":{"id":"t","history_length":3}}`, all, ModeGetTask, nil},
		{"subscribe_task", `{"subscribe_task":{"id":"t"}}`, all, ModeSubscribeTask, nil},
		{"cancel_task", `{"cancel_task":{"id":"t","metadata":{"reason":"user"}}}`, all, ModeCancelTask, nil},
		{"create_push_config to loopback http", `{"create_push_config":{"task_id":"t","url":"http://127.0.0.1:9/hook","authentication":{"scheme":"Bearer","credentials":"c"}}}`, all, ModeCreatePushConfig, nil},
		{"list_push_configs", `{"list_push_configs":{"task_id":"t","page_size":10}}`, all, ModeListPushConfigs, nil},
		{"delete_push_config", `{"delete_push_config":{"task_id":"t","id":"c"}}`, all, ModeDeletePushConfig, nil},

		{"nothing to send", `{}`, all, "", ErrInvalidArguments},
		{"no arguments", ``, all, "", ErrInvalidArguments},
		{"null data", `{"data":null}`, all, "", ErrInvalidArguments},
		{"empty message", `{"message":""}`, all, "", ErrInvalidArguments},
		{"send field with a mode", `{"message":"hi","get_task":{"id":"t"}}`, all, "", ErrInvalidArguments},
		{"stream with a mode", `{"stream":true,"subscribe_task":{"id":"t"}}`, all, "", ErrInvalidArguments},
		{"two modes", `{"get_task":{"id":"t"},"cancel_task":{"id":"t"}}`, all, "", ErrInvalidArguments},
		{"empty task id", `{"get_task":{"id":""}}`, all, "", ErrInvalidArguments},
		{"unknown mode field", `{"get_task":{"id":"t","extra":1}}`, all, "", ErrInvalidArguments},
		{"unknown field", `{"message":"hi","skill":"x"}`, all, "", ErrInvalidArguments},
		// Names are exact: encoding/json would fold case, and the guards
		// read members by their exact names.
		{"a member in another case", `{"message":"short","MESSAGE":"long"}`, all, "", ErrInvalidArguments},
		{"a mode in another case", `{"Get_Task":{"id":"B"}}`, all, "", ErrInvalidArguments},
		{"a lone member in another case", `{"MESSAGE":"long"}`, all, "", ErrInvalidArguments},
		{"a lone nested member in another case", `{"get_task":{"ID":"B"}}`, all, "", ErrInvalidArguments},
		{"a nested member in another case", `{"get_task":{"id":"A","Id":"B"}}`, all, "", ErrInvalidArguments},
		{"a push url in another case", `{"create_push_config":{"task_id":"t","url":"https://ok.example/h","URL":"https://evil.example/x"}}`, all, "", ErrInvalidArguments},
		{"cancel metadata cannot carry chio", `{"cancel_task":{"id":"t","metadata":{"chio":{"x":1}}}}`, all, "", ErrInvalidArguments},
		{"free-form metadata keeps any key", `{"message":"hi","metadata":{"Anything":1,"other":2}}`, all, modeSend, nil},
		// Every reader of untrusted JSON refuses names that differ only in case.
		{"free-form metadata with a case-variant key", `{"message":"hi","metadata":{"Anything":1,"anything":2}}`, all, "", ErrInvalidArguments},
		{"trailing data", `{"message":"hi"} {}`, all, "", ErrInvalidArguments},
		{"not an object", `["hi"]`, all, "", ErrInvalidArguments},
		{"reserved metadata", `{"message":"hi","metadata":{"chio":{"targetSkillId":"other"}}}`, all, "", ErrInvalidArguments},
		{"reserved message metadata", `{"message":"hi","message_metadata":{"chio":{"governedIntent":{}}}}`, all, "", ErrInvalidArguments},
		{"negative history", `{"message":"hi","history_length":-1}`, all, "", ErrInvalidArguments},
		{"empty reference", `{"message":"hi","reference_task_ids":[""]}`, all, "", ErrInvalidArguments},
		{"http callback to a named host", `{"create_push_config":{"task_id":"t","url":"http://callback.example/hook"}}`, all, "", ErrInsecureURL},
		{"relative callback", `{"create_push_config":{"task_id":"t","url":"/hook"}}`, all, "", ErrInvalidArguments},
		{"callback auth without scheme", `{"create_push_config":{"task_id":"t","url":"https://cb.example","authentication":{"credentials":"c"}}}`, all, "", ErrInvalidArguments},
		{"page size", `{"list_push_configs":{"task_id":"t","page_size":500}}`, all, "", ErrInvalidArguments},
		{"push ref without id", `{"get_push_config":{"task_id":"t"}}`, all, "", ErrInvalidArguments},

		{"stream without streaming", `{"message":"hi","stream":true}`, features{push: true, history: true}, "", ErrNotAdvertised},
		{"subscribe without streaming", `{"subscribe_task":{"id":"t"}}`, features{push: true, history: true}, "", ErrNotAdvertised},
		{"history without history", `{"message":"hi","history_length":2}`, features{streaming: true, push: true}, "", ErrNotAdvertised},
		{"get history without history", `{"get_task":{"id":"t","history_length":2}}`, features{streaming: true, push: true}, "", ErrNotAdvertised},
		{"push without push", `{"get_push_config":{"task_id":"t","id":"c"}}`, features{streaming: true, history: true}, "", ErrNotAdvertised},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := parseArgs([]byte(tc.args), tc.f)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || a.mode != tc.mode {
				t.Fatalf("mode %v, err %v; want %s", a, err, tc.mode)
			}
		})
	}
}

// TestInputSchemaAgreesWithParseArgs: the published schema accepts what
// parseArgs accepts and refuses the exclusivity violations it refuses.
func TestInputSchemaAgreesWithParseArgs(t *testing.T) {
	raw, err := inputSchema(features{streaming: true, push: true, history: true})
	if err != nil {
		t.Fatal(err)
	}
	schema := compileSchema(t, raw)
	for _, tc := range []struct {
		args string
		ok   bool
	}{
		{`{"message":"hi","stream":true,"history_length":1}`, true},
		{`{"data":{"x":1},"task_id":"t"}`, true},
		{`{"get_task":{"id":"t"}}`, true},
		{`{"create_push_config":{"task_id":"t","url":"https://cb.example/hook"}}`, true},
		{`{}`, false},
		{`{"message":"hi","get_task":{"id":"t"}}`, false},
		{`{"get_task":{"id":"t"},"cancel_task":{"id":"t"}}`, false},
		{`{"get_task":{}}`, false},
		{`{"message":"hi","skill":"x"}`, false},
	} {
		_, perr := parseArgs([]byte(tc.args), features{streaming: true, push: true, history: true})
		serr := schema.Validate(mustJSON(t, []byte(tc.args)))
		if (serr == nil) != tc.ok || (perr == nil) != tc.ok {
			t.Errorf("%s: schema says %v, parseArgs says %v; want ok=%v", tc.args, serr, perr, tc.ok)
		}
	}
}

// TestRefusedCallsNeverReachThePartner: every local refusal happens before
// any upstream request.
func TestRefusedCallsNeverReachThePartner(t *testing.T) {
	p := startPartner(t, partnerOpts{legacy: true, noHistory: true, noPush: true})
	a := discover(t, p, Config{})
	for _, tc := range []struct {
		tool, args string
		want       error
	}{
		{"echo", `{"message":"hi","get_task":{"id":"t"}}`, ErrInvalidArguments},
		{"echo", `{"message":"hi","history_length":1}`, ErrNotAdvertised},
		{"echo", `{"create_push_config":{"task_id":"t","url":"https://cb.example"}}`, ErrNotAdvertised},
		{"echo", `{"get_task":{"id":"t"}}`, ErrFollowUpRefused}, // no registry
		{"echo", `{"message":"hi","task_id":"t"}`, ErrFollowUpRefused},
		{"nope", `{"message":"hi"}`, ErrUnknownTool},
	} {
		_, err := a.Invoke(t.Context(), call(a, tc.tool, tc.args))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s %s: err = %v, want %v", tc.tool, tc.args, err, tc.want)
		}
	}
	if n := p.requests.Load(); n != 0 {
		t.Fatalf("%d refused calls reached the partner", n)
	}
}
