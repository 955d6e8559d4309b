package a2a

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/dpop/dpopa2a"
)

// helperKey holds the token the agent delegates.
var helperKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{4}, 32))

// delegationTokens are the attack's tokens: the agent's, which can
// delegate (so it is honoured only with a proof by agentKey); the
// helper's, a leaf delegated by the agent to helperKey; and the agent's
// token as the helper can rebuild it from its own delegation chain.
func delegationTokens(t *testing.T) *dpoptest.Chain {
	t.Helper()
	return dpoptest.NewChain(t, dpoptest.Spec{Issuer: issuerKey, AgentKey: agentKey, HelperKey: helperKey,
		AgentID: "cap-dpop-agent", HelperID: "cap-dpop-helper",
		Agent: []schemas.ToolGrant{
			{ServerID: hello.ServerID, ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}},
			{ServerID: "slow-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}},
		Helper: []schemas.ToolGrant{{ServerID: hello.ServerID, ToolName: hello.ToolName, Operations: []schemas.Operation{schemas.OpInvoke}}}})
}

// wantBinding checks the receipt's recorded binding.
func wantBinding(t *testing.T, js jetstream.JetStream, receiptID, method, thumbprint string) {
	t.Helper()
	d, ok := decisionEvents(t, js)[receiptID]
	if !ok {
		t.Fatalf("no decision event for %s", receiptID)
	}
	b := dpoptest.Binding(t, d)
	jkt, hasJKT := b["jkt"]
	if b["method"] != method || (thumbprint != "" && jkt != thumbprint) || (thumbprint == "" && hasJKT) {
		t.Fatalf("receipt %s: binding %v, want %s %s", receiptID, b, method, thumbprint)
	}
}

// wantDenyReceipt checks that receiptID is a deny at the dpop step whose
// reason names check: a deny decision, or (a proof found spent as the
// allowed call's decision was written) an allow closed by a refused
// outcome, which the ledger signs as that deny.
func wantDenyReceipt(t *testing.T, js jetstream.JetStream, receiptID string, check dpop.Check) {
	t.Helper()
	d, ok := decisionEvents(t, js)[receiptID]
	if !ok {
		t.Fatalf("no decision event for receipt %q", receiptID)
	}
	guard, reason := d.Decision.Guard, d.Decision.Reason
	if d.Decision.Verdict == schemas.VerdictAllow {
		o, ok := outcomeOf(t, js, receiptID)
		if !ok || o.Outcome != schemas.OutcomeRefused {
			t.Fatalf("receipt %s: an allow without a refused outcome: %+v", receiptID, o)
		}
		guard, reason = o.Guard, o.Reason
	}
	if guard != kernel.StepDPoP || dpop.CheckOf(reason) != check {
		t.Fatalf("receipt %s: refused at %s (%q), want dpop %s", receiptID, guard, reason, check)
	}
}

// dpopClient is the a2a-go client from the edge's card, over binding,
// signing every call with s (dpopa2a), the gRPC transport configured.
func dpopClient(t *testing.T, httpURL string, s *dpop.Signer, binding sdk.TransportProtocol) *a2aclient.Client {
	t.Helper()
	ctx := context.Background()
	card, err := agentcard.DefaultResolver.Resolve(ctx, httpURL)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	c, err := a2aclient.NewFromCard(ctx, card, dpopa2a.ClientOption(s),
		a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(insecure.NewCredentials())),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []sdk.TransportProtocol{binding}}))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

var allBindings = []sdk.TransportProtocol{sdk.TransportProtocolJSONRPC, sdk.TransportProtocolHTTPJSON, sdk.TransportProtocolGRPC}

// The official a2a-go client with the dpopa2a interceptor, over JSON-RPC,
// REST and gRPC, with a token that can delegate: every call carries a
// fresh proof by the agent's key, and the receipt records the binding.
// The helper's own leaf token still goes as a bearer token.
func TestDPoPClientAllBindings(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	toks := delegationTokens(t)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, b := range allBindings {
		t.Run(string(b), func(t *testing.T) {
			c := dpopClient(t, cl.edges[0].URL, agent, b)
			res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("world")), Metadata: helloTarget})
			if err != nil {
				t.Fatal(err)
			}
			task, ok := res.(*sdk.Task)
			if !ok || task.Status.State != sdk.TaskStateCompleted {
				t.Fatalf("send: %T %+v", res, res)
			}
			rid, _ := chioMetaOf(t, task.Metadata)["receiptId"].(string)
			wantBinding(t, cl.js, rid, dpop.MethodDPoP, dpoptest.JKT(agentKey))
			// Reads are proven too, each with its own proof.
			got, err := c.GetTask(ctx, &sdk.GetTaskRequest{ID: task.ID})
			if err != nil || got.Status.State != sdk.TaskStateCompleted {
				t.Fatalf("get: %+v %v", got, err)
			}
			if l, err := c.ListTasks(ctx, &sdk.ListTasksRequest{}); err != nil || len(l.Tasks) == 0 {
				t.Fatalf("list: %+v %v", l, err)
			}
			if card, err := c.GetExtendedAgentCard(ctx, &sdk.GetExtendedAgentCardRequest{}); err != nil || len(card.Skills) == 0 {
				t.Fatalf("extended card: %+v %v", card, err)
			}
			var events int
			for _, err := range c.SendStreamingMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("world")), Metadata: helloTarget}) {
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				events++
			}
			if events == 0 {
				t.Fatal("stream: no events")
			}
		})
	}
	// The helper's leaf token, as a bearer token.
	bearerClient := sdkClient(t, cl.edges[0].URL, toks.Helper)
	res, err := bearerClient.SendMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("world")), Metadata: helloTarget})
	if err != nil {
		t.Fatal(err)
	}
	rid, _ := chioMetaOf(t, res.(*sdk.Task).Metadata)["receiptId"].(string)
	wantBinding(t, cl.js, rid, dpop.MethodBearer, "")
}

