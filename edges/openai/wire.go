// Package openai is the OpenAI function-calling edge: it lists the exposed
// tools a caller's capability may call as OpenAI function definitions
// (Chat Completions or Responses shapes) and runs the function calls a
// model produced, each through edges/dispatch (kernel, durable decision
// event, tool, durable outcome event), answering with tool messages or
// function_call_output items that carry Chio's verdict and receipt id.
//
// The adapter keeps no state: names are computed from the registry, and
// everything else lives in JetStream.
package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Dialect is the OpenAI API a batch came from; its value is the protocol
// recorded on each call's decision event.
type Dialect string

// The two dialects.
const (
	Chat      Dialect = "openai.chat"
	Responses Dialect = "openai.responses"
)

// Bounds of a batch request.
const (
	// MaxBodyBytes bounds a request body: 64 calls of the largest
	// arguments (32 KiB each, escaped in a JSON string) fit.
	MaxBodyBytes = 4 << 20
	// MaxItems bounds the items of one batch: a model's turn rarely
	// holds more than a handful of calls.
	MaxItems = 64
	// MaxCallIDBytes bounds a call id, which is recorded in the receipt.
	MaxCallIDBytes = 128
)

// Item is one entry of a batch: a function call, or a call the adapter
// refuses (Type says which kind).
type Item struct {
	// CallID is the Chat tool_call id or the Responses call_id (the item
	// id for a hosted call that has none).
	CallID string
	// Type is "function" (Chat) or "function_call" (Responses) for a
	// function call; anything else is refused.
	Type      string
	Name      string
	Arguments string
	// Namespace is a Responses function call's namespace: Chio's
	// functions have none, so a call that names one is never run.
	Namespace string
	// ByItemID reports that CallID is the item id (a Responses call
	// that has no call_id, such as mcp_approval_request).
	ByItemID bool
	// BadArguments, when set, says why the call's arguments cannot be
	// read (a model's call whose arguments are not a string): the call is
	// answered invalid_arguments and never reaches the kernel.
	BadArguments string
}

// IsFunction reports whether the item is a function call the adapter runs.
func (it Item) IsFunction() bool { return it.Type == "function" || it.Type == "function_call" }

// Batch is a decoded request: its calls in input order.
type Batch struct {
	Dialect Dialect
	Items   []Item
}

// Error is an OpenAI-style error answer.
type Error struct {
	Status  int
	Message string
	Type    string
	Code    string
	Param   string
	// Extra is added to the error object under "chio" (the receipts of a
	// refused credential's calls).
	Extra any
	// check is the failed check of a refused proof of possession: the
	// 401's challenge names it.
	check dpop.Check
}

func (e *Error) Error() string { return e.Message }

// MarshalJSON writes {"error":{"message","type","code","param"}}, with null
// for an unset code or param as OpenAI does.
func (e *Error) MarshalJSON() ([]byte, error) {
	body := map[string]any{"message": e.Message, "type": e.Type, "code": nullable(e.Code), "param": nullable(e.Param)}
	if e.Extra != nil {
		body["chio"] = e.Extra
	}
	return json.Marshal(map[string]any{"error": body})
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// invalid is a 400 invalid_request_error.
func invalid(code, param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

// DecodeBatch reads a POST /openai/v1/tool-calls body. Accepted shapes:
//
//   - Chat Completions: an assistant message {"role":"assistant","tool_calls":[…]},
//     the same under "message", or {"tool_calls":[…]} alone;
//   - Responses: {"output":[…]} (a response's output as is) or a bare
//     array of output items.
//
// Responses items that need no answer are skipped (see SkipsItem), so a
// response's whole output can be sent; every other item is a call, run
// when it is a function_call and refused otherwise. A body that is no
// such shape or more than one of them, holds no call, more than MaxItems
// items, or a call without a usable id or type is an error, and nothing
// runs. The body is read with strictjson: one with a repeated or
// case-variant member, invalid UTF-8, a lone surrogate or nesting past
// strictjson.MaxDepth is refused (invalid_json) as a whole.
func DecodeBatch(body []byte) (*Batch, *Error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, invalid("invalid_json", "", "the body is empty: send an assistant message with tool_calls, or Responses output items")
	}
	if err := strictjson.Valid(trimmed); err != nil {
		// A repeated or case-variant member ("Tool_Calls" beside
		// "tool_calls"), invalid UTF-8 or too deep a nesting is refused
		// whole: no two readers may see two different batches in it.
		return nil, invalid("invalid_json", "", "the body is not JSON this surface accepts: %v", err)
	}
	if trimmed[0] == '[' {
		return decodeResponses(trimmed, "")
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &top); err != nil {
		return nil, invalid("invalid_request", "", "the body must be a JSON object or an array of Responses output items")
	}
	var shapes []string
	for _, k := range []string{"output", "message", "tool_calls"} {
		if _, ok := top[k]; ok {
			shapes = append(shapes, k)
		}
	}
	if len(shapes) > 1 {
		return nil, invalid("ambiguous_request", "", "the body holds both %s and %s: send one shape, Chat Completions (tool_calls) or Responses (output)", shapes[0], shapes[1])
	}
	switch {
	case top["output"] != nil:
		return decodeResponses(top["output"], "output")
	case top["message"] != nil:
		return decodeChat(top["message"], "message.")
	case top["tool_calls"] != nil:
		return decodeChat(trimmed, "")
	}
	return nil, invalid("invalid_request", "", `no tool calls: send {"role":"assistant","tool_calls":[…]} (Chat Completions) or {"output":[…]} (Responses)`)
}

// chatMessage is the part of a Chat Completions assistant message the
// adapter reads; its other fields (content, refusal, audio…) are ignored.
type chatMessage struct {
	Role      *string    `json:"role"`
	ToolCalls []chatCall `json:"tool_calls"`
}

type chatCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
	Custom *struct {
		Name string `json:"name"`
	} `json:"custom"`
}

