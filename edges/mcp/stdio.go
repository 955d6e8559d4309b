package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServeStdio serves the same tools over newline-delimited JSON-RPC on in
// and out, every call under token (the dev capability when token is
// empty), until in ends or ctx is done. A capability the kernel refuses at
// the start is an error; one refused later (expired, revoked) gets
// JSON-RPC errors, with deny receipts for its tool calls. in is closed at
// the end when it is an io.Closer; out is not.
func (e *Edge) ServeStdio(ctx context.Context, token string, in io.Reader, out io.Writer) error {
	if token == "" {
		token = e.opts.devToken
	}
	if token == "" {
		return errors.New("serve mcp over stdio: no capability and no dev capability")
	}
	if _, dec := e.kernel.Identify(token); dec != nil {
		return fmt.Errorf("serve mcp over stdio: %s", refusedMessage(dec))
	}
	t := &sdk.IOTransport{Reader: newStampingReader(in), Writer: nopWriteCloser{out}}
	if err := e.server.Run(withCaller(ctx, &caller{token: token}), t); err != nil {
		return fmt.Errorf("serve mcp over stdio: %w", err)
	}
	return nil
}

// nopWriteCloser leaves closing out to its owner.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
