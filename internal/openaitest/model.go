// Package openaitest is an in-test OpenAI-compatible model API (Chat
// Completions and Responses, streamed or not) with a scripted model, the
// upstream that the OpenAI adapter's proxy tests talk to.
package openaitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Model is an OpenAI-compatible upstream (Chat Completions and
// Responses, streamed or not) with a scripted model. The first user
// message is its instruction:
//
//   - "use F1 F2 …": call each function, then, once the trailing input is
//     the calls' outputs, answer "results: OUT1 | OUT2 …";
//   - "forever F": call F every turn;
//   - anything else: answer "hello, TEXT".
//
// A function written "F!" gets arguments that are not JSON. It records
// every request it gets, and refuses one without its key.
type Model struct {
	Server *httptest.Server
	key    string

	mu       sync.Mutex
	fail     Failure
	failFrom int
	quirks   Quirks
	requests []map[string]any
	auth     []string
}

// Quirks are departures from OpenAI's own answers that compatible
// servers (or OpenAI itself) make.
type Quirks struct {
	// OmitCallType leaves "type" out of Chat tool calls.
	OmitCallType bool
	// ObjectArguments sends Responses function_call arguments as an
	// object instead of a JSON string.
	ObjectArguments bool
	// SplitData writes each SSE event's JSON over two data: lines.
	SplitData bool
	// Pad adds about that many bytes to an answer: a "padding" member
	// of a whole answer, chunks without choices in a Chat stream.
	Pad int
}

// Failure is how a failing request is answered.
type Failure struct {
	// Status is the answer's status (0: no failure).
	Status int
	// EchoAuth quotes the request's Authorization header in the error's
	// message, as some servers' errors do.
	EchoAuth bool
	// Text answers in text/plain instead of OpenAI's JSON error.
	Text bool
	// InStream answers a streamed request with a 200 stream whose one
	// event is the error, as OpenAI does for a failure mid-stream.
	InStream bool
	// Pad adds that many bytes to the error's message.
	Pad int
}

// SetQuirks sets the quirks of later answers.
func (m *Model) SetQuirks(q Quirks) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.quirks = q
}

// FailFrom makes the n-th request (1-based) and every later one fail
// with status.
func (m *Model) FailFrom(n, status int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failFrom, m.fail = n, Failure{Status: status}
}

// FailWith makes every later request fail as f says (a zero f: succeed
// again).
func (m *Model) FailWith(f Failure) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failFrom, m.fail = 0, f
}

// Start serves a model that expects key as Authorization: Bearer; it
// stops when the test ends.
func Start(t testing.TB, key string) *Model {
	m := &Model{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, m.chat) })
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, m.responses) })
	m.Server = httptest.NewServer(mux)
	t.Cleanup(m.Server.Close)
	return m
}

// BaseURL is the API base, as a client's base URL.
func (m *Model) BaseURL() string { return m.Server.URL + "/v1" }

// Fail makes every later request fail with status (0: succeed again).
func (m *Model) Fail(status int) { m.FailFrom(0, status) }

// Count is the number of requests received.
func (m *Model) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.requests)
}

// Request is the i-th request's body.
func (m *Model) Request(i int) map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests[i]
}

// Auth is the i-th request's Authorization header.
func (m *Model) Auth(i int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.auth[i]
}

