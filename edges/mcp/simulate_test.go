package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/internal/natstest"
)

// Simulation mode runs no tool and writes nothing: a Simulator's answer
// comes back marked bridgeMode "simulation", any other server's tools are
// unsupported, and a refused capability gets 401 with no deny receipt.
func TestSimulation(t *testing.T) {
	f := start(t, WithSimulation(true))
	cs := mustConnect(t, f.url, fullToken(t), "")
	cases := []struct {
		name, tool string
		args       map[string]any
		decision   string
		isError    bool
		structured map[string]any
		text       string
	}{
		{"simulator", "create_pet", map[string]any{"name": "Rex"}, DecisionSimulated, false,
			map[string]any{"bridgeMode": "simulation", "would": "POST /pets", "tool": "create_pet", "arguments": map[string]any{"name": "Rex"}}, `{`},
		{"no simulator", "read", map[string]any{"path": "/tmp/x"}, DecisionUnsupported, true, nil,
			`chio: simulation is unsupported by tool server "files-srv"`},
		{"no simulator, would fail", "explode", nil, DecisionUnsupported, true, nil, "chio: simulation is unsupported"},
	}
	for _, c := range cases {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		v := verdictOf(t, res.Meta)
		got, _ := json.Marshal(res.StructuredContent)
		want, _ := json.Marshal(c.structured)
		if v.Decision != c.decision || !v.Simulation || v.ReceiptRef != "" || res.IsError != c.isError ||
			(c.structured != nil && string(got) != string(want)) || (c.structured == nil && res.StructuredContent != nil) ||
			!strings.HasPrefix(textOf(t, res), c.text) {
			t.Errorf("%s: %+v %s %q", c.name, v, got, textOf(t, res))
		}
	}
	// Grants and arguments are still checked.
	twinOnly := mustConnect(t, f.url, valid(t, "cap-twin", "twin-srv"), "")
	if _, err := twinOnly.CallTool(context.Background(), &sdk.CallToolParams{Name: "create_pet"}); rpcCode(err) != codeInvalidParams {
		t.Errorf("outside the grant: %v", err)
	}
	if _, _, a := post(t, f.url, fullToken(t), callBody(1, "create_pet", `{"a":1,"a":2}`), nil); a.Error == nil || a.Error.Code != codeInvalidParams {
		t.Errorf("duplicate member: %+v", a.Error)
	}
	status, _, a := post(t, f.url, expiredToken(t), callBody(2, "read", `{}`), nil)
	var data Refused
	if status != http.StatusUnauthorized || a.Error == nil || json.Unmarshal(a.Error.Data, &data) != nil || len(data.Receipts) != 0 {
		t.Errorf("expired: %d %+v", status, a.Error)
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events in simulation mode", n)
	}
}
