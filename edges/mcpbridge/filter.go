package mcpbridge

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"

	"github.com/chio-ledger/chio/internal/redact"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// idPrefix is how much of an oversized message is kept to find its id.
const idPrefix = 64 << 10

// filter reads every message of the upstream before the MCP SDK does:
// bounded in size, the operator's credentials redacted, and read with
// strictjson, so that a duplicate member or invalid UTF-8 never reaches a
// tool output, a receipt or a log. A refused answer becomes an error
// answer to its request (the call fails with the reason); any other
// refused message is dropped.
type filter struct {
	max      int
	redactor *redact.Redactor
	log      *slog.Logger
}

// message is what the SDK reads in place of raw (oversized: raw is only
// its first bytes): raw redacted, an error answer, or nil to drop it.
func (f *filter) message(raw []byte, oversized bool) []byte {
	reason := ""
	if oversized {
		reason = fmt.Sprintf("message larger than %d bytes", f.max)
	} else if err := strictjson.Valid(raw); err != nil {
		reason = err.Error() // strictjson never quotes the input
	}
	if reason == "" {
		out, _ := f.redactor.Bytes(raw)
		return out
	}
	id, ok := responseID(raw)
	if !ok {
		f.log.Warn("mcpbridge: upstream message dropped", "reason", reason)
		return nil
	}
	f.log.Warn("mcpbridge: upstream answer refused", "reason", reason)
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{
		"code": -32603, "message": "chio: the upstream's answer was refused: " + reason}})
	return msg
}

// responseID finds the id of a JSON-RPC response, read leniently (the
// message was refused by the strict reader, or cut): ok is false for a
// request or notification, or when no usable id comes before the cut.
func responseID(raw []byte) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var id json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			break
		}
		switch key {
		case "id":
			id = v
		case "method":
			return nil, false
		}
	}
	if len(id) == 0 || (id[0] != '"' && (id[0] < '0' || id[0] > '9') && id[0] != '-') {
		return nil, false
	}
	if strictjson.Valid(id) != nil {
		return nil, false
	}
	return id, true
}

// readBounded reads one delimited record of br, at most max bytes of it
// kept: the rest is read and discarded (all but idPrefix bytes), so an
// oversized record never sits in memory whole.
func readBounded(br *bufio.Reader, delim byte, max int) (rec []byte, oversized bool, err error) {
	for {
		chunk, err := br.ReadSlice(delim)
		switch {
		case oversized:
		case len(rec)+len(chunk) > max:
			oversized = true
			if keep := idPrefix - len(rec); keep > 0 {
				rec = append(rec, chunk[:min(keep, len(chunk))]...)
			}
		default:
			rec = append(rec, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return rec, oversized, err
	}
}

// lineFilter is the upstream's stdout (newline-delimited JSON-RPC) as the
// SDK reads it: each line filtered.
type lineFilter struct {
	br  *bufio.Reader
	f   *filter
	out []byte
	err error
}

func newLineFilter(r io.Reader, f *filter) *lineFilter {
	return &lineFilter{br: bufio.NewReaderSize(r, 64<<10), f: f}
}

func (l *lineFilter) Read(p []byte) (int, error) {
	for len(l.out) == 0 {
		if l.err != nil {
			return 0, l.err
		}
		line, over, err := readBounded(l.br, '\n', l.f.max)
		if t := bytes.TrimSpace(line); len(t) > 0 {
			if msg := l.f.message(t, over); msg != nil {
				l.out = append(msg, '\n')
			}
		}
		l.err = err
	}
	n := copy(p, l.out)
	l.out = l.out[n:]
	return n, nil
}

// httpFilter is the HTTP transport of the streamable client: it adds the
// operator's headers to every request and filters every answer, a JSON
// body whole and an event stream event by event.
type httpFilter struct {
	base    http.RoundTripper
	headers http.Header
	f       *filter
}

func (h *httpFilter) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	for k, vs := range h.headers {
		r.Header[k] = append([]string(nil), vs...)
	}
	resp, err := h.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case mt == "text/event-stream":
		resp.Body = &sseFilter{br: bufio.NewReaderSize(resp.Body, 64<<10), body: resp.Body, f: h.f}
	case mt == "application/json" && resp.StatusCode/100 == 2:
		body, over, rerr := readBounded(bufio.NewReader(resp.Body), 0, h.f.max)
		resp.Body.Close()
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("read the upstream's answer: %w", rerr)
		}
		msg := h.f.message(bytes.TrimSpace(body), over)
		resp.Body = io.NopCloser(bytes.NewReader(msg))
		resp.ContentLength = int64(len(msg))
		resp.Header.Del("Content-Length")
	default:
		// Errors and empty answers: bounded and redacted, never parsed here.
		body, _, _ := readBounded(bufio.NewReader(resp.Body), 0, 64<<10)
		resp.Body.Close()
		body, _ = h.f.redactor.Bytes(body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Del("Content-Length")
	}
	return resp, nil
}

// sseFilter passes an event stream on with each event's data filtered;
// the other fields (event, id, retry) are kept as they are.
type sseFilter struct {
	br   *bufio.Reader
	body io.Closer
	f    *filter
	out  []byte
	err  error
}

func (s *sseFilter) Close() error { return s.body.Close() }

func (s *sseFilter) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.err = s.event()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// event reads one event (up to a blank line) into s.out.
func (s *sseFilter) event() error {
	var fields, data []byte
	over, hasData := false, false
	for {
		line, lover, err := readBounded(s.br, '\n', s.f.max)
		t := bytes.TrimRight(line, "\r\n")
		switch {
		case len(t) == 0 && len(line) > 0 || len(t) == 0 && err != nil:
			if hasData {
				if msg := s.f.message(data, over); msg != nil {
					fields = append(append(append(fields, "data: "...), msg...), '\n')
				}
			}
			if len(fields) > 0 {
				s.out = append(fields, '\n')
			}
			return err
		case bytes.HasPrefix(t, []byte("data:")):
			v := bytes.TrimPrefix(t[len("data:"):], []byte(" "))
			if hasData {
				data = append(data, '\n')
			}
			hasData = true
			if over = over || lover || len(data)+len(v) > s.f.max; !over {
				data = append(data, v...)
			}
		case len(t) > 0:
			if !lover && len(fields) < idPrefix {
				fields = append(append(fields, t...), '\n')
			}
		}
		if err != nil {
			if hasData || len(fields) > 0 {
				continue // flush what was read, then report err
			}
			return err
		}
	}
}
