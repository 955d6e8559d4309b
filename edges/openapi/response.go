package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// RawResponse receives the upstream response in raw mode.
type RawResponse struct {
	Status int
	Header http.Header // minus hop-by-hop headers
	Body   []byte
}

type rawKey struct{}

// WithRawResponse asks Invoke, for a reverse proxy, to copy the upstream
// response's status, headers (minus hop-by-hop ones) and body bytes into
// sink, and to return {"httpStatus", "method", "path", "bodySha256",
// "bodyBytes"} instead of the parsed body, so the receipt records the status
// and a hash of the body the client gets.
func WithRawResponse(ctx context.Context, sink *RawResponse) context.Context {
	return context.WithValue(ctx, rawKey{}, sink)
}

func rawSink(ctx context.Context) *RawResponse {
	sink, _ := ctx.Value(rawKey{}).(*RawResponse)
	return sink
}

// rawOutput fills the sink and describes the response for the receipt.
func rawOutput(sink *RawResponse, rt *Route, resp *http.Response, body []byte, redacted bool, redact func([]byte) ([]byte, bool)) (json.RawMessage, error) {
	h := resp.Header.Clone()
	removeHopByHop(h)
	for k, vs := range h {
		for i, v := range vs {
			if r, ok := redact([]byte(v)); ok {
				h[k][i] = string(r)
			}
		}
	}
	if redacted {
		// The body changed length; the upstream's framing no longer fits.
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	sink.Status, sink.Header, sink.Body = resp.StatusCode, h, body
	sum := sha256.Sum256(body)
	out, err := marshal(struct {
		HTTPStatus int    `json:"httpStatus"`
		Method     string `json:"method"`
		Path       string `json:"path"`
		BodySHA256 string `json:"bodySha256"`
		BodyBytes  int    `json:"bodyBytes"`
	}{resp.StatusCode, rt.Method, rt.Path, hex.EncodeToString(sum[:]), len(body)})
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", rt.Tool, err)
	}
	return out, nil
}

// parsedOutput is {"httpStatus", "method", "path", "body"[, "bodyEncoding"]}.
// A JSON body is read with strictjson: one it refuses for anything but
// its syntax (a member repeated, exactly or but for case; nesting past
// strictjson.MaxDepth; invalid UTF-8 or a lone surrogate; too large) is an
// error wrapping ErrUnreadableResponse, so the call fails with that reason
// rather than record what readers of the receipt would read differently,
// or could not read. A body of a JSON type that is not JSON at all is
// text, as any other.
func parsedOutput(rt *Route, resp *http.Response, body []byte) (json.RawMessage, error) {
	out := struct {
		HTTPStatus   int             `json:"httpStatus"`
		Method       string          `json:"method"`
		Path         string          `json:"path"`
		Body         json.RawMessage `json:"body"`
		BodyEncoding string          `json:"bodyEncoding,omitempty"`
	}{HTTPStatus: resp.StatusCode, Method: rt.Method, Path: rt.Path}
	isJSON := false
	if len(body) > 0 && jsonMediaType(resp.Header.Get("Content-Type")) {
		err := strictjson.Valid(body)
		if err != nil && !errors.Is(err, strictjson.ErrSyntax) {
			return nil, fmt.Errorf("%w: %s %s answered JSON strictjson refuses: %w", ErrUnreadableResponse, rt.Method, rt.Path, err)
		}
		isJSON = err == nil
	}
	var buf bytes.Buffer
	var err error
	switch {
	case len(body) == 0:
		out.Body = json.RawMessage(`null`)
	case isJSON && json.Compact(&buf, body) == nil:
		out.Body = buf.Bytes()
	case utf8.Valid(body):
		out.Body, err = marshal(string(body))
	default:
		out.Body, err = marshal(base64.StdEncoding.EncodeToString(body))
		out.BodyEncoding = "base64"
	}
	if err != nil {
		return nil, fmt.Errorf("encode response body: %w", err)
	}
	return marshal(out)
}

// removeHopByHop deletes the connection's headers (RFC 9110 §7.6.1),
// those the Connection header names included.
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		h.Del(name)
	}
}
