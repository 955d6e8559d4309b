// Package mcpbridgetest is a real MCP server, written with the official
// MCP Go SDK, for the MCP bridge's tests and chio's: a test binary runs it
// over stdio when started with StdioFlag (see MaybeServeStdio), or a test
// serves it over streamable HTTP with NewHandler.
package mcpbridgetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioFlag, as a test binary's first argument, makes it this server on
// stdin/stdout (MaybeServeStdio).
const StdioFlag = "-mcpbridgetest-stdio"

// MaybeServeStdio serves over stdio and exits when the process was started
// with StdioFlag; otherwise it returns. Call it first in TestMain (or an
// init func of a test file).
func MaybeServeStdio() {
	if len(os.Args) < 2 || os.Args[1] != StdioFlag {
		return
	}
	err := NewServer(true).Run(context.Background(), &mcp.StdioTransport{})
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "mcpbridgetest:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// NewHandler serves a fresh server over streamable HTTP.
func NewHandler() http.Handler {
	s := NewServer(false)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// EchoIn and EchoOut are the echo tool's input and structured output.
type EchoIn struct {
	Text string `json:"text"`
}

// EchoOut is echo's structured output.
type EchoOut struct {
	Text string `json:"text"`
}

// NoteIn is the input of the note tools.
type NoteIn struct {
	Note string `json:"note"`
}

// EnvIn names an environment variable.
type EnvIn struct {
	Name string `json:"name"`
}

// ProgressIn says how many progress notifications to send.
type ProgressIn struct {
	Steps int `json:"steps"`
}

// Empty is an empty input.
type Empty struct{}

func ptr[T any](v T) *T { return &v }

// NewServer builds the server. With stdio it also has "crash", which exits
// the process mid-call, and "env", which echoes an environment variable.
//
// Tools: echo (read-only, structured), fail (isError), write_note
// (destructive), update_note (side effects, not destructive), progress
// (read-only, sends progress), block (waits to be cancelled), cancelled
// (waits until block was cancelled, then says how often), add_tool and
// remove_tool (add and remove "extra", which notifies list_changed).
func NewServer(stdio bool) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcpbridgetest", Version: "1.2.3"}, nil)
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo the text back", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, in EchoIn) (*mcp.CallToolResult, EchoOut, error) {
			return nil, EchoOut{Text: in.Text}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails", Annotations: ro},
		func(_ context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the disk is full"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "write_note", Description: "Overwrite the note", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in NoteIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "written: " + in.Note}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "update_note", Description: "Append to the note", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: false}},
		func(_ context.Context, _ *mcp.CallToolRequest, in NoteIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "appended: " + in.Note}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "Report progress, then finish", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, in ProgressIn) (*mcp.CallToolResult, EchoOut, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i := 1; i <= in.Steps; i++ {
					if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
						Progress: float64(i), Total: float64(in.Steps), Message: fmt.Sprintf("step %d", i)}); err != nil {
						return nil, EchoOut{}, err
					}
					if i == 1 {
						// The client handles a request only after the
						// notifications before it, and answers come
						// apart from both: the ping makes the first
						// progress arrive before the answer. Later ones
						// may come after it, as from any server.
						if err := req.Session.Ping(ctx, nil); err != nil {
							return nil, EchoOut{}, err
						}
					}
				}
			}
			return nil, EchoOut{Text: "done"}, nil
		})
	var mu sync.Mutex
	cancelled := 0
	cancelledCh := make(chan struct{})
	mcp.AddTool(s, &mcp.Tool{Name: "block", Description: "Report that it started, then wait until cancelled", Annotations: ro},
		func(ctx context.Context, req *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "started"})
			}
			<-ctx.Done()
			mu.Lock()
			cancelled++
			if cancelled == 1 {
				close(cancelledCh)
			}
			mu.Unlock()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(s, &mcp.Tool{Name: "cancelled", Description: "How many block calls were cancelled (waits for one)", Annotations: ro},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, struct {
			Count int `json:"count"`
		}, error) {
			var out struct {
				Count int `json:"count"`
			}
			select {
			case <-cancelledCh:
			case <-ctx.Done():
				return nil, out, ctx.Err()
			}
			mu.Lock()
			out.Count = cancelled
			mu.Unlock()
			return nil, out, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Description: "Add the tool extra"},
		func(_ context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "extra", Description: "Added at run time", Annotations: ro},
				func(_ context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, EchoOut, error) {
					return nil, EchoOut{Text: "extra"}, nil
				})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "added"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "remove_tool", Description: "Remove the tool extra"},
		func(_ context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
			s.RemoveTools("extra")
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "removed"}}}, nil, nil
		})
	if stdio {
		mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exit the server mid-call", Annotations: ro},
			func(_ context.Context, _ *mcp.CallToolRequest, _ Empty) (*mcp.CallToolResult, any, error) {
				os.Exit(3)
				return nil, nil, nil
			})
		mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Echo an environment variable", Annotations: ro},
			func(_ context.Context, _ *mcp.CallToolRequest, in EnvIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Name + "=" + os.Getenv(in.Name)}}}, nil, nil
			})
	}
	return s
}
