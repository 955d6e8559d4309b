package a2aadapter

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chio-ledger/chio/internal/redact"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Bounds on what a partner may answer. The a2a-go client reads a whole
// body (and a whole SSE event) into memory before it decodes it, so these
// are what bounds the adapter's memory per call: a partner answering with
// a huge artifact is cut off at the bound, and the call fails.
const (
	// MaxAnswerBytes bounds a partner's answer to one call (a JSON-RPC or
	// REST body), one event of a stream, and a tool result.
	MaxAnswerBytes = 4 << 20
	// MaxStreamBytes bounds all the events of one stream together.
	MaxStreamBytes = 16 << 20
)

// Deadlines of a partner's stream. Comments (": keepalive") keep a
// connection open but are not an answer: they do not reset the idle
// deadline, so a partner that sends only comments cannot hold a call.
const (
	// StreamIdle is the longest a stream goes without an event that
	// carries data.
	StreamIdle = time.Minute
	// StreamMax is the longest one stream lasts, whatever it sends.
	StreamMax = 30 * time.Minute
)

// ErrPartnerIdle: a partner's stream passed StreamIdle with no event, or
// StreamMax in all.
var ErrPartnerIdle = errors.New("partner stream stalled")

// ErrAnswerTooLarge: the partner's answer passed MaxAnswerBytes (an
// answer, an event, a result) or MaxStreamBytes (a stream).
var ErrAnswerTooLarge = errors.New("partner answer too large")

// answerGate is the round tripper that reads partner answers for the
// a2a-go client: a JSON body is read whole, to MaxAnswerBytes, and checked
// with strictjson before the client decodes it; an SSE stream is passed on
// one whole event at a time, each within MaxAnswerBytes and its data
// checked with strictjson, the stream within MaxStreamBytes. What breaks
// a bound or is not strict JSON fails the call: the client sees an error
// (ErrAnswerTooLarge, ErrMalformedPayload), never a partial answer.
type answerGate struct {
	next http.RoundTripper
}

