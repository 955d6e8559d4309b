package mcp

import (
	"context"
	"fmt"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/internal/natstest"
)

// Two clients with different capabilities call at once through the same
// stateless edge: each sees only its own tools, every call gets its own
// receipt, and every receipt's decision event is on the stream.
func TestParallelClients(t *testing.T) {
	f := start(t)
	const calls = 20
	clients := []struct {
		name, tool string
		cs         *sdk.ClientSession
		tools      int
	}{
		{"full", "read", mustConnect(t, f.url, fullToken(t), ""), len(allNames)},
		{"twin", "twin-srv__echo", mustConnect(t, f.url, valid(t, "cap-twin", "twin-srv"), "2025-11-25"), 1},
	}
	var (
		mu   sync.Mutex
		refs = map[string]string{} // receipt → client
		wg   sync.WaitGroup
	)
	for _, c := range clients {
		for i := range calls {
			wg.Go(func() {
				ctx := context.Background()
				list, err := c.cs.ListTools(ctx, nil)
				if err != nil || len(list.Tools) != c.tools {
					t.Errorf("%s list: %v", c.name, err)
					return
				}
				path := fmt.Sprintf("/tmp/%s-%d", c.name, i)
				res, err := c.cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: map[string]any{"path": path}})
				if err != nil || res.IsError {
					t.Errorf("%s call %d: %v", c.name, i, err)
					return
				}
				sc, _ := res.StructuredContent.(map[string]any)
				if args, _ := sc["arguments"].(map[string]any); args["path"] != path {
					t.Errorf("%s call %d answered %v", c.name, i, res.StructuredContent)
				}
				mu.Lock()
				defer mu.Unlock()
				refs[verdictOf(t, res.Meta).ReceiptRef] = c.name
			})
		}
	}
	wg.Wait()
	if len(refs) != 2*calls {
		t.Fatalf("%d distinct receipts, want %d", len(refs), 2*calls)
	}
	events := natstest.Decisions(t, f.js)
	for ref, who := range refs {
		ev, ok := events[ref]
		if !ok || (who == "twin") != (ev.ToolServer == "twin-srv") {
			t.Errorf("%s's receipt %s: %+v", who, ref, ev)
		}
	}
}
