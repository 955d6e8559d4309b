package a2a

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/schemas"
)

// narrowToken grants only hello-a2a-srv's tools.
func narrowToken(t *testing.T, id string) string {
	t.Helper()
	now := time.Now()
	tok, err := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{
		ID: id, Issuer: pub(issuerKey), Subject: pub(agentKey),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix()),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := schemas.EncodeCapabilityHeader(tok)
	return h
}

// skillIDs reads a card's skill ids.
func skillIDs(t *testing.T, raw []byte) []string {
	t.Helper()
	var c struct {
		Skills []struct {
			ID string `json:"id"`
		} `json:"skills"`
		URL string `json:"url"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("card %s: %v", raw, err)
	}
	var ids []string
	for _, s := range c.Skills {
		ids = append(ids, s.ID)
	}
	slices.Sort(ids)
	return ids
}

// The extended card lists what the caller's capability may invoke, on
// every binding and in both dialects; the public card says there is one
// and lists every skill; without a capability it is 401.
func TestExtendedCard(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	url, tok := cl.edges[0].URL, narrowToken(t, "cap-narrow")
	want := []string{"hello_task"}

	resp, err := http.Get(url + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	public, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if all := skillIDs(t, public); len(all) <= len(want) || !strings.Contains(string(public), `"extendedAgentCard":true`) {
		t.Fatalf("public card: skills %v, %s", all, public)
	}

	for _, c := range []struct{ version, method, field string }{
		{"1.0", "GetExtendedAgentCard", "supportedInterfaces"},
		{"", "agent/getAuthenticatedExtendedCard", "url"}, // 0.3: the 0.3-compatible card
	} {
		m := rpc(t, url, tok, c.version, `{"jsonrpc":"2.0","id":1,"method":"`+c.method+`"}`)
		raw, _ := json.Marshal(m["result"])
		if got := skillIDs(t, raw); !slices.Equal(got, want) || !strings.Contains(string(raw), `"`+c.field+`"`) {
			t.Fatalf("%s: skills %v, card %s", c.method, got, raw)
		}
		req, _ := http.NewRequest(http.MethodPost, url+"/a2a", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"`+c.method+`"}`))
		req.Header.Set("Content-Type", "application/json")
		anon, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		anon.Body.Close()
		if anon.StatusCode != http.StatusUnauthorized || anon.Header.Get("WWW-Authenticate") != `Bearer realm="chio"` {
			t.Fatalf("%s without a capability: HTTP %d %q", c.method, anon.StatusCode, anon.Header.Get("WWW-Authenticate"))
		}
	}
	for _, path := range []string{"/extendedAgentCard", "/v1/card"} {
		req, _ := http.NewRequest(http.MethodGet, url+RESTPath+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set(wire.HeaderVersion, "1.0")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if got := skillIDs(t, raw); r.StatusCode != http.StatusOK || !slices.Equal(got, want) {
			t.Fatalf("REST %s: HTTP %d skills %v: %s", path, r.StatusCode, got, raw)
		}
	}

	c, _ := grpcSDKClient(t, url, tok)
	card, err := c.GetExtendedAgentCard(context.Background(), &sdk.GetExtendedAgentCardRequest{})
	if err != nil {
		t.Fatalf("gRPC GetExtendedAgentCard: %v", err)
	}
	var got []string
	for _, s := range card.Skills {
		got = append(got, s.ID)
	}
	slices.Sort(got)
	grpcListed := slices.ContainsFunc(card.SupportedInterfaces, func(i *sdk.AgentInterface) bool {
		return i.ProtocolBinding == sdk.TransportProtocolGRPC && i.URL == cl.raw[0].cfg.GRPCURL
	})
	if !slices.Equal(got, want) || !grpcListed {
		t.Fatalf("gRPC extended card: skills %v, gRPC listed %v", got, grpcListed)
	}
}

// A tokenless caller acting under the dev capability is not authenticated:
// no extended card for it (401), though its calls run; the card does not
// offer one where authentication is not enforced, but a presented
// capability still gets its view. The 0.3 routes also
// answer under the JSON-RPC URL (/a2a/v1/…), and GET /a2a is the card.
func TestExtendedCardNeedsACredential(t *testing.T) {
	cl := startCluster(t, 1, token(t, agentKey, "cap-dev"))
	url := cl.edges[0].URL
	if body, _, err := cl.raw[0].CardJSON(url, wire.V10); err != nil || !strings.Contains(string(body), `"extendedAgentCard":false`) {
		t.Fatalf("dev-mode card offers an extended card: %s %v", body, err)
	}
	for _, c := range []struct {
		method, path, tok string
		status            int
	}{
		{http.MethodGet, RESTPath + "/v1/card", "", http.StatusUnauthorized},
		{http.MethodGet, "/a2a/v1/card", "", http.StatusUnauthorized},
		{http.MethodGet, "/a2a/v1/card", narrowToken(t, "cap-presented"), http.StatusOK},
		{http.MethodGet, "/a2a", "", http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, url+c.path, nil)
		if c.tok != "" {
			req.Header.Set("Authorization", "Bearer "+c.tok)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != c.status {
			t.Fatalf("%s %s: HTTP %d, want %d: %s", c.method, c.path, r.StatusCode, c.status, raw)
		}
		if c.status == http.StatusOK && len(skillIDs(t, raw)) == 0 {
			t.Fatalf("%s %s: no card: %s", c.method, c.path, raw)
		}
	}
}
