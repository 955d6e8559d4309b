package a2aadapter

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// hugePartner answers every A2A call with a task whose one artifact's
// text is endless: as a JSON-RPC or REST body, or as one SSE event that
// never ends. It counts the bytes the adapter took (the writes that
// succeeded) and closes done when the adapter has hung up.
type hugePartner struct {
	written atomic.Int64
	done    chan struct{}
}

// hugeTarget is how much the partner would send if it were read to the
// end: far past any bound.
const hugeTarget = 300 << 20

func (h *hugePartner) answer(w http.ResponseWriter, r *http.Request) {
	defer func() {
		select {
		case h.done <- struct{}{}:
		default:
		}
	}()
	task := `{"id":"t-huge","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"artifacts":[{"artifactId":"a","parts":[{"text":"`
	head, tail := `{"jsonrpc":"2.0","id":"1","result":{"task":`+task, `"}]}]}}}`
	if strings.HasPrefix(r.URL.Path, "/rest/") {
		head, tail = `{"task":`+task, `"}]}]}}`
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		w.Header().Set("Content-Type", "text/event-stream")
		head, tail = "data: "+head, tail+"\n\n"
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	write := func(s string) bool {
		n, err := io.WriteString(w, s)
		h.written.Add(int64(n))
		return err == nil
	}
	if !write(head) {
		return
	}
	chunk := strings.Repeat("x", 64<<10)
	for h.written.Load() < hugeTarget {
		if !write(chunk) {
			return
		}
	}
	write(tail)
}

// A partner answering with an endless artifact: the call fails with
// ErrAnswerTooLarge, and the adapter stopped reading at the bound (what
// the partner managed to write is the bound plus what the sockets between
// the two buffer, nowhere near what it meant to send).
func TestHugeAnswerIsCutOff(t *testing.T) {
	// Loopback socket buffers grow to a few MiB each way.
	const slack = 24 << 20
	for _, tc := range []struct {
		name    string
		binding a2a.TransportProtocol
		args    string
		bound   int64
	}{
		{"JSON-RPC send", a2a.TransportProtocolJSONRPC, `{"message":"hi"}`, MaxAnswerBytes},
		{"REST send", a2a.TransportProtocolHTTPJSON, `{"message":"hi"}`, MaxAnswerBytes},
		{"JSON-RPC stream event", a2a.TransportProtocolJSONRPC, `{"message":"hi","stream":true}`, MaxAnswerBytes},
		{"REST stream event", a2a.TransportProtocolHTTPJSON, `{"message":"hi","stream":true}`, MaxAnswerBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &hugePartner{done: make(chan struct{}, 1)}
			p := startPartner(t, partnerOpts{bindings: []a2a.TransportProtocol{tc.binding}, answer: h.answer})
			a := discover(t, p, Config{})
			_, err := a.Invoke(t.Context(), call(a, "echo", tc.args))
			if !errors.Is(err, ErrAnswerTooLarge) {
				t.Fatalf("Invoke: %v, want ErrAnswerTooLarge", err)
			}
			if !strings.Contains(err.Error(), "too large") {
				t.Fatalf("the reason does not say why: %v", err)
			}
			<-h.done // the partner's writes fail once the adapter hangs up
			t.Logf("the partner wrote %d bytes", h.written.Load())
			if got := h.written.Load(); got > tc.bound+slack {
				t.Fatalf("the partner wrote %d bytes, past the bound %d and slack %d", got, tc.bound, slack)
			}
		})
	}
}

// A partner whose answer is not strict JSON fails the call with
// ErrMalformedPayload, for every hostile variant of its valid answer, as
// a body and as the first event of a stream.
func TestHostileAnswersFail(t *testing.T) {
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		for _, v := range hostilejson.Variants([]byte(`{"sample":1}`)) {
			t.Run(string(binding)+"/"+v.Name, func(t *testing.T) {
				// The agent's own answer, made hostile as v is.
				variant := func(doc []byte) []byte {
					for _, c := range hostilejson.Variants(doc) {
						if c.Name == v.Name {
							return c.Doc
						}
					}
					t.Errorf("no variant %q", v.Name)
					return doc
				}
				hostile := func(body []byte) []byte {
					start := bytes.Index(body, []byte("data: "))
					if start < 0 {
						return variant(body)
					}
					start += len("data: ")
					end := start + bytes.IndexByte(body[start:], '\n')
					return slices.Concat(body[:start], variant(body[start:end]), body[end:])
				}
				p := startPartner(t, partnerOpts{bindings: []a2a.TransportProtocol{binding}, rewrite: hostile})
				a := discover(t, p, Config{})
				if _, err := a.Invoke(t.Context(), call(a, "echo", `{"message":"hi"}`)); !errors.Is(err, ErrMalformedPayload) {
					t.Fatalf("send: %v, want ErrMalformedPayload", err)
				}
				if _, err := a.Invoke(t.Context(), call(a, "stream", `{"message":"hi","stream":true}`)); !errors.Is(err, ErrMalformedPayload) {
					t.Fatalf("stream: %v, want ErrMalformedPayload", err)
				}
			})
		}
	}
	// The same partner, its answers untouched, serves both calls.
	p := startPartner(t, partnerOpts{rewrite: func(b []byte) []byte { return b }})
	a := discover(t, p, Config{})
	if _, err := a.Invoke(t.Context(), call(a, "echo", `{"message":"hi"}`)); err != nil {
		t.Fatalf("send: %v", err)
	}
	if _, err := a.Invoke(t.Context(), call(a, "stream", `{"message":"hi","stream":true}`)); err != nil {
		t.Fatalf("stream: %v", err)
	}
}

