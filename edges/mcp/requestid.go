package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// metaRequestID is the _meta key under which the transports hand a
// tools/call its own JSON-RPC id, for the decision event: the SDK gives
// tool handlers no access to it. Whatever a client sends under the key is
// overwritten.
const metaRequestID = "chio/jsonrpc_id"

// stamp copies a tools/call request's id into its params' _meta. It
// reports false, changing nothing, for any other message and for params or
// _meta that are not objects, which the SDK refuses anyway.
func (m message) stamp() bool {
	id, ok := m["id"]
	if !ok || m.method() != methodCallTool {
		return false
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(m["params"], &params) != nil || params == nil {
		return false
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := params["_meta"]; ok {
		if json.Unmarshal(raw, &meta) != nil || meta == nil {
			return false
		}
	}
	meta[metaRequestID] = id
	rawMeta, err := marshal(meta)
	if err != nil {
		return false
	}
	params["_meta"] = rawMeta
	rawParams, err := marshal(params)
	if err != nil {
		return false
	}
	m["params"] = rawParams
	return true
}

// stampIDs is body with every tools/call request's id stamped, or body
// itself when there is none or body is not JSON-RPC.
func stampIDs(body []byte) []byte {
	msgs, batch, ok := parseBody(body)
	if !ok {
		return body
	}
	stamped := false
	for _, m := range msgs {
		stamped = m.stamp() || stamped
	}
	if !stamped {
		return body
	}
	var v any = msgs[0]
	if batch {
		v = msgs
	}
	out, err := marshal(v)
	if err != nil {
		return body
	}
	return out
}

// stampedID is the JSON-RPC id a transport stamped into a call's _meta.
func stampedID(meta sdk.Meta) any {
	switch v := meta[metaRequestID].(type) {
	case string, float64, int64, json.Number:
		return v
	}
	return nil
}

// maxStampedLine bounds the stdio lines that get their ids stamped; a
// longer line passes as is (its call, over MaxParametersBytes, is refused
// anyway, or it merely goes without its request id).
const maxStampedLine = MaxBodyBytes

// stampingReader is newline-delimited JSON-RPC with the ids of its
// tools/call requests stamped, line by line.
type stampingReader struct {
	src     *bufio.Reader
	closer  io.Closer // the source's, if it has one
	pending []byte
	long    bool // inside a line longer than the buffer
	err     error
	// flight, when set, counts the requests read; the end of the input
	// is reported only once they are answered.
	flight *inflight
}

func newStampingReader(in io.Reader) *stampingReader {
	r := &stampingReader{src: bufio.NewReaderSize(in, maxStampedLine)}
	r.closer, _ = in.(io.Closer)
	return r
}

func (r *stampingReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			if r.flight != nil {
				r.flight.wait()
			}
			return 0, r.err
		}
		line, err := r.src.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		if !full {
			r.err = err
		}
		switch {
		case len(line) == 0:
		case full || r.long:
			r.pending = append(r.pending[:0], line...)
		default:
			body, nl := bytes.CutSuffix(line, []byte("\n"))
			if r.flight != nil {
				r.flight.add(countMessages(body, false))
			}
			r.pending = append(r.pending[:0], stampIDs(body)...)
			if nl {
				r.pending = append(r.pending, '\n')
			}
		}
		r.long = full
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// Close closes the source, if it can be, so that the SDK's blocked read
// ends with the session.
func (r *stampingReader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}
