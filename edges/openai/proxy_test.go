package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/openaitest"
)

const upstreamKey = "sk-upstream-secret-0123456789"

// startProxy starts the adapter with its proxy in front of an in-test model.
func startProxy(t testing.TB, maxRounds int, opts ...Option) (*fixture, *openaitest.Model) {
	t.Helper()
	m := openaitest.Start(t, upstreamKey)
	u, err := url.Parse(m.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	return start(t, append(opts, WithUpstream(Upstream{BaseURL: u, APIKey: upstreamKey, MaxRounds: maxRounds}))...), m
}

// client is the official client pointed at the adapter, the capability
// as its API key.
func client(f *fixture, token string) oa.Client {
	return oa.NewClient(option.WithBaseURL(f.url+"/openai/v1/"), option.WithAPIKey(token), option.WithMaxRetries(0))
}

// proxyAnswer is what a client learnt from one request.
type proxyAnswer struct {
	text     string
	calls    []string // names of the calls handed to the client
	callIDs  []string
	header   http.Header
	metadata map[string]string // Responses
	report   string            // the "chio" member, when the answer has one
}

// ask sends instruction through the proxy with the official client, in
// dialect d, streamed or not, with the client's own tools.
func ask(t *testing.T, c oa.Client, d Dialect, stream bool, instruction string, clientTools ...string) (*proxyAnswer, error) {
	t.Helper()
	ctx := context.Background()
	var hr *http.Response
	ans := &proxyAnswer{}
	if d == Chat {
		p := oa.ChatCompletionNewParams{Model: "test-model", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(instruction)}}
		for _, n := range clientTools {
			p.Tools = append(p.Tools, oa.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: n,
				Parameters: shared.FunctionParameters{"type": "object"}}))
		}
		var msg oa.ChatCompletionMessage
		if stream {
			p.StreamOptions = oa.ChatCompletionStreamOptionsParam{IncludeUsage: oa.Bool(true)}
			st := c.Chat.Completions.NewStreaming(ctx, p, option.WithResponseInto(&hr))
			acc := oa.ChatCompletionAccumulator{}
			for st.Next() {
				if !acc.AddChunk(st.Current()) {
					t.Fatalf("the accumulator refused chunk %s", st.Current().RawJSON())
				}
			}
			if err := st.Err(); err != nil {
				return nil, err
			}
			if len(acc.Choices) == 0 {
				t.Fatal("no choices streamed")
			}
			msg = acc.Choices[0].Message
		} else {
			comp, err := c.Chat.Completions.New(ctx, p, option.WithResponseInto(&hr))
			if err != nil {
				return nil, err
			}
			msg = comp.Choices[0].Message
			ans.report = comp.JSON.ExtraFields["chio"].Raw()
		}
		ans.text = msg.Content
		for _, tc := range msg.ToolCalls {
			ans.calls, ans.callIDs = append(ans.calls, tc.Function.Name), append(ans.callIDs, tc.ID)
		}
		ans.header = hr.Header
		return ans, nil
	}
	p := responses.ResponseNewParams{Model: "test-model", Input: responses.ResponseNewParamsInputUnion{OfString: oa.String(instruction)}}
	for _, n := range clientTools {
		p.Tools = append(p.Tools, responses.ToolParamOfFunction(n, map[string]any{"type": "object"}, false))
	}
	var resp responses.Response
	if stream {
		st := c.Responses.NewStreaming(ctx, p, option.WithResponseInto(&hr))
		var deltas strings.Builder
		completed := false
		seq, added := int64(-1), int64(0)
		for st.Next() {
			ev := st.Current()
			// The stream stays well-formed: sequence numbers consecutive,
			// items added at output indexes 0, 1, …
			if seq >= 0 && ev.SequenceNumber != seq+1 {
				t.Fatalf("sequence_number %d after %d", ev.SequenceNumber, seq)
			}
			seq = ev.SequenceNumber
			if ev.Type == "response.output_item.added" {
				if ev.OutputIndex != added {
					t.Fatalf("item added at output_index %d, want %d", ev.OutputIndex, added)
				}
				added++
			}
			switch ev.Type {
			case "response.output_text.delta":
				deltas.WriteString(ev.Delta)
			case "response.completed":
				resp, completed = ev.Response, true
			}
		}
		if err := st.Err(); err != nil {
			return nil, err
		}
		if !completed {
			t.Fatal("no response.completed event")
		}
		if deltas.String() != resp.OutputText() {
			t.Fatalf("streamed text %q, completed response %q", deltas.String(), resp.OutputText())
		}
	} else {
		r, err := c.Responses.New(ctx, p, option.WithResponseInto(&hr))
		if err != nil {
			return nil, err
		}
		resp = *r
	}
	ans.text, ans.metadata, ans.header = resp.OutputText(), resp.Metadata, hr.Header
	ans.report = resp.JSON.ExtraFields["chio"].Raw()
	for _, it := range resp.Output {
		if it.Type == "function_call" {
			ans.calls, ans.callIDs = append(ans.calls, it.Name), append(ans.callIDs, it.CallID)
		}
	}
	return ans, nil
}

