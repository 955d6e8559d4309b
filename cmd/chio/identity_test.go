package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/internal/authtest"
)

// chio up trusting an OpenID provider from the command line: an agent
// holding a client-credentials access token from zitadel's provider calls
// a skill with the a2a-go client over JSON-RPC and REST, and a tool with
// the MCP SDK's client (--expose-all shows the demo tool there), with no chio
// capability; each call's receipt names who the caller was. A token of a
// provider the edge does not trust is refused.
func TestUpTakesProviderAccessTokens(t *testing.T) {
	o := authtest.StartOP(t, "agent-7", "secret-7")
	up := startUp(t, "--require-capability", "--oidc-issuer", o.Issuer, "--oidc-audience", "agent-7",
		"--oidc-grant", "sub=agent-7:hello-a2a-srv/*", "--oidc-ca", o.CAFile(t), "--expose-all")
	token := o.AccessToken(t)
	hc := &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}, Timeout: 30 * time.Second}
	card, err := agentcard.DefaultResolver.Resolve(t.Context(), up.httpURL)
	if err != nil {
		t.Fatal(err)
	}
	// The card declares the provider as an OpenID Connect scheme, one of
	// the alternatives.
	oidc, ok := card.SecuritySchemes["oidc_0"].(a2apb.OpenIDConnectSecurityScheme)
	if !ok || oidc.OpenIDConnectURL != o.Issuer+"/.well-known/openid-configuration" {
		t.Fatalf("card security schemes %#v", card.SecuritySchemes)
	}
	seen := 0
	for _, iface := range card.SupportedInterfaces {
		if iface.ProtocolVersion != a2apb.Version ||
			(iface.ProtocolBinding != a2apb.TransportProtocolJSONRPC && iface.ProtocolBinding != a2apb.TransportProtocolHTTPJSON) {
			continue
		}
		seen++
		t.Run(string(iface.ProtocolBinding), func(t *testing.T) {
			client, err := a2aclient.NewFromEndpoints(t.Context(), []*a2apb.AgentInterface{iface},
				a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
			if err != nil {
				t.Fatal(err)
			}
			task := sendGoverned(t, client, "hello from agent-7 over "+string(iface.ProtocolBinding))
			if task.Status.State != a2apb.TaskStateCompleted {
				t.Fatalf("task %+v", task)
			}
			rid, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)
			var r struct {
				Receipt struct {
					CapabilityID string `json:"capability_id"`
					Metadata     struct {
						Attribution struct {
							Identity map[string]any `json:"identity"`
						} `json:"attribution"`
					} `json:"metadata"`
				} `json:"receipt"`
			}
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
				if code == http.StatusOK {
					if err := json.Unmarshal(body, &r); err != nil {
						t.Fatalf("receipt: %v\n%s", err, body)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("receipt %s: %d %s", rid, code, body)
				}
			}
			id := r.Receipt.Metadata.Attribution.Identity
			if id["issuer"] != o.Issuer || id["subject"] != "agent-7" || id["token_id"] == nil {
				t.Fatalf("receipt %s names the caller as %v", rid, id)
			}
			// chio verify checks it and says who the caller was.
			code, whole := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
			_, proof := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid+"/tlog-proof")
			dir := t.TempDir()
			rf, pf := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.tlog-proof")
			_ = os.WriteFile(rf, whole, 0o600)
			_ = os.WriteFile(pf, proof, 0o600)
			kernelPub, _ := os.ReadFile(filepath.Join(up.dir, "keys", kernelPubFile))
			out, err := chio(t.Context(), "verify", "--receipt", rf, "--proof", pf, "--vkey", filepath.Join(up.dir, "keys", checkpointVKeyFile), "--kernel-key", strings.TrimSpace(string(kernelPub)))
			if want := fmt.Sprintf("identity: \"agent-7\" of %q (", o.Issuer); code != http.StatusOK || err != nil || !strings.Contains(out, "verify: OK") || !strings.Contains(out, want) {
				t.Fatalf("chio verify: %v\n%s\nwant a line starting %s", err, out, want)
			}
			// The caller reads its own receipt with the same token.
			if code, body := httpGetAs(t, token, up.httpURL+"/v1/receipts/"+rid); code != http.StatusOK {
				t.Fatalf("the caller reading its own receipt with its access token: %d %s", code, body)
			}
		})
	}
	if seen != 2 {
		t.Fatalf("the card lists %d of the JSON-RPC and REST interfaces", seen)
	}
	// The authorization-context report names the caller on each row and,
	// grouped by identity, counts the caller's receipts under its
	// identity, apart from the demo capability's.
	var rep struct {
		Receipts []struct {
			Identity *struct{ Issuer, Subject, ClientID string } `json:"identity"`
		} `json:"receipts"`
		Groups []struct {
			Identity *struct{ Issuer, Subject string } `json:"identity"`
			Summary  struct {
				MatchingReceipts int `json:"matchingReceipts"`
			} `json:"summary"`
		} `json:"groups"`
	}
	reportURL := up.httpURL + "/v1/reports/authorization-context?groupBy=identity"
	waitBody(t, up.token, reportURL, `"matchingReceipts":2`)
	body, err := chio(t.Context(), "trust", "authorization-context", "list", "--group-by", "identity", "--url", up.httpURL,
		"--token", "@"+filepath.Join(up.dir, operatorTokenFile))
	if err != nil {
		t.Fatalf("trust authorization-context list --group-by identity: %v\n%s", err, body)
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("report: %v %s", err, body)
	}
	named := 0
	for _, r := range rep.Receipts {
		if r.Identity != nil && r.Identity.Subject == "agent-7" && r.Identity.Issuer == o.Issuer {
			named++
		}
	}
	if named != 2 || len(rep.Groups) == 0 || rep.Groups[0].Identity == nil || rep.Groups[0].Identity.Subject != "agent-7" ||
		rep.Groups[0].Summary.MatchingReceipts != 2 {
		t.Fatalf("report grouped by identity: %s", body)
	}
	if code, body := httpGetAs(t, up.token, up.httpURL+"/v1/reports/authorization-context?groupBy=tenant"); code != http.StatusBadRequest {
		t.Fatalf("groupBy=tenant: %d %s", code, body)
	}
	// A token of a provider the edge does not trust is refused with 401,
	// and runs nothing.
	stranger := authtest.StartIssuer(t)
	forged := stranger.Sign(t, map[string]any{"iss": stranger.URL, "sub": "agent-7", "aud": "agent-7", "exp": time.Now().Add(time.Hour).Unix()})
	client, err := a2aclient.NewFromEndpoints(t.Context(), []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: bearer{token: forged, next: http.DefaultTransport}, Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.SendMessage(t.Context(), &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("forged"))})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a token of an untrusted provider: %v", err)
	}
	if code, body := httpGetAs(t, forged, up.httpURL+"/v1/receipts/query?limit=1"); code != http.StatusUnauthorized {
		t.Fatalf("reading with a token of an untrusted provider: %d %s", code, body)
	}

	// MCP: without a token, 401 naming the resource's metadata, which names
	// the provider; with the provider's token, the SDK's client calls a tool.
	req, _ := http.NewRequest(http.MethodPost, up.httpURL+mcpedge.Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	wantMeta := up.httpURL + mcpedge.ResourceMetadataPrefix + mcpedge.Path
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(strings.Join(resp.Header.Values("WWW-Authenticate"), ","), `resource_metadata="`+wantMeta+`"`) {
		t.Fatalf("/mcp without a token: %d %q", resp.StatusCode, resp.Header.Values("WWW-Authenticate"))
	}
	_, prmBody := httpGet(t, wantMeta)
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	if err := json.Unmarshal(prmBody, &prm); err != nil || prm.Resource != up.httpURL+mcpedge.Path || len(prm.AuthorizationServers) != 1 || prm.AuthorizationServers[0] != o.Issuer {
		t.Fatalf("protected resource metadata %s: %v", prmBody, err)
	}
	mc := sdk.NewClient(&sdk.Implementation{Name: "agent-7", Version: "1"}, nil)
	cs, err := mc.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: up.httpURL + mcpedge.Path, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	listed, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, tl := range listed.Tools {
		if strings.HasSuffix(tl.Name, "hello_task") {
			name = tl.Name
		}
	}
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: map[string]any{"text": "over MCP"}})
	if err != nil || res.IsError {
		t.Fatalf("MCP call %q with the provider's token: %v %+v", name, err, res)
	}
}

