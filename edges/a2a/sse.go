package a2a

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// The SSE sink: how the HTTP bindings write a stream.

// sse is a sink writing Server-Sent Events, flushed one by one.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	data    func(json.RawMessage) []byte
	errData func(*wire.Error) []byte
}

// newSSE sends the stream's headers at once, so the client knows the
// stream is open before the first event.
func newSSE(w http.ResponseWriter, data func(json.RawMessage) []byte, errData func(*wire.Error) []byte) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx and friends: do not buffer
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w), data: data, errData: errData}
	_ = s.rc.Flush()
	return s
}

func (s *sse) write(b []byte) error {
	// A server-wide write timeout must not cut a long stream; each write
	// gets its own deadline instead.
	_ = s.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sse) event(id string, ev json.RawMessage) error {
	return s.write(wire.SSEFrame(id, s.data(ev)))
}

func (s *sse) fail(werr *wire.Error) { _ = s.write(wire.SSEFrame("", s.errData(werr))) }

func (s *sse) keepAlive() error { return s.write([]byte(wire.SSEKeepAlive)) }
