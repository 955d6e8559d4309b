package witness

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

const (
	// maxResponse bounds what is read of a witness's answer: a few
	// signature lines, or an error page, need far less.
	maxResponse = 64 << 10
	// maxSnippet bounds how much of an error body an error repeats.
	maxSnippet = 256
	// maxProofLines is tlog-witness's limit on consistency proof lines.
	maxProofLines = 63
	// sizeContentType marks a 409's body as the witness's tree size.
	sizeContentType = "text/x.tlog.size"
)

// SizeConflict is the error of a 409 answer: the witness's latest cosigned
// checkpoint for the origin has WitnessSize, not the old size sent. The
// caller resends with a consistency proof from WitnessSize. A WitnessSize
// above the checkpoint's size means the witness has cosigned a larger tree
// of this origin than the log is offering, which no resend can fix.
type SizeConflict struct {
	WitnessSize uint64
}

func (e *SizeConflict) Error() string {
	return "size conflict: the witness's latest cosigned size is " + strconv.FormatUint(e.WitnessSize, 10)
}

// HTTPError is an answer other than 200 or a well-formed 409. Per
// tlog-witness, 404 means the witness does not know the origin, 403 that
// no trusted log signature verified, 400 a malformed request and 422 a
// consistency proof that failed, as it does for a fork.
type HTTPError struct {
	StatusCode int
	Snippet    string // the start of the body, made printable
}

func (e *HTTPError) Error() string {
	msg := strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode)
	if e.Snippet != "" {
		msg += ": " + e.Snippet
	}
	return msg
}

