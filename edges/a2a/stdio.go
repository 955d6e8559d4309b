package a2a

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// The stdio binding: the hello-a2a profile, JSON-RPC one request per line.

// ServeStdio runs the hello-a2a stdio profile: one JSON-RPC request per
// line in, one response per line out, as the edge's dev capability holder.
// A line over the size limit is answered with -32600 and skipped; the loop
// goes on.
func (e *Edge) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriter(out)
	var cerr *wire.Error
	if e.cfg.DevToken == "" {
		cerr = wire.Unauthenticated("the stdio edge has no capability to act under")
	}
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
