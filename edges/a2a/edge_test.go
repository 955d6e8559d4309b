package a2a

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/conformance"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agentKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	otherKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
)

var wireMessage = wire.Message{MessageID: "m-takeover", Role: wire.RoleUser, Parts: []wire.Part{wire.TextPart("again")}}

var helloTarget = map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}}

func pub(k ed25519.PrivateKey) string { return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey)) }

// countingHello counts tool runs, to prove what never ran.
type countingHello struct {
	*hello.Server
	runs atomic.Int64
}

func (s *countingHello) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	s.runs.Add(1)
	return s.Server.Invoke(ctx, inv)
}

func (s *countingHello) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	s.runs.Add(1)
	return s.Server.InvokeStream(ctx, inv, emit)
}

// slowServer's tool waits until it is cancelled (or 10 s pass), reporting
// a cancellation on cancelled.
type slowServer struct {
	tools.Running
	started   chan struct{}
	cancelled chan struct{}
}

func newSlow() *slowServer {
	return &slowServer{started: make(chan struct{}, 16), cancelled: make(chan struct{}, 16)}
}

func (s *slowServer) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: "slow-srv", Name: "slow", Version: "1",
		Tools: []schemas.ToolDefinition{{Name: "slow_task", Description: "waits", InputSchema: json.RawMessage(`{"type":"object"}`),
			Metadata: map[string]json.RawMessage{"a2a.expose": json.RawMessage(`true`)}}}}
}
func (s *slowServer) ServerID() string    { return "slow-srv" }
func (s *slowServer) ToolNames() []string { return []string{"slow_task"} }
func (s *slowServer) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	s.started <- struct{}{}
	select {
	case <-ctx.Done():
		s.cancelled <- struct{}{}
		return nil, ctx.Err()
	case <-time.After(10 * time.Second):
		return json.RawMessage(`"slow done"`), nil
	}
}
func (s *slowServer) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	_, err := s.Invoke(ctx, inv)
	return err
}

type cluster struct {
	js    jetstream.JetStream
	tool  *countingHello
	slow  *slowServer
	step  *stepServer
	tick  *tickServer
	conf  *conformance.Server
	edges []*httptest.Server
	raw   []*Edge
}

// startCluster runs n edge replicas on one embedded NATS server; configure,
// if given, adjusts each replica's Config.
func startCluster(t testing.TB, n int, devToken string, configure ...func(*Config, jetstream.JetStream)) *cluster {
	t.Helper()
	ns, _, _ := natstest.Start(t)
	cl := &cluster{tool: &countingHello{Server: hello.New()}, slow: newSlow(), step: newStep(), tick: newTick(),
		conf: conformance.New(conformance.WithResubscribeHold(3 * time.Second))}
	policy := govtest.Policy(t, pub(issuerKey))
	for i := range n {
		env := govtest.New(t, govtest.On(ns), govtest.WithPolicy(policy), govtest.WithEdgeID(fmt.Sprintf("edge-%d", i)),
			govtest.WithServers(cl.tool, cl.slow, cl.step, cl.tick, cl.conf))
		js, k, reg, d := env.JS, env.Kernel, env.Registry, env.Dispatch
		cl.js = js
		ctx := context.Background()
		ts, err := taskstore.Open(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{EdgeID: fmt.Sprintf("edge-%d", i), DevToken: devToken, ClaimLease: 2 * time.Second, KeepAlive: 300 * time.Millisecond}
		for _, c := range configure {
			c(&cfg, js)
		}
		e := New(cfg, k, reg, d, ts)
		if cfg.Push != nil {
			pctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = e.RunPush(pctx) }()
			t.Cleanup(func() { stop(); <-done })
		}
		ec := echo.New()
		e.Register(ec, HTTPConfig{ServeRoot: true})
		srv := httptest.NewServer(ec)
		t.Cleanup(srv.Close)
		cl.edges = append(cl.edges, srv)
		cl.raw = append(cl.raw, e)
	}
	return cl
}

func token(t testing.TB, subject ed25519.PrivateKey, id string) string {
	t.Helper()
	return govtest.Valid(t, issuerKey, subject, id, govtest.AllOf("hello-a2a-srv", "slow-srv", "step-srv", conformance.ServerID, "tick-srv")...)
}

