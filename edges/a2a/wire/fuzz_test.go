package wire

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// addHostile seeds f with the hostile variants of doc.
func addHostile(f *testing.F, doc string) {
	for _, c := range hostilejson.Variants([]byte(doc)) {
		f.Add(c.Doc)
	}
}

// FuzzDecodeRequest feeds arbitrary bodies through the envelope decoder, the
// method's param decoder and the response encoders: none may panic, every
// response must be valid JSON, and every body accepted strict JSON.
func FuzzDecodeRequest(f *testing.F) {
	addHostile(f, `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"},{"data":{"a":1}}],"metadata":{"k":"v"}}}}`)
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]},"configuration":{"returnImmediately":true,"historyLength":2}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"message/send","params":{"message":{"kind":"message","role":"user","parts":[{"kind":"file","file":{"bytes":"eHl6"}},{"kind":"data","data":{"value":1},"metadata":{"data_part_compat":true}}]},"configuration":{"blocking":false}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"type":"text","text":"world"}]}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"task/get","params":{"taskId":"a2a-task-2"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"ListTasks","params":{"pageSize":"7","status":"TASK_STATE_WORKING","statusTimestampAfter":"2026-01-01T00:00:00Z"}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tasks/cancel","params":{"id":"t","metadata":{"a":[1,{"b":null}]}}}`,
		`{"jsonrpc":"2.0","method":"GetExtendedAgentCard"}`,
		`[{"jsonrpc":"2.0"}]`,
		`{"jsonrpc":"2.0","id":{},"method":1,"params":"x"}`,
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","parts":[{"raw":"-_8","url":null,"data":null}]}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := DecodeRequest(body)
		if e != nil {
			mustJSON(t, EncodeError(req.ResponseID(), e))
			return
		}
		if err := strictjson.Valid(body); err != nil {
			t.Fatalf("accepted a body strictjson refuses: %v", err)
		}
		for _, v := range []Version{V03, V10, VHelloStdio} {
			m, ok := LookupMethod(req.Method, v)
			if !ok {
				mustJSON(t, EncodeError(req.ResponseID(), MethodNotFound(req.Method)))
				continue
			}
			params, e := m.DecodeParams(req.Params)
			if e != nil {
				mustJSON(t, EncodeError(req.ResponseID(), e))
				continue
			}
			if sp, ok := params.(*SendParams); ok {
				// A decoded message must encode in every dialect and round-trip.
				for _, out := range []Version{V03, V10, VHelloStdio} {
					b, err := EncodeMessage(out, &sp.Message)
					if err != nil {
						t.Fatalf("decoded message does not encode in %s: %v", out, err)
					}
					if _, e := DecodeMessage(b); e != nil {
						t.Fatalf("%s encoding does not decode: %v\n%s", out, e, b)
					}
				}
				PartsToArguments(sp.Message.Parts, []string{"hello_task", "a"})
			}
			mustJSON(t, EncodeResult(req.ResponseID(), params))
		}
	})
}

// FuzzDecodeMessage checks that any message the decoder accepts encodes in
// every dialect and decodes back to the same encoding.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"},{"data":[1]},{"raw":"eHl6","filename":"f"},{"url":"https://x"}]}`,
		`{"kind":"message","role":"agent","parts":[{"kind":"file","file":{"uri":"u","mimeType":"a/b"}},{"kind":"data","data":{"k":"v"}}]}`,
		`{"role":"user","parts":[{"type":"text","text":"world"}],"metadata":{"n":1e400}}`,
		`{"role":"user","parts":[{"data":null}],"extensions":["x"],"referenceTaskIds":["t"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, e := DecodeMessage(raw)
		if e != nil {
			mustJSON(t, EncodeError(nil, e))
			return
		}
		for _, v := range []Version{V03, V10, VHelloStdio} {
			b, err := EncodeMessage(v, m)
			if err != nil {
				t.Fatalf("%s: accepted message does not encode: %v", v, err)
			}
			back, e := DecodeMessage(b)
			if e != nil {
				t.Fatalf("%s: encoding does not decode: %v\n%s", v, e, b)
			}
			again, err := EncodeMessage(v, back)
			if err != nil || string(again) != string(b) {
				t.Fatalf("%s: round trip differs:\n%s\n%s", v, b, again)
			}
		}
		ResultToParts(raw)
	})
}

// FuzzDecodeRESTSend feeds arbitrary bodies to the REST send routes (1.0
// and 0.3): none may panic, every error must encode, and every body
// accepted (but the empty one, which reads as {}) must be strict JSON.
func FuzzDecodeRESTSend(f *testing.F) {
	valid := `{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"},{"data":{"a":1}}],"metadata":{"k":"v"}},"metadata":{"chio":{"targetSkillId":"x"}}}`
	addHostile(f, valid)
	f.Add([]byte(valid))
	f.Add([]byte(`{"request":{"messageId":"m","role":"ROLE_USER","content":[{"text":"hi"}]}}`))
	f.Add([]byte(`null`))
	routes := []RESTRoute{}
	for _, p := range []string{"/message:send", "/v1/message:send", "/message:stream"} {
		r, ok := MatchREST("POST", p)
		if !ok {
			f.Fatalf("no route %s", p)
		}
		routes = append(routes, r)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, r := range routes {
			params, e := DecodeRESTRequest(r, url.Values{}, body)
			if e != nil {
				_, b := EncodeRESTError(e)
				mustJSON(t, b)
				continue
			}
			if tr := bytes.TrimSpace(body); len(tr) == 0 || string(tr) == "null" {
				continue
			}
			if err := strictjson.Valid(body); err != nil {
				t.Fatalf("accepted a body strictjson refuses: %v", err)
			}
			mustJSON(t, EncodeResult(nil, params))
		}
	})
}

func mustJSON(t *testing.T, b []byte) {
	t.Helper()
	if !json.Valid(b) {
		t.Fatalf("invalid JSON response: %s", b)
	}
}