var proxyCases = []struct {
	name    string
	dialect Dialect
	stream  bool
}{
	{"chat", Chat, false},
	{"chat stream", Chat, true},
	{"responses", Responses, false},
	{"responses stream", Responses, true},
}

func receiptsOf(h http.Header) []string {
	if v := h.Get(ReceiptsHeader); v != "" {
		return strings.Split(v, ",")
	}
	return nil
}

// The loop, for both APIs, streamed and not: the model calls a governed
// tool that succeeds and one that fails; the proxy runs both under the
// caller's capability, feeds the results back, and the client gets the
// model's final answer with the two receipts. The upstream saw the
// operator's key, never the capability.
func TestProxyRunsGovernedToolRounds(t *testing.T) {
	for _, tc := range proxyCases {
		t.Run(tc.name, func(t *testing.T) {
			f, m := startProxy(t, 0)
			tok := fullToken(t)
			ans, err := ask(t, client(f, tok), tc.dialect, tc.stream, "use hello_task explode")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(ans.text, "results: ") || !strings.Contains(ans.text, "hello from a2a") ||
				!strings.Contains(ans.text, "chio: the tool failed: boom") || len(ans.calls) != 0 {
				t.Fatalf("final answer %+v", ans)
			}
			ids := receiptsOf(ans.header)
			if len(ids) != 2 || ans.header.Get(RoundsHeader) != "2" {
				t.Fatalf("headers %v", ans.header)
			}
			if tc.dialect == Responses && (ans.metadata["chio_receipts"] != strings.Join(ids, ",") || ans.metadata["chio_tool_rounds"] != "2") {
				t.Fatalf("metadata %v, receipts %v", ans.metadata, ids)
			}
			if !tc.stream {
				var rep proxyReport
				if err := json.Unmarshal([]byte(ans.report), &rep); err != nil || rep.Rounds != 2 || len(rep.Calls) != 2 ||
					rep.Calls[0].Decision != DecisionAllow || rep.Calls[1].Decision != DecisionToolError || rep.Calls[1].ReceiptRef != ids[1] {
					t.Fatalf("report %s: %v", ans.report, err)
				}
			}
			evs := natstest.Decisions(t, f.js)
			for i, want := range []string{hello.ToolName, "explode"} {
				d, ok := evs[ids[i]]
				if !ok || d.ToolName != want {
					t.Fatalf("receipt %s: %+v", ids[i], d)
				}
				meta := metaOf(t, d)
				callID := meta.OpenAI.ToolCallID
				if tc.dialect == Responses {
					callID = meta.OpenAI.CallID
				}
				if meta.Protocol != string(tc.dialect) || callID != "call_1_"+string(rune('0'+i)) {
					t.Fatalf("receipt %s metadata %+v", ids[i], meta)
				}
			}
			if m.Count() != 2 {
				t.Fatalf("upstream requests: %d", m.Count())
			}
			for i := range m.Count() {
				if a := m.Auth(i); a != "Bearer "+upstreamKey {
					t.Fatalf("upstream request %d sent %q", i, a)
				}
			}
			first, _ := json.Marshal(m.Request(0)["tools"])
			if !strings.Contains(string(first), `"name":"hello_task"`) {
				t.Fatalf("governed tools not added upstream: %s", first)
			}
			second, _ := json.Marshal(m.Request(1))
			if strings.Contains(string(second), `"chio"`) || !strings.Contains(string(second), "call_1_1") {
				t.Fatalf("round 2 request: %s", second)
			}
		})
	}
}

