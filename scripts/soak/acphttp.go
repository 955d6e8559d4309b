package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// httpLines carries the ACP SDK's newline-delimited JSON-RPC over chio's
// HTTP profile: each line the SDK writes is POSTed to /acp on its own
// goroutine (so calls overlap as on a stdio pipe), and each answer is
// written back as one line for the SDK to read. A request whose POST fails
// is answered with a JSON-RPC error carrying its id, so no call hangs.
type httpLines struct {
	hc  *http.Client
	url string

	ctx    context.Context
	cancel context.CancelFunc
	pr     *io.PipeReader
	pw     *io.PipeWriter

	mu  sync.Mutex // serialises writes to pw
	bmu sync.Mutex // guards buf
	buf []byte
	wg  sync.WaitGroup
}

func newHTTPLines(hc *http.Client, url string) *httpLines {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	return &httpLines{hc: hc, url: url, ctx: ctx, cancel: cancel, pr: pr, pw: pw}
}

// Reader is what the SDK reads answers from.
func (h *httpLines) Reader() io.Reader { return h.pr }

// Write takes the SDK's output; every complete line is one POST.
func (h *httpLines) Write(p []byte) (int, error) {
	if h.ctx.Err() != nil {
		return 0, io.ErrClosedPipe
	}
	h.bmu.Lock()
	h.buf = append(h.buf, p...)
	var lines [][]byte
	for {
		i := bytes.IndexByte(h.buf, '\n')
		if i < 0 {
			break
		}
		if line := bytes.TrimSpace(h.buf[:i]); len(line) > 0 {
			lines = append(lines, bytes.Clone(line))
		}
		h.buf = h.buf[i+1:]
	}
	h.bmu.Unlock()
	for _, l := range lines {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.post(l)
		}()
	}
	return len(p), nil
}

func (h *httpLines) post(line []byte) {
	answer, err := h.roundTrip(line)
	if err != nil {
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &req) != nil || len(req.ID) == 0 {
			return // a notification: nobody waits for an answer
		}
		answer, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID,
			"error": map[string]any{"code": -32603, "message": "soak transport: " + err.Error()}})
	}
	if len(answer) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, _ = h.pw.Write(append(answer, '\n'))
}

func (h *httpLines) roundTrip(line []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(h.ctx, http.MethodPost, h.url, bytes.NewReader(line))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", h.url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("POST %s: read answer: %w", h.url, err)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		if resp.StatusCode/100 == 2 {
			return nil, nil // a notification's answer
		}
		return nil, fmt.Errorf("POST %s: HTTP %d", h.url, resp.StatusCode)
	}
	// One answer per line: compact whatever layout the server chose.
	var out bytes.Buffer
	if err := json.Compact(&out, body); err != nil {
		return nil, fmt.Errorf("POST %s: HTTP %d, not JSON: %.200s", h.url, resp.StatusCode, body)
	}
	return out.Bytes(), nil
}

// Close stops the transport: in-flight POSTs are cancelled and the SDK
// sees its input end.
func (h *httpLines) Close() {
	h.cancel()
	h.wg.Wait()
	_ = h.pw.Close()
}
