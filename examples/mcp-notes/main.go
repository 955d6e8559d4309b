// Command mcp-notes is a small MCP server over stdio, written with the
// official MCP Go SDK, for the README tour: chio wraps it as governed
// tools (chio up --mcp-server 'notes=bin/mcp-notes').
//
// Its tools: count_words (read-only, with a structured answer) and
// add_note (changes state; MCP's default makes it destructive, so chio
// runs it only under a grant that names it).
package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type countIn struct {
	Text string `json:"text" jsonschema:"the text to count the words of"`
}

type countOut struct {
	Words int `json:"words"`
}

type noteIn struct {
	Note string `json:"note" jsonschema:"the note to keep"`
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-notes", Version: "0.1.0"}, nil)
	readOnly := true
	mcp.AddTool(s, &mcp.Tool{Name: "count_words", Description: "Count the words of a text",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: readOnly}},
		func(_ context.Context, _ *mcp.CallToolRequest, in countIn) (*mcp.CallToolResult, countOut, error) {
			return nil, countOut{Words: len(strings.Fields(in.Text))}, nil
		})
	var mu sync.Mutex
	var notes []string
	mcp.AddTool(s, &mcp.Tool{Name: "add_note", Description: "Keep a note"},
		func(_ context.Context, _ *mcp.CallToolRequest, in noteIn) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			notes = append(notes, in.Note)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d notes kept", len(notes))}}}, nil, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