func decodeChat(raw json.RawMessage, prefix string) (*Batch, *Error) {
	var m chatMessage
	if err := strictjson.UnmarshalExact(raw, &m); err != nil {
		return nil, invalid("invalid_request", strings.TrimSuffix(prefix, "."), "not a Chat Completions assistant message: %v", err)
	}
	if m.Role != nil && *m.Role != "assistant" {
		return nil, invalid("invalid_request", prefix+"role", "role is %q: tool calls come in an assistant message", *m.Role)
	}
	if err := checkCount(len(m.ToolCalls), prefix+"tool_calls"); err != nil {
		return nil, err
	}
	b := &Batch{Dialect: Chat}
	for i, c := range m.ToolCalls {
		if c.Type == "" {
			return nil, invalid("invalid_request", fmt.Sprintf("%stool_calls[%d].type", prefix, i),
				`%stool_calls[%d] has no type: a function call is {"id","type":"function","function":{"name","arguments"}}`, prefix, i)
		}
		b.Items = append(b.Items, chatItem(c))
		if err := checkID(c.ID, fmt.Sprintf("%stool_calls[%d].id", prefix, i)); err != nil {
			return nil, err
		}
	}
	return b, checkUnique(b.Items, prefix+"tool_calls")
}

// responsesItem is a Responses output item as far as the adapter reads it.
type responsesItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments"` // a string for function_call; tool_search_call's is an object
	Namespace string `json:"namespace"`
	// Execution is tool_search_call's: "server" or "client".
	Execution string `json:"execution"`
}

// skippedItems are Responses output items that need no answer: content,
// and calls OpenAI ran itself (their results are in the response).
var skippedItems = map[string]bool{
	"message": true, "reasoning": true, "compaction": true, "additional_tools": true,
	"web_search_call": true, "file_search_call": true, "code_interpreter_call": true,
	"image_generation_call": true, "mcp_call": true, "mcp_list_tools": true,
	"mcp_approval_response": true,
}

// SkipsItem reports whether a Responses output item of type typ (and,
// for tool_search_call, execution) is skipped: it is not a call the
// client must answer. Outputs (function_call_output, any *_output type)
// are answers already; server-executed calls were run by OpenAI. Every
// other item is a call: a function_call is run, the rest (computer_call,
// shell_call, local_shell_call, apply_patch_call, mcp_approval_request,
// custom_tool_call, a client tool_search_call, types not known here) are
// refused and never run.
func SkipsItem(typ, execution string) bool {
	switch {
	case skippedItems[typ], strings.HasSuffix(typ, "_output"):
		return true
	case typ == "tool_search_call":
		return execution != "client"
	}
	return false
}

func decodeResponses(raw json.RawMessage, param string) (*Batch, *Error) {
	var items []responsesItem
	if err := strictjson.UnmarshalExact(raw, &items); err != nil {
		return nil, invalid("invalid_request", param, "not a list of Responses output items: %v", err)
	}
	if len(items) > MaxItems {
		return nil, checkCount(len(items), param)
	}
	b := &Batch{Dialect: Responses}
	for i, r := range items {
		switch {
		case r.Type == "":
			return nil, invalid("invalid_request", itemParam(param, i)+".type", "item %d has no type", i)
		case SkipsItem(r.Type, r.Execution):
			continue // needs no answer: a response's whole output may be sent
		}
		it := Item{CallID: r.CallID, Type: r.Type, Name: r.Name, Namespace: r.Namespace}
		if it.IsFunction() {
			args, ok := r.Arguments.(string)
			if !ok && r.Arguments != nil {
				return nil, invalid("invalid_request", itemParam(param, i)+".arguments", "item %d: arguments must be a JSON string", i)
			}
			it.Arguments = args
		} else if it.CallID == "" {
			it.CallID, it.ByItemID = r.ID, true // mcp_approval_request carries only an item id
		}
		if err := checkID(it.CallID, itemParam(param, i)+".call_id"); err != nil {
			return nil, err
		}
		b.Items = append(b.Items, it)
	}
	if err := checkCount(len(b.Items), param); err != nil {
		return nil, err
	}
	return b, checkUnique(b.Items, param)
}