func (g answerGate) RoundTrip(r *http.Request) (*http.Response, error) {
	next := g.next
	if next == nil {
		next = http.DefaultTransport
	}
	// The credentials the transports below attach are collected, to be
	// redacted from the answer: whatever its status, it reaches the caller
	// and the receipt's content hash.
	ctx, collected := redact.WithCollector(r.Context())
	resp, err := next.RoundTrip(r.WithContext(ctx))
	if err != nil || resp.Body == nil || r.Method == http.MethodHead {
		return resp, err
	}
	red := collected.Redactor()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "text/event-stream" {
		g := newEventGate(resp.Body, MaxAnswerBytes, MaxStreamBytes)
		g.redactor = red
		g.deadlines(StreamIdle, StreamMax)
		resp.Body = g
		resp.ContentLength = -1
		return resp, nil
	}
	body, err := strictjson.ReadAll(resp.Body, MaxAnswerBytes)
	resp.Body.Close()
	switch {
	case errors.Is(err, strictjson.ErrTooLarge):
		return nil, fmt.Errorf("%w: the answer is over %d bytes", ErrAnswerTooLarge, MaxAnswerBytes)
	case err != nil:
		return nil, fmt.Errorf("read answer: %w", err)
	}
	body, _ = red.Bytes(body)
	// An error page (text/plain, text/html) is left to the client, which
	// reports the status; JSON is checked whatever the status.
	if isJSON(mt) && len(bytes.TrimSpace(body)) > 0 {
		if err := strictjson.Valid(body); err != nil {
			return nil, fmt.Errorf("%w: the answer is not strict JSON: %w", ErrMalformedPayload, err)
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// isJSON reports whether a media type is JSON (application/json, and
// +json types such as application/a2a+json). An absent one counts too: the
// a2a-go client decodes what it gets as JSON.
func isJSON(mt string) bool {
	return mt == "" || mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// eventGate passes an SSE stream on one whole event at a time (the bytes
// through the blank line that ends it), after checking its size and its
// data. Lines are read as a2a-go's parser reads them: they end at "\n", a
// "\r" before it dropped, and an event's data is its "data:" lines' values
// (one leading space dropped) joined by "\n".
type eventGate struct {
	body      io.ReadCloser
	r         *bufio.Reader
	maxEvent  int
	maxStream int64
	total     int64
	out       []byte // a checked event, being handed out
	event     []byte // the raw event being read
	data      []byte // its data
	err       error  // the error to return once out is drained
	// redactor removes the attached credentials from each event.
	redactor *redact.Redactor

	// The stream's deadlines (deadlines): a timer that closes the body,
	// so a Read blocked on a silent partner returns; stalled says why.
	idle    time.Duration
	idleT   *time.Timer
	maxT    *time.Timer
	stalled atomic.Pointer[error]
}

// deadlines starts the stream's idle and overall deadlines.
func (g *eventGate) deadlines(idle, total time.Duration) {
	g.idle = idle
	g.idleT = time.AfterFunc(idle, func() {
		g.stall(fmt.Errorf("%w: no event with data for %s (comments do not count)", ErrPartnerIdle, idle))
	})
	g.maxT = time.AfterFunc(total, func() { g.stall(fmt.Errorf("%w: the stream passed %s", ErrPartnerIdle, total)) })
}

func (g *eventGate) stall(err error) {
	if g.stalled.CompareAndSwap(nil, &err) {
		_ = g.body.Close()
	}
}

func newEventGate(body io.ReadCloser, maxEvent int, maxStream int64) *eventGate {
	return &eventGate{body: body, r: bufio.NewReaderSize(body, 64<<10), maxEvent: maxEvent, maxStream: maxStream}
}

func (g *eventGate) Read(p []byte) (int, error) {
	for len(g.out) == 0 && g.err == nil {
		g.next()
		if g.err != nil && g.idleT != nil {
			g.idleT.Stop() // the stream has ended: its deadlines with it
			g.maxT.Stop()
		}
	}
	if len(g.out) > 0 {
		n := copy(p, g.out)
		g.out = g.out[n:]
		return n, nil
	}
	return 0, g.err
}

func (g *eventGate) Close() error {
	if g.idleT != nil {
		g.idleT.Stop()
		g.maxT.Stop()
	}
	return g.body.Close()
}

// next reads one event into out, or sets err.
func (g *eventGate) next() {
	g.event, g.data = g.event[:0], g.data[:0]
	hasData := false
	for {
		line, err := g.line()
		if p := g.stalled.Load(); p != nil && err != nil {
			g.err = *p
			return
		}
		if err != nil && (err != io.EOF || len(g.event) == 0) {
			g.err = err
			return
		}
		content := bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if v, ok := bytes.CutPrefix(content, []byte("data:")); ok {
			v, _ = bytes.CutPrefix(v, []byte(" "))
			if hasData {
				g.data = append(g.data, '\n')
			}
			g.data, hasData = append(g.data, v...), true
		}
		if len(content) == 0 || err == io.EOF { // the event ends
			if hasData {
				if verr := strictjson.Valid(g.data); verr != nil {
					g.err = fmt.Errorf("%w: a stream event is not strict JSON: %w", ErrMalformedPayload, verr)
					return
				}
			}
			if hasData && g.idleT != nil {
				g.idleT.Reset(g.idle) // an answer: comments alone never get here with data
			}
			out, _ := g.redactor.Bytes(g.event)
			g.out = append(g.out[:0], out...)
			if err == io.EOF {
				g.err = io.EOF
			}
			return
		}
	}
}

// line reads one line (with its "\n", none at the end of the stream) into
// g.event and returns it, refusing an event or a stream past its bound
// before reading further.
func (g *eventGate) line() ([]byte, error) {
	start := len(g.event)
	for {
		chunk, err := g.r.ReadSlice('\n')
		g.total += int64(len(chunk))
		if len(g.event)+len(chunk) > g.maxEvent {
			return nil, fmt.Errorf("%w: a stream event is over %d bytes", ErrAnswerTooLarge, g.maxEvent)
		}
		if g.total > g.maxStream {
			return nil, fmt.Errorf("%w: the stream is over %d bytes", ErrAnswerTooLarge, g.maxStream)
		}
		g.event = append(g.event, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil:
			return g.event[start:], err
		}
		return g.event[start:], nil
	}
}
