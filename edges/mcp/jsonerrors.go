package mcp

import (
	"bytes"
	"net/http"
	"strings"
)

// jsonErrors turns the SDK's plain-text error answers (an unknown method,
// a missing Accept, a wrong Content-Type, a GET to a stateless server)
// into JSON-RPC errors with the same status, which MCP clients read.
// The answer to a request of one tools/call refused for its proof after
// the transport admitted it (a replayed proof, a tool proof for another
// call) becomes a 401 with the DPoP challenge, as a refusal found before
// is (a 503 with Retry-After when the replay state was unreachable). Anything else passes through untouched.
type jsonErrors struct {
	http.ResponseWriter
	msgs    []message
	refused *proofRefusal
	wrote   bool
	status  int // of the plain-text error being captured, if any
	text    bytes.Buffer
}

func (w *jsonErrors) WriteHeader(status int) {
	if w.wrote {
		return
	}
	w.wrote = true
	if status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	if check := w.refused.get(); check != "" && status/100 == 2 && len(w.msgs) == 1 {
		status = setProofStatus(w.Header(), check, "")
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *jsonErrors) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.status != 0 {
		return w.text.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

func (w *jsonErrors) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
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
