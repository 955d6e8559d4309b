package mcp

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/schemas"
)

// dynTool is an exposed tool of the servers the follow tests change.
func dynTool(name string) schemas.ToolDefinition {
	return schemas.ToolDefinition{Name: name, Description: name, InputSchema: json.RawMessage(pathSchema), Metadata: exposed}
}

// The edge follows the registry while it runs: a server registered later,
// and a tool a Replace adds, are listed and callable through the same
// client session; a tool a Replace withdraws is neither listed nor called.
func TestFollowsRegistry(t *testing.T) {
	f := start(t)
	dyn := &testServer{id: "dyn-srv", defs: []schemas.ToolDefinition{dynTool("alpha")}}
	if err := f.reg.Register(dyn); err != nil {
		t.Fatal(err)
	}
	tok := valid(t, "cap-dyn", "dyn-srv", "late-srv")
	cs := mustConnect(t, f.url, tok, "2025-11-25")
	ctx := context.Background()
	steps := []struct {
		name     string
		change   func() error
		listed   []string
		callable []string
		refused  []string
	}{
		{"registered after start", func() error { return nil }, []string{"alpha"}, []string{"alpha"}, []string{"beta", "late_tool"}},
		{"server registered", func() error {
			return f.reg.Register(&testServer{id: "late-srv", defs: []schemas.ToolDefinition{dynTool("late_tool")}})
		}, []string{"alpha", "late_tool"}, []string{"late_tool"}, []string{"beta"}},
		{"tool added by Replace", func() error {
			dyn.defs = []schemas.ToolDefinition{dynTool("alpha"), dynTool("beta")}
			return f.reg.Replace(dyn)
		}, []string{"alpha", "beta", "late_tool"}, []string{"alpha", "beta"}, nil},
		{"tool withdrawn by Replace", func() error {
			dyn.defs = []schemas.ToolDefinition{dynTool("beta")}
			return f.reg.Replace(dyn)
		}, []string{"beta", "late_tool"}, []string{"beta"}, []string{"alpha"}},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		list, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("%s: list: %v", s.name, err)
		}
		var got []string
		for _, tl := range list.Tools {
			got = append(got, tl.Name)
		}
		if !slices.Equal(got, s.listed) {
			t.Errorf("%s: listed %v, want %v", s.name, got, s.listed)
		}
		for _, name := range s.callable {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{"path": "/tmp/x"}})
			if err != nil || res.IsError || verdictOf(t, res.Meta).Decision != DecisionAllow ||
				!strings.Contains(textOf(t, res), `"tool":"`+name+`"`) {
				t.Errorf("%s: call %s: %v %+v", s.name, name, err, res)
			}
		}
		for _, name := range s.refused {
			if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{"path": "/tmp/x"}}); rpcCode(err) != codeInvalidParams {
				t.Errorf("%s: call %s: %v, want unknown tool", s.name, name, err)
			}
		}
	}
}

// A stdio session, which outlives requests, is told with
// notifications/tools/list_changed that the list changed, and then lists
// the new tool.
func TestStdioListChanged(t *testing.T) {
	f := start(t)
	tok := valid(t, "cap-stdio-dyn", "late-srv")
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.edge.ServeStdio(ctx, tok, toServer, fromServer) }()
	t.Cleanup(func() {
		cancel()
		clientOut.Close()
		<-served
	})
	changed := make(chan struct{}, 8)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stdio-client", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(ctx, &sdk.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c := cs.InitializeResult().Capabilities; c == nil || c.Tools == nil || !c.Tools.ListChanged {
		t.Fatalf("capabilities %+v: tools.listChanged not offered", c)
	}
	if err := f.reg.Register(&testServer{id: "late-srv", defs: []schemas.ToolDefinition{dynTool("late_tool")}}); err != nil {
		t.Fatal(err)
	}
	// The edge learns of the change on its next request; this one is the
	// session's own.
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	<-changed
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 || list.Tools[0].Name != "late_tool" {
		t.Fatalf("tools %+v", list.Tools)
	}
}

// Replaces racing calls: a tool every version lists stays listed and
// callable throughout, whatever the rebuilds interleave with (run with
// -race).
func TestReplaceRacesCalls(t *testing.T) {
	f := start(t)
	dyn := &testServer{id: "dyn-srv", defs: []schemas.ToolDefinition{dynTool("alpha")}}
	if err := f.reg.Register(dyn); err != nil {
		t.Fatal(err)
	}
	cs := mustConnect(t, f.url, valid(t, "cap-race", "dyn-srv"), "2025-11-25")
	ctx := context.Background()
	const rounds = 50
	versions := [][]schemas.ToolDefinition{{dynTool("alpha"), dynTool("beta")}, {dynTool("alpha")}}
	replaced := make(chan error, 1)
	go func() {
		for i := range rounds {
			// dyn's defs are read only by Replace, on this goroutine.
			dyn.defs = versions[i%2]
			if err := f.reg.Replace(dyn); err != nil {
				replaced <- err
				return
			}
		}
		replaced <- nil
	}()
	for range rounds {
		list, err := cs.ListTools(ctx, nil)
		if err != nil || !slices.ContainsFunc(list.Tools, func(tl *sdk.Tool) bool { return tl.Name == "alpha" }) {
			t.Fatalf("list: %v %+v", err, list)
		}
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "alpha", Arguments: map[string]any{"path": "/tmp/x"}})
		if err != nil || res.IsError {
			t.Fatalf("call alpha: %v %+v", err, res)
		}
	}
	if err := <-replaced; err != nil {
		t.Fatal(err)
	}
}
