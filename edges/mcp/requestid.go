package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
// itself when there is none or readMessages refuses it.
func stampIDs(body []byte) []byte {
	return stampMessages(readMessages(body), body)
}

// stampMessages is body, read as in, with every tools/call request's id
// stamped; body itself when there is none or in is refused.
func stampMessages(in incoming, body []byte) []byte {
	if in.refusal != nil {
		return body
	}
	stamped := false
	for _, m := range in.msgs {
		stamped = m.stamp() || stamped
	}
	if !stamped {
		return body
	}
	var v any = in.msgs[0]
	if in.batch {
		v = in.msgs
	}
	out, err := marshal(v)
	if err != nil {
		return body
	}
	return out
}

// stampedID is the JSON-RPC id a transport stamped into a call's _meta:
// a string, or an integer (the SDK decodes it as float64, exact since
// readMessages admits no integer past maxSafeID).
func stampedID(meta sdk.Meta) any {
	switch v := meta[metaRequestID].(type) {
	case string, int64:
		return v
	case float64:
		if v == math.Trunc(v) && math.Abs(v) <= maxSafeID {
			return int64(v)
		}
	case json.Number:
		if n, ok := safeInteger(v.String()); ok {
			return n
		}
	}
	return nil
}

// maxStampedLine bounds a stdio line, as MaxBodyBytes bounds an HTTP
// request: a longer one is refused unread, since every message must be
// read whole to be checked before the SDK reads it.
const maxStampedLine = MaxBodyBytes

// stampingReader is newline-delimited JSON-RPC, each line read with
// readMessages before the SDK reads it: a refused line never reaches the
// SDK, its answer goes to refuse; the others pass with the ids of their
// tools/call requests stamped. Blank lines pass as they are.
type stampingReader struct {
	src     *bufio.Reader
	closer  io.Closer // the source's, if it has one
	pending []byte
	long    bool // inside a line longer than the buffer
	err     error
	// flight, when set, counts the requests read; the end of the input
	// is reported only once they are answered.
	flight *inflight
	// refuse answers a refused line; nil drops it silently.
	refuse func(id json.RawMessage, werr *jsonrpc.Error)
}

func newStampingReader(in io.Reader, refuse func(json.RawMessage, *jsonrpc.Error)) *stampingReader {
	r := &stampingReader{src: bufio.NewReaderSize(in, maxStampedLine), refuse: refuse}
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
		case r.long:
			// The rest of a line refused when it filled the buffer.
		case full:
			r.refuseLine(json.RawMessage("null"), rpcError(codeInvalidRequest,
				fmt.Sprintf("chio: a message over %d bytes", maxStampedLine), nil))
		case len(bytes.TrimSpace(line)) == 0:
			r.pending = append(r.pending[:0], line...)
		default:
			body, nl := bytes.CutSuffix(line, []byte("\n"))
			in := readMessages(body)
			if in.refusal != nil {
				r.refuseLine(in.id, in.refusal)
				break
			}
			if r.flight != nil {
				r.flight.add(countMessages(body, false))
			}
			r.pending = append(r.pending[:0], stampMessages(in, body)...)
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

func (r *stampingReader) refuseLine(id json.RawMessage, werr *jsonrpc.Error) {
	if r.refuse != nil {
		r.refuse(id, werr)
	}
}

// Close closes the source, if it can be, so that the SDK's blocked read
// ends with the session.
func (r *stampingReader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}