type bearer struct {
	token   string
	methods *[]string // if set, records each JSON-RPC method sent
	mu      *sync.Mutex
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.methods != nil {
		if r.Body == nil {
			r.Body = http.NoBody
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct{ Method string }
		_ = json.Unmarshal(body, &m)
		if m.Method == "" {
			m.Method = r.URL.Path // REST
		}
		b.mu.Lock()
		*b.methods = append(*b.methods, m.Method)
		b.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func sdkClient(t *testing.T, url, tok string) *a2aclient.Client {
	return sdkClientOver(t, url, tok, a2apb.TransportProtocolJSONRPC)
}

// sdkClientOver is the a2a-go client from the card, preferring binding.
func sdkClientOver(t *testing.T, url, tok string, binding a2apb.TransportProtocol) *a2aclient.Client {
	t.Helper()
	ctx := context.Background()
	card, err := agentcard.DefaultResolver.Resolve(ctx, url)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	// The timeout bounds a whole SSE stream too: generous, the tests'
	// contexts are the real limits.
	hc := &http.Client{Transport: bearer{token: tok}, Timeout: 2 * time.Minute}
	c, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []a2apb.TransportProtocol{binding}}))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

func chioMetaOf(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	c, ok := m["chio"].(map[string]any)
	if !ok {
		t.Fatalf("no metadata.chio in %v", m)
	}
	return c
}

// The official Go SDK client, against two replicas: send on one, get, list
// and cancel on the other.
func TestSDKClientAcrossReplicas(t *testing.T) {
	cl := startCluster(t, 2, "")
	tok := token(t, agentKey, "cap-sdk")
	a, b := sdkClient(t, cl.edges[0].URL, tok), sdkClient(t, cl.edges[1].URL, tok)
	ctx := context.Background()

	res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("world")), Metadata: helloTarget})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok {
		t.Fatalf("result %T", res)
	}
	meta := chioMetaOf(t, task.Metadata)
	if task.Status.State != a2apb.TaskStateCompleted || meta["receiptId"] == "" || meta["authorityPath"] != "cross_protocol_orchestrator" || meta["decision"] != "allow" {
		t.Fatalf("task %+v meta %v", task.Status, meta)
	}
	if len(task.Artifacts) != 1 || cl.tool.runs.Load() != 1 {
		t.Fatalf("artifacts %d, runs %d", len(task.Artifacts), cl.tool.runs.Load())
	}

	again := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("more"))
	again.TaskID = task.ID
	if _, err := b.SendMessage(ctx, &a2apb.SendMessageRequest{Message: again, Metadata: helloTarget}); !errors.Is(err, a2apb.ErrUnsupportedOperation) {
		t.Fatalf("send to a terminal task: %v", err)
	}
	got, err := b.GetTask(ctx, &a2apb.GetTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2apb.TaskStateCompleted || chioMetaOf(t, got.Metadata)["receiptId"] != meta["receiptId"] {
		t.Fatalf("get on the other replica: %+v %v", got, err)
	}
	list, err := b.ListTasks(ctx, &a2apb.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != task.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := b.CancelTask(ctx, &a2apb.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2apb.ErrTaskNotCancelable) {
		t.Fatalf("cancel of a completed task: %v", err)
	}
	if _, err := b.GetTask(ctx, &a2apb.GetTaskRequest{ID: "0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f"}); !errors.Is(err, a2apb.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	// Another caller never sees the task.
	other := sdkClient(t, cl.edges[1].URL, token(t, otherKey, "cap-other"))
	if _, err := other.GetTask(ctx, &a2apb.GetTaskRequest{ID: task.ID}); !errors.Is(err, a2apb.ErrTaskNotFound) {
		t.Fatalf("another caller read the task: %v", err)
	}
	if l, err := other.ListTasks(ctx, &a2apb.ListTasksRequest{}); err != nil || len(l.Tasks) != 0 {
		t.Fatalf("another caller listed %v, %v", l, err)
	}
}

// rpc posts one JSON-RPC body and returns the decoded response.
func rpc(t *testing.T, url, tok, version, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/a2a", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if version != "" {
		req.Header.Set("A2A-Version", version)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("response %q: %v", raw, err)
	}
	return m
}

func errCode(m map[string]any) int {
	e, ok := m["error"].(map[string]any)
	if !ok {
		return 0
	}
	for k := range e {
		if k != "code" && k != "message" && k != "data" {
			return -1 // extra members are a defect
		}
	}
	c, _ := e["code"].(float64)
	return int(c)
}

func TestBadInputs(t *testing.T) {
	cl := startCluster(t, 1, "")
	url := cl.edges[0].URL
	tok := token(t, agentKey, "cap-bad")
	expired := func() string {
		now := time.Now()
		x, _ := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{ID: "cap-expired", Issuer: pub(issuerKey), Subject: pub(agentKey),
			Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}},
			IssuedAt: uint64(now.Add(-2 * time.Hour).Unix()), ExpiresAt: uint64(now.Add(-time.Hour).Unix())})
		h, _ := schemas.EncodeCapabilityHeader(x)
		return h
	}()
	send := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m1","parts":[{"kind":"text","text":"hi"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`
	cases := []struct {
		name, tok, version, body string
		code                     int
	}{
		{"not json", tok, "", `{`, -32700},
		{"wrong jsonrpc", tok, "", `{"jsonrpc":"1.0","id":1,"method":"message/send","params":{}}`, -32600},
		{"missing method", tok, "", `{"jsonrpc":"2.0","id":1,"params":{}}`, -32600},
		{"unknown method", tok, "", `{"jsonrpc":"2.0","id":1,"method":"nope","params":{}}`, -32601},
		{"wrong param types", tok, "", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":"hi"}}`, -32602},
		{"oversize body", tok, "", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"x":"` + strings.Repeat("a", 1<<20) + `"}}`, -32600},
		{"unknown skill", tok, "", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m","parts":[{"kind":"text","text":"x"}]},"metadata":{"chio":{"targetSkillId":"nope"}}}}`, -32602},
		// Arguments with no canonical form never reach the kernel: a
		// repeated member anywhere in the body is refused with the body.
		{"duplicate argument member", tok, "", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m","parts":[{"kind":"data","data":{"skill":"hello_task","arguments":{"text":"a","text":"b"}}}]}}}`, -32600},
		{"hard-floor skill", tok, "", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m","parts":[{"kind":"text","text":"x"}]},"metadata":{"chio":{"targetSkillId":"chio.admin"}}}}`, -32602},
		{"unsupported version", tok, "99.0", send, -32009},
		{"no token", "", "", send, -31401},
		{"unsupported media type", tok, "", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m","parts":[{"kind":"text","text":"x","metadata":{}},{"kind":"file","file":{"uri":"https://x/y.png","mimeType":"image/png"}}]}}}`, -32005},
		{"stream without a skill", tok, "", `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"role":"user","messageId":"m","parts":[{"kind":"text","text":"x"}]}}}`, -32602},
		{"subscribe to an unknown task", tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":"01a2004d-f7a4-7acb-9b47-13b8fec10698"}}`, -32001},
		{"push not supported", tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"t","url":"https://x"}}`, -32003},
		{"governed intent not an object", tok, "", strings.Replace(send, `"targetSkillId":"hello_task"`, `"targetSkillId":"hello_task","governedIntent":"buy"`, 1), -32602},
		{"governed intent unknown field", tok, "", strings.Replace(send, `"targetSkillId":"hello_task"`, `"targetSkillId":"hello_task","governedIntent":{"id":"i","server_id":"hello-a2a-srv","tool_name":"hello_task","purpose":"p","budget":1}`, 1), -32602},
		{"two different governed intents", tok, "", strings.Replace(strings.Replace(send, `"targetSkillId":"hello_task"`, `"targetSkillId":"hello_task","governedIntent":{"id":"i1","server_id":"hello-a2a-srv","tool_name":"hello_task","purpose":"p"}`, 1),
			`"parts":[{"kind":"text","text":"hi"}]`, `"parts":[{"kind":"text","text":"hi"}],"metadata":{"chio":{"governedIntent":{"id":"i2","server_id":"hello-a2a-srv","tool_name":"hello_task","purpose":"p"}}}`, 1), -32602},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := errCode(rpc(t, url, c.tok, c.version, c.body)); got != c.code {
				t.Fatalf("code %d, want %d", got, c.code)
			}
		})
	}
	if n := cl.tool.runs.Load(); n != 0 {
		t.Fatalf("a tool ran %d times on bad input", n)
	}
	// Tokens the kernel refuses get 401 (HTTP) and -31401 with their deny
	// receipt (a decision event, found by the id the error names), and no
	// task; a follow-up message on some task id too, without its task read.
	followUp := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m-follow","taskId":"01a00000-0000-7000-8000-000000000000","parts":[{"kind":"text","text":"hi"}]}}}`
	for _, bad := range []struct{ tok, body, guard, tool string }{
		{expired, send, "time", "hello_task"}, {"eyJmb3JnZWQiOnRydWV9", send, "parse", "hello_task"},
		{expired, followUp, "time", "SendMessage"},
	} {
		req, _ := http.NewRequest(http.MethodPost, url+"/a2a", strings.NewReader(bad.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+bad.tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer realm="chio", error="invalid_token"` ||
			errCode(m) != wire.CodeUnauthenticated || !strings.Contains(fmt.Sprint(m), "refused at "+bad.guard) {
			t.Fatalf("token refused at %s: HTTP %d %q %v %v", bad.guard, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), m, err)
		}
		info, _ := m["error"].(map[string]any)["data"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
		rid, _ := info["receiptId"].(string)
		d, ok := decisionEvents(t, cl.js)[rid]
		if !ok || d.Decision.Verdict != schemas.VerdictDeny || d.Decision.Guard != bad.guard || d.ToolName != bad.tool {
			t.Fatalf("refused at %s: deny receipt %q: %v %+v (tool %s)", bad.guard, rid, ok, d.Decision, d.ToolName)
		}
	}
	// Intents that do not fit the call (another tool; a chain whose parent
	// is the call itself) end in a failed task with a deny receipt.
	wrongTool := strings.Replace(send, `"targetSkillId":"hello_task"`, `"targetSkillId":"hello_task","governedIntent":{"id":"i","server_id":"hello-a2a-srv","tool_name":"other","purpose":"p"}`, 1)
	selfParent := strings.Replace(send, `"targetSkillId":"hello_task"`, `"targetSkillId":"hello_task","governedIntent":{"id":"i","server_id":"hello-a2a-srv","tool_name":"hello_task","purpose":"p","call_chain":{"chain_id":"c","parent_request_id":"m1","origin_subject":"a","delegator_subject":"a"}}`, 1)
	emptyChain := strings.Replace(send, `"targetSkillId":"hello_task"`, `"targetSkillId":"hello_task","governedIntent":{"id":"i","server_id":"hello-a2a-srv","tool_name":"hello_task","purpose":"p","call_chain":{"chain_id":"","parent_request_id":"p","origin_subject":"a","delegator_subject":"a"}}`, 1)
	for _, bad := range []struct{ tok, body, guard string }{
		{tok, wrongTool, "governed_intent"}, {tok, selfParent, "governed_intent"}, {tok, emptyChain, "governed_intent"},
	} {
		m := rpc(t, url, bad.tok, "", bad.body)
		r, _ := m["result"].(map[string]any)
		st, _ := r["status"].(map[string]any)
		meta, _ := r["metadata"].(map[string]any)
		c, _ := meta["chio"].(map[string]any)
		if st["state"] != "failed" || c["decision"] != "deny" || c["receiptId"] == nil || c["denyGuard"] != bad.guard {
			t.Fatalf("want a deny by %s: %v", bad.guard, m)
		}
	}
	if n := cl.tool.runs.Load(); n != 0 {
		t.Fatalf("a tool ran %d times for a refused token", n)
	}
}

// The hello-a2a stdio contract: message/send completes with a receipt;
// message/stream answers working with receiptPending; task/get executes it
// once and collates both chunks.
func TestHelloStdioContract(t *testing.T) {
	cl := startCluster(t, 1, token(t, agentKey, "cap-dev"))
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"type":"text","text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"message/stream","params":{"message":{"role":"user","parts":[{"type":"text","text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	if err := cl.raw[0].ServeStdio(context.Background(), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("responses: %q", out.String())
	}
	var send, stream map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &send)
	_ = json.Unmarshal([]byte(lines[1]), &stream)
	sr := send["result"].(map[string]any)
	sc := sr["metadata"].(map[string]any)["chio"].(map[string]any)
	if sr["status"] != "completed" || sc["authorityPath"] != "cross_protocol_orchestrator" || sc["receiptId"] == nil || sc["receiptId"] == "" {
		t.Fatalf("message/send: %s", lines[0])
	}
	st := stream["result"].(map[string]any)
	stc := st["metadata"].(map[string]any)["chio"].(map[string]any)
	if st["status"] != "working" || stc["receiptPending"] != true || stc["receiptId"] != nil {
		t.Fatalf("message/stream: %s", lines[1])
	}
	get := fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"task/get","params":{"taskId":%q}}`, st["id"])
	out.Reset()
	if err := cl.raw[0].ServeStdio(context.Background(), strings.NewReader(get+"\n"+get+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	fr := first["result"].(map[string]any)
	fc := fr["metadata"].(map[string]any)["chio"].(map[string]any)
	if fr["status"] != "completed" || fc["receiptId"] == nil || !strings.Contains(lines[0], "hello from a2a, world") || !strings.Contains(lines[0], "stream complete") {
		t.Fatalf("task/get: %s", lines[0])
	}
	sc2 := second["result"].(map[string]any)["metadata"].(map[string]any)["chio"].(map[string]any)
	if sc2["receiptId"] != fc["receiptId"] || cl.tool.runs.Load() != 2 {
		t.Fatalf("the deferred task ran again: runs %d, receipts %v %v", cl.tool.runs.Load(), fc["receiptId"], sc2["receiptId"])
	}
}

// Concurrent follow-ups on a deferred task from two replicas: the tool
// runs once, one receipt.
func TestDeferredTaskRunsOnceAcrossReplicas(t *testing.T) {
	tok := token(t, agentKey, "cap-race")
	cl := startCluster(t, 2, tok)
	var out bytes.Buffer
	create := `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"role":"user","parts":[{"type":"text","text":"race"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`
	if err := cl.raw[0].ServeStdio(context.Background(), strings.NewReader(create+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	var created map[string]any
	_ = json.Unmarshal(out.Bytes(), &created)
	id := created["result"].(map[string]any)["id"].(string)
	var wg sync.WaitGroup
	receipts := make(chan any, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := rpc(t, cl.edges[i%2].URL, tok, "", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"task/get","params":{"taskId":%q}}`, id))
			if r, ok := m["result"].(map[string]any); ok {
				if c, ok := r["metadata"].(map[string]any)["chio"].(map[string]any); ok && c["receiptId"] != nil {
					receipts <- c["receiptId"]
				}
			}
		}()
	}
	wg.Wait()
	close(receipts)
	seen := map[any]bool{}
	for r := range receipts {
		seen[r] = true
	}
	if cl.tool.runs.Load() != 1 || len(seen) != 1 {
		t.Fatalf("tool runs %d, distinct receipts %v", cl.tool.runs.Load(), seen)
	}
}

// A 0.3 client: the SDK's 0.3 card parser and compatibility transport.
func TestSDK03Client(t *testing.T) {
	cl := startCluster(t, 1, "")
	tok := token(t, agentKey, "cap-03")
	ctx := context.Background()
	resolver := agentcard.Resolver{CardParser: a2av0.NewAgentCardParser()}
	card, err := resolver.Resolve(ctx, cl.edges[0].URL)
	if err != nil {
		t.Fatalf("0.3 card parser: %v", err)
	}
	for _, binding := range []a2apb.TransportProtocol{a2apb.TransportProtocolJSONRPC, a2apb.TransportProtocolHTTPJSON} {
		t.Run(string(binding), func(t *testing.T) {
			var (
				methods []string
				mu      sync.Mutex
			)
			hc := &http.Client{Transport: bearer{token: tok, methods: &methods, mu: &mu}, Timeout: 20 * time.Second}
			var transport a2aclient.TransportFactory = a2av0.NewJSONRPCTransportFactory(a2av0.JSONRPCTransportConfig{Client: hc})
			want := "message/send,tasks/get,tasks/cancel,tasks/get,message/stream"
			if binding == a2apb.TransportProtocolHTTPJSON {
				transport = a2av0.NewRESTTransportFactory(a2av0.RESTTransportConfig{Client: hc})
				want = "/a2a/rest/v1/message:send,/a2a/rest/v1/tasks/{id},/a2a/rest/v1/tasks/{id}:cancel,/a2a/rest/v1/tasks/0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f,/a2a/rest/v1/message:stream"
			}
			factory := a2aclient.NewFactory(a2aclient.WithDefaultsDisabled(), a2aclient.WithCompatTransport(a2av0.Version, binding, transport))
			c, err := factory.CreateFromCard(ctx, card)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("world")), Metadata: helloTarget})
			if err != nil {
				t.Fatal(err)
			}
			task, ok := res.(*a2apb.Task)
			if !ok || task.Status.State != a2apb.TaskStateCompleted || chioMetaOf(t, task.Metadata)["receiptId"] == nil {
				t.Fatalf("0.3 send: %T %+v", res, res)
			}
			got, err := c.GetTask(ctx, &a2apb.GetTaskRequest{ID: task.ID})
			if err != nil || got.Status.State != a2apb.TaskStateCompleted || len(got.Artifacts) != 1 {
				t.Fatalf("0.3 get: %+v %v", got, err)
			}
			if _, err := c.CancelTask(ctx, &a2apb.CancelTaskRequest{ID: task.ID}); !errors.Is(err, a2apb.ErrTaskNotCancelable) {
				t.Fatalf("0.3 cancel of a completed task: %v", err)
			}
			if _, err := c.GetTask(ctx, &a2apb.GetTaskRequest{ID: "0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f"}); !errors.Is(err, a2apb.ErrTaskNotFound) {
				t.Fatalf("0.3 unknown task: %v", err)
			}
			var kinds []string
			for ev, err := range c.SendStreamingMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("world")), Metadata: helloTarget}) {
				if err != nil {
					t.Fatal(err)
				}
				kinds = append(kinds, fmt.Sprintf("%T", ev))
			}
			if strings.Join(kinds, ",") != "*a2a.Task,*a2a.TaskArtifactUpdateEvent,*a2a.TaskArtifactUpdateEvent,*a2a.TaskStatusUpdateEvent" {
				t.Fatalf("0.3 stream: %v", kinds)
			}
			mu.Lock()
			defer mu.Unlock()
			if got := strings.ReplaceAll(strings.Join(methods, ","), string(task.ID), "{id}"); got != want {
				t.Fatalf("the client did not speak 0.3 %s:\n%s\nwant %s", binding, got, want)
			}
		})
	}
}

// A cancel on replica B stops the tool running for a background task on
// replica A, and cancel wins: the task ends canceled, its receipt linked.
func TestCancelMidFlightAcrossReplicas(t *testing.T) {
	cl := startCluster(t, 2, "")
	tok := token(t, agentKey, "cap-cancel")
	send := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"slow_task"}}}}`
	m := rpc(t, cl.edges[0].URL, tok, "1.0", send)
	task := m["result"].(map[string]any)["task"].(map[string]any)
	if task["status"].(map[string]any)["state"] != "TASK_STATE_WORKING" {
		t.Fatalf("returnImmediately: %v", m)
	}
	select {
	case <-cl.slow.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the background tool never started")
	}
	id := task["id"].(string)
	cancelRunning(t, cl, cl.edges[1].URL, tok, id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		g := rpc(t, cl.edges[0].URL, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":%q}}`, id))
		r := g["result"].(map[string]any)
		meta, _ := r["metadata"].(map[string]any)
		chio, _ := meta["chio"].(map[string]any)
		if r["status"].(map[string]any)["state"] == "TASK_STATE_CANCELED" && hasReceipts(chio) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task after cancel: %v", g)
		}
		time.Sleep(20 * time.Millisecond)
	}
	again := rpc(t, cl.edges[1].URL, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"CancelTask","params":{"id":%q}}`, id))
	if errCode(again) != -32002 {
		t.Fatalf("second cancel: %v", again)
	}
}

// A background task whose accepting replica died (its claim lapsed) is
// taken over by another replica's sweeper and completed, once.
func TestBackgroundTaskTakenOver(t *testing.T) {
	cl := startCluster(t, 1, "")
	tok := token(t, agentKey, "cap-takeover")
	e := cl.raw[0]
	ctx := context.Background()
	owner, werr := e.owner(ctx, caller{token: tok}, "")
	if werr != nil {
		t.Fatal(werr)
	}
	first, _ := encodeStored(&wireMessage)
	req := execRequest{ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{"text":"again"}`), Mode: modeBackground, Capability: tok}
	task, err := e.tasks.Create(ctx, owner, "", first, mustJSON(req), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The dead replica claimed it for 200 ms and never finished.
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
		if cur.State == taskstore.StateCompleted {
			if len(cur.ReceiptIDs) != 1 || cur.ReceiptIDs[0] != cur.ExecutionID || cl.tool.runs.Load() != 1 {
				t.Fatalf("taken over: receipts %v execution %s runs %d", cur.ReceiptIDs, cur.ExecutionID, cl.tool.runs.Load())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not taken over: %s claimed by %s", cur.State, cur.ClaimedBy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A token delegated to the victim's public key by someone else does not
// make its holder the victim: tasks are scoped to the authority path.
func TestDelegatedSubjectIsNotTheOwner(t *testing.T) {
	cl := startCluster(t, 1, "")
	url := cl.edges[0].URL
	victim := token(t, agentKey, "cap-victim")
	m := rpc(t, url, victim, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"secret"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`)
	id := m["result"].(map[string]any)["task"].(map[string]any)["id"].(string)

	now := time.Now()
	parent, err := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{ID: "cap-attacker", Issuer: pub(issuerKey), Subject: pub(otherKey),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	child, err := schemas.Delegate(otherKey, parent, schemas.CapabilityBody{ID: "cap-impersonation", Subject: pub(agentKey),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "hello_task", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: parent.IssuedAt, ExpiresAt: parent.ExpiresAt})
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := schemas.EncodeCapabilityHeader(child)
	for _, body := range []string{
		fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"GetTask","params":{"id":%q}}`, id),
		fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"CancelTask","params":{"id":%q}}`, id),
	} {
		if got := errCode(rpc(t, url, forged, "1.0", body)); got != -32001 {
			t.Fatalf("impersonating token: code %d for %s", got, body)
		}
	}
	l := rpc(t, url, forged, "1.0", `{"jsonrpc":"2.0","id":4,"method":"ListTasks","params":{}}`)
	if tasks := l["result"].(map[string]any)["tasks"].([]any); len(tasks) != 0 {
		t.Fatalf("impersonating token listed %v", tasks)
	}
}

// A live background task keeps renewing its lease, so another replica's
// sweeper never takes it over while it runs.
func TestLiveTaskIsNotTakenOver(t *testing.T) {
	cl := startCluster(t, 2, "")
	tok := token(t, agentKey, "cap-live")
	m := rpc(t, cl.edges[0].URL, tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"slow_task"}}}}`)
	id := m["result"].(map[string]any)["task"].(map[string]any)["id"].(string)
	<-cl.slow.started
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cl.raw[1].Sweep(sctx, 100*time.Millisecond)
	// Twice the lease (2 s in startCluster): a lapsed lease would be taken over.
	select {
	case <-cl.slow.started:
		t.Fatal("the running task was taken over by another replica")
	case <-time.After(4 * time.Second):
	}
	rpc(t, cl.edges[1].URL, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"CancelTask","params":{"id":%q}}`, id))
	<-cl.slow.cancelled
}

// A run whose lease lapsed on a stalled machine is still this replica's
// own: its sweeper must not claim the task and start the tool a second
// time beside it (the run's renewal wins the lease back instead).
func TestOwnRunIsNotSweptAgain(t *testing.T) {
	cl := startCluster(t, 1, "")
	e := cl.raw[0]
	tok := token(t, agentKey, "cap-own-run")
	m := rpc(t, cl.edges[0].URL, tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"slow_task"}}}}`)
	id := m["result"].(map[string]any)["task"].(map[string]any)["id"].(string)
	<-cl.slow.started
	// Only now: a sweep this eager could otherwise claim the task between
	// its creation and the send's own claim on a slow machine.
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.Sweep(sctx, 20*time.Millisecond)
	// The lease as stored lapsed a minute ago, still naming this replica.
	owner, werr := e.owner(context.Background(), caller{token: tok}, "")
	if werr != nil {
		t.Fatal(werr)
	}
	if _, err := e.tasks.Transition(context.Background(), id, owner, func(*taskstore.Task) ([]taskstore.Event, error) {
		return []taskstore.Event{taskstore.ClaimEvent(e.cfg.EdgeID, time.Now().Add(-time.Minute).UTC())}, nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cl.slow.started:
		t.Fatal("the sweeper started a second run of a task running on its own replica")
	case <-time.After(time.Second):
	}
	rpc(t, cl.edges[0].URL, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"CancelTask","params":{"id":%q}}`, id))
	<-cl.slow.cancelled
}

func TestStdioSurvivesAnOversizeLine(t *testing.T) {
	cl := startCluster(t, 1, token(t, agentKey, "cap-stdio-big"))
	in := strings.Repeat("x", wire.MaxRequestBytes+10) + "\n" +
		`{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":{"id":"0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f"}}` + "\n"
	var out bytes.Buffer
	if err := cl.raw[0].ServeStdio(context.Background(), strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "-32600") || !strings.Contains(lines[1], "-32001") {
		t.Fatalf("responses: %q", lines)
	}
}

func TestListTasksBadPageToken(t *testing.T) {
	cl := startCluster(t, 1, "")
	m := rpc(t, cl.edges[0].URL, token(t, agentKey, "cap-page"), "1.0", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageToken":"forged"}}`)
	if errCode(m) != -32602 {
		t.Fatalf("bad page token: %v", m)
	}
}

func TestPublicURL(t *testing.T) {
	proxy := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	cases := []struct {
		remote, fwdHost, fwdProto string
		want                      string
	}{
		{"10.1.2.3:5555", "edge.example.com", "https", "https://edge.example.com"},
		{"10.1.2.3:5555", "attacker.example, edge.example.com", "http, https", "https://edge.example.com"},
		{"192.0.2.7:5555", "attacker.example", "https", "http://direct.example:8080"},
	}
	for _, c := range cases {
		r := httptest.NewRequest(http.MethodGet, "http://direct.example:8080/.well-known/agent-card.json", nil)
		r.RemoteAddr = c.remote
		r.Header.Set("X-Forwarded-Host", c.fwdHost)
		r.Header.Set("X-Forwarded-Proto", c.fwdProto)
		if got := publicURL(r, HTTPConfig{TrustedProxies: proxy}); got != c.want {
			t.Errorf("%+v: %s", c, got)
		}
	}
}

func TestJSONRPCPaths(t *testing.T) {
	cl := startCluster(t, 1, "")
	tok := token(t, agentKey, "cap-paths")
	for _, path := range []string{"/a2a", "/a2a/", "/"} {
		req, _ := http.NewRequest(http.MethodPost, cl.edges[0].URL+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}`))
		req.Header.Set("Content-Type", "application/a2a+json")
		req.Header.Set("A2A-Version", "1.0")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(raw), `"tasks":[]`) {
			t.Errorf("%s: %s", path, raw)
		}
	}
}

// hasReceipts reports whether metadata.chio links any receipt.
func hasReceipts(chio map[string]any) bool {
	ids, _ := chio["receiptIds"].([]any)
	return len(ids) > 0
}

// cancelRunning cancels task id, running the slow tool, through the edge
// at url, and waits until the tool saw the cancel.
func cancelRunning(t *testing.T, cl *cluster, url, tok, id string) {
	t.Helper()
	c := rpc(t, url, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"CancelTask","params":{"id":%q}}`, id))
	if c["result"].(map[string]any)["status"].(map[string]any)["state"] != "TASK_STATE_CANCELED" {
		t.Fatalf("cancel: %v", c)
	}
	select {
	case <-cl.slow.cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the running tool was not cancelled")
	}
}
