package mcp

import (
	"bytes"
	"encoding/json"
)

// message is one JSON-RPC message, its members undecoded.
type message map[string]json.RawMessage

// parseBody reads one message or a batch; ok is false when body is neither
// (the SDK answers that).
func parseBody(body []byte) (msgs []message, batch bool, ok bool) {
	t := bytes.TrimSpace(body)
	if len(t) > 0 && t[0] == '[' {
		if json.Unmarshal(t, &msgs) != nil || len(msgs) == 0 {
			return nil, true, false
		}
		return msgs, true, true
	}
	var m message
	if json.Unmarshal(t, &m) != nil || m == nil {
		return nil, false, false
	}
	return []message{m}, false, true
}

func (m message) method() string {
	s, _ := jsonString(m["method"])
	return s
}

// toolCall is m read as a tools/call request, if it is one naming a tool.
func (m message) toolCall() (toolCall, bool) {
	if _, ok := m["id"]; !ok || m.method() != methodCallTool {
		return toolCall{}, false
	}
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(m["params"], &p) != nil || p.Name == "" {
		return toolCall{}, false
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(p.Meta, &meta) // not an object: the SDK refuses the call
	return toolCall{name: p.Name, args: p.Arguments, requestID: decodeID(m["id"]), proof: meta[MetaDPoPProof]}, true
}

// request reports whether m is a request (a method and an id).
func (m message) request() bool {
	_, id := m["id"]
	return id && m.method() != ""
}

// decodeID is a raw JSON-RPC id as a string or number, or nil.
func decodeID(raw json.RawMessage) any {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	switch v.(type) {
	case string, float64:
		return v
	}
	return nil
}

// marshal is JSON without HTML escaping, so re-encoded messages keep
// their strings' bytes.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
