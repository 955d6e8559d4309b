package mcpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// progressBuffer is how many progress notifications of one call wait for
// the edge; past it the oldest news is dropped (a later one supersedes it).
const progressBuffer = 64

// Invoke calls the tool on the upstream. The output is the tool's
// structuredContent when it declares an output schema, else {"content":
// [its content blocks]}. An isError answer fails the call (ErrToolError,
// with the tool's text); so does a protocol error, a dead server
// (ErrServerDown before sending, ErrServerGone in flight) or an answer the
// filter refused. Cancelling ctx, or Cancel, sends notifications/cancelled.
func (s *Server) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	return s.call(ctx, inv, nil)
}

// InvokeStream is Invoke with the upstream's progress notifications as
// chunks ({"progress", "total", "message"}) while the call runs, and the
// output as the last chunk.
func (s *Server) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	out, err := s.call(ctx, inv, emit)
	if err != nil {
		return err
	}
	return emit(tools.Chunk{Data: out, Last: true})
}

func (s *Server) call(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) (json.RawMessage, error) {
	s.mu.RLock()
	td, ok := s.byName[inv.ToolName]
	sess, downErr := s.sess, s.downErr
	s.mu.RUnlock()
	if !ok || inv.ServerID != "" && inv.ServerID != s.id {
		return nil, fmt.Errorf("invoke %s/%s: %w", quoted(inv.ServerID), quoted(inv.ToolName), tools.ErrUnknownTool)
	}
	runCtx, finish, err := s.Start(ctx, inv.ID)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", td.upstream, err)
	}
	defer finish()
	if sess == nil {
		if downErr == nil {
			return nil, fmt.Errorf("invoke %s: %w", td.upstream, ErrServerDown)
		}
		return nil, fmt.Errorf("invoke %s: %w: %w", td.upstream, ErrServerDown, downErr)
	}
	var args map[string]json.RawMessage
	if len(inv.Arguments) > 0 {
		if err := strictjson.Unmarshal(inv.Arguments, &args); err != nil {
			return nil, fmt.Errorf("invoke %s: arguments: %w", td.upstream, err)
		}
	}
	// The call ends when the caller's context does (the SDK then sends
	// notifications/cancelled) or when the session does.
	callCtx, cancel := context.WithCancelCause(runCtx)
	defer cancel(nil)
	stopAfter := context.AfterFunc(sess.ctx, func() { cancel(context.Cause(sess.ctx)) })
	defer stopAfter()

	params := &mcp.CallToolParams{Name: td.upstream, Arguments: args}
	if emit != nil {
		ch := make(chan *mcp.ProgressNotificationParams, progressBuffer)
		s.progMu.Lock()
		s.progress[inv.ID] = ch
		s.progMu.Unlock()
		defer func() {
			s.progMu.Lock()
			delete(s.progress, inv.ID)
			s.progMu.Unlock()
		}()
		params.SetProgressToken(inv.ID)
		relayCtx, stopRelay := context.WithCancel(callCtx)
		relayDone := make(chan struct{})
		go func() {
			defer close(relayDone)
			// An emit that fails stops the call with its error.
			if err := relayProgress(relayCtx, ch, emit); err != nil {
				cancel(err)
			}
		}()
		defer func() { stopRelay(); <-relayDone }()
	}
	res, err := sess.cs.CallTool(callCtx, params)
	if err != nil {
		switch cause := context.Cause(callCtx); {
		case runCtx.Err() != nil:
			return nil, fmt.Errorf("invoke %s: %w", td.upstream, context.Cause(runCtx))
		case cause != nil:
			return nil, fmt.Errorf("invoke %s: %w", td.upstream, cause)
		}
		if errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The session broke before the supervisor saw it end: no
			// later call is sent on it.
			s.lost(sess, err)
			return nil, fmt.Errorf("invoke %s: %w: %w", td.upstream, ErrServerGone, s.clean(err))
		}
		return nil, fmt.Errorf("invoke %s: %w", td.upstream, s.clean(err))
	}
	out, err := output(td, res)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", td.upstream, err)
	}
	return out, nil
}

// relayProgress emits each progress notification as a chunk until ctx ends.
func relayProgress(ctx context.Context, ch <-chan *mcp.ProgressNotificationParams, emit func(tools.Chunk) error) error {
	send := func(p *mcp.ProgressNotificationParams) error {
		raw, err := json.Marshal(struct {
			Progress float64 `json:"progress"`
			Total    float64 `json:"total,omitempty"`
			Message  string  `json:"message,omitempty"`
		}{p.Progress, p.Total, p.Message})
		if err != nil {
			return nil // a NaN cannot come through JSON; nothing to relay
		}
		return emit(tools.Chunk{Data: raw})
	}
	for {
		select {
		case <-ctx.Done():
			// What arrived before the answer is still news: pass it on.
			for {
				select {
				case p := <-ch:
					if err := send(p); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case p := <-ch:
			if err := send(p); err != nil {
				return err
			}
		}
	}
}

// onProgress hands a progress notification to its call, never blocking
// the session's reader.
func (s *Server) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	tok, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	s.progMu.Lock()
	ch := s.progress[tok]
	s.progMu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- req.Params:
	default:
	}
}

// output is the Chio output of an answer.
func output(td toolDef, res *mcp.CallToolResult) (json.RawMessage, error) {
	if res.IsError {
		return nil, fmt.Errorf("%w: %s", ErrToolError, contentText(res.Content))
	}
	if td.structured {
		if res.StructuredContent == nil {
			return nil, fmt.Errorf("%w: the tool declares an output schema but sent no structuredContent", ErrBadAnswer)
		}
		raw, err := schemas.Canonical(res.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("%w: structuredContent: %w", ErrBadAnswer, err)
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil || obj == nil {
			return nil, fmt.Errorf("%w: structuredContent is not a JSON object", ErrBadAnswer)
		}
		return raw, nil
	}
	content := res.Content
	if content == nil {
		content = []mcp.Content{}
	}
	raw, err := schemas.Canonical(struct {
		Content []mcp.Content `json:"content"`
	}{content})
	if err != nil {
		return nil, fmt.Errorf("%w: content: %w", ErrBadAnswer, err)
	}
	return raw, nil
}

// contentText is the text blocks of an error answer, joined and cut.
func contentText(cs []mcp.Content) string {
	var parts []string
	for _, c := range cs {
		if t, ok := c.(*mcp.TextContent); ok && strings.TrimSpace(t.Text) != "" {
			parts = append(parts, strings.TrimSpace(t.Text))
		}
	}
	s := strings.Join(parts, "; ")
	if s == "" {
		return "(no text)"
	}
	if r := []rune(s); len(r) > 1024 {
		s = string(r[:1023]) + "…"
	}
	return s
}
