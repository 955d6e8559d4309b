// Package hello is the demo tool server behind the hello-a2a example: one
// tool, hello_task, that greets in one payload or as a two-chunk stream.
package hello

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// Identity of the demo server and its tool.
const (
	ServerID = "hello-a2a-srv"
	ToolName = "hello_task"
)

// Server is the hello-a2a tool server. The embedded Running provides Cancel.
type Server struct {
	tools.Running
}

var _ tools.Server = (*Server)(nil)

// New returns a hello server.
func New() *Server { return &Server{} }

// Manifest returns a fresh copy on every call, so no caller can change
// another's view of it.
func (s *Server) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{
		Schema:      schemas.ManifestSchema,
		ServerID:    ServerID,
		Name:        "Hello A2A Server",
		Description: "A tiny receipt-bearing A2A hello surface",
		Version:     "0.1.0",
		Tools: []schemas.ToolDefinition{{
			Name:        ToolName,
			Description: "Return a collated greeting",
			// The hints make the A2A rating adapted: output streams, partially.
			InputSchema:    json.RawMessage(`{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true}`),
			HasSideEffects: false,
			Metadata: map[string]json.RawMessage{"a2a.expose": json.RawMessage(`true`), "openai.expose": json.RawMessage(`true`),
				"acp.expose": json.RawMessage(`true`)},
		}},
	}
}

// ServerID returns "hello-a2a-srv".
func (s *Server) ServerID() string { return ServerID }

// ToolNames returns the one tool.
func (s *Server) ToolNames() []string { return []string{ToolName} }

// Invoke returns {"message":"hello from a2a","arguments":<args>}.
func (s *Server) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	args, err := arguments(inv)
	if err != nil {
		return nil, fmt.Errorf("invoke: %w", err)
	}
	runCtx, finish, err := s.Start(ctx, inv.ID)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", ToolName, err)
	}
	defer finish()
	if runCtx.Err() != nil {
		return nil, fmt.Errorf("invoke %s: %w", ToolName, context.Cause(runCtx))
	}
	out, err := encode(struct {
		Message   string          `json:"message"`
		Arguments json.RawMessage `json:"arguments"`
	}{"hello from a2a", args})
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", ToolName, err)
	}
	return out, nil
}

// InvokeStream emits {"type":"text","text":"hello from a2a, <text>"} (text is
// arguments.text when it is a string, else "world") and then
// {"content":[{"type":"text","text":"stream complete"}]}. A cancellation
// between the chunks stops it with the context's cause.
func (s *Server) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	if emit == nil {
		return errors.New("invoke stream: emit is nil")
	}
	args, err := arguments(inv)
	if err != nil {
		return fmt.Errorf("invoke stream: %w", err)
	}
	text := "world"
	var obj map[string]any
	if json.Unmarshal(args, &obj) == nil {
		if t, ok := obj["text"].(string); ok {
			text = t
		}
	}
	type part struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	first, err := encode(part{"text", "hello from a2a, " + text})
	if err != nil {
		return fmt.Errorf("invoke stream %s: %w", ToolName, err)
	}
	second, err := encode(struct {
		Content []part `json:"content"`
	}{[]part{{"text", "stream complete"}}})
	if err != nil {
		return fmt.Errorf("invoke stream %s: %w", ToolName, err)
	}

	runCtx, finish, err := s.Start(ctx, inv.ID)
	if err != nil {
		return fmt.Errorf("invoke stream %s: %w", ToolName, err)
	}
	defer finish()
	for i, data := range []json.RawMessage{first, second} {
		if runCtx.Err() != nil {
			return fmt.Errorf("invoke stream %s: %w", ToolName, context.Cause(runCtx))
		}
		if err := emit(tools.Chunk{Data: data, Last: i == 1}); err != nil {
			return fmt.Errorf("invoke stream %s: emit chunk %d: %w", ToolName, i, err)
		}
	}
	return nil
}

// arguments checks that inv is for this server's tool and returns its
// arguments compacted; absent arguments are an empty object.
func arguments(inv tools.Invocation) (json.RawMessage, error) {
	if inv.ToolName != ToolName || (inv.ServerID != "" && inv.ServerID != ServerID) {
		return nil, fmt.Errorf("tool %q on server %q: %w", inv.ToolName, inv.ServerID, tools.ErrUnknownTool)
	}
	if len(bytes.TrimSpace(inv.Arguments)) == 0 {
		return json.RawMessage(`{}`), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, inv.Arguments); err != nil {
		return nil, fmt.Errorf("%s arguments are not valid JSON: %w", ToolName, err)
	}
	return buf.Bytes(), nil
}

// encode marshals without HTML escaping, so "<" in a greeting stays "<" as
// in the Rust original, and without the encoder's trailing newline.
func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
