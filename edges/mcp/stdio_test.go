package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// The same tools over stdio, with the official client on the other end of
// two pipes: listed and called under the session's capability, each call
// recorded with its JSON-RPC id; a capability revoked mid-session gets
// JSON-RPC errors and deny receipts.
func TestStdio(t *testing.T) {
	f := start(t)
	tok := valid(t, "cap-stdio", "files-srv", "twin-srv", "sim-srv")
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- f.edge.ServeStdio(context.Background(), tok, toServer, fromServer) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "stdio-client", Version: "1"}, nil).
		Connect(context.Background(), &sdk.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info := cs.InitializeResult().ServerInfo; info == nil || info.Name != "chio-test" {
		t.Fatalf("server info %+v", info)
	}
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Equal(names, allNames) {
		t.Fatalf("tools %v", names)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/x"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	ev, ok := natstest.Decisions(t, f.js)[verdictOf(t, res.Meta).ReceiptRef]
	if m := metaOf(t, ev); !ok || ev.Decision.Verdict != schemas.VerdictAllow || m.Protocol != "mcp" || m.MCP.RequestID == nil {
		t.Fatalf("event %+v %s", ev.Decision, ev.Metadata)
	}
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "secret"}); rpcCode(err) != codeInvalidParams {
		t.Fatalf("unknown tool: %v", err)
	}

	if err := kernel.Revoke(ctx, f.js, 1, "cap-stdio", "compromised", time.Now()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, dec := f.edge.kernel.Identify(context.Background(), tok, nil); dec != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the revocation never took effect")
		}
	}
	_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "/tmp/y"}})
	var werr *jsonrpc.Error
	var data Refused
	if rpcCode(err) != CodeUnauthorized || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked call: %v", err)
	}
	if !errors.As(err, &werr) || json.Unmarshal(werr.Data, &data) != nil || len(data.Receipts) != 1 {
		t.Fatalf("revoked call data: %v", err)
	}
	deny, ok := natstest.Decisions(t, f.js)[data.Receipts[0].ReceiptRef]
	if !ok || deny.Decision.Verdict != schemas.VerdictDeny || metaOf(t, deny).MCP.RequestID == nil {
		t.Fatalf("deny event %+v %s", deny.Decision, deny.Metadata)
	}
	if _, err := cs.ListTools(ctx, nil); rpcCode(err) != CodeUnauthorized {
		t.Fatalf("revoked list: %v", err)
	}

	// The client going away ends the session.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeStdio did not return when the input ended")
	}
}

// A session whose capability is refused from the start does not begin.
func TestStdioRefusedAtStart(t *testing.T) {
	f := start(t)
	cases := []struct{ name, token, err string }{
		{"expired", expiredToken(t), "capability refused at time"},
		{"none", "", "no capability"},
	}
	for _, c := range cases {
		err := f.edge.ServeStdio(context.Background(), c.token, strings.NewReader(""), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// Without a token the dev capability serves, and is checked the same.
	dev := start(t, WithDevToken(expiredToken(t)))
	if err := dev.edge.ServeStdio(context.Background(), "", strings.NewReader(""), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "capability refused at time") {
		t.Errorf("dev capability: %v", err)
	}
}

// The end of the input waits for the answers to the requests read, and
// only for those: notifications, null ids (which the SDK never answers)
// and answers are not requests.
func TestCountMessages(t *testing.T) {
	cases := []struct {
		line    string
		answers bool
		want    int
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, false, 1},
		{`{"jsonrpc":"2.0","id":"a","method":"ping"}`, false, 1},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, false, 0},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, false, 0},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, false, 2},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, false, 0},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, true, 1},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}`, true, 1},
		{`{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage"}`, true, 0},
		{`not json`, false, 0},
	}
	for _, c := range cases {
		if got := countMessages([]byte(c.line), c.answers); got != c.want {
			t.Errorf("countMessages(%s, %v) = %d, want %d", c.line, c.answers, got, c.want)
		}
	}
}
