package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// responsesAPI is the Responses API through the proxy.
type responsesAPI struct{}

func (responsesAPI) dialect() Dialect { return Responses }
func (responsesAPI) path() string     { return "responses" }

// prepare refuses background responses (the proxy must see each round's
// output to run its calls) and adds the governed functions as flat
// function tools.
func (responsesAPI) prepare(req map[string]json.RawMessage, bs []*Binding) (map[string]bool, *Error) {
	if string(req["background"]) == "true" {
		return nil, invalid("unsupported_parameter", "background", "background responses are not supported through the governing proxy: it runs each round's calls as they come")
	}
	if raw, ok := req["input"]; ok {
		if _, err := inputItems(raw); err != nil {
			return nil, invalid("invalid_type", "input", "%v", err)
		}
	}
	if unstored(req) && req["reasoning"] != nil {
		// Reasoning items are sent back each round; unstored, they must
		// carry their encrypted content to be accepted.
		if werr := includeEncryptedReasoning(req); werr != nil {
			return nil, werr
		}
	}
	return addGoverned(req, bs, FormatResponses, func(t map[string]json.RawMessage) string {
		if typ := stringField(t, "type"); typ == "function" || typ == "custom" {
			return stringField(t, "name")
		}
		return "" // hosted tools (web_search, mcp, file_search…) run upstream
	})
}

// unstored reports a request with store: false.
func unstored(req map[string]json.RawMessage) bool { return string(req["store"]) == "false" }

// encryptedReasoning is the include value that returns reasoning items
// with their encrypted content.
const encryptedReasoning = "reasoning.encrypted_content"

func includeEncryptedReasoning(req map[string]json.RawMessage) *Error {
	var include []string
	if raw, ok := req["include"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &include); err != nil {
			return invalid("invalid_type", "include", "include must be an array of strings")
		}
	}
	for _, v := range include {
		if v == encryptedReasoning {
			return nil
		}
	}
	req["include"], _ = json.Marshal(append(include, encryptedReasoning))
	return nil
}

func (responsesAPI) parse(body []byte) (*turn, error) {
	var resp struct {
		Status string            `json:"status"`
		Output []json.RawMessage `json:"output"`
	}
	if err := strictjson.Unmarshal(body, &resp); err != nil {
		return nil, fmt.Errorf("not a response: %w", err)
	}
	t := &turn{body: body, output: resp.Output, cut: resp.Status != "" && resp.Status != "completed"}
	for i, raw := range resp.Output {
		var r responsesItem
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("output[%d]: %w", i, err)
		}
		if SkipsItem(r.Type, r.Execution) {
			continue
		}
		it := Item{CallID: r.CallID, Type: r.Type, Name: r.Name, Namespace: r.Namespace}
		if s, ok := r.Arguments.(string); ok {
			it.Arguments = s
		} else if it.IsFunction() && r.Arguments != nil {
			it.BadArguments = "arguments must be a JSON string holding an object"
		}
		if it.CallID == "" {
			it.CallID, it.ByItemID = r.ID, true
		}
		t.calls = append(t.calls, turnCall{Item: it, pos: i})
	}
	return t, nil
}

// terminalEvents end a response stream, carrying the whole response.
var terminalEvents = map[string]bool{"response.completed": true, "response.incomplete": true, "response.failed": true}

// parseStream reads the turn from the response its terminal event
// carries; a stream without one was cut off.
func (api responsesAPI) parseStream(events []ssestream.Event) (*turn, error) {
	for i := len(events) - 1; i >= 0; i-- {
		var ev struct {
			Type     string          `json:"type"`
			Response json.RawMessage `json:"response"`
		}
		if err := strictjson.Unmarshal(events[i].Data, &ev); err != nil {
			return nil, fmt.Errorf("not a response stream event: %w", err)
		}
		if terminalEvents[ev.Type] {
			t, err := api.parse(ev.Response)
			if err != nil {
				return nil, err
			}
			t.events = events
			return t, nil
		}
	}
	return nil, errors.New("the stream ended before response.completed")
}

