package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/chio-ledger/chio/internal/redact"
	"net/http"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/openaitest"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The valid documents whose hostile variants the surface refuses.
const (
	helloArgs     = `{"text":"world"}`
	chatBatch     = `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"hello_task","arguments":"{}"}}]}`
	outputBatch   = `{"output":[{"type":"function_call","call_id":"c1","name":"hello_task","arguments":"{}"}]}`
	chatRequest   = `{"model":"m","messages":[{"role":"user","content":"use hello_task"}]}`
	outputRequest = `{"model":"m","input":"use hello_task"}`
)

// jsonText is s as a JSON string, its bytes kept as they are (json.Marshal
// would make invalid UTF-8 valid).
func jsonText(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// chatCallWith is a one-call Chat batch with raw arguments.
func chatCallWith(args string) string {
	return `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"hello_task","arguments":` +
		jsonText(args) + `}}]}`
}

// Every hostile variant of a batch is a 400 invalid_json in OpenAI's
// shape, and every hostile variant of a call's arguments is that call's
// invalid_arguments (or, where the arguments' bytes make the body itself
// hostile, the body's 400): nothing runs, nothing is recorded.
func TestBatchRefusesHostileJSON(t *testing.T) {
	f := start(t)
	tok := fullToken(t)
	var bodies []hostilejson.Case
	for _, doc := range []string{chatBatch, outputBatch} {
		bodies = append(bodies, hostilejson.Variants([]byte(doc))...)
	}
	bodies = append(bodies, hostilejson.Case{Name: "Tool_Calls beside tool_calls",
		Doc: []byte(`{"tool_calls":[{"id":"c1","type":"function","function":{"name":"hello_task","arguments":"{}"}}],` +
			`"Tool_Calls":[{"id":"c1","type":"function","function":{"name":"getCheckpoint","arguments":"{}"}}]}`)})
	for _, c := range bodies {
		code, _, raw := do(t, http.MethodPost, f.url+ToolCallsPath, tok, c.Doc)
		var e openAIError
		if err := json.Unmarshal(raw, &e); code != http.StatusBadRequest || err != nil || e.Error.Code != "invalid_json" ||
			e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s", c.Name, code, raw)
		}
	}
	// A lone member named as a read one but for case is no such member:
	// encoding/json alone would read it as one.
	for name, body := range map[string]string{
		"Tool_Calls in a message": `{"message":{"role":"assistant","Tool_Calls":[{"id":"c1","type":"function","function":{"name":"hello_task","arguments":"{}"}}]}}`,
		"Function in a call":      `{"tool_calls":[{"id":"c1","type":"function","Function":{"name":"hello_task","arguments":"{}"}}]}`,
		"Name in an output item":  `{"output":[{"type":"function_call","call_id":"c1","Name":"hello_task","arguments":"{}"}]}`,
	} {
		code, _, raw := do(t, http.MethodPost, f.url+ToolCallsPath, tok, []byte(body))
		if code != http.StatusBadRequest || !strings.Contains(string(raw), "only in case") {
			t.Errorf("%s: %d %s", name, code, raw)
		}
	}
	for _, v := range hostilejson.Variants([]byte(helloArgs)) {
		body := chatCallWith(string(v.Doc))
		code, _, raw := do(t, http.MethodPost, f.url+ToolCallsPath, tok, []byte(body))
		if strictjson.Valid([]byte(body)) != nil {
			if code != http.StatusBadRequest {
				t.Errorf("arguments %s: %d %s", v.Name, code, raw)
			}
			continue
		}
		var ans struct {
			Messages []struct{ Chio Chio } `json:"messages"`
		}
		if err := json.Unmarshal(raw, &ans); code != http.StatusOK || err != nil || len(ans.Messages) != 1 ||
			ans.Messages[0].Chio.Decision != DecisionInvalidArguments || ans.Messages[0].Chio.ReceiptRef != "" {
			t.Errorf("arguments %s: %d %s", v.Name, code, raw)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after hostile batches", n)
	}
}

// A batch past MaxItems is refused whole, in either dialect, before any
// of its calls runs.
func TestBatchBound(t *testing.T) {
	f := start(t)
	var chat, output []string
	for i := range MaxItems + 1 {
		chat = append(chat, fmt.Sprintf(`{"id":"c%d","type":"function","function":{"name":"hello_task","arguments":"{}"}}`, i))
		output = append(output, fmt.Sprintf(`{"type":"function_call","call_id":"c%d","name":"hello_task","arguments":"{}"}`, i))
	}
	for _, body := range []string{`{"tool_calls":[` + strings.Join(chat, ",") + `]}`, `{"output":[` + strings.Join(output, ",") + `]}`} {
		code, _, raw := do(t, http.MethodPost, f.url+ToolCallsPath, fullToken(t), []byte(body))
		var e openAIError
		if err := json.Unmarshal(raw, &e); code != http.StatusBadRequest || err != nil || e.Error.Code != "too_many_tool_calls" {
			t.Errorf("%d %s", code, raw)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after refused batches", n)
	}
}

// Calls still queued when the client goes away are not run.
func TestRunStopsWhenTheClientGoesAway(t *testing.T) {
	f := start(t)
	b, werr := DecodeBatch([]byte(chatBatch))
	if werr != nil {
		t.Fatal(werr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := f.a.Run(ctx, fullToken(t), nil, b); len(res) != 0 {
		t.Fatalf("%d results after the client went away", len(res))
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events", n)
	}
}

// The proxy reads client requests with strictjson too: a hostile variant
// is a 400 invalid_json, before the upstream and the kernel.
func TestProxyRefusesHostileJSON(t *testing.T) {
	f, m := startProxy(t, 0)
	tok := fullToken(t)
	cases := []struct {
		path string
		doc  string
	}{{ChatCompletionsPath, chatRequest}, {ResponsesPath, outputRequest}}
	for _, c := range cases {
		for _, v := range hostilejson.Variants([]byte(c.doc)) {
			code, _, raw := do(t, http.MethodPost, f.url+c.path, tok, v.Doc)
			var e openAIError
			if err := json.Unmarshal(raw, &e); code != http.StatusBadRequest || err != nil || e.Error.Code != "invalid_json" {
				t.Errorf("%s %s: %d %s", c.path, v.Name, code, raw)
			}
		}
	}
	code, _, raw := do(t, http.MethodPost, f.url+ChatCompletionsPath, tok, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}],`+
		`"tools":[],"Tools":[{"type":"function","function":{"name":"hello_task"}}]}`))
	if code != http.StatusBadRequest || !strings.Contains(string(raw), "invalid_json") {
		t.Errorf("tools and Tools: %d %s", code, raw)
	}
	if m.Count() != 0 || len(natstest.Decisions(t, f.js)) != 0 {
		t.Fatalf("upstream requests %d", m.Count())
	}
}

// Whatever the upstream answers, the operator's key does not reach the
// client: an error quoting the Authorization header the proxy sent is
// relayed with its status but the key scrubbed, whether JSON, plain text
// or an error event in a stream, on both APIs.
func TestProxyScrubsUpstreamCredentials(t *testing.T) {
	f, m := startProxy(t, 0)
	tok := fullToken(t)
	cases := []struct {
		name   string
		fail   openaitest.Failure
		stream bool
		status int
	}{
		{"400", openaitest.Failure{Status: 400, EchoAuth: true}, false, 400},
		{"429", openaitest.Failure{Status: 429, EchoAuth: true}, false, 429},
		{"500 in plain text", openaitest.Failure{Status: 500, EchoAuth: true, Text: true}, false, 500},
		{"500 to a stream", openaitest.Failure{Status: 500, EchoAuth: true}, true, 500},
		{"error event in a stream", openaitest.Failure{Status: 500, EchoAuth: true, InStream: true}, true, http.StatusBadGateway},
	}
	for _, c := range cases {
		for _, path := range []string{ChatCompletionsPath, ResponsesPath} {
			m.FailWith(c.fail)
			body := chatRequest
			if path == ResponsesPath {
				body = outputRequest
			}
			if c.stream {
				body = strings.Replace(body, `"model":"m"`, `"model":"m","stream":true`, 1)
			}
			code, _, raw := do(t, http.MethodPost, f.url+path, tok, []byte(body))
			if code != c.status || bytes.Contains(raw, []byte(upstreamKey)) || !bytes.Contains(raw, []byte("Authorization: "+redact.Mark)) {
				t.Errorf("%s %s: %d %s", c.name, path, code, raw)
			}
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events", n)
	}
}

// An upstream answer past the proxy's bounds is not relayed, not even in
// part: the client gets a 502 saying so.
func TestProxyBoundsUpstreamAnswers(t *testing.T) {
	f, m := startProxy(t, 0)
	tok := fullToken(t)
	cases := []struct {
		name, path, body string
		fail             openaitest.Failure
		quirks           openaitest.Quirks
	}{
		{"error answer", ChatCompletionsPath, chatRequest, openaitest.Failure{Status: 400, EchoAuth: true, Pad: MaxUpstreamErrorBytes}, openaitest.Quirks{}},
		{"answer", ResponsesPath, outputRequest, openaitest.Failure{}, openaitest.Quirks{Pad: MaxProxyBodyBytes}},
		{"stream", ChatCompletionsPath, strings.Replace(chatRequest, `"model":"m"`, `"model":"m","stream":true`, 1),
			openaitest.Failure{}, openaitest.Quirks{Pad: MaxProxyBodyBytes}},
	}
	for _, c := range cases {
		m.FailWith(c.fail)
		m.SetQuirks(c.quirks)
		code, _, raw := do(t, http.MethodPost, f.url+c.path, tok, []byte(c.body))
		var e openAIError
		if err := json.Unmarshal(raw, &e); code != http.StatusBadGateway || err != nil || e.Error.Code != "upstream_too_large" ||
			bytes.Contains(raw, []byte(upstreamKey)) {
			t.Errorf("%s: %d %.300s", c.name, code, raw)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events", n)
	}
}

// FuzzToolCallsRequest: decoding a batch never panics; a batch accepted
// is a document strictjson accepts, within MaxItems, and every call's
// arguments accepted are too.
func FuzzToolCallsRequest(f *testing.F) {
	for _, s := range []string{chatBatch, outputBatch, `{"message":` + chatBatch + `}`, chatCallWith(helloArgs),
		`[{"type":"function_call","call_id":"c1","name":"x","arguments":"{\"a\":1}"},{"type":"reasoning","id":"r"}]`, `{}`, ``} {
		f.Add([]byte(s))
	}
	for _, doc := range []string{chatBatch, outputBatch} {
		for _, v := range hostilejson.Variants([]byte(doc)) {
			if len(v.Doc) < 4096 {
				f.Add(v.Doc)
			}
		}
	}
	for _, v := range hostilejson.Variants([]byte(helloArgs)) {
		if len(v.Doc) < 4096 {
			f.Add([]byte(chatCallWith(string(v.Doc))))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, werr := DecodeBatch(body)
		if werr != nil {
			if werr.Status != http.StatusBadRequest {
				t.Fatalf("status %d", werr.Status)
			}
			return
		}
		if err := strictjson.Valid(body); err != nil {
			t.Fatalf("accepted what strictjson refuses: %v", err)
		}
		if len(b.Items) == 0 || len(b.Items) > MaxItems {
			t.Fatalf("%d items accepted", len(b.Items))
		}
		for _, it := range b.Items {
			if args, err := parseArguments(it.Arguments); err == nil && strictjson.Valid(args) != nil {
				t.Fatalf("arguments %q accepted", args)
			}
		}
	})
}

// FuzzProxyRequest: reading and preparing a proxy request never panics,
// and a request accepted is a document strictjson accepts.
func FuzzProxyRequest(f *testing.F) {
	for _, s := range []string{chatRequest, outputRequest,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
		`{"model":"m","input":[{"role":"user","content":"x"}],"store":false,"reasoning":{},"include":["a"]}`, `{}`, ``} {
		f.Add([]byte(s))
	}
	for _, doc := range []string{chatRequest, outputRequest} {
		for _, v := range hostilejson.Variants([]byte(doc)) {
			if len(v.Doc) < 4096 {
				f.Add(v.Doc)
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, api := range []proxyAPI{chatAPI{}, responsesAPI{}} {
			req, werr := proxyRequest(body)
			if werr != nil {
				continue
			}
			if err := strictjson.Valid(body); err != nil {
				t.Fatalf("accepted what strictjson refuses: %v", err)
			}
			_, _ = streamFlag(req)
			if _, werr := api.prepare(req, nil); werr == nil {
				relaxToolChoice(req)
			}
		}
	})
}