func (m *Model) serve(w http.ResponseWriter, r *http.Request, api func(http.ResponseWriter, map[string]any, int, Quirks)) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.requests = append(m.requests, req)
	m.auth = append(m.auth, r.Header.Get("Authorization"))
	round, fail, q := len(m.requests), m.fail, m.quirks
	if round < m.failFrom {
		fail = Failure{}
	}
	m.mu.Unlock()
	if fail.Status != 0 {
		failed(w, r, req, fail)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+m.key {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"wrong upstream key","type":"invalid_request_error","code":"invalid_api_key","param":null}}`)
		return
	}
	api(w, req, round, q)
}

// failed answers a request as f says.
func failed(w http.ResponseWriter, r *http.Request, req map[string]any, f Failure) {
	msg := "rate limited by the model"
	if f.EchoAuth {
		msg = "request refused; it had Authorization: " + r.Header.Get("Authorization")
	}
	msg += strings.Repeat(" ", f.Pad)
	if f.Text {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(f.Status)
		fmt.Fprintln(w, msg)
		return
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "requests",
		"code": "rate_limit_exceeded", "param": nil}})
	if f.InStream && req["stream"] == true {
		newSSE(w, false).raw("error", string(body))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Status)
	_, _ = w.Write(body)
}

// modelCall is a call the script makes.
type modelCall struct{ name, args string }

// decide runs the script on the instruction and the trailing outputs; a
// forced tool choice ("required") makes it call even after outputs.
func decide(instruction string, outputs []string, forced bool) (text string, calls []modelCall) {
	words := strings.Fields(instruction)
	switch {
	case len(words) > 1 && words[0] == "forever":
		return "", []modelCall{{words[1], `{"text":"again"}`}}
	case len(words) > 1 && words[0] == "use" && (len(outputs) == 0 || forced):
		for _, w := range words[1:] {
			args := `{"text":"world"}`
			if strings.HasSuffix(w, "!") {
				w, args = strings.TrimSuffix(w, "!"), `{not json`
			}
			calls = append(calls, modelCall{w, args})
		}
		return "", calls
	case len(outputs) > 0:
		return "results: " + strings.Join(outputs, " | "), nil
	}
	return "hello, " + instruction, nil
}

func (m *Model) chat(w http.ResponseWriter, req map[string]any, round int, q Quirks) {
	msgs, _ := req["messages"].([]any)
	instruction := ""
	var outputs []string
	for _, v := range msgs {
		msg, _ := v.(map[string]any)
		switch msg["role"] {
		case "user":
			if instruction == "" {
				instruction, _ = msg["content"].(string)
			}
			outputs = nil
		case "assistant":
			outputs = nil
		case "tool":
			s, _ := msg["content"].(string)
			outputs = append(outputs, s)
		}
	}
	text, calls := decide(instruction, outputs, req["tool_choice"] == "required")
	id := fmt.Sprintf("chatcmpl-%d", round)
	var toolCalls []any
	for i, c := range calls {
		tc := map[string]any{"id": fmt.Sprintf("call_%d_%d", round, i), "type": "function",
			"function": map[string]any{"name": c.name, "arguments": c.args}}
		if q.OmitCallType {
			delete(tc, "type")
		}
		toolCalls = append(toolCalls, tc)
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	if req["stream"] != true {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
		if len(calls) > 0 {
			msg["tool_calls"] = toolCalls
		} else {
			msg["content"] = text
		}
		writeJSON(w, padded(map[string]any{"id": id, "object": "chat.completion", "created": 1700000000, "model": req["model"],
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}, q.Pad))
		return
	}
	sse := newSSE(w, q.SplitData)
	for left := q.Pad; left > 0; left -= 1 << 20 {
		sse.data(map[string]any{"id": id, "object": "chat.completion.chunk", "choices": []any{}, "padding": strings.Repeat("x", min(left, 1<<20))})
	}
	chunk := func(delta map[string]any, finish any) {
		sse.data(map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": req["model"],
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	if text != "" {
		half := len(text) / 2
		chunk(map[string]any{"content": text[:half]}, nil)
		chunk(map[string]any{"content": text[half:]}, nil)
	}
	for i, c := range calls {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d_%d", round, i), "type": "function",
			"function": map[string]any{"name": c.name, "arguments": ""}}}}, nil)
		half := len(c.args) / 2
		for _, part := range []string{c.args[:half], c.args[half:]} {
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": part}}}}, nil)
		}
	}
	chunk(map[string]any{}, finish)
	if so, _ := req["stream_options"].(map[string]any); so["include_usage"] == true {
		sse.data(map[string]any{"id": id, "object": "chat.completion.chunk", "created": 1700000000, "model": req["model"], "choices": []any{},
			"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
	}
	sse.raw("", "[DONE]")
}

func (m *Model) responses(w http.ResponseWriter, req map[string]any, round int, q Quirks) {
	instruction := ""
	var outputs []string
	switch in := req["input"].(type) {
	case string:
		instruction = in
	case []any:
		for _, v := range in {
			item, _ := v.(map[string]any)
			switch {
			case item["role"] == "user":
				if instruction == "" {
					instruction, _ = item["content"].(string)
				}
				outputs = nil
			case item["type"] == "function_call_output":
				s, _ := item["output"].(string)
				outputs = append(outputs, s)
			default:
				outputs = nil
			}
		}
	}
	text, calls := decide(instruction, outputs, req["tool_choice"] == "required")
	id := fmt.Sprintf("resp_%d", round)
	var output []any
	if text != "" {
		output = append(output, map[string]any{"id": fmt.Sprintf("msg_%d", round), "type": "message", "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
	}
	for i, c := range calls {
		var args any = c.args
		if q.ObjectArguments {
			var obj any
			if json.Unmarshal([]byte(c.args), &obj) == nil {
				args = obj
			}
		}
		output = append(output, map[string]any{"id": fmt.Sprintf("fc_%d_%d", round, i), "type": "function_call", "status": "completed",
			"call_id": fmt.Sprintf("call_%d_%d", round, i), "name": c.name, "arguments": args})
	}
	metadata := req["metadata"]
	if metadata == nil {
		metadata = map[string]any{}
	}
	resp := func(status string, out []any) map[string]any {
		return map[string]any{"id": id, "object": "response", "created_at": 1700000000, "status": status, "model": req["model"],
			"output": out, "metadata": metadata, "tools": req["tools"], "parallel_tool_calls": true, "tool_choice": "auto",
			"usage": map[string]any{"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
				"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}}
	}
	if req["stream"] != true {
		writeJSON(w, padded(resp("completed", output), q.Pad))
		return
	}
	sse := newSSE(w, q.SplitData)
	sse.event("response.created", map[string]any{"response": resp("in_progress", []any{})})
	sse.event("response.in_progress", map[string]any{"response": resp("in_progress", []any{})})
	for i, v := range output {
		item := v.(map[string]any)
		itemID := item["id"]
		if item["type"] == "message" {
			sse.event("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{"id": itemID, "type": "message",
				"role": "assistant", "status": "in_progress", "content": []any{}}})
			half := len(text) / 2
			for _, part := range []string{text[:half], text[half:]} {
				sse.event("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "delta": part, "logprobs": []any{}})
			}
			sse.event("response.output_text.done", map[string]any{"item_id": itemID, "output_index": i, "content_index": 0, "text": text, "logprobs": []any{}})
		} else {
			args, _ := item["arguments"].(string)
			sse.event("response.output_item.added", map[string]any{"output_index": i, "item": map[string]any{"id": itemID, "type": "function_call",
				"status": "in_progress", "call_id": item["call_id"], "name": item["name"], "arguments": ""}})
			half := len(args) / 2
			for _, part := range []string{args[:half], args[half:]} {
				sse.event("response.function_call_arguments.delta", map[string]any{"item_id": itemID, "output_index": i, "delta": part})
			}
			sse.event("response.function_call_arguments.done", map[string]any{"item_id": itemID, "output_index": i, "arguments": args, "name": item["name"]})
		}
		sse.event("response.output_item.done", map[string]any{"output_index": i, "item": item})
	}
	sse.event("response.completed", map[string]any{"response": resp("completed", output)})
}

// padded is v with n bytes of padding, if n > 0.
func padded(v map[string]any, n int) map[string]any {
	if n > 0 {
		v["padding"] = strings.Repeat("x", n)
	}
	return v
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes a text/event-stream answer.
type sse struct {
	w     http.ResponseWriter
	seq   int
	split bool
}

func newSSE(w http.ResponseWriter, split bool) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, split: split}
}

func (s *sse) raw(event, data string) {
	if event != "" {
		fmt.Fprintf(s.w, "event: %s\n", event)
	}
	if rest, ok := strings.CutPrefix(data, "{"); s.split && ok {
		// Legal SSE: the reader joins the lines with a newline, which is
		// white space after the object's opening brace.
		fmt.Fprintf(s.w, "data: {\ndata: %s\n\n", rest)
	} else {
		fmt.Fprintf(s.w, "data: %s\n\n", data)
	}
	s.w.(http.Flusher).Flush()
}

func (s *sse) data(v any) {
	b, _ := json.Marshal(v)
	s.raw("", string(b))
}

// event writes a Responses event: its type and sequence number added.
func (s *sse) event(typ string, v map[string]any) {
	v["type"], v["sequence_number"] = typ, s.seq
	s.seq++
	b, _ := json.Marshal(v)
	s.raw(typ, string(b))
}