// inputItems reads a request's input as a list of items: a string is one
// user message.
func inputItems(raw json.RawMessage) ([]json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		msg, err := json.Marshal(map[string]string{"role": "user", "content": s})
		return []json.RawMessage{msg}, err
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("input must be a string or an array of input items")
	}
	return items, nil
}

// droppedReasoning reports a reasoning item without encrypted content:
// an unstored response's reasoning the upstream could not take back.
func droppedReasoning(item json.RawMessage) bool {
	var r struct {
		Type             string  `json:"type"`
		EncryptedContent *string `json:"encrypted_content"`
	}
	return json.Unmarshal(item, &r) == nil && r.Type == "reasoning" && r.EncryptedContent == nil
}

// extend appends the round's whole output (reasoning, messages, calls)
// and one function_call_output per result to the input, so that the
// next round works with store:false and with any compatible upstream. In
// a conversation the upstream keeps the items itself: only the outputs
// are sent.
func (responsesAPI) extend(req map[string]json.RawMessage, t *turn, results []Result) error {
	var items []json.RawMessage
	if raw, ok := req["conversation"]; !ok || string(raw) == "null" {
		in, err := inputItems(req["input"])
		if err != nil {
			return err
		}
		items = in
		for _, o := range t.output {
			if unstored(req) && droppedReasoning(o) {
				continue
			}
			items = append(items, o)
		}
	}
	for _, r := range results {
		raw, err := json.Marshal(map[string]string{"type": "function_call_output", "call_id": r.Item.CallID, "output": r.Output})
		if err != nil {
			return fmt.Errorf("encode an output: %w", err)
		}
		items = append(items, raw)
	}
	raw, err := json.Marshal(items)
	if err != nil {
		return fmt.Errorf("encode input: %w", err)
	}
	req["input"] = raw
	return nil
}

// final is the response (or its events) without the held calls, the
// receipt ids in metadata and the report under "chio". A stream's events
// keep their order; output indexes and sequence numbers are renumbered
// where held items left gaps.
func (responsesAPI) final(t *turn, deferred map[int]bool, rep *proxyReport) ([]byte, []ssestream.Event, error) {
	held := heldPositions(t, deferred)
	if t.events == nil {
		body, err := editJSON(t.body, func(resp map[string]any) { reportIn(resp, held, rep) })
		return body, nil, err
	}
	out := make([]ssestream.Event, 0, len(t.events))
	seq := -1
	for _, ev := range t.events {
		drop := false
		data, err := editJSON(ev.Data, func(e map[string]any) {
			if oi, ok := intField(e, "output_index"); ok {
				if held[oi] {
					drop = true
					return
				}
				e["output_index"] = shifted(oi, held)
			}
			if resp, ok := e["response"].(map[string]any); ok {
				reportIn(resp, held, rep)
			}
			if n, ok := intField(e, "sequence_number"); ok {
				if seq < 0 {
					seq = n
				}
				e["sequence_number"] = seq
				seq++
			}
		})
		if err != nil {
			return nil, nil, err
		}
		if !drop {
			out = append(out, ssestream.Event{Type: ev.Type, Data: data})
		}
	}
	return nil, out, nil
}

// reportIn edits a response object: held output items removed, the
// receipt ids and round count in metadata (chio_receipts,
// chio_tool_rounds), the report under "chio".
func reportIn(resp map[string]any, held map[int]bool, rep *proxyReport) {
	dropPositions(resp, "output", held, nil, false)
	if _, ok := resp["output"]; !ok {
		resp["output"] = []any{}
	}
	md := asObject(resp["metadata"])
	if md == nil {
		md = map[string]any{}
	}
	md["chio_receipts"] = strings.Join(rep.receiptIDs(), ",")
	md["chio_tool_rounds"] = strconv.Itoa(rep.Rounds)
	resp["metadata"] = md
	resp["chio"] = rep
}
