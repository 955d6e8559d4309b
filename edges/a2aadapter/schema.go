package a2aadapter

import (
	"encoding/json"
	"fmt"
)

// Follow-up modes of the tool contract: each is an argument object, alone
// in the arguments (mutually exclusive with the send fields).
const (
	ModeGetTask          = "get_task"           // {id, history_length?}
	ModeSubscribeTask    = "subscribe_task"     // {id}
	ModeCancelTask       = "cancel_task"        // {id, metadata?}
	ModeCreatePushConfig = "create_push_config" // {task_id, url, id?, token?, authentication?}
	ModeGetPushConfig    = "get_push_config"    // {task_id, id}
	ModeListPushConfigs  = "list_push_configs"  // {task_id, page_size?, page_token?}
	ModeDeletePushConfig = "delete_push_config" // {task_id, id}
)

// features are what the card advertises that changes the contract.
type features struct {
	streaming, push, history bool
}

// inputSchema is the tool contract, narrowed to what the card advertises:
// stream and subscribe_task only with streaming, the push family only with
// push notifications, history_length only when the interface honours it
// (every A2A 1.x interface; a 0.3 one when the card sets
// capabilities.stateTransitionHistory). The oneOf states the exclusivity
// that parseArgs enforces.
func inputSchema(f features) (json.RawMessage, error) {
	str := func(d string) map[string]any {
		return map[string]any{"type": "string", "minLength": 1, "description": d}
	}
	obj := func(d string) map[string]any { return map[string]any{"type": "object", "description": d} }
	strict := func(props map[string]any, required ...string) map[string]any {
		o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			o["required"] = required
		}
		return o
	}
	histLen := map[string]any{"type": "integer", "minimum": 0, "description": "at most this many recent messages of the task history (0: none)"}

	props := map[string]any{
		"message":            map[string]any{"type": "string", "description": "text, sent as an A2A text part"},
		"data":               map[string]any{"description": "any JSON value, sent as an A2A data part"},
		"context_id":         str("the A2A context to continue"),
		"task_id":            str("an A2A task this tool observed, to continue"),
		"reference_task_ids": map[string]any{"type": "array", "items": map[string]any{"type": "string", "minLength": 1}, "description": "A2A tasks this tool observed, given as context"},
		"metadata":           obj("SendMessageRequest.metadata (the key \"chio\" is reserved)"),
		"message_metadata":   obj("Message.metadata (the key \"chio\" is reserved)"),
		"return_immediately": map[string]any{"type": "boolean", "description": "answer as soon as the task exists instead of when it ends"},
	}
	getTask := map[string]any{"id": str("task id")}
	if f.history {
		props["history_length"] = histLen
		getTask["history_length"] = histLen
	}
	modes := []string{ModeGetTask, ModeCancelTask}
	props[ModeGetTask] = strict(getTask, "id")
	props[ModeCancelTask] = strict(map[string]any{"id": str("task id"), "metadata": obj("CancelTaskRequest.metadata")}, "id")
	if f.streaming {
		props["stream"] = map[string]any{"type": "boolean", "description": "stream the task's events (SendStreamingMessage)"}
		props[ModeSubscribeTask] = strict(map[string]any{"id": str("task id")}, "id")
		modes = append(modes, ModeSubscribeTask)
	}
	if f.push {
		ref := strict(map[string]any{"task_id": str("task id"), "id": str("push config id")}, "task_id", "id")
		props[ModeCreatePushConfig] = strict(map[string]any{
			"task_id": str("task id"),
			"url":     str("callback URL: https, or http to a loopback host"),
			"id":      str("push config id"),
			"token":   str("token the partner echoes with each notification"),
			"authentication": strict(map[string]any{
				"scheme":      str("HTTP authentication scheme the partner uses on the callback"),
				"credentials": str("credentials for that scheme"),
			}, "scheme"),
		}, "task_id", "url")
		props[ModeGetPushConfig] = ref
		props[ModeListPushConfigs] = strict(map[string]any{
			"task_id":    str("task id"),
			"page_size":  map[string]any{"type": "integer", "minimum": 1, "maximum": 100},
			"page_token": str("page token from a previous list"),
		}, "task_id")
		props[ModeDeletePushConfig] = ref
		modes = append(modes, ModeCreatePushConfig, ModeGetPushConfig, ModeListPushConfigs, ModeDeletePushConfig)
	}

	anyMode := make([]any, len(modes))
	branches := []any{map[string]any{
		"anyOf": []any{map[string]any{"required": []string{"message"}}, map[string]any{"required": []string{"data"}}},
		"not":   map[string]any{"anyOf": anyMode},
	}}
	for i, m := range modes {
		anyMode[i] = map[string]any{"required": []string{m}}
		branches = append(branches, map[string]any{"required": []string{m}, "maxProperties": 1})
	}
	schema := map[string]any{
		"type":                 "object",
		"description":          "Send a message to the skill (message and/or data, with the optional send fields), or one follow-up mode alone",
		"properties":           props,
		"additionalProperties": false,
		"oneOf":                branches,
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	return raw, nil
}