// Client submits checkpoints to one witness's add-checkpoint endpoint.
// It is safe for concurrent use, though the protocol's old size makes
// concurrent submissions of one origin conflict.
type Client struct {
	w        Witness
	endpoint string
	hc       *http.Client
	log      *slog.Logger
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client. Its Timeout, if any, applies on top
// of the context's deadline. Its redirect policy is not used: the client
// never follows a redirect.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// noRedirects makes a redirect the answer itself: a witness that sends
// the ledger elsewhere (a metadata service, an internal host) gets its
// 3xx back as an error, and the checkpoint goes nowhere else.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// WithLogger sets the logger of per-request debug lines.
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// NewClient returns a client of w, a witness from a Policy or NewWitness.
func NewClient(w Witness, opts ...Option) (*Client, error) {
	if w.verifier == nil {
		return nil, errors.New("new witness client: witness has no key; make it with NewWitness or ParsePolicy")
	}
	c := &Client{
		w:        w,
		endpoint: strings.TrimSuffix(w.URL, "/") + "/add-checkpoint",
		hc:       &http.Client{},
		log:      slog.Default(),
	}
	for _, o := range opts {
		o(c)
	}
	hc := *c.hc // a copy: the caller's client keeps its own policy
	hc.CheckRedirect = noRedirects
	c.hc = &hc
	return c, nil
}

// Witness is the witness this client submits to.
func (c *Client) Witness() Witness { return c.w }

// AddCheckpoint asks the witness to cosign checkpoint, a signed note,
// given oldSize, the size the caller believes the witness last cosigned
// (0 when it has cosigned nothing for the origin), and the RFC 6962
// consistency proof from oldSize to the checkpoint's size (empty when
// oldSize is 0 or equal to that size).
//
// It returns the witness's cosignature lines ("— name base64\n") that
// verify with the witness's key; lines from other keys are dropped, and
// an answer with none, or with one from the witness's key that does not
// verify, is an error. A 409 gives an error wrapping *SizeConflict, any
// other failed status one wrapping *HTTPError. The context bounds the
// whole exchange.
func (c *Client) AddCheckpoint(ctx context.Context, oldSize uint64, proof [][]byte, checkpoint []byte) ([]byte, error) {
	cosigs, err := c.addCheckpoint(ctx, oldSize, proof, checkpoint)
	if err != nil {
		return nil, fmt.Errorf("add-checkpoint to witness %s: %w", c.w.Name, err)
	}
	return cosigs, nil
}

func (c *Client) addCheckpoint(ctx context.Context, oldSize uint64, proof [][]byte, checkpoint []byte) ([]byte, error) {
	text, _, err := splitNote(checkpoint)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	cp, err := parseCheckpoint(string(text))
	if err != nil {
		return nil, err
	}
	switch {
	case oldSize > cp.size:
		return nil, fmt.Errorf("old size %d is past the checkpoint's size %d", oldSize, cp.size)
	case oldSize == 0 && len(proof) != 0:
		return nil, fmt.Errorf("old size 0 takes no proof, got %d hashes", len(proof))
	case len(proof) > maxProofLines:
		return nil, fmt.Errorf("%d proof hashes, the protocol allows %d", len(proof), maxProofLines)
	}

	var body bytes.Buffer
	body.Grow(32 + len(proof)*45 + len(checkpoint))
	body.WriteString("old " + strconv.FormatUint(oldSize, 10) + "\n")
	for i, h := range proof {
		if len(h) != len(cp.hash) {
			return nil, fmt.Errorf("proof hash %d is %d bytes, want %d", i, len(h), len(cp.hash))
		}
		body.WriteString(base64.StdEncoding.EncodeToString(h) + "\n")
	}
	body.WriteString("\n")
	body.Write(checkpoint)

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, &body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	c.log.DebugContext(ctx, "witness add-checkpoint", "witness", c.w.Name, "origin", cp.origin,
		"old", oldSize, "size", cp.size, "status", resp.StatusCode, "elapsed", time.Since(start))
	if err != nil {
		return nil, fmt.Errorf("read %d response: %w", resp.StatusCode, err)
	}

	switch resp.StatusCode {
	case http.StatusOK:
		if len(data) > maxResponse {
			return nil, fmt.Errorf("response over %d bytes", maxResponse)
		}
		return c.cosignatures(text, data)
	case http.StatusConflict:
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == sizeContentType {
			size, ok := parseSizeBody(data)
			if !ok {
				return nil, fmt.Errorf("409 with malformed %s body %q", sizeContentType, snippet(data))
			}
			return nil, &SizeConflict{WitnessSize: size}
		}
	}
	return nil, &HTTPError{StatusCode: resp.StatusCode, Snippet: snippet(data)}
}

// cosignatures checks a 200 answer against the note text it cosigns. The
// answer is verified on the bare text, not appended to the caller's
// checkpoint, so that a cosignature by this key already on the checkpoint
// cannot stand in for the new one.
func (c *Client) cosignatures(text, data []byte) ([]byte, error) {
	if len(data) == 0 {
		return nil, errors.New("empty 200 response, want cosignature lines")
	}
	msg := make([]byte, 0, len(text)+1+len(data))
	msg = append(append(append(msg, text...), '\n'), data...)
	n, err := note.Open(msg, note.VerifierList(c.w.verifier))
	var unverified *note.UnverifiedNoteError
	var invalid *note.InvalidSignatureError
	switch {
	case errors.As(err, &unverified):
		return nil, fmt.Errorf("response has no cosignature from key %s: %q", c.w.verifier.Name(), snippet(data))
	case errors.As(err, &invalid):
		return nil, fmt.Errorf("response's cosignature from key %s does not verify", c.w.verifier.Name())
	case err != nil:
		return nil, fmt.Errorf("malformed response %q: %w", snippet(data), err)
	}
	var out bytes.Buffer
	for _, s := range n.Sigs {
		out.WriteString("— " + s.Name + " " + s.Base64 + "\n")
	}
	return out.Bytes(), nil
}

// parseSizeBody parses a 409 body: a decimal size without leading zeros
// and a newline.
func parseSizeBody(data []byte) (uint64, bool) {
	s, ok := strings.CutSuffix(string(data), "\n")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && s == strconv.FormatUint(n, 10)
}

// snippet is the start of a body, as printable text on one line.
func snippet(data []byte) string {
	if len(data) > maxSnippet {
		data = data[:maxSnippet]
	}
	s := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(data), "\uFFFD"))
	return strings.TrimSpace(s)
}
