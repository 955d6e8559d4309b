package mcp

import (
	"bytes"
	"net/http"
	"strings"
)

// jsonErrors turns the SDK's plain-text error answers (an unknown method,
// a missing Accept, a wrong Content-Type, a GET to a stateless server)
// into JSON-RPC errors with the same status, which MCP clients read.
// Anything else passes through untouched.
type jsonErrors struct {
	http.ResponseWriter
	msgs   []message
	status int // of the plain-text error being captured, if any
	text   bytes.Buffer
}

func (w *jsonErrors) WriteHeader(status int) {
	if status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *jsonErrors) Write(p []byte) (int, error) {
	if w.status != 0 {
		return w.text.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

func (w *jsonErrors) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.status == 0 {
		f.Flush()
	}
}

func (w *jsonErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the captured error, if any.
func (w *jsonErrors) finish() {
	if w.status == 0 {
		return
	}
	msg := strings.TrimSpace(w.text.String())
	code := int64(codeInvalidRequest)
	// The SDK's words for a method it does not serve (jsonrpc2.ErrNotHandled).
	if strings.HasPrefix(msg, "JSON RPC not handled") {
		code = codeMethodNotFound
	}
	writeError(w.ResponseWriter, w.status, w.msgs, rpcError(code, msg, nil))
}
