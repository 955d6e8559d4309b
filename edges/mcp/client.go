package mcp

import (
	"context"
	"fmt"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ListedTool is one tool an MCP endpoint lists: its MCP name and, from
// its _meta.chio, the Chio names.
type ListedTool struct {
	Name, ServerID, ToolName, Description string
}

// ListTools asks the MCP endpoint (a Chio edge's /mcp) which tools token
// may call, with the official client; an empty token sends no credential.
// token is sent as a bearer token: one that can delegate needs a proof
// (ListToolsWith and a dpop.Transport).
func ListTools(ctx context.Context, endpoint, token string) ([]ListedTool, error) {
	return ListToolsWith(ctx, endpoint, &http.Client{Transport: bearerTransport{token: token, next: http.DefaultTransport}})
}

// ListToolsWith is ListTools with the HTTP client that sends the
// credential, such as one whose transport is a dpop.Transport.
func ListToolsWith(ctx context.Context, endpoint string, hc *http.Client) ([]ListedTool, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "chio-tools-list", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	defer cs.Close()
	var out []ListedTool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools at %s: %w", endpoint, err)
		}
		lt := ListedTool{Name: t.Name, Description: t.Description}
		if m, ok := t.Meta["chio"].(map[string]any); ok {
			lt.ServerID, _ = m["server_id"].(string)
			lt.ToolName, _ = m["tool_name"].(string)
		}
		out = append(out, lt)
	}
	return out, nil
}

// bearerTransport sends a capability on every request.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token == "" {
		return b.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