// The receipt table through the proxy: allow, guard denial (a tool the
// capability does not grant), unknown function and bad arguments in one
// turn; each is answered to the model, the failures never stop the calls
// after them, and only calls that reached the kernel have receipts.
func TestProxyDenyPaths(t *testing.T) {
	f, m := startProxy(t, 0)
	tok := capability(t, "cap-hello", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), hello.ServerID)
	ans, err := ask(t, client(f, tok), Chat, false, "use explode nosuch hello_task! hello_task")
	if err != nil {
		t.Fatal(err)
	}
	var rep proxyReport
	if err := json.Unmarshal([]byte(ans.report), &rep); err != nil || len(rep.Calls) != 4 {
		t.Fatalf("report %s: %v", ans.report, err)
	}
	want := []struct {
		decision string
		receipt  bool
	}{{DecisionDeny, true}, {DecisionUnknownFunction, false}, {DecisionInvalidArguments, false}, {DecisionAllow, true}}
	for i, w := range want {
		c := rep.Calls[i]
		if c.Decision != w.decision || (c.ReceiptRef != "") != w.receipt || c.Denied != (w.decision != DecisionAllow) {
			t.Fatalf("call %d: %+v, want %+v", i, c, w)
		}
	}
	if got := receiptsOf(ans.header); len(got) != 2 || got[0] != rep.Calls[0].ReceiptRef || got[1] != rep.Calls[3].ReceiptRef {
		t.Fatalf("receipts header %v", got)
	}
	for _, s := range []string{"chio: denied at", "unknown function", "arguments must be a JSON object", "hello from a2a"} {
		if !strings.Contains(ans.text, s) {
			t.Fatalf("the model was not told %q: %s", s, ans.text)
		}
	}
	// The capability lists only hello_task to the model.
	first, _ := json.Marshal(m.Request(0)["tools"])
	if strings.Contains(string(first), "explode") {
		t.Fatalf("ungranted tool offered: %s", first)
	}
}

// A turn that calls the client's own tool ends the loop: the client gets
// its call (renumbered, alone) and the governed call in the same turn is
// held back, not run.
func TestProxyMixedTurnHoldsGovernedCalls(t *testing.T) {
	for _, tc := range proxyCases {
		t.Run(tc.name, func(t *testing.T) {
			f, m := startProxy(t, 0)
			ans, err := ask(t, client(f, fullToken(t)), tc.dialect, tc.stream, "use hello_task client_lookup", "client_lookup")
			if err != nil {
				t.Fatal(err)
			}
			if len(ans.calls) != 1 || ans.calls[0] != "client_lookup" || ans.callIDs[0] != "call_1_1" {
				t.Fatalf("client calls %v %v", ans.calls, ans.callIDs)
			}
			if ids := receiptsOf(ans.header); len(ids) != 0 || m.Count() != 1 || len(natstest.Decisions(t, f.js)) != 0 {
				t.Fatalf("receipts %v, upstream requests %d", ids, m.Count())
			}
			if (tc.dialect == Responses || !tc.stream) && !strings.Contains(ans.report, `"deferred":[{"call_id":"call_1_0","function":"hello_task"}]`) {
				t.Fatalf("report %s", ans.report)
			}
			// The client has tools of its own: one call per turn, unless it
			// asked otherwise.
			if m.Request(0)["parallel_tool_calls"] != false {
				t.Fatalf("parallel_tool_calls %v", m.Request(0)["parallel_tool_calls"])
			}
		})
	}
}