// An MCP client that knows nothing but the edge's URL authorizes itself
// the way MCP's authorization specification says, with the MCP SDK's own
// OAuth client: the edge's 401 names its protected resource metadata, which
// names the OpenID provider; the client logs its user in with the
// authorization-code grant, PKCE and the edge's URL as the resource
// (RFC 8707), and calls a governed tool with the token, at both protocol
// revisions the SDK speaks. The receipt names the user, the client and the
// audience. A token of the same provider for another audience is refused.
func TestMCPClientsAuthorizeWithTheSDK(t *testing.T) {
	o := authtest.StartOP(t, "mcp-agent", "mcp-secret")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	resource := "http://" + addr + mcpedge.Path
	up := startUp(t, "--listen", addr, "--require-capability", "--oidc-issuer", o.Issuer, "--oidc-audience", resource,
		"--oidc-grant", "sub="+authtest.TestUserID+":hello-a2a-srv/*", "--oidc-ca", o.CAFile(t), "--expose-all")
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			h, err := mcpauth.NewAuthorizationCodeHandler(&mcpauth.AuthorizationCodeHandlerConfig{
				PreregisteredClient: &oauthex.ClientCredentials{ClientID: o.ClientID,
					ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: o.ClientSecret}},
				RedirectURL:              o.RedirectURL,
				AuthorizationCodeFetcher: o.LogIn(t),
				// The edge names no scopes; zitadel's provider wants one.
				ScopeFilter: func([]string) []string { return []string{"openid"} },
				Client:      o.HTTPClient(),
			})
			if err != nil {
				t.Fatal(err)
			}
			mc := sdk.NewClient(&sdk.Implementation{Name: "mcp-agent", Version: "1"}, nil)
			cs, err := mc.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: resource, OAuthHandler: h},
				&sdk.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatalf("connect with the SDK's OAuth client: %v", err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != version {
				t.Fatalf("negotiated %s", got)
			}
			ts, _ := h.TokenSource(t.Context())
			tok, err := ts.Token()
			if err != nil || tok.AccessToken == "" {
				t.Fatalf("the handler's token: %v", err)
			}
			listed, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var name string
			for _, tl := range listed.Tools {
				if strings.HasSuffix(tl.Name, "hello_task") {
					name = tl.Name
				}
			}
			res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: map[string]any{"text": "authorized " + version}})
			if err != nil || res.IsError {
				t.Fatalf("MCP call %q: %v %+v", name, err, res)
			}
			body := waitReceipt(t, up, receiptRef(t, res.Meta))
			var r struct {
				Receipt struct {
					Metadata struct {
						Attribution struct {
							Identity struct {
								Issuer   string   `json:"issuer"`
								Subject  string   `json:"subject"`
								ClientID string   `json:"client_id"`
								Audience []string `json:"audience"`
							} `json:"identity"`
						} `json:"attribution"`
					} `json:"metadata"`
				} `json:"receipt"`
			}
			if err := json.Unmarshal(body, &r); err != nil {
				t.Fatal(err)
			}
			if id := r.Receipt.Metadata.Attribution.Identity; id.Issuer != o.Issuer || id.Subject != authtest.TestUserID ||
				id.ClientID != "mcp-agent" || len(id.Audience) != 1 || id.Audience[0] != resource {
				t.Fatalf("the receipt names the caller as %+v", id)
			}
		})
	}
	// The client's own client-credentials token is for the client, not for
	// this edge: refused with the challenge, and nothing is called.
	req, _ := http.NewRequest(http.MethodPost, resource, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+o.AccessToken(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Fatalf("a token for another audience: %d %q", resp.StatusCode, resp.Header.Values("WWW-Authenticate"))
	}
}

// sendGoverned sends text with a governed intent for the demo tool, so
// its receipt is one the authorization-context report projects.
func sendGoverned(t *testing.T, client *a2aclient.Client, text string) *a2apb.Task {
	t.Helper()
	msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(text))
	msg.Metadata = map[string]any{"chio": map[string]any{"governedIntent": map[string]any{
		"id": "intent-" + text, "server_id": "hello-a2a-srv", "tool_name": "hello_task", "purpose": text}}}
	res, err := client.SendMessage(t.Context(), &a2apb.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok {
		t.Fatalf("A2A call: %+v", res)
	}
	return task
}
