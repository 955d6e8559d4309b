package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/chio-ledger/chio/schemas"
)

// The x-chio-* bridge hint keys, read from the top level
// of input_schema with output_schema as the fallback.
const (
	HintPublish          = "x-chio-publish"
	HintApprovalRequired = "x-chio-approval-required"
	HintStreaming        = "x-chio-streaming"
	HintCancellation     = "x-chio-cancellation"
	HintPartialOutput    = "x-chio-partial-output"
	HintTargetProtocol   = "x-chio-target-protocol"
)

// Target protocols accepted in x-chio-target-protocol.
const (
	TargetNative = "native"
	TargetMCP    = "mcp"
	TargetHTTP   = "http"
	TargetA2A    = "a2a"
	TargetACP    = "acp"
	TargetOpenAI = "open_ai"
)

// Hints are a tool's bridge semantics, resolved with their defaults.
type Hints struct {
	Publish          bool // false: never published on outward edges
	ApprovalRequired bool // needs interactive approval (hint or annotations.requires_approval)
	Streaming        bool // the tool streams its output
	Cancellation     bool // the tool supports cancellation
	PartialOutput    bool // the tool emits partial output
	SideEffects      bool // has_side_effects or annotations.destructive
	TargetProtocol   string
}

// ReadHints resolves a tool's bridge hints. It fails rather than guess: a
// schema that is not a JSON object, a hint of the wrong JSON type (null
// included), a hint key given twice in one schema (parsers disagree on which
// copy wins), an unknown target protocol or latency hint are all errors, and
// edges treat an error as unsupported.
func ReadHints(t *schemas.ToolDefinition) (Hints, error) {
	if t == nil {
		return Hints{}, errors.New("read hints: tool definition is nil")
	}
	in, err := schemaHints(t.InputSchema)
	if err != nil {
		return Hints{}, fmt.Errorf("read hints of %q: input_schema: %w", t.Name, err)
	}
	var out map[string]json.RawMessage
	if len(t.OutputSchema) > 0 {
		if out, err = schemaHints(t.OutputSchema); err != nil {
			return Hints{}, fmt.Errorf("read hints of %q: output_schema: %w", t.Name, err)
		}
	}
	lookup := func(key string) (json.RawMessage, bool) {
		if v, ok := in[key]; ok {
			return v, true
		}
		v, ok := out[key]
		return v, ok
	}
	boolHint := func(key string, def bool) (bool, error) {
		raw, ok := lookup(key)
		if !ok {
			return def, nil
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return false, fmt.Errorf("%s: %w", key, err)
		}
		b, ok := v.(bool)
		if !ok {
			return false, fmt.Errorf("%s must be a JSON boolean, got %s", key, abbreviate(raw))
		}
		return b, nil
	}

	var slow, moderate bool
	switch t.LatencyHint {
	case "", schemas.LatencyFast:
	case schemas.LatencyModerate:
		moderate = true
	case schemas.LatencySlow:
		slow = true
	default:
		return Hints{}, fmt.Errorf("read hints of %q: latency_hint %s is not fast, moderate or slow", t.Name, abbreviate([]byte(t.LatencyHint)))
	}

	var h Hints
	fields := []struct {
		key string
		def func() bool // evaluated late: partial output defaults to the resolved streaming
		dst *bool
	}{
		{HintPublish, func() bool { return true }, &h.Publish},
		{HintApprovalRequired, func() bool { return false }, &h.ApprovalRequired},
		{HintStreaming, func() bool { return moderate || slow }, &h.Streaming},
		{HintCancellation, func() bool { return slow }, &h.Cancellation},
		{HintPartialOutput, func() bool { return h.Streaming }, &h.PartialOutput},
	}
	for _, f := range fields {
		if *f.dst, err = boolHint(f.key, f.def()); err != nil {
			return Hints{}, fmt.Errorf("read hints of %q: %w", t.Name, err)
		}
	}

	h.TargetProtocol = TargetNative
	if raw, ok := lookup(HintTargetProtocol); ok {
		s, ok := jsonString(raw)
		switch {
		case !ok:
			return Hints{}, fmt.Errorf("read hints of %q: %s must be a JSON string, got %s", t.Name, HintTargetProtocol, abbreviate(raw))
		case !knownTarget(s):
			return Hints{}, fmt.Errorf("read hints of %q: %s %s is not native, mcp, http, a2a, acp or open_ai", t.Name, HintTargetProtocol, abbreviate(raw))
		}
		h.TargetProtocol = s
	}

	if a := t.Annotations; a != nil {
		h.ApprovalRequired = h.ApprovalRequired || a.RequiresApproval
		h.SideEffects = a.Destructive
	}
	h.SideEffects = h.SideEffects || t.HasSideEffects
	return h, nil
}

func knownTarget(s string) bool {
	switch s {
	case TargetNative, TargetMCP, TargetHTTP, TargetA2A, TargetACP, TargetOpenAI:
		return true
	}
	return false
}

// schemaHints returns the x-chio-* members of a JSON object's top level. It
// walks the tokens itself, rather than unmarshalling into a map, so that a
// repeated hint key is seen and refused instead of silently keeping the last.
func schemaHints(raw json.RawMessage) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	hints := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("malformed JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("malformed JSON: object key is not a string")
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("malformed JSON: %w", err)
		}
		if !strings.HasPrefix(key, "x-chio-") {
			continue
		}
		if _, dup := hints[key]; dup {
			return nil, fmt.Errorf("%s given twice", key)
		}
		hints[key] = val
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return hints, nil
}

// abbreviate renders untrusted bytes for an error message: quoted, and cut
// so a huge value cannot flood logs.
func abbreviate(b []byte) string {
	const limit = 64
	if len(b) > limit {
		return fmt.Sprintf("%q…", b[:limit])
	}
	return fmt.Sprintf("%q", b)
}