// Requests the proxy refuses never reach the upstream and run nothing.
func TestProxyRefusesBeforeUpstream(t *testing.T) {
	f, m := startProxy(t, 0)
	tok := fullToken(t)
	expired := capability(t, "cap-old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), hello.ServerID)
	chat := `{"model":"m","messages":[{"role":"user","content":"use hello_task"}]}`
	cases := []struct {
		name, path, token, ctype, body string
		status                         int
		code                           string
	}{
		{"no capability", ChatCompletionsPath, "", "application/json", chat, 401, "missing_capability"},
		{"expired capability", ResponsesPath, expired, "application/json", `{"model":"m","input":"hi"}`, 401, "invalid_capability"},
		{"not JSON", ChatCompletionsPath, tok, "application/json", `{"model":`, 400, "invalid_json"},
		{"wrong content type", ChatCompletionsPath, tok, "text/plain", chat, 415, "unsupported_media_type"},
		{"no messages", ChatCompletionsPath, tok, "application/json", `{"model":"m"}`, 400, "invalid_request"},
		{"n=2", ChatCompletionsPath, tok, "application/json", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, 400, "unsupported_parameter"},
		{"stream not bool", ChatCompletionsPath, tok, "application/json", `{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_type"},
		{"client tool named like a governed one", ChatCompletionsPath, tok, "application/json",
			`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"hello_task"}}]}`, 400, "tool_name_conflict"},
		{"responses tool conflict", ResponsesPath, tok, "application/json",
			`{"model":"m","input":"x","tools":[{"type":"function","name":"hello_task","parameters":{}}]}`, 400, "tool_name_conflict"},
		{"background", ResponsesPath, tok, "application/json", `{"model":"m","input":"x","background":true}`, 400, "unsupported_parameter"},
		{"bad input", ResponsesPath, tok, "application/json", `{"model":"m","input":42}`, 400, "invalid_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := map[string]string{"Content-Type": c.ctype}
			if c.token != "" {
				h["Authorization"] = "Bearer " + c.token
			}
			status, _, body := doWith(t, http.MethodPost, f.url+c.path, h, []byte(c.body))
			var e openAIError
			if err := json.Unmarshal(body, &e); status != c.status || err != nil || e.Error.Code != c.code {
				t.Fatalf("%d %s, want %d %s", status, body, c.status, c.code)
			}
		})
	}
	if m.Count() != 0 || len(natstest.Decisions(t, f.js)) != 0 {
		t.Fatalf("upstream requests %d", m.Count())
	}
}

// A model that never stops calling governed tools is cut off at the
// bound: 502, with the calls that ran and their receipts.
func TestProxyMaxRounds(t *testing.T) {
	f, m := startProxy(t, 3)
	_, err := ask(t, client(f, fullToken(t)), Responses, false, "forever hello_task")
	var apiErr *oa.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Code != "max_tool_rounds" {
		t.Fatalf("err %v", err)
	}
	if m.Count() != 3 || len(receiptsOf(apiErr.Response.Header)) != 2 || len(natstest.Decisions(t, f.js)) != 2 {
		t.Fatalf("upstream requests %d, header %v", m.Count(), apiErr.Response.Header)
	}
	if !strings.Contains(apiErr.RawJSON(), `"calls":[{"round":1`) {
		t.Fatalf("error body %s", apiErr.RawJSON())
	}
}

// An upstream error is relayed as is; an upstream that does not answer is
// a 502. The operator's key is in neither.
func TestProxyUpstreamFailures(t *testing.T) {
	f, m := startProxy(t, 0)
	m.Fail(http.StatusTooManyRequests)
	_, err := ask(t, client(f, fullToken(t)), Chat, false, "hi")
	var apiErr *oa.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("err %v", err)
	}
	m.Server.Close()
	_, err = ask(t, client(f, fullToken(t)), Responses, true, "hi")
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Code != "upstream_unavailable" ||
		strings.Contains(apiErr.RawJSON(), upstreamKey) {
		t.Fatalf("err %v", err)
	}
}

// Once a governed tool has run, a failure is answered with
// X-Should-Retry: false: the official client, which retries 5xx by
// default, does not send the request again and run the tool twice.
func TestProxyNoRetryAfterToolsRan(t *testing.T) {
	f, m := startProxy(t, 0)
	m.FailFrom(2, http.StatusServiceUnavailable)
	c := oa.NewClient(option.WithBaseURL(f.url+"/openai/v1/"), option.WithAPIKey(fullToken(t)), option.WithMaxRetries(2),
		option.WithRequestTimeout(30*time.Second))
	_, err := ask(t, c, Chat, false, "use hello_task")
	var apiErr *oa.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Response.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("err %v", err)
	}
	if m.Count() != 2 || len(natstest.Decisions(t, f.js)) != 1 {
		t.Fatalf("upstream requests %d, decisions %d: the request was retried", m.Count(), len(natstest.Decisions(t, f.js)))
	}
}

// A forced tool choice is honoured once: after a governed round it is
// "auto", so the model can answer.
func TestProxyRelaxesForcedToolChoice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		choice string
	}{{"required", `"required"`}, {"named function", `{"type":"function","function":{"name":"hello_task"}}`}} {
		t.Run(tc.name, func(t *testing.T) {
			f, m := startProxy(t, 0)
			body := `{"model":"m","tool_choice":` + tc.choice + `,"messages":[{"role":"user","content":"use hello_task"}]}`
			status, h, resp := do(t, http.MethodPost, f.url+ChatCompletionsPath, fullToken(t), []byte(body))
			if status != http.StatusOK || h.Get(RoundsHeader) != "2" || !strings.Contains(string(resp), "results: ") {
				t.Fatalf("%d %v %s", status, h, resp)
			}
			if got := m.Request(1)["tool_choice"]; got != "auto" {
				t.Fatalf("round 2 tool_choice %v", got)
			}
		})
	}
}

// What compatible servers (and OpenAI) may send: Chat tool calls without
// a type are still function calls; Responses arguments that are not a
// string are answered invalid_arguments without a run; data split over
// lines streams through; an upstream refusing the operator's key is a 502
// that names the proxy's credentials, with no part of the upstream's
// answer.
func TestProxyUpstreamQuirks(t *testing.T) {
	cases := []struct {
		name     string
		q        openaitest.Quirks
		d        Dialect
		stream   bool
		receipts int
		text     string
	}{
		{"chat call without type", openaitest.Quirks{OmitCallType: true}, Chat, false, 1, "hello from a2a"},
		{"responses object arguments", openaitest.Quirks{ObjectArguments: true}, Responses, false, 0, "arguments must be a JSON string"},
		{"chat data over two lines", openaitest.Quirks{SplitData: true}, Chat, true, 1, "hello from a2a"},
		{"responses data over two lines", openaitest.Quirks{SplitData: true}, Responses, true, 1, "hello from a2a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, m := startProxy(t, 0)
			m.SetQuirks(tc.q)
			ans, err := ask(t, client(f, fullToken(t)), tc.d, tc.stream, "use hello_task")
			if err != nil {
				t.Fatal(err)
			}
			if got := receiptsOf(ans.header); len(got) != tc.receipts || !strings.Contains(ans.text, tc.text) || len(ans.calls) != 0 {
				t.Fatalf("receipts %v, answer %+v", got, ans)
			}
		})
	}
	t.Run("upstream refuses the key", func(t *testing.T) {
		m := openaitest.Start(t, "sk-another-key")
		u, _ := url.Parse(m.BaseURL())
		f := start(t, WithUpstream(Upstream{BaseURL: u, APIKey: upstreamKey}))
		_, err := ask(t, client(f, fullToken(t)), Chat, false, "hi")
		var apiErr *oa.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || apiErr.Code != "upstream_auth" ||
			strings.Contains(apiErr.RawJSON(), "wrong upstream key") {
			t.Fatalf("err %v", err)
		}
	})
}