// The card offers the DPoP scheme beside the bearer one.
func TestCardAdvertisesDPoP(t *testing.T) {
	cl := startCluster(t, 1, "")
	card, err := agentcard.DefaultResolver.Resolve(context.Background(), cl.edges[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := card.SecuritySchemes["chio_capability_dpop"].(sdk.HTTPAuthSecurityScheme)
	if !ok || s.Scheme != "DPoP" || !strings.Contains(s.Description, "RFC 9449") {
		t.Fatalf("DPoP scheme: %#v", card.SecuritySchemes["chio_capability_dpop"])
	}
	if b, ok := card.SecuritySchemes["chio_capability"].(sdk.HTTPAuthSecurityScheme); !ok || b.Scheme != "Bearer" {
		t.Fatalf("bearer scheme: %#v", card.SecuritySchemes["chio_capability"])
	}
	if len(card.SecurityRequirements) != 2 {
		t.Fatalf("security requirements: %v", card.SecurityRequirements)
	}
}

// refusal is how a binding answered a refused request.
type refusal struct {
	status    int    // HTTP status (0 on gRPC)
	challenge string // WWW-Authenticate, joined
	code      int    // JSON-RPC or A2A code, or the gRPC code
	receiptID string
	check     string // ErrorInfo metadata dpopCheck
	// retryAfter is the Retry-After header of an HTTP answer.
	retryAfter string
}

// rawSend sends one SendMessage over binding with the given credential
// headers (or metadata), as a client would put them: auth is the
// Authorization value, proof the DPoP one ("" for none). It returns the
// receipt id of a success, or the refusal.
func rawSend(t *testing.T, cl *cluster, grpcAddr string, binding sdk.TransportProtocol, host, auth, proof string) (string, *refusal) {
	t.Helper()
	h := http.Header{}
	if auth != "" {
		h.Set("Authorization", auth)
	}
	if proof != "" {
		h.Set(dpop.Header, proof)
	}
	return sendWith(t, cl, grpcAddr, binding, host, h)
}

// sendWith is rawSend with the credential headers as given: h's members
// are sent as they are (over gRPC as metadata, lower-cased), several
// values of one as several headers.
func sendWith(t *testing.T, cl *cluster, grpcAddr string, binding sdk.TransportProtocol, host string, h http.Header) (string, *refusal) {
	t.Helper()
	switch binding {
	case sdk.TransportProtocolGRPC:
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		md := metadata.MD{}
		for k, vs := range h {
			md.Append(strings.ToLower(k), vs...)
		}
		req := &pb.SendMessageRequest{Message: &pb.Message{MessageId: "m-" + randomSuffix(), Role: pb.Role_ROLE_USER,
			Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "world"}}}}}
		meta, err := structpb.NewStruct(map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}})
		if err != nil {
			t.Fatal(err)
		}
		req.Metadata = meta
		resp, err := pb.NewA2AServiceClient(conn).SendMessage(metadata.NewOutgoingContext(context.Background(), md), req)
		if err != nil {
			return "", grpcRefusal(t, err)
		}
		c := resp.GetTask().GetMetadata().GetFields()["chio"].GetStructValue().GetFields()
		return c["receiptId"].GetStringValue(), nil
	case sdk.TransportProtocolHTTPJSON:
		body := `{"message":{"messageId":"m-` + randomSuffix() + `","role":"ROLE_USER","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}`
		status, rh, raw := httpSendWith(t, cl.edges[0].URL+RESTPath+"/message:send", host, h, body)
		if status == http.StatusOK {
			var m struct {
				Task struct {
					Metadata map[string]any `json:"metadata"`
				} `json:"task"`
			}
			_ = json.Unmarshal(raw, &m)
			rid, _ := chioMetaOf(t, m.Task.Metadata)["receiptId"].(string)
			return rid, nil
		}
		return "", restRefusal(t, status, rh, raw)
	default:
		body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-` + randomSuffix() + `","role":"ROLE_USER","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`
		status, rh, raw := httpSendWith(t, cl.edges[0].URL+"/a2a", host, h, body)
		return rpcResult(t, status, rh, raw)
	}
}

// grpcRefusal is how a gRPC call answered err.
func grpcRefusal(t *testing.T, err error) *refusal {
	t.Helper()
	code, info, _ := grpcStatusOf(t, err)
	r := &refusal{code: int(code)}
	if info != nil {
		r.receiptID, r.check = info.Metadata["receiptId"], info.Metadata[metaDPoPCheck]
	}
	return r
}

// restRefusal reads a REST error answer.
func restRefusal(t *testing.T, status int, h http.Header, raw []byte) *refusal {
	t.Helper()
	var e struct {
		Error struct {
			Code    int `json:"code"`
			Details []struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || len(e.Error.Details) == 0 {
		t.Fatalf("REST refusal %d: %s", status, raw)
	}
	md := e.Error.Details[0].Metadata
	return &refusal{status: status, challenge: strings.Join(h.Values("WWW-Authenticate"), " | "), code: e.Error.Code,
		receiptID: md["receiptId"], check: md[metaDPoPCheck], retryAfter: h.Get("Retry-After")}
}

// rpcSendAt posts a JSON-RPC SendMessage to url (with Host host, if set).
func rpcSendAt(t *testing.T, url, host, auth, proof, body string) (string, *refusal) {
	t.Helper()
	status, h, raw := httpSend(t, url, host, auth, proof, body)
	return rpcResult(t, status, h, raw)
}

// rpcResult reads a JSON-RPC SendMessage answer: the receipt id of a
// task, or the refusal.
func rpcResult(t *testing.T, status int, h http.Header, raw []byte) (string, *refusal) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("response %d %q: %v", status, raw, err)
	}
	if r, ok := m["result"].(map[string]any); ok && status == http.StatusOK {
		task, _ := r["task"].(map[string]any)
		meta, _ := task["metadata"].(map[string]any)
		rid, _ := chioMetaOf(t, meta)["receiptId"].(string)
		return rid, nil
	}
	ref := &refusal{status: status, challenge: strings.Join(h.Values("WWW-Authenticate"), " | "), code: errCode(m), retryAfter: h.Get("Retry-After")}
	if e, ok := m["error"].(map[string]any); ok {
		if data, ok := e["data"].([]any); ok && len(data) > 0 {
			md, _ := data[0].(map[string]any)["metadata"].(map[string]any)
			ref.receiptID, _ = md["receiptId"].(string)
			ref.check, _ = md[metaDPoPCheck].(string)
		}
	}
	return "", ref
}

func httpSend(t *testing.T, url, host, auth, proof, body string) (int, http.Header, []byte) {
	t.Helper()
	h := http.Header{}
	if auth != "" {
		h.Set("Authorization", auth)
	}
	if proof != "" {
		h.Set(dpop.Header, proof)
	}
	return httpSendWith(t, url, host, h, body)
}

// httpSendWith posts body to url with the headers h (added to the
// JSON content type and A2A-Version 1.0).
func httpSendWith(t *testing.T, url, host string, h http.Header, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	if host != "" {
		req.Host = host
	}
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// htuOf is the URL a proof for binding must name on the test cluster.
func htuOf(cl *cluster, grpcAddr string, binding sdk.TransportProtocol) string {
	switch binding {
	case sdk.TransportProtocolGRPC:
		return "http://" + grpcAddr + pb.A2AService_SendMessage_FullMethodName
	case sdk.TransportProtocolHTTPJSON:
		return cl.edges[0].URL + RESTPath + "/message:send"
	}
	return cl.edges[0].URL + "/a2a"
}

// wantRefused checks a refusal: Unauthenticated on the binding's terms,
// with the DPoP challenge naming the check over HTTP, and a deny receipt
// whose reason names it.
func wantRefused(t *testing.T, js jetstream.JetStream, binding sdk.TransportProtocol, r *refusal, check dpop.Check) {
	t.Helper()
	if r == nil {
		t.Fatalf("accepted; want refused with %s", check)
	}
	switch binding {
	case sdk.TransportProtocolGRPC:
		if codes.Code(r.code) != codes.Unauthenticated {
			t.Fatalf("gRPC code %s, want Unauthenticated", codes.Code(r.code))
		}
	default:
		want := wire.CodeUnauthenticated
		if binding == sdk.TransportProtocolHTTPJSON {
			want = http.StatusUnauthorized
		}
		if r.status != http.StatusUnauthorized || r.code != want ||
			r.challenge != `DPoP realm="chio", algs="EdDSA", error="invalid_dpop_proof", error_description="`+string(check)+`"` {
			t.Fatalf("HTTP %d code %d challenge %q; want 401, %d, the DPoP challenge for %s", r.status, r.code, r.challenge, want, check)
		}
	}
	if r.check != string(check) {
		t.Fatalf("dpopCheck %q, want %s", r.check, check)
	}
	wantDenyReceipt(t, js, r.receiptID, check)
}

// The rebuilt-parent attack on every binding: the helper rebuilds the
// agent's token from its own delegation chain and presents it, as a
// bearer token (missing_proof) and as DPoP with a proof by its own key
// (wrong_key). Both are refused before any tool runs, each with its deny
// receipt; the agent itself, proving its key, is served.
func TestDPoPRebuiltParentRefused(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	grpcAddr := g.lns[0].Addr().String()
	toks := delegationTokens(t)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	for _, b := range allBindings {
		t.Run(string(b), func(t *testing.T) {
			before := cl.tool.runs.Load()
			_, r := rawSend(t, cl, grpcAddr, b, "", "Bearer "+toks.Rebuilt, "")
			wantRefused(t, cl.js, b, r, dpop.CheckMissing)
			helperProof := dpoptest.ForgedProof(t, helperKey, toks.Rebuilt, http.MethodPost, htuOf(cl, grpcAddr, b))
			_, r = rawSend(t, cl, grpcAddr, b, "", "DPoP "+toks.Rebuilt, helperProof)
			wantRefused(t, cl.js, b, r, dpop.CheckKey)
			if n := cl.tool.runs.Load() - before; n != 0 {
				t.Fatalf("the tool ran %d times for the helper", n)
			}
			proof := dpoptest.Proof(t, agent, http.MethodPost, htuOf(cl, grpcAddr, b))
			rid, r := rawSend(t, cl, grpcAddr, b, "", "DPoP "+toks.Agent, proof)
			if r != nil {
				t.Fatalf("the agent was refused: %+v", r)
			}
			wantBinding(t, cl.js, rid, dpop.MethodDPoP, dpoptest.JKT(agentKey))
		})
	}
}

// Proofs that do not fit the request are refused by name.
func TestDPoPProofChecks(t *testing.T) {
	cl := startCluster(t, 1, "")
	toks := delegationTokens(t)
	url := cl.edges[0].URL + "/a2a"
	ath := dpop.TokenHash(toks.Agent)
	now := time.Now()
	for _, c := range []struct {
		name   string
		claims dpop.Claims
		check  dpop.Check
	}{
		{"another URL", dpop.Claims{HTM: http.MethodPost, HTU: cl.edges[0].URL + "/elsewhere", ATH: ath}, dpop.CheckURL},
		{"another method", dpop.Claims{HTM: http.MethodPut, HTU: url, ATH: ath}, dpop.CheckMethod},
		{"another token", dpop.Claims{HTM: http.MethodPost, HTU: url, ATH: dpop.TokenHash(toks.Helper)}, dpop.CheckToken},
		{"expired", dpop.Claims{HTM: http.MethodPost, HTU: url, ATH: ath, IAT: now.Add(-10 * time.Minute).Unix()}, dpop.CheckStale},
		{"from the future", dpop.Claims{HTM: http.MethodPost, HTU: url, ATH: ath, IAT: now.Add(10 * time.Minute).Unix()}, dpop.CheckFuture},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, r := rawSend(t, cl, "", sdk.TransportProtocolJSONRPC, "", "DPoP "+toks.Agent, dpoptest.SignClaims(t, agentKey, c.claims))
			wantRefused(t, cl.js, sdk.TransportProtocolJSONRPC, r, c.check)
		})
	}
	if n := cl.tool.runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times", n)
	}
}

// A proof is good for one request: sent again with the same headers it
// is refused as replayed, with a deny receipt, on the replica that took it
// and on any other (two edges, each with its own kernel and dispatcher, on
// one JetStream; a load balancer sends both the same Host).
func TestDPoPReplay(t *testing.T) {
	cl := startCluster(t, 2, "")
	toks := delegationTokens(t)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	body := func() string {
		return `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-` + randomSuffix() +
			`","role":"ROLE_USER","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`
	}
	const host = "edge.example"
	t.Run("same replica", func(t *testing.T) {
		proof, _ := agent.Proof(http.MethodPost, "http://"+host+"/a2a")
		b := body()
		if _, r := rpcSendAt(t, cl.edges[0].URL+"/a2a", host, "DPoP "+toks.Agent, proof, b); r != nil {
			t.Fatalf("first use refused: %+v", r)
		}
		runs := cl.tool.runs.Load()
		_, r := rpcSendAt(t, cl.edges[0].URL+"/a2a", host, "DPoP "+toks.Agent, proof, b)
		wantRefused(t, cl.js, sdk.TransportProtocolJSONRPC, r, dpop.CheckReplayed)
		if cl.tool.runs.Load() != runs {
			t.Fatal("the tool ran for a replayed proof")
		}
	})
	t.Run("across replicas", func(t *testing.T) {
		proof, _ := agent.Proof(http.MethodPost, "http://"+host+"/a2a")
		b := body()
		if _, r := rpcSendAt(t, cl.edges[0].URL+"/a2a", host, "DPoP "+toks.Agent, proof, b); r != nil {
			t.Fatalf("replica A refused the first use: %+v", r)
		}
		runs := cl.tool.runs.Load()
		_, r := rpcSendAt(t, cl.edges[1].URL+"/a2a", host, "DPoP "+toks.Agent, proof, b)
		wantRefused(t, cl.js, sdk.TransportProtocolJSONRPC, r, dpop.CheckReplayed)
		if cl.tool.runs.Load() != runs {
			t.Fatal("the tool ran for a replayed proof")
		}
	})
	t.Run("sends stored before their call", func(t *testing.T) {
		// A background or streamed send stores its task first: its proof
		// is spent before that, so a replay stores nothing and is denied
		// outright.
		for _, b := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-bg","role":"ROLE_USER","parts":[{"text":"world"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`,
			`{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"m-st","role":"ROLE_USER","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`,
		} {
			proof, _ := agent.Proof(http.MethodPost, "http://"+host+"/a2a")
			if status, _, raw := httpSend(t, cl.edges[0].URL+"/a2a", host, "DPoP "+toks.Agent, proof, b); status != http.StatusOK || strings.Contains(string(raw), `"error"`) {
				t.Fatalf("first use: %d %s", status, raw)
			}
			_, r := rpcSendAt(t, cl.edges[1].URL+"/a2a", host, "DPoP "+toks.Agent, proof, b)
			wantRefused(t, cl.js, sdk.TransportProtocolJSONRPC, r, dpop.CheckReplayed)
			if d := decisionEvents(t, cl.js)[r.receiptID]; d.Decision.Verdict != schemas.VerdictDeny || d.TaskID != "" {
				t.Fatalf("replay of a stored send: %+v", d)
			}
		}
	})
	t.Run("a read", func(t *testing.T) {
		// A read spends its proof too.
		proof, _ := agent.Proof(http.MethodPost, "http://"+host+"/a2a")
		list := `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`
		status, _, raw := httpSend(t, cl.edges[0].URL+"/a2a", host, "DPoP "+toks.Agent, proof, list)
		if status != http.StatusOK || !strings.Contains(string(raw), `"tasks"`) {
			t.Fatalf("list: %d %s", status, raw)
		}
		status, h, raw := httpSend(t, cl.edges[1].URL+"/a2a", host, "DPoP "+toks.Agent, proof, list)
		if status != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), `error_description="replayed"`) || !strings.Contains(string(raw), "-31401") {
			t.Fatalf("replayed list: %d %q %s", status, h.Get("WWW-Authenticate"), raw)
		}
	})
}

