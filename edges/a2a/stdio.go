package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/kernel"
)

// The stdio binding: the hello-a2a profile, JSON-RPC one request per line.

// ServeStdio runs the hello-a2a stdio profile: one JSON-RPC request per
// line in, one response per line out, as the holder of the edge's dev
// capability (Config.DevToken). A capability the kernel refuses at the
// start is an error; one refused later (expired, revoked) gets -31401,
// with a deny receipt for a send. A line over the size limit is answered
// with -32600 and skipped; the loop goes on.
//
// The process holds the capability, but a capability that must be proven
// (one that can delegate, a dpop_required grant, --require-dpop) is
// honoured only with a proof of possession of its subject key, and stdio
// has no HTTP request to bind an RFC 9449 proof to: each call carries a
// chio.dpop_proof.v1 (dpop.Signer.ToolProof) as the JSON object
// params.metadata.chio.dpopProof (else params.message.metadata.chio.dpopProof),
// naming the tool call it is for: the skill's server and tool, and the
// arguments the message resolves to. A call without one is refused
// (missing_proof), with its deny receipt.
func (e *Edge) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	var cerr *wire.Error
	if e.cfg.DevToken == "" {
		cerr = wire.Unauthenticated("the stdio edge has no capability to act under")
	} else if _, d := e.kernel.Held(e.cfg.DevToken); d != nil {
		return fmt.Errorf("a2a stdio: the configured capability is refused at %s: %s", d.Guard, d.Reason)
	}
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriter(out)
	// Lines are read on their own goroutine so that a stop (SIGTERM) ends
	// the session while it waits for input; that reader is left blocked
	// in Read, which ends with the process.
	type read struct {
		line    []byte
		tooLong bool
		err     error
	}
	lines := make(chan read)
	go func() {
		for {
			line, tooLong, err := readLine(r, wire.MaxRequestBytes)
			select {
			case lines <- read{line, tooLong, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var next read
		select {
		case next = <-lines:
		case <-ctx.Done():
			return nil // a requested stop, not a failure
		}
		line, tooLong, err := next.line, next.tooLong, next.err
		if err != nil && err != io.EOF {
			return fmt.Errorf("stdio: read: %w", err)
		}
		var resp []byte
		switch {
		case tooLong:
			werr := wire.InvalidRequest(fmt.Sprintf("request larger than %d bytes", wire.MaxRequestBytes))
			_, rec := e.begin(ctx, "stdio", "")
			rec.fail(werr)
			rec.release()
			resp = wire.EncodeError(nil, werr)
		case len(strings.TrimSpace(string(line))) > 0:
			lctx, rec := e.begin(ctx, "stdio", "")
			resp, _ = e.handleJSONRPC(lctx, rpcCall{caller: caller{token: e.cfg.DevToken}, negotiated: wire.V03, stdio: true}, line, cerr)
			rec.release()
		}
		if resp != nil {
			if _, werr := w.Write(append(resp, '\n')); werr != nil {
				return fmt.Errorf("stdio: write: %w", werr)
			}
			if werr := w.Flush(); werr != nil {
				return fmt.Errorf("stdio: flush: %w", werr)
			}
		}
		if err == io.EOF || ctx.Err() != nil {
			return nil
		}
	}
}

// metaDPoPProof is the member of metadata.chio that carries a stdio
// call's chio.dpop_proof.v1.
const metaDPoPProof = "dpopProof"

// stdioProof is the tool proof a stdio call carries (see ServeStdio), nil
// for none. Its form is the kernel's to judge: whatever JSON value is
// there is passed on, so a malformed one is refused, never ignored.
func stdioProof(params json.RawMessage) *kernel.Proof {
	var p struct {
		Metadata json.RawMessage `json:"metadata"`
		Message  struct {
			Metadata json.RawMessage `json:"metadata"`
		} `json:"message"`
	}
	_ = json.Unmarshal(params, &p) // what does not decode has no proof: the params' decoding refuses it
	for _, meta := range []json.RawMessage{p.Metadata, p.Message.Metadata} {
		if raw := member(member(meta, "chio"), metaDPoPProof); len(raw) > 0 && string(raw) != "null" {
			return &kernel.Proof{Tool: raw}
		}
	}
	return nil
}

// member is obj's member name, nil when obj is not an object or has none.
func member(obj json.RawMessage, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return nil
	}
	return m[name]
}

// readLine reads one line of at most limit bytes; a longer one is read to
// its end and reported as tooLong, so the next line starts cleanly.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, rerr := r.ReadLine()
		if len(line)+len(chunk) > limit {
			tooLong, line = true, nil
		} else if !tooLong {
			line = append(line, chunk...)
		}
		if rerr != nil {
			return line, tooLong, rerr
		}
		if !isPrefix {
			return line, tooLong, nil
		}
	}
}
