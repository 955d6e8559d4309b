package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/mccutchen/go-httpbin/v2/httpbin"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chio-ledger/chio/edges/acp"
	"github.com/chio-ledger/chio/edges/exchange"
	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/edges/protect"
	"github.com/chio-ledger/chio/internal/authtest"
	"github.com/chio-ledger/chio/internal/natsembed"
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
	name := helloToolName(t, cs)
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
			name := helloToolName(t, cs)
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

// tokenCreds sends an access token in each gRPC call's metadata, over a
// plaintext loopback connection.
type tokenCreds string

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(c)}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return false }

// Every other surface of chio up takes the same provider's access token
// as A2A over JSON-RPC and REST, and MCP, do, each through its own
// client's way of sending it: A2A over gRPC (the a2a-go client, metadata
// authorization), OpenAI tool calls, ACP over HTTP, and api protect in
// front of a real upstream. Each call's receipt names the caller. An
// expired token of a trusted provider is refused on each, in the
// protocol's own form, and runs nothing.
func TestEverySurfaceTakesAccessTokens(t *testing.T) {
	o := authtest.StartOP(t, "agent-7", "secret-7")
	is := authtest.StartIssuer(t)
	var upstreamHits atomic.Int32
	bin := httpbin.New()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { upstreamHits.Add(1); bin.ServeHTTP(w, r) }))
	t.Cleanup(api.Close)
	spec := filepath.Join("..", "..", "edges", "openapi", "testdata", "httpbin.yaml")
	up := startUp(t, "--require-capability", "--oidc-issuer", o.Issuer, "--oidc-issuer", is.URL, "--oidc-audience", "agent-7",
		"--oidc-grant", "sub=agent-7:hello-a2a-srv/*", "--oidc-grant", "sub=agent-7:httpbin/*", "--oidc-ca", o.CAFile(t),
		"--openapi", spec, "--openapi-server-id", "httpbin", "--openapi-upstream", api.URL, "--openapi-protect-listen", "127.0.0.1:0")
	token := o.AccessToken(t)
	expired := is.Sign(t, map[string]any{"iss": is.URL, "sub": "agent-7", "aud": "agent-7", "exp": time.Now().Add(-time.Hour).Unix()})
	grpcAddr := regexp.MustCompile(`chio up: gRPC +([0-9.:]+) `).FindStringSubmatch(up.out)
	protectAddr := regexp.MustCompile(`api protect  (http://[0-9.:]+)`).FindStringSubmatch(up.out)
	if grpcAddr == nil || protectAddr == nil {
		t.Fatalf("no gRPC or api protect address in:\n%s", up.out)
	}
	identityOf := func(t *testing.T, rid string) map[string]any {
		t.Helper()
		var r struct {
			Receipt struct {
				Metadata struct {
					Attribution struct {
						Identity map[string]any `json:"identity"`
					} `json:"attribution"`
				} `json:"metadata"`
			} `json:"receipt"`
		}
		if err := json.Unmarshal(waitReceipt(t, up, rid), &r); err != nil {
			t.Fatal(err)
		}
		return r.Receipt.Metadata.Attribution.Identity
	}
	post := func(t *testing.T, url, tok, body string) (int, []byte) {
		t.Helper()
		return httpDoAs(t, http.MethodPost, tok, url, strings.NewReader(body))
	}
	surfaces := []struct {
		name string
		// call calls the demo tool (or the API) with tok and returns the
		// receipt id; with refused, it checks the refusal's form and
		// returns the deny receipt's id where the protocol carries it.
		call func(t *testing.T, tok string, refused bool) string
	}{
		{"A2A over gRPC", func(t *testing.T, tok string, refused bool) string {
			client, err := a2aclient.NewFromEndpoints(t.Context(), []*a2apb.AgentInterface{a2apb.NewAgentInterface(grpcAddr[1], a2apb.TransportProtocolGRPC)},
				a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(tokenCreds(tok))))
			if err != nil {
				t.Fatal(err)
			}
			if refused {
				_, err := client.SendMessage(t.Context(), &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("expired"))})
				if !errors.Is(err, a2apb.ErrUnauthenticated) {
					t.Fatalf("gRPC with an expired token: %v", err)
				}
				return ""
			}
			task := sendTask(t, client, "over gRPC")
			if task.Status.State != a2apb.TaskStateCompleted {
				t.Fatalf("task %+v", task)
			}
			rid, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)
			return rid
		}},
		{"OpenAI tool calls", func(t *testing.T, tok string, refused bool) string {
			msg := `{"role":"assistant","tool_calls":[{"id":"call_jwt","type":"function","function":{"name":"hello_task","arguments":"{\"text\":\"openai\"}"}}]}`
			code, body := post(t, up.httpURL+openai.ToolCallsPath, tok, msg)
			if refused {
				var e struct {
					Error struct {
						Code string `json:"code"`
						Chio struct {
							Receipts []struct {
								ReceiptRef string `json:"receipt_ref"`
							} `json:"receipts"`
						} `json:"chio"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &e); code != http.StatusUnauthorized || err != nil || e.Error.Code != "invalid_capability" || len(e.Error.Chio.Receipts) != 1 {
					t.Fatalf("OpenAI with an expired token: %d %s", code, body)
				}
				return e.Error.Chio.Receipts[0].ReceiptRef
			}
			var ans struct {
				Messages []struct {
					Chio openai.Chio `json:"chio"`
				} `json:"messages"`
			}
			if err := json.Unmarshal(body, &ans); code != http.StatusOK || err != nil || len(ans.Messages) != 1 || ans.Messages[0].Chio.Denied {
				t.Fatalf("OpenAI: %d %s", code, body)
			}
			return ans.Messages[0].Chio.ReceiptRef
		}},
		{"ACP over HTTP", func(t *testing.T, tok string, refused bool) string {
			code, body := post(t, up.httpURL+acp.Path, tok, `{"jsonrpc":"2.0","id":2,"method":"tool/invoke","params":{"capabilityId":"hello_task","arguments":{"text":"acp"}}}`)
			if refused {
				// A JSON-RPC error naming the check, with the deny receipt
				// (the tool was named).
				var e struct {
					Error struct {
						Code int `json:"code"`
						Data struct {
							Guard     string `json:"guard"`
							ReceiptID string `json:"receiptId"`
						} `json:"data"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != -32001 || e.Error.Data.Guard != "time" || e.Error.Data.ReceiptID == "" {
					t.Fatalf("ACP with an expired token: %d %s", code, body)
				}
				return e.Error.Data.ReceiptID
			}
			var m struct {
				Result struct {
					ReceiptID string `json:"receiptId"`
				} `json:"result"`
			}
			if err := json.Unmarshal(body, &m); code != http.StatusOK || err != nil || m.Result.ReceiptID == "" {
				t.Fatalf("ACP: %d %s", code, body)
			}
			return m.Result.ReceiptID
		}},
		{"api protect", func(t *testing.T, tok string, refused bool) string {
			before := upstreamHits.Load()
			req, _ := http.NewRequest(http.MethodGet, protectAddr[1]+"/get?q=jwt", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if refused {
				if resp.StatusCode != http.StatusUnauthorized || upstreamHits.Load() != before || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") {
					t.Fatalf("api protect with an expired token: %d %s (upstream hit %d times)", resp.StatusCode, body, upstreamHits.Load()-before)
				}
				return resp.Header.Get(protect.ReceiptHeader)
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get(protect.ReceiptHeader) == "" {
				t.Fatalf("api protect: %d %s", resp.StatusCode, body)
			}
			return resp.Header.Get(protect.ReceiptHeader)
		}},
	}
	for _, s := range surfaces {
		t.Run(s.name, func(t *testing.T) {
			rid := s.call(t, token, false)
			if id := identityOf(t, rid); id["issuer"] != o.Issuer || id["subject"] != "agent-7" || id["client_id"] != "agent-7" {
				t.Fatalf("receipt %s names the caller as %v", rid, id)
			}
			if deny := s.call(t, expired, true); deny != "" {
				if r := awaitLogReceipt(t, up.httpURL, up.token, deny); r.Decision.Verdict != "deny" {
					t.Fatalf("the expired token's receipt %s: %+v", deny, r.Decision)
				}
			}
		})
	}
}

// The standalone chio ledger and chio projections, which run no policy,
// take readers' access tokens from their own --oidc flags: a token whose
// rule gives a read grant (chio.read/receipts) reads every receipt on
// both, a token of the same provider that no rule maps is refused, and an
// untrusted provider's token is refused. A standalone chio edge a2a with
// --token-exchange-key serves the token exchange, whose capability calls
// a skill; a key its policy does not trust is refused at start.
func TestStandaloneServicesTakeAccessTokens(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	is := authtest.StartIssuer(t)
	keyDir := t.TempDir()
	issuerKey, issuerPub := filepath.Join(keyDir, "issuer.key"), filepath.Join(keyDir, "issuer.pub")
	pub, err := chio(t.Context(), "capability", "keygen", "--out", issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(issuerPub, []byte(pub), 0o600); err != nil {
		t.Fatal(err)
	}
	readers := []string{"--oidc-issuer", is.URL, "--oidc-audience", "chio-log", "--oidc-grant", "sub=auditor:chio.read/receipts:read"}
	start := func(re string, args ...string) string {
		r := regexp.MustCompile(re)
		out, _ := startCommand(t, r, args...)
		return r.FindStringSubmatch(out)[1]
	}
	ledgerDir := t.TempDir()
	ledgerURL := start(`log API on (http://[0-9.:]+)`, append([]string{"ledger", "--nats", ns.ClientURL(), "--data-dir", ledgerDir, "--listen", "127.0.0.1:0"}, readers...)...)
	projURL := start(`API on (http://[0-9.:]+)`, append([]string{"projections", "--nats", ns.ClientURL(), "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--kernel-key", filepath.Join(ledgerDir, "keys", "kernel.pub")}, readers...)...)
	callers := []string{"--oidc-issuer", is.URL, "--oidc-audience", "chio-edge", "--oidc-grant", "sub=agent-7:hello-a2a-srv/hello_task"}
	edgeURL := start(`agent card (http://[0-9.:]+)/`, append([]string{"edge", "a2a", "--nats", ns.ClientURL(), "--listen", "127.0.0.1:0", "--issuer-pub", issuerPub,
		"--token-exchange-key", issuerKey}, callers...)...)
	exp := time.Now().Add(time.Hour).Unix()
	code, out := exchangeForm(t, edgeURL+exchange.Path, url.Values{"grant_type": {exchange.GrantType}, "subject_token_type": {exchange.TokenTypeJWT},
		"subject_token": {is.Sign(t, map[string]any{"iss": is.URL, "sub": "agent-7", "aud": "chio-edge", "exp": exp})}}, nil)
	capText, _ := out["access_token"].(string)
	if code != http.StatusOK || capText == "" {
		t.Fatalf("token exchange on chio edge a2a: %d %v", code, out)
	}
	// A key the edge's policy does not trust would sign capabilities it
	// refuses: the edge does not start.
	otherKey := filepath.Join(keyDir, "other.key")
	if _, err := chio(t.Context(), "capability", "keygen", "--out", otherKey); err != nil {
		t.Fatal(err)
	}
	if msg, err := chio(t.Context(), append([]string{"edge", "a2a", "--nats", ns.ClientURL(), "--listen", "127.0.0.1:0", "--issuer-pub", issuerPub,
		"--token-exchange-key", otherKey}, callers...)...); err == nil || !strings.Contains(err.Error()+msg, "not among the policy's trusted issuers") {
		t.Fatalf("an untrusted exchange key: %v %s", err, msg)
	}
	client, err := a2aclient.NewFromEndpoints(t.Context(), []*a2apb.AgentInterface{a2apb.NewAgentInterface(edgeURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: bearer{token: strings.TrimSpace(capText), next: http.DefaultTransport}, Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	task := sendTask(t, client, "for the auditor")
	rid, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)

	auditor := is.Sign(t, map[string]any{"iss": is.URL, "sub": "auditor", "aud": "chio-log", "exp": exp})
	someone := is.Sign(t, map[string]any{"iss": is.URL, "sub": "someone", "aud": "chio-log", "exp": exp})
	stranger := authtest.StartIssuer(t)
	forged := stranger.Sign(t, map[string]any{"iss": stranger.URL, "sub": "auditor", "aud": "chio-log", "exp": exp})
	for _, read := range []string{ledgerURL + "/v1/receipts/" + rid, projURL + "/v1/reports/authorization-context"} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			code, body := httpGetAs(t, auditor, read)
			if code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the auditor's token on %s: %d %s", read, code, body)
			}
		}
		if code, body := httpGetAs(t, someone, read); code != http.StatusUnauthorized {
			t.Fatalf("a token no rule maps on %s: %d %s", read, code, body)
		}
		if code, body := httpGetAs(t, forged, read); code != http.StatusUnauthorized {
			t.Fatalf("an untrusted provider's token on %s: %d %s", read, code, body)
		}
	}
}

// chio a2a send --token takes a JWT access token as it is, inline, from a
// file (whatever dots the file's path has) or from stdin, and a capability
// in either form.
func TestBearerText(t *testing.T) {
	is := authtest.StartIssuer(t)
	jwt := is.Sign(t, map[string]any{"iss": is.URL, "sub": "a", "aud": "b", "exp": time.Now().Add(time.Hour).Unix()})
	dir := t.TempDir()
	file := filepath.Join(dir, "v1.2.token")
	if err := os.WriteFile(file, []byte(jwt+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, arg, stdin string }{
		{"inline", jwt, ""},
		{"a file with dots in its path", "@" + file, ""},
		{"stdin", "-", jwt + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := bearerText(strings.NewReader(c.stdin), c.arg)
			if err != nil || got != jwt {
				t.Fatalf("%q: %v", got, err)
			}
		})
	}
	if _, err := bearerText(strings.NewReader(""), "not.a-token"); err == nil {
		t.Fatal("a non-token was sent")
	}
}

// helloToolName is the MCP name the demo hello_task tool is listed under.
func helloToolName(t *testing.T, cs *sdk.ClientSession) string {
	t.Helper()
	listed, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range listed.Tools {
		if strings.HasSuffix(tl.Name, "hello_task") {
			return tl.Name
		}
	}
	t.Fatalf("no hello_task among %d tools", len(listed.Tools))
	return ""
}