// A token that can delegate reads nothing without its proof: GetTask,
// ListTasks, CancelTask and the extended card as a bearer token are
// refused (401, DPoP challenge naming missing_proof), on every binding.
func TestDPoPReadsNeedAProof(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	toks := delegationTokens(t)
	ctx := context.Background()
	c := dpopClient(t, cl.edges[0].URL, dpoptest.Signer(t, agentKey, toks.Agent), sdk.TransportProtocolJSONRPC)
	res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("world")), Metadata: helloTarget})
	if err != nil {
		t.Fatal(err)
	}
	id := string(res.(*sdk.Task).ID)
	for _, body := range []string{
		fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":%q}}`, id),
		`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"CancelTask","params":{"id":%q}}`, id),
		`{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard","params":{}}`,
	} {
		status, h, raw := httpSend(t, cl.edges[0].URL+"/a2a", "", "Bearer "+toks.Agent, "", body)
		if status != http.StatusUnauthorized || !strings.Contains(string(raw), "-31401") || !strings.Contains(string(raw), "missing_proof") ||
			h.Get("WWW-Authenticate") != dpop.Challenge(dpop.CheckMissing) {
			t.Fatalf("%s: %d %q %s", body, status, h.Values("WWW-Authenticate"), raw)
		}
	}
	code, h, raw := restCall(t, http.MethodGet, cl.edges[0].URL+RESTPath+"/tasks/"+id, toks.Agent, "", "")
	if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") != dpop.Challenge(dpop.CheckMissing) {
		t.Fatalf("REST get: %d %q %s", code, h.Values("WWW-Authenticate"), raw)
	}
	bearer, _ := grpcSDKClient(t, cl.edges[0].URL, toks.Agent)
	if _, err := bearer.GetTask(ctx, &sdk.GetTaskRequest{ID: sdk.TaskID(id)}); err == nil {
		t.Fatal("gRPC get as bearer: served")
	}
	conn := rawGRPC(t, g.lns[0].Addr().String())
	_, err = conn.GetTask(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+toks.Agent), &pb.GetTaskRequest{Id: id})
	if code, info, _ := grpcStatusOf(t, err); code != codes.Unauthenticated || info.Metadata[metaDPoPCheck] != string(dpop.CheckMissing) {
		t.Fatalf("gRPC get as bearer: %v", err)
	}
	// Another token's non-DPoP refusals keep the Bearer challenge, with
	// DPoP's beside it.
	status, h, _ := httpSend(t, cl.edges[0].URL+"/a2a", "", "Bearer not-a-token", "", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`)
	if got := h.Values("WWW-Authenticate"); status != http.StatusUnauthorized || len(got) != 2 ||
		got[0] != `Bearer realm="chio", error="invalid_token"` || got[1] != dpop.Challenge("") {
		t.Fatalf("a bad bearer token: %d %q", status, got)
	}
}

// The hello-a2a stdio profile with a configured token that can delegate:
// each call proves its key with a chio.dpop_proof.v1 in
// metadata.chio.dpopProof; one without is refused with a deny receipt.
func TestDPoPStdio(t *testing.T) {
	toks := delegationTokens(t)
	cl := startCluster(t, 1, toks.Agent)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	tp, err := agent.ToolProof(hello.ServerID, hello.ToolName, json.RawMessage(`{"text":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	rawTP, _ := json.Marshal(tp)
	wrong, err := agent.ToolProof(hello.ServerID, hello.ToolName, json.RawMessage(`{"text":"other"}`))
	if err != nil {
		t.Fatal(err)
	}
	rawWrong, _ := json.Marshal(wrong)
	send := func(id int, proof []byte) string {
		meta := `{"chio":{"targetSkillId":"hello_task"}}`
		if proof != nil {
			meta = `{"chio":{"targetSkillId":"hello_task","dpopProof":` + string(proof) + `}}`
		}
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"message/send","params":{"message":{"role":"user","parts":[{"type":"text","text":"world"}]},"metadata":%s}}`, id, meta)
	}
	// A fresh proof under "Metadata": in no metadata the call is read
	// with, so it is no proof at all.
	fresh, err := agent.ToolProof(hello.ServerID, hello.ToolName, json.RawMessage(`{"text":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	rawFresh, _ := json.Marshal(fresh)
	inexact := strings.Replace(send(5, rawFresh), `"metadata":{"chio"`, `"Metadata":{"chio"`, 1)
	in := strings.Join([]string{send(1, nil), send(2, rawTP), send(3, rawTP), send(4, rawWrong), inexact}, "\n") + "\n"
	var out bytes.Buffer
	if err := cl.raw[0].ServeStdio(context.Background(), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("responses: %q", out.String())
	}
	refused := func(line string, check dpop.Check) {
		t.Helper()
		var m map[string]any
		_ = json.Unmarshal([]byte(line), &m)
		if errCode(m) != wire.CodeUnauthenticated {
			t.Fatalf("want -31401 for %s: %s", check, line)
		}
		md, _ := m["error"].(map[string]any)["data"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
		rid, _ := md["receiptId"].(string)
		if md[metaDPoPCheck] != string(check) {
			t.Fatalf("dpopCheck %v, want %s: %s", md[metaDPoPCheck], check, line)
		}
		wantDenyReceipt(t, cl.js, rid, check)
	}
	refused(lines[0], dpop.CheckMissing)
	var ok map[string]any
	_ = json.Unmarshal([]byte(lines[1]), &ok)
	r, _ := ok["result"].(map[string]any)
	c, _ := r["metadata"].(map[string]any)["chio"].(map[string]any)
	if r["status"] != "completed" || c["receiptId"] == nil {
		t.Fatalf("with its tool proof: %s", lines[1])
	}
	wantBinding(t, cl.js, c["receiptId"].(string), dpop.MethodToolProof, dpoptest.JKT(agentKey))
	refused(lines[2], dpop.CheckReplayed)
	refused(lines[3], dpop.CheckCall)
	refused(lines[4], dpop.CheckMissing)
	if n := cl.tool.runs.Load(); n != 1 {
		t.Fatalf("tool runs %d, want 1", n)
	}

	// A capability the kernel refuses at the start ends the session.
	expired, err := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{ID: "cap-stdio-expired", Issuer: pub(issuerKey), Subject: pub(agentKey),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: hello.ServerID, ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(time.Now().Add(-2 * time.Hour).Unix()), ExpiresAt: uint64(time.Now().Add(-time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	text, _ := schemas.EncodeCapabilityHeader(expired)
	e := cl.raw[0]
	cfg := e.cfg
	cfg.DevToken = text
	stale := New(cfg, e.kernel, e.registry, e.dispatch, e.tasks)
	if err := stale.ServeStdio(context.Background(), strings.NewReader(send(1, nil)+"\n"), io.Discard); err == nil || !strings.Contains(err.Error(), "refused at time") {
		t.Fatalf("an expired stdio capability: %v", err)
	}
}

// A2A 0.3 clients prove their key too: a2a-go's 0.3 REST transport with
// the interceptor (its /v1 routes), and a raw request on the 0.3 route
// under the JSON-RPC URL (/a2a/v1/...), whose proof names the path the
// client sent, not the one it is served under.
func TestDPoP03REST(t *testing.T) {
	cl := startCluster(t, 1, "")
	toks := delegationTokens(t)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	ctx := context.Background()
	resolver := agentcard.Resolver{CardParser: a2av0.NewAgentCardParser()}
	card, err := resolver.Resolve(ctx, cl.edges[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	f := a2aclient.NewFactory(a2aclient.WithDefaultsDisabled(), dpopa2a.ClientOption(agent),
		a2aclient.WithCompatTransport(a2av0.Version, sdk.TransportProtocolHTTPJSON, a2av0.NewRESTTransportFactory(a2av0.RESTTransportConfig{})))
	c, err := f.CreateFromCard(ctx, card)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("world")), Metadata: helloTarget})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*sdk.Task)
	wantBinding(t, cl.js, chioMetaOf(t, task.Metadata)["receiptId"].(string), dpop.MethodDPoP, dpoptest.JKT(agentKey))
	if got, err := c.GetTask(ctx, &sdk.GetTaskRequest{ID: task.ID}); err != nil || got.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("0.3 get: %+v %v", got, err)
	}

	url := cl.edges[0].URL + "/a2a/v1/message:send"
	body := `{"message":{"messageId":"m-03","role":"user","parts":[{"kind":"text","text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}`
	proof, _ := agent.Proof(http.MethodPost, url)
	if status, _, raw := httpSend(t, url, "", "DPoP "+toks.Agent, proof, body); status != http.StatusOK {
		t.Fatalf("0.3 route under /a2a: %d %s", status, raw)
	}
	served, _ := agent.Proof(http.MethodPost, cl.edges[0].URL+RESTPath+"/v1/message:send")
	if status, h, raw := httpSend(t, url, "", "DPoP "+toks.Agent, served, body); status != http.StatusUnauthorized ||
		h.Get("WWW-Authenticate") != dpop.Challenge(dpop.CheckURL) {
		t.Fatalf("a proof for the path served, not sent: %d %q %s", status, h.Values("WWW-Authenticate"), raw)
	}
}

// A background task whose capability is honoured only with its holder's
// proof cannot be resumed by another replica (the proof was for the
// request the dead replica took): the sweeper fails it, and the tool does
// not run.
func TestDPoPBackgroundTaskNotTakenOver(t *testing.T) {
	cl := startCluster(t, 1, "")
	toks := delegationTokens(t)
	e := cl.raw[0]
	ctx := context.Background()
	proof, _ := dpoptest.Signer(t, agentKey, toks.Agent).Proof(http.MethodPost, "http://x/a2a")
	owner, werr := e.owner(ctx, caller{token: toks.Agent, proof: &kernel.Proof{DPoP: proof, Method: http.MethodPost, URL: "http://x/a2a"}}, "")
	if werr != nil {
		t.Fatal(werr)
	}
	first, _ := encodeStored(&wireMessage)
	req := execRequest{ServerID: hello.ServerID, ToolName: hello.ToolName, Arguments: json.RawMessage(`{"text":"again"}`), Mode: modeBackground, Capability: toks.Agent}
	task, err := e.tasks.Create(ctx, owner, "", first, mustJSON(req), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, won, err := e.tasks.Claim(ctx, task.ID, owner, "dead-replica", 200*time.Millisecond); err != nil || !won {
		t.Fatalf("claim: %v %v", won, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go e.Sweep(sctx, 100*time.Millisecond)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cur, err := e.tasks.Load(ctx, task.ID, owner)
		if err != nil {
			t.Fatal(err)
		}
		if cur.State.Terminal() {
			if cur.State != "failed" || len(cur.ReceiptIDs) != 0 || cl.tool.runs.Load() != 0 {
				t.Fatalf("state %s, receipts %v, runs %d", cur.State, cur.ReceiptIDs, cl.tool.runs.Load())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ended: %s claimed by %s", cur.State, cur.ClaimedBy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stdioSession runs one stdio session of lines and returns each answer.
func stdioSession(t *testing.T, e *Edge, lines ...string) []map[string]any {
	t.Helper()
	var out bytes.Buffer
	if err := e.ServeStdio(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != len(lines) {
		t.Fatalf("%d answers to %d lines: %s", len(got), len(lines), out.String())
	}
	res := make([]map[string]any, len(got))
	for i, l := range got {
		if err := json.Unmarshal([]byte(l), &res[i]); err != nil {
			t.Fatalf("answer %q: %v", l, err)
		}
	}
	return res
}

// stdioLine is a stdio JSON-RPC request for method with params, its proof
// (if any) added at params.metadata.chio.dpopProof after it was signed.
func stdioLine(t *testing.T, method string, params map[string]any, proof *dpop.ToolProof) string {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	if proof != nil {
		var p map[string]any
		_ = json.Unmarshal(raw, &p)
		meta, _ := p["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			p["metadata"] = meta
		}
		chio, _ := meta["chio"].(map[string]any)
		if chio == nil {
			chio = map[string]any{}
			meta["chio"] = chio
		}
		chio[metaDPoPProof] = proof
		if raw, err = json.Marshal(p); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, method, raw)
}

// opProof is a proof for the stdio operation method with params, as a
// client makes it with StdioOperation.
func opProof(t *testing.T, s *dpop.Signer, method string, params map[string]any) *dpop.ToolProof {
	t.Helper()
	raw, _ := json.Marshal(params)
	op, err := StdioOperation(method, raw)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := s.ToolProof(op.ToolServer, op.ToolName, op.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// helloProof is a proof for the hello_task call with {"text":"world"}.
func helloProof(t *testing.T, s *dpop.Signer) *dpop.ToolProof {
	t.Helper()
	tp, err := s.ToolProof(hello.ServerID, hello.ToolName, json.RawMessage(`{"text":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// wantStdioRefused checks a stdio answer refused with -31401 naming
// check, and returns its receipt id ("" for a call that names no tool).
func wantStdioRefused(t *testing.T, m map[string]any, check dpop.Check) string {
	t.Helper()
	if errCode(m) != wire.CodeUnauthenticated {
		t.Fatalf("want -31401 for %s: %v", check, m)
	}
	md, _ := m["error"].(map[string]any)["data"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
	if md[metaDPoPCheck] != string(check) {
		t.Fatalf("dpopCheck %v, want %s: %v", md[metaDPoPCheck], check, m)
	}
	rid, _ := md["receiptId"].(string)
	return rid
}

// A stdio proof is good for the one operation it names: a proof for the
// hello_task call does not read or cancel a task, a proof for one
// operation does not serve another or other params; a proof signed for
// the operation (StdioOperation) does. message/stream stores a deferred
// task on a proof for its own operation, and the tasks/get that runs the
// task needs a proof for the task's tool call.
func TestDPoPStdioOperations(t *testing.T) {
	toks := delegationTokens(t)
	cl := startCluster(t, 1, toks.Agent)
	e := cl.raw[0]
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	send := map[string]any{"message": map[string]any{"role": "user", "parts": []any{map[string]any{"type": "text", "text": "world"}}},
		"metadata": map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}}}
	res := stdioSession(t, e, stdioLine(t, "message/send", send, helloProof(t, agent)))
	r, _ := res[0]["result"].(map[string]any)
	id, _ := r["id"].(string)
	if r["status"] != "completed" || id == "" {
		t.Fatalf("message/send: %v", res[0])
	}
	get := map[string]any{"id": id}
	annotated := map[string]any{"id": id, "metadata": map[string]any{"chio": map[string]any{"note": "kept in the hash"}}}
	okGet := opProof(t, agent, "tasks/get", get)
	res = stdioSession(t, e,
		stdioLine(t, "tasks/get", get, helloProof(t, agent)),                                                         // 0: a tool proof
		stdioLine(t, "tasks/cancel", get, helloProof(t, agent)),                                                      // 1: a tool proof
		stdioLine(t, "tasks/get", get, okGet),                                                                        // 2: the operation's proof
		stdioLine(t, "tasks/cancel", get, opProof(t, agent, "tasks/get", get)),                                       // 3: another method's
		stdioLine(t, "tasks/get", map[string]any{"id": id, "historyLength": 1}, opProof(t, agent, "tasks/get", get)), // 4: other params
		stdioLine(t, "tasks/get", annotated, opProof(t, agent, "tasks/get", annotated)),                              // 5: metadata beside the proof
		stdioLine(t, "tasks/cancel", get, opProof(t, agent, "tasks/cancel", get)),                                    // 6: cancel, proven
		stdioLine(t, "tasks/list", map[string]any{}, opProof(t, agent, "tasks/list", nil)),                           // 7: params {} and absent alike
		stdioLine(t, "tasks/get", get, okGet),                                                                        // 8: replayed
	)
	wantStdioRefused(t, res[0], dpop.CheckCall)
	wantStdioRefused(t, res[1], dpop.CheckCall)
	if r, _ := res[2]["result"].(map[string]any); r["id"] != id || r["status"] != "completed" {
		t.Fatalf("tasks/get with its proof: %v", res[2])
	}
	wantStdioRefused(t, res[3], dpop.CheckCall)
	wantStdioRefused(t, res[4], dpop.CheckCall)
	if r, _ := res[5]["result"].(map[string]any); r["id"] != id {
		t.Fatalf("tasks/get with metadata: %v", res[5])
	}
	if errCode(res[6]) != wire.CodeTaskNotCancelable {
		t.Fatalf("tasks/cancel with its proof (a completed task): %v", res[6])
	}
	if r, _ := res[7]["result"].(map[string]any); r == nil {
		t.Fatalf("tasks/list with its proof: %v", res[7])
	}
	wantStdioRefused(t, res[8], dpop.CheckReplayed)

	// Two proofs in one call: malformed, with the send's deny receipt.
	both := map[string]any{"message": map[string]any{"role": "user", "parts": []any{map[string]any{"type": "text", "text": "world"}},
		"metadata": map[string]any{"chio": map[string]any{metaDPoPProof: helloProof(t, agent)}}},
		"metadata": map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}}}
	res = stdioSession(t, e, stdioLine(t, "message/send", both, helloProof(t, agent)))
	wantDenyReceipt(t, cl.js, wantStdioRefused(t, res[0], dpop.CheckMalformed), dpop.CheckMalformed)

	// Deferred: message/stream runs no tool, so its proof names it; the
	// get that runs the task names the task's call.
	res = stdioSession(t, e, stdioLine(t, "message/stream", send, helloProof(t, agent)))
	wantDenyReceipt(t, cl.js, wantStdioRefused(t, res[0], dpop.CheckCall), dpop.CheckCall)
	res = stdioSession(t, e, stdioLine(t, "message/stream", send, opProof(t, agent, "message/stream", send)))
	r, _ = res[0]["result"].(map[string]any)
	deferred, _ := r["id"].(string)
	if r["status"] != "working" || deferred == "" {
		t.Fatalf("message/stream: %v", res[0])
	}
	dget := map[string]any{"id": deferred}
	runs := cl.tool.runs.Load()
	res = stdioSession(t, e,
		stdioLine(t, "tasks/get", dget, opProof(t, agent, "tasks/get", dget)), // reads, runs nothing
		stdioLine(t, "tasks/get", dget, helloProof(t, agent)),                 // runs the task
		stdioLine(t, "tasks/get", dget, helloProof(t, agent)),                 // nothing left to run
	)
	if r, _ := res[0]["result"].(map[string]any); r["id"] != deferred || r["status"] != "working" {
		t.Fatalf("tasks/get with the operation's proof: %v", res[0])
	}
	r, _ = res[1]["result"].(map[string]any)
	c, _ := r["metadata"].(map[string]any)["chio"].(map[string]any)
	if r["status"] != "completed" || c["receiptId"] == nil {
		t.Fatalf("tasks/get with the task's call proof: %v", res[1])
	}
	wantBinding(t, cl.js, c["receiptId"].(string), dpop.MethodToolProof, dpoptest.JKT(agentKey))
	wantStdioRefused(t, res[2], dpop.CheckCall)
	if n := cl.tool.runs.Load() - runs; n != 1 {
		t.Fatalf("the deferred task ran %d times", n)
	}
}

// StdioOperation hashes the params without the proof, wherever it was,
// and without the objects that held only it.
func TestStdioOperation(t *testing.T) {
	want, err := StdioOperation("tasks/get", json.RawMessage(`{"id":"t1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want.ToolServer != "a2a" || want.ToolName != "tasks/get" || string(want.Arguments) != `{"id":"t1"}` {
		t.Fatalf("%+v", want)
	}
	for _, p := range []string{
		`{"id":"t1","metadata":{"chio":{"dpopProof":{"x":1}}}}`,
		`{ "metadata" : {"chio":{}}, "id":"t1"}`,
		`{"id":"t1","metadata":{}}`,
	} {
		got, err := StdioOperation("tasks/get", json.RawMessage(p))
		if err != nil || string(got.Arguments) != string(want.Arguments) {
			t.Fatalf("%s: %s %v", p, got.Arguments, err)
		}
	}
	got, err := StdioOperation("message/send", json.RawMessage(`{"message":{"parts":[],"metadata":{"chio":{"dpopProof":1,"a":2}}},"metadata":{"x":null,"chio":{"dpopProof":2}}}`))
	if err != nil || string(got.Arguments) != `{"message":{"metadata":{"chio":{"a":2}},"parts":[]},"metadata":{"x":null}}` {
		t.Fatalf("%s %v", got.Arguments, err)
	}
	for _, p := range []string{``, `null`} {
		if got, err := StdioOperation("tasks/list", json.RawMessage(p)); err != nil || string(got.Arguments) != `{}` {
			t.Fatalf("%q: %s %v", p, got.Arguments, err)
		}
	}
	for _, p := range []string{`[]`, `{"id":"a","id":"b"}`, `{`} {
		if _, err := StdioOperation("tasks/get", json.RawMessage(p)); err == nil {
			t.Fatalf("%s: no error", p)
		}
	}
}

// A DPoP presentation wrong in form reaches the kernel as a refused proof:
// a SendMessage with the DPoP scheme but no proof (missing_proof), with
// two proofs, or with a proof beside a bearer token or X-Chio-Capability
// (malformed), is refused on every binding with its deny receipt, 401
// with the DPoP challenge, -31401 or UNAUTHENTICATED; even for a leaf
// token, and the tool does not run.
func TestDPoPPresentationWrongInForm(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	grpcAddr := g.lns[0].Addr().String()
	toks := delegationTokens(t)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	helper := dpoptest.Signer(t, helperKey, toks.Helper)
	for _, b := range allBindings {
		t.Run(string(b), func(t *testing.T) {
			htu := htuOf(cl, grpcAddr, b)
			proof := func(s *dpop.Signer) string {
				return dpoptest.Proof(t, s, http.MethodPost, htu)
			}
			for _, c := range []struct {
				name  string
				h     http.Header
				check dpop.Check
			}{
				{"DPoP scheme without a proof", http.Header{"Authorization": {"DPoP " + toks.Agent}}, dpop.CheckMissing},
				{"two proofs", http.Header{"Authorization": {"DPoP " + toks.Agent}, dpop.Header: {proof(agent), proof(agent)}}, dpop.CheckMalformed},
				{"a proof beside Bearer", http.Header{"Authorization": {"Bearer " + toks.Helper}, dpop.Header: {proof(helper)}}, dpop.CheckMalformed},
				{"a proof beside X-Chio-Capability", http.Header{"X-Chio-Capability": {toks.Helper}, dpop.Header: {proof(helper)}}, dpop.CheckMalformed},
			} {
				t.Run(c.name, func(t *testing.T) {
					runs := cl.tool.runs.Load()
					_, r := sendWith(t, cl, grpcAddr, b, "", c.h)
					wantRefused(t, cl.js, b, r, c.check)
					if d := decisionEvents(t, cl.js)[r.receiptID]; !strings.HasPrefix(d.Decision.Reason, "dpop "+string(c.check)+": ") {
						t.Fatalf("deny reason %q", d.Decision.Reason)
					}
					if cl.tool.runs.Load() != runs {
						t.Fatal("the tool ran")
					}
				})
			}
		})
	}
}

// With the replay state out of reach (its bucket gone), a proof cannot be
// checked: that is the server's condition, not the client's fault. A
// proven SendMessage gets its deny receipt (state_unavailable) and
// answers 503 with Retry-After (JSON-RPC -32603, REST UNAVAILABLE) or
// gRPC UNAVAILABLE; so does a proven read. A bearer leaf token, which
// needs no proof, is still served.
func TestDPoPStateUnavailable(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	grpcAddr := g.lns[0].Addr().String()
	toks := delegationTokens(t)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	ctx := context.Background()
	natstest.BreakProofState(t, cl.js)
	for _, b := range allBindings {
		t.Run(string(b), func(t *testing.T) {
			proof := dpoptest.Proof(t, agent, http.MethodPost, htuOf(cl, grpcAddr, b))
			runs := cl.tool.runs.Load()
			_, r := rawSend(t, cl, grpcAddr, b, "", "DPoP "+toks.Agent, proof)
			if r == nil {
				t.Fatal("served without its proof's one-time claim")
			}
			switch b {
			case sdk.TransportProtocolGRPC:
				if codes.Code(r.code) != codes.Unavailable {
					t.Fatalf("gRPC code %s, want Unavailable", codes.Code(r.code))
				}
			default:
				want := wire.CodeInternal
				if b == sdk.TransportProtocolHTTPJSON {
					want = http.StatusServiceUnavailable
				}
				if r.status != http.StatusServiceUnavailable || r.retryAfter == "" || r.code != want || r.challenge != "" {
					t.Fatalf("HTTP %d Retry-After %q code %d challenge %q", r.status, r.retryAfter, r.code, r.challenge)
				}
			}
			if r.check != string(dpop.CheckState) {
				t.Fatalf("dpopCheck %q", r.check)
			}
			wantDenyReceipt(t, cl.js, r.receiptID, dpop.CheckState)
			if cl.tool.runs.Load() != runs {
				t.Fatal("the tool ran")
			}
		})
	}
	// A read, over JSON-RPC and gRPC.
	url := cl.edges[0].URL + "/a2a"
	proof, _ := agent.Proof(http.MethodPost, url)
	status, h, raw := httpSend(t, url, "", "DPoP "+toks.Agent, proof, `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`)
	if status != http.StatusServiceUnavailable || h.Get("Retry-After") != "1" || !strings.Contains(string(raw), `"code":-32603`) ||
		!strings.Contains(string(raw), string(dpop.CheckState)) {
		t.Fatalf("list: %d %q %s", status, h.Get("Retry-After"), raw)
	}
	proof, _ = agent.Proof(http.MethodPost, "http://"+grpcAddr+pb.A2AService_ListTasks_FullMethodName)
	_, err := rawGRPC(t, grpcAddr).ListTasks(metadata.AppendToOutgoingContext(ctx, "authorization", "DPoP "+toks.Agent, "dpop", proof), &pb.ListTasksRequest{})
	if code, info, _ := grpcStatusOf(t, err); code != codes.Unavailable || info.Metadata[metaDPoPCheck] != string(dpop.CheckState) {
		t.Fatalf("gRPC list: %v", err)
	}
	if rid, r := rawSend(t, cl, "", sdk.TransportProtocolJSONRPC, "", "Bearer "+toks.Helper, ""); r != nil {
		t.Fatalf("a bearer leaf token: %+v", r)
	} else {
		wantBinding(t, cl.js, rid, dpop.MethodBearer, "")
	}
}

// With the gRPC interface configured (Config.GRPCURL), a proof's htu
// names it, whatever :authority the client sends: a proof for the
// address the client dialled, or for a host the client names in
// :authority, is refused (wrong_url); one for the advertised interface
// is accepted.
func TestDPoPGRPCAdvertisedAuthority(t *testing.T) {
	const advertised = "a2a.example:7443"
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t), func(c *Config, _ jetstream.JetStream) { c.GRPCURL = advertised })
	g.serve(t, cl)
	grpcAddr := g.lns[0].Addr().String()
	toks := delegationTokens(t)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	send := func(authority, htu string) (string, *refusal) {
		t.Helper()
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if authority != "" {
			opts = append(opts, grpc.WithAuthority(authority))
		}
		conn, err := grpc.NewClient(grpcAddr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		proof := dpoptest.Proof(t, agent, http.MethodPost, htu+pb.A2AService_SendMessage_FullMethodName)
		meta, _ := structpb.NewStruct(map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}})
		req := &pb.SendMessageRequest{Message: &pb.Message{MessageId: "m-" + randomSuffix(), Role: pb.Role_ROLE_USER,
			Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "world"}}}}, Metadata: meta}
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "DPoP "+toks.Agent, "dpop", proof)
		resp, err := pb.NewA2AServiceClient(conn).SendMessage(ctx, req)
		if err != nil {
			return "", grpcRefusal(t, err)
		}
		return resp.GetTask().GetMetadata().GetFields()["chio"].GetStructValue().GetFields()["receiptId"].GetStringValue(), nil
	}
	_, r := send("", "http://"+grpcAddr)
	wantRefused(t, cl.js, sdk.TransportProtocolGRPC, r, dpop.CheckURL)
	_, r = send("other.example:7443", "http://other.example:7443")
	wantRefused(t, cl.js, sdk.TransportProtocolGRPC, r, dpop.CheckURL)
	rid, r := send("", "http://"+advertised)
	if r != nil {
		t.Fatalf("a proof for the advertised interface: %+v", r)
	}
	wantBinding(t, cl.js, rid, dpop.MethodDPoP, dpoptest.JKT(agentKey))
}

// grpcAuthority: the configured interface, its host from PublicURL for a
// port alone, else what the client sent.
func TestGRPCAuthority(t *testing.T) {
	for _, c := range []struct {
		grpcURL, publicURL, sent, want string
	}{
		{"", "", "client:1", "client:1"},
		{"a2a.example:443", "", "client:1", "a2a.example:443"},
		{"a2a.example:443", "https://web.example", "client:1", "a2a.example:443"},
		{":8081", "https://web.example", "client:1", "web.example:8081"},
		{":8081", "https://[::1]:8443", "client:1", "[::1]:8081"},
		{":8081", "", "client:8081", "client:8081"},
	} {
		e := &Edge{cfg: Config{GRPCURL: c.grpcURL, PublicURL: c.publicURL}}
		if got := e.grpcAuthority(c.sent); got != c.want {
			t.Errorf("%+v: %q", c, got)
		}
	}
}

// A refused credential with arguments the strict reader refuses (here a
// skill's JSON object in a text part, nested past the limit) still has its
// deny receipt, for the A2A operation itself: the arguments no reader
// could read back are never recorded.
func TestRefusedCredentialWithBadArguments(t *testing.T) {
	cl := startCluster(t, 1, "")
	toks := delegationTokens(t)
	deep := `hello_task {"text":"world","x":` + strings.Repeat("[", 80) + strings.Repeat("]", 80) + `}`
	text, _ := json.Marshal(deep)
	body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m-` + randomSuffix() +
		`","role":"ROLE_USER","parts":[{"text":` + string(text) + `}]}}}`
	for name, auth := range map[string]string{"garbage": "Bearer garbage", "rebuilt without its proof": "Bearer " + toks.Rebuilt} {
		status, h, raw := httpSendWith(t, cl.edges[0].URL+"/a2a", "", http.Header{"Authorization": {auth}}, body)
		_, r := rpcResult(t, status, h, raw)
		if r == nil || r.code != wire.CodeUnauthenticated || r.receiptID == "" {
			t.Fatalf("%s: %d %s", name, status, raw)
		}
		d, ok := natstest.Decisions(t, cl.js)[r.receiptID]
		if !ok || d.ToolName != wire.OpSendMessage.String() || string(d.Parameters) != "{}" {
			t.Errorf("%s: deny recorded for %s with %.80s", name, d.ToolName, d.Parameters)
		}
	}
}

// Arguments written in a text part are inside a string, so the strict
// reading of the body never saw them: the skill's own check refuses them
// before a task is stored, for a streaming send as for a blocking one.
func TestTextPartArgumentsReadStrictly(t *testing.T) {
	cl := startCluster(t, 1, "")
	toks := delegationTokens(t)
	ctx := context.Background()
	tasks, err := cl.js.Stream(ctx, schemas.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	count := func() uint64 {
		info, err := tasks.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	before, decisions := count(), len(natstest.Decisions(t, cl.js))
	for _, method := range []string{"SendMessage", "SendStreamingMessage"} {
		for name, args := range map[string]string{
			"case variant": `{"text":"a","Text":"b"}`,
			"too deep":     `{"text":"a","x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
		} {
			text, _ := json.Marshal("hello_task " + args)
			body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"message":{"messageId":"m-` + randomSuffix() +
				`","role":"ROLE_USER","parts":[{"text":` + string(text) + `}]}}}`
			status, _, raw := httpSendWith(t, cl.edges[0].URL+"/a2a", "", http.Header{"Authorization": {"Bearer " + toks.Helper}}, body)
			if !strings.Contains(string(raw), `"code":-32602`) {
				t.Errorf("%s, %s: %d %s", method, name, status, raw)
			}
		}
	}
	if n := count(); n != before {
		t.Errorf("%d task commits stored for refused requests", n-before)
	}
	if n := len(natstest.Decisions(t, cl.js)); n != decisions {
		t.Errorf("%d decision events written for refused requests", n-decisions)
	}
}

// A stdio tool proof is spent only by the call it proves: sent first with
// other arguments (wrong_call), then with a skill the card does not have,
// it still serves its own call, once.
func TestStdioProofNotSpentByAnotherCall(t *testing.T) {
	toks := delegationTokens(t)
	cl := startCluster(t, 1, toks.Agent)
	agent := dpoptest.Signer(t, agentKey, toks.Agent)
	tp, err := agent.ToolProof(hello.ServerID, hello.ToolName, json.RawMessage(`{"text":"world"}`))
	if err != nil {
		t.Fatal(err)
	}
	send := func(text, skill string) string {
		return stdioLine(t, "message/send", map[string]any{
			"message":  map[string]any{"role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}},
			"metadata": map[string]any{"chio": map[string]any{"targetSkillId": skill}}}, tp)
	}
	res := stdioSession(t, cl.raw[0], send("other", "hello_task"), send("world", "no_such_skill"), send("world", "hello_task"), send("world", "hello_task"))
	wantStdioRefused(t, res[0], dpop.CheckCall)
	if res[1]["error"] == nil {
		t.Fatalf("a skill the card does not have: %v", res[1])
	}
	r, _ := res[2]["result"].(map[string]any)
	if r["status"] != "completed" {
		t.Fatalf("the proof's own call after the refusals: %v", res[2])
	}
	wantStdioRefused(t, res[3], dpop.CheckReplayed)
	if n := cl.tool.runs.Load(); n != 1 {
		t.Fatalf("tool runs %d, want 1", n)
	}
}
