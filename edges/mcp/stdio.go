package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves the same tools over newline-delimited JSON-RPC on in
// and out, every call under token (the dev capability when token is
// empty), until in ends or ctx is done. A capability the kernel refuses at
// the start is an error; one refused later (expired, revoked) gets
// JSON-RPC errors, with deny receipts for its tool calls. A line that
// readMessages refuses, or longer than MaxBodyBytes, is answered with its
// JSON-RPC error and never reaches the SDK. in is closed at the end when
// it is an io.Closer; out is not.
func (e *Edge) ServeStdio(ctx context.Context, token string, in io.Reader, out io.Writer) error {
	if token == "" {
		token = e.opts.devToken
	}
	if token == "" {
		return errors.New("serve mcp over stdio: no capability and no dev capability")
	}
	if _, dec := e.kernel.Held(token); dec != nil {
		return fmt.Errorf("serve mcp over stdio: %s", refusedMessage(dec))
	}
	fl := newInflight(ctx)
	aw := &answerWriter{w: out, flight: fl}
	r := newStampingReader(in, aw.refuse)
	r.flight = fl
	t := &sdk.IOTransport{Reader: r, Writer: aw}
	if err := e.server.Run(withCaller(ctx, &caller{token: token, held: true}), t); err != nil {
		return fmt.Errorf("serve mcp over stdio: %w", err)
	}
	return nil
}

// inflight counts the requests read and not yet answered, so that the end
// of the input waits for their answers: a client that writes its requests
// and closes stdin (a pipe, a script) still gets every answer.
type inflight struct {
	ctx  context.Context
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

func newInflight(ctx context.Context) *inflight {
	f := &inflight{ctx: ctx}
	f.cond = sync.NewCond(&f.mu)
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.cond.Broadcast()
	})
	return f
}

func (f *inflight) add(n int) {
	if n == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n += n
	f.cond.Broadcast()
}

// wait blocks until every request read has its answer, or ctx is done.
func (f *inflight) wait() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n > 0 && f.ctx.Err() == nil {
		f.cond.Wait()
	}
}

// countMessages counts, in one line of JSON-RPC (a message or a batch),
// the requests (a method and an id) or the answers (an id and a result or
// an error).
func countMessages(line []byte, answers bool) int {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return 0
	}
	var msgs []map[string]json.RawMessage
	if line[0] == '[' {
		if json.Unmarshal(line, &msgs) != nil {
			return 0
		}
	} else {
		var m map[string]json.RawMessage
		if json.Unmarshal(line, &m) != nil {
			return 0
		}
		msgs = append(msgs, m)
	}
	n := 0
	for _, m := range msgs {
		// A null id is a notification to the SDK: it is never answered.
		rawID, id := m["id"]
		id = id && string(bytes.TrimSpace(rawID)) != "null"
		_, method := m["method"]
		_, result := m["result"]
		_, rpcErr := m["error"]
		if id && ((answers && !method && (result || rpcErr)) || (!answers && method)) {
			n++
		}
	}
	return n
}

// answerWriter passes the server's messages to w and counts the answers
// among them; it also writes the answers to lines refused before the
// SDK read them. It leaves closing w to its owner.
type answerWriter struct {
	mu      sync.Mutex // the SDK writes whole lines; so does refuse
	w       io.Writer
	flight  *inflight
	partial []byte
}

// refuse answers a line the SDK never read: one JSON-RPC error line. It
// is no answer to a counted request.
func (a *answerWriter) refuse(id json.RawMessage, werr *jsonrpc.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _ = a.w.Write(append(errorBody(id, werr), '\n'))
}

func (a *answerWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, err := a.w.Write(p)
	a.partial = append(a.partial, p[:n]...)
	for {
		line, rest, ok := bytes.Cut(a.partial, []byte("\n"))
		if !ok {
			break
		}
		a.flight.add(-countMessages(line, true))
		a.partial = append(a.partial[:0], rest...)
	}
	return n, err
}

func (*answerWriter) Close() error { return nil }
