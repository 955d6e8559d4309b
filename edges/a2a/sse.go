package a2a

import (
	"encoding/json"
	"net/http"
	"strconv"
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

// handover ends the stream with a comment naming the resume point, and
// nothing else: the response then ends cleanly before the task's final
// status, which is how A2A tells a client its stream was interrupted
// (it resubscribes, SubscribeToTask, and the proxy sends that to
// another replica). The client's resume point is the id of the last event
// it received, sent back as Last-Event-ID (or params.metadata
// lastGeneration); repeating it in the comment is for the humans reading
// the wire. No field (id:, retry:) is written: several SSE parsers
// dispatch such a frame as an event with empty data, which an A2A client
// then fails to decode.
func (s *sse) handover(last int64) {
	msg := ": this replica is stopping; subscribe to the task again"
	if last > 0 {
		msg += " with Last-Event-ID: " + strconv.FormatInt(last, 10)
	}
	_ = s.write([]byte(msg + "\n\n"))
}