func itemParam(param string, i int) string {
	if param == "" {
		return fmt.Sprintf("[%d]", i)
	}
	return fmt.Sprintf("%s[%d]", param, i)
}

func checkCount(n int, param string) *Error {
	switch {
	case n == 0:
		return invalid("no_tool_calls", param, "no tool calls to run")
	case n > MaxItems:
		return invalid("too_many_tool_calls", param, "%d items: at most %d per request", n, MaxItems)
	}
	return nil
}

func checkID(id, param string) *Error {
	switch {
	case id == "":
		return invalid("missing_call_id", param, "%s is required: each result answers one call by its id", param)
	case len(id) > MaxCallIDBytes:
		return invalid("invalid_call_id", param, "%s is longer than %d bytes", param, MaxCallIDBytes)
	}
	return nil
}

// checkUnique refuses two calls with one id: their results could not be
// told apart.
func checkUnique(items []Item, param string) *Error {
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		if seen[it.CallID] {
			return invalid("duplicate_call_id", param, "call id %q appears twice", it.CallID)
		}
		seen[it.CallID] = true
	}
	return nil
}

// Chio is the Chio verdict on one call, in each result under "chio".
type Chio struct {
	Denied bool `json:"denied"`
	// ReceiptRef is the receipt id: present exactly when the call reached
	// the kernel and its decision event is durable.
	ReceiptRef string `json:"receipt_ref,omitempty"`
	// Decision is allow, deny, tool_error, unknown_function,
	// invalid_arguments, unsupported or error (see the README's table).
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	ToolName string `json:"tool_name,omitempty"`
	ServerID string `json:"server_id,omitempty"`
	// FunctionName is the name the model used, when it is not ToolName.
	FunctionName string `json:"function_name,omitempty"`
	// Receipt is the signed receipt, with AwaitReceipt.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}

// Result is the answer to one item.
type Result struct {
	Item   Item
	Output string
	Chio   Chio
	// refusal is the kernel's deny of a call that reached it.
	refusal *kernel.Decision
}

type chatToolMessage struct {
	Role       string `json:"role"`
	ToolCallID string `json:"tool_call_id"`
	Content    string `json:"content"`
	Chio       Chio   `json:"chio"`
}

type responsesOutput struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output string `json:"output"`
	Chio   Chio   `json:"chio"`
}

// refusedItem is a Responses call Chio refused and does not answer: the
// client that runs such calls answers them itself.
type refusedItem struct {
	ID     string `json:"id,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// Answer is the body of a batch's answer, in input order:
// {"messages":[tool messages]} for Chat Completions;
// {"output":[function_call_output items],"refused":[…]} for Responses. A
// refused custom_tool_call is answered with a custom_tool_call_output
// item; the other calls Chio does not run (computer_call, shell_call,
// local_shell_call, apply_patch_call, mcp_approval_request…) have output
// types of their own that Chio does not invent: they are listed under
// "refused" as {"call_id" (or "id"),"type","reason"} instead.
func Answer(d Dialect, results []Result) any {
	if d == Chat {
		msgs := make([]chatToolMessage, len(results))
		for i, r := range results {
			msgs[i] = chatToolMessage{Role: "tool", ToolCallID: r.Item.CallID, Content: r.Output, Chio: r.Chio}
		}
		return map[string]any{"messages": msgs}
	}
	out, ref := []responsesOutput{}, []refusedItem{}
	for _, r := range results {
		switch {
		case r.Item.IsFunction():
			out = append(out, responsesOutput{Type: "function_call_output", CallID: r.Item.CallID, Output: r.Output, Chio: r.Chio})
		case r.Item.Type == "custom_tool_call":
			out = append(out, responsesOutput{Type: "custom_tool_call_output", CallID: r.Item.CallID, Output: r.Output, Chio: r.Chio})
		default:
			it := refusedItem{Type: r.Item.Type, Reason: r.Chio.Reason}
			if r.Item.ByItemID {
				it.ID = r.Item.CallID
			} else {
				it.CallID = r.Item.CallID
			}
			ref = append(ref, it)
		}
	}
	return map[string]any{"output": out, "refused": ref}
}
