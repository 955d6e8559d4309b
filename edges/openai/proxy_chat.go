package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// chatAPI is Chat Completions through the proxy.
type chatAPI struct{}

func (chatAPI) dialect() Dialect { return Chat }
func (chatAPI) path() string     { return "chat/completions" }

// prepare refuses n > 1 (the tool rounds follow one choice) and adds the
// governed functions as tool envelopes.
func (chatAPI) prepare(req map[string]json.RawMessage, bs []*Binding) (map[string]bool, *Error) {
	var msgs []json.RawMessage
	if err := json.Unmarshal(req["messages"], &msgs); err != nil || len(msgs) == 0 {
		return nil, invalid("invalid_request", "messages", "messages must be a non-empty array of chat messages")
	}
	if raw, ok := req["n"]; ok && string(raw) != "null" {
		var n int
		if err := json.Unmarshal(raw, &n); err != nil || n != 1 {
			return nil, invalid("unsupported_parameter", "n", "n must be 1 through the governing proxy: its tool rounds follow one choice")
		}
	}
	return addGoverned(req, bs, FormatChat, func(t map[string]json.RawMessage) string {
		var inner map[string]json.RawMessage
		_ = json.Unmarshal(t[stringField(t, "type")], &inner) // {"type":"function","function":{"name"}}, likewise custom
		return stringField(inner, "name")
	})
}

// chatChoice is the part of a completion's first choice the proxy reads.
type chatChoice struct {
	FinishReason string `json:"finish_reason"`
	Message      struct {
		Content   *string    `json:"content"`
		ToolCalls []chatCall `json:"tool_calls"`
	} `json:"message"`
}

func (chatAPI) parse(body []byte) (*turn, error) {
	var resp struct {
		Choices []chatChoice `json:"choices"`
	}
	if err := strictjson.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("not a chat completion: %w", err)
	}
	if len(resp.Choices) == 0 {
		return nil, errors.New("the chat completion has no choices")
	}
	m := resp.Choices[0].Message
	t := &turn{body: body, content: m.Content, cut: cutShort(resp.Choices[0].FinishReason)}
	for i, c := range m.ToolCalls {
		t.calls = append(t.calls, turnCall{Item: chatItem(c), pos: i})
	}
	return t, nil
}

// cutShort reports a finish reason that left the turn unfinished.
func cutShort(reason string) bool { return reason == "length" || reason == "content_filter" }

func chatItem(c chatCall) Item {
	it := Item{CallID: c.ID, Type: c.Type}
	if it.Type == "" && c.Function != nil {
		it.Type = "function" // some compatible servers leave it out
	}
	switch {
	case c.Function != nil:
		it.Name, it.Arguments = c.Function.Name, c.Function.Arguments
	case c.Custom != nil:
		it.Name = c.Custom.Name
	}
	return it
}

// chatChunk is the part of a completion chunk the proxy reads.
type chatChunk struct {
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function *struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
				Custom *struct {
					Name string `json:"name"`
				} `json:"custom"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

// parseStream assembles the turn from its chunks: the content and each
// tool call (by index) concatenated in order. A stream that ends before
// [DONE] is cut off, and its calls may be incomplete: an error.
func (chatAPI) parseStream(events []ssestream.Event) (*turn, error) {
	t := &turn{events: events}
	var content strings.Builder
	hasContent, done := false, false
	calls := map[int]*Item{}
	for _, ev := range events {
		if string(ev.Data) == "[DONE]" {
			done = true
			continue
		}
		var ch chatChunk
		if err := strictjson.Unmarshal(ev.Data, &ch); err != nil {
			return nil, fmt.Errorf("not a chat completion chunk: %w", err)
		}
		if len(ch.Choices) == 0 {
			continue // the usage chunk
		}
		if fr := ch.Choices[0].FinishReason; fr != nil && cutShort(*fr) {
			t.cut = true
		}
		d := ch.Choices[0].Delta
		if d.Content != nil {
			hasContent = true
			content.WriteString(*d.Content)
		}
		for _, tc := range d.ToolCalls {
			it := calls[tc.Index]
			if it == nil {
				it = &Item{}
				calls[tc.Index] = it
			}
			if tc.ID != "" {
				it.CallID = tc.ID
			}
			if tc.Type != "" {
				it.Type = tc.Type
			}
			switch {
			case tc.Function != nil:
				it.Name += tc.Function.Name
				it.Arguments += tc.Function.Arguments
				if it.Type == "" {
					it.Type = "function"
				}
			case tc.Custom != nil:
				it.Name += tc.Custom.Name
			}
		}
	}
	if !done {
		return nil, errors.New("the stream ended before [DONE]")
	}
	if hasContent {
		s := content.String()
		t.content = &s
	}
	idx := make([]int, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		t.calls = append(t.calls, turnCall{Item: *calls[i], pos: i})
	}
	return t, nil
}

// extend appends the assistant's turn (its text and calls) and one tool
// message per result. Chio's verdicts stay out: the model sees only what
// a tool message holds.
func (chatAPI) extend(req map[string]json.RawMessage, t *turn, results []Result) error {
	// Raw: the client's messages go on as they came, numbers unrounded.
	var msgs []any
	var prior []json.RawMessage
	if err := json.Unmarshal(req["messages"], &prior); err != nil {
		return fmt.Errorf("read messages: %w", err)
	}
	for _, m := range prior {
		msgs = append(msgs, m)
	}
	calls := make([]any, len(t.calls))
	for i, c := range t.calls {
		calls[i] = map[string]any{"id": c.CallID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
	}
	msgs = append(msgs, map[string]any{"role": "assistant", "content": t.content, "tool_calls": calls})
	for _, r := range results {
		msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": r.Item.CallID, "content": r.Output})
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		return fmt.Errorf("encode messages: %w", err)
	}
	req["messages"] = raw
	return nil
}

// final is the completion (or its chunks) without the held calls; a
// whole completion also carries the report under "chio".
func (chatAPI) final(t *turn, deferred map[int]bool, rep *proxyReport) ([]byte, []ssestream.Event, error) {
	held := heldPositions(t, deferred)
	if t.events != nil {
		if len(held) == 0 {
			return nil, t.events, nil
		}
		out := make([]ssestream.Event, 0, len(t.events))
		for _, ev := range t.events {
			if string(ev.Data) == "[DONE]" {
				out = append(out, ev)
				continue
			}
			data, err := editJSON(ev.Data, func(chunk map[string]any) {
				for _, ch := range anySlice(chunk["choices"]) {
					if delta, ok := asObject(ch)["delta"].(map[string]any); ok {
						dropPositions(delta, "tool_calls", held, func(v map[string]any) (int, bool) { return intField(v, "index") }, true)
					}
				}
			})
			if err != nil {
				return nil, nil, err
			}
			out = append(out, ssestream.Event{Type: ev.Type, Data: data})
		}
		return nil, out, nil
	}
	body, err := editJSON(t.body, func(resp map[string]any) {
		if choices := anySlice(resp["choices"]); len(choices) > 0 {
			if msg, ok := asObject(choices[0])["message"].(map[string]any); ok {
				dropPositions(msg, "tool_calls", held, nil, false)
			}
		}
		resp["chio"] = rep
	})
	return body, nil, err
}