// The event gate hands on a valid stream byte for byte, and refuses an
// event or a stream past its bound, or an event whose data is not strict
// JSON, before handing on any of that event.
func TestEventGate(t *testing.T) {
	valid := "id: 1\ndata: {\"a\":1}\n\n: keep-alive\n\nid: 2\r\ndata: {\"b\":\r\ndata: [2]}\r\n\r\ndata: {\"c\":3}"
	for _, tc := range []struct {
		name          string
		in            string
		event, stream int
		want          string // what is handed on before the error
		err           error
	}{
		{"valid", valid, 64, 1 << 10, valid, io.EOF},
		{"event past its bound", "data: {\"a\":1}\n\ndata: \"" + strings.Repeat("x", 100) + "\"\n\n", 64, 1 << 10, "data: {\"a\":1}\n\n", ErrAnswerTooLarge},
		{"long line past its bound", "data: \"" + strings.Repeat("x", 200<<10) + "\"\n\n", 100 << 10, 1 << 20, "", ErrAnswerTooLarge},
		{"stream past its bound", strings.Repeat("data: {\"a\":1}\n\n", 10), 64, 100, strings.Repeat("data: {\"a\":1}\n\n", 6), ErrAnswerTooLarge},
		{"repeated member", "data: {\"a\":1}\n\ndata: {\"a\":1,\"a\":2}\n\n", 64, 1 << 10, "data: {\"a\":1}\n\n", ErrMalformedPayload},
		{"repeated member across data lines", "data: {\"a\":1,\ndata: \"A\":2}\n\n", 64, 1 << 10, "", ErrMalformedPayload},
		{"too deep", "data: " + hostilejson.Nested(strictjson.MaxDepth+1) + "\n\n", 1 << 10, 1 << 10, "", ErrMalformedPayload},
		{"unended last event", "data: {\"a\":1}", 64, 1 << 10, "data: {\"a\":1}", io.EOF},
		{"unended hostile last event", "data: {\"a\":1} {}", 64, 1 << 10, "", ErrMalformedPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newEventGate(io.NopCloser(strings.NewReader(tc.in)), tc.event, int64(tc.stream))
			var got bytes.Buffer
			buf := make([]byte, 7) // small reads: events are handed on in pieces
			var err error
			for err == nil {
				var n int
				n, err = g.Read(buf)
				got.Write(buf[:n])
			}
			if !errors.Is(err, tc.err) || got.String() != tc.want {
				t.Fatalf("handed on %q, %v; want %q, %v", got.String(), err, tc.want, tc.err)
			}
		})
	}
}

// A stream of events each within the event bound but together past a
// result's: InvokeStream hands each on, Invoke (which makes them one
// result) fails with ErrAnswerTooLarge.
func TestCollectedEventsBounded(t *testing.T) {
	const events, text = 5, 1 << 20
	answer := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"jsonrpc":"2.0","id":"1","result":{"task":{"id":"t-big","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}}`+"\n\n")
		for i := range events {
			last := i == events-1
			io.WriteString(w, `data: {"jsonrpc":"2.0","id":"1","result":{"artifactUpdate":{"taskId":"t-big","contextId":"c","append":`+
				strconv.FormatBool(i > 0)+`,"lastChunk":`+strconv.FormatBool(last)+`,"artifact":{"artifactId":"a","parts":[{"text":"`+strings.Repeat("x", text)+`"}]}}}}`+"\n\n")
		}
		io.WriteString(w, `data: {"jsonrpc":"2.0","id":"1","result":{"statusUpdate":{"taskId":"t-big","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}}}}`+"\n\n")
	}
	p := startPartner(t, partnerOpts{answer: answer})
	a := discover(t, p, Config{})
	chunks, err := streamChunks(t, a, "stream", `{"message":"go","stream":true}`)
	if err != nil || len(chunks) != events+2 {
		t.Fatalf("InvokeStream: %d chunks, %v", len(chunks), err)
	}
	if _, err := a.Invoke(t.Context(), call(a, "stream", `{"message":"go","stream":true}`)); !errors.Is(err, ErrAnswerTooLarge) {
		t.Fatalf("Invoke: %v, want ErrAnswerTooLarge", err)
	}
}

// A partner's stream of comments alone stalls the call at the idle
// deadline; events with data keep it going, up to the overall one.
func TestStreamDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name        string
		event       string // what the partner sends every 5 ms
		for_        time.Duration
		idle, total time.Duration
		want        string // "" for a clean end
	}{
		{"comments only", ": keepalive\n\n", 2 * time.Second, 100 * time.Millisecond, time.Minute, "no event with data"},
		{"data events", "data: {}\n\n", 300 * time.Millisecond, 100 * time.Millisecond, time.Minute, ""},
		{"past the overall deadline", "data: {}\n\n", 2 * time.Second, time.Minute, 150 * time.Millisecond, "the stream passed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			go func() {
				defer pw.Close()
				for end := time.Now().Add(tc.for_); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
					if _, err := io.WriteString(pw, tc.event); err != nil {
						return // the gate closed the stream
					}
				}
			}()
			g := newEventGate(pr, MaxAnswerBytes, MaxStreamBytes)
			g.deadlines(tc.idle, tc.total)
			defer g.Close()
			_, err := io.Copy(io.Discard, g)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("stream ended with %v", err)
			case tc.want != "" && (!errors.Is(err, ErrPartnerIdle) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("stream ended with %v, want %q", err, tc.want)
			}
		})
	}
}
