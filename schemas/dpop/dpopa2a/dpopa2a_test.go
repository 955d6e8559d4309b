package dpopa2a

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	holderKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
)

func signer(t *testing.T) *dpop.Signer {
	t.Helper()
	now := time.Now()
	tok, err := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{
		ID: "cap-dpopa2a", Issuer: schemas.EncodePublicKey(issuerKey.Public().(ed25519.PublicKey)),
		Subject: schemas.EncodePublicKey(holderKey.Public().(ed25519.PublicKey)),
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "srv", ToolName: "*",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix()),
	})
	if err != nil {
		t.Fatal(err)
	}
	text, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	s, err := dpop.NewSigner(holderKey, text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seen is one request as a server received it: its method and URL (the
// proof's htm and htu must be these), and its credential.
type seen struct {
	method, url, auth, proof string
}

type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func (r *recorder) add(s seen) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, s)
}

func (r *recorder) take() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

// check verifies that every request seen carried the signer's token as
// DPoP and a proof for exactly that request.
func check(t *testing.T, s *dpop.Signer, what string, got []seen) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("%s: %d requests, want 1: %+v", what, len(got), got)
	}
	g := got[0]
	if g.auth != "DPoP "+s.Token() {
		t.Fatalf("%s: Authorization %.40q", what, g.auth)
	}
	p, err := dpop.Parse(g.proof)
	if err != nil {
		t.Fatalf("%s: proof: %v", what, err)
	}
	if p.HTM != g.method || p.HTU != g.url {
		t.Fatalf("%s: proof for %s %s, request %s %s", what, p.HTM, p.HTU, g.method, g.url)
	}
	if err := p.Verify(dpop.Expect{Subject: schemas.EncodePublicKey(holderKey.Public().(ed25519.PublicKey)), Token: s.Token(),
		Method: g.method, URL: g.url}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// The interceptor's proofs name exactly the requests a2a-go's transports
// send, on every binding, for every method, with tenants from the
// request, the interface and the context.
func TestProofsMatchTheRequestsSent(t *testing.T) {
	s := signer(t)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(seen{method: r.Method, url: dpop.RequestURL(r, ""), auth: r.Header.Get("Authorization"), proof: r.Header.Get(dpop.Header)})
		http.Error(w, `{"error":"no"}`, http.StatusTeapot)
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		m, _ := grpc.MethodFromServerStream(ss)
		md, _ := metadata.FromIncomingContext(ss.Context())
		first := func(k string) string {
			if v := md.Get(k); len(v) > 0 {
				return v[0]
			}
			return ""
		}
		rec.add(seen{method: http.MethodPost, url: "http://" + first(":authority") + m, auth: first("authorization"), proof: first("dpop")})
		return status.Error(codes.Unimplemented, "no")
	}))
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	card := &a2a.AgentCard{Name: "x", Capabilities: a2a.AgentCapabilities{Streaming: true}, SupportedInterfaces: []*a2a.AgentInterface{
		{URL: srv.URL + "/a2a", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "1.0"},
		{URL: srv.URL + "/rest", ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: "1.0"},
		{URL: srv.URL + "/tenanted", ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: "1.0", Tenant: "iface-tenant"},
		{URL: ln.Addr().String(), ProtocolBinding: a2a.TransportProtocolGRPC, ProtocolVersion: "1.0"},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	calls := []struct {
		name string
		do   func(context.Context, *a2aclient.Client)
	}{
		{"SendMessage", func(ctx context.Context, c *a2aclient.Client) {
			_, _ = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("hi"))})
		}},
		{"SendStreamingMessage", func(ctx context.Context, c *a2aclient.Client) {
			for range c.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("hi"))}) {
			}
		}},
		{"GetTask", func(ctx context.Context, c *a2aclient.Client) {
			h := 2
			_, _ = c.GetTask(ctx, &a2a.GetTaskRequest{ID: "task 1", HistoryLength: &h})
		}},
		{"GetTask with a tenant", func(ctx context.Context, c *a2aclient.Client) {
			_, _ = c.GetTask(ctx, &a2a.GetTaskRequest{ID: "t2", Tenant: "req-tenant"})
		}},
		{"ListTasks with the context's tenant", func(ctx context.Context, c *a2aclient.Client) {
			_, _ = c.ListTasks(a2a.AttachTenant(ctx, "ctx-tenant"), &a2a.ListTasksRequest{PageSize: 3})
		}},
		{"CancelTask", func(ctx context.Context, c *a2aclient.Client) {
			_, _ = c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: "t3"})
		}},
		{"SubscribeToTask", func(ctx context.Context, c *a2aclient.Client) {
			for range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: "t4"}) {
			}
		}},
		{"CreateTaskPushConfig", func(ctx context.Context, c *a2aclient.Client) {
			_, _ = c.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: "t5", URL: "https://hook.example/x"})
		}},
		{"GetTaskPushConfig", func(ctx context.Context, c *a2aclient.Client) {
			_, _ = c.GetTaskPushConfig(ctx, &a2a.GetTaskPushConfigRequest{TaskID: "t6", ID: "c1"})
		}},
		{"ListTaskPushConfigs", func(ctx context.Context, c *a2aclient.Client) {
			_, _ = c.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: "t7"})
		}},
		{"DeleteTaskPushConfig", func(ctx context.Context, c *a2aclient.Client) {
			_ = c.DeleteTaskPushConfig(ctx, &a2a.DeleteTaskPushConfigRequest{TaskID: "t8", ID: "c2"})
		}},
	}
	for _, b := range []struct {
		name string
		url  string
	}{
		{"jsonrpc", srv.URL + "/a2a"},
		{"rest", srv.URL + "/rest"},
		{"rest with the interface's tenant", srv.URL + "/tenanted"},
		{"grpc", ln.Addr().String()},
	} {
		t.Run(b.name, func(t *testing.T) {
			var ep *a2a.AgentInterface
			for _, f := range card.SupportedInterfaces {
				if f.URL == b.url {
					ep = f
				}
			}
			c, err := a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{ep},
				ClientOption(s), a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(insecure.NewCredentials())))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Destroy()
			if err := c.UpdateCard(card); err != nil {
				t.Fatal(err)
			}
			for _, call := range calls {
				call.do(ctx, c)
				check(t, s, b.name+" "+call.name, rec.take())
			}
		})
	}
}

// Over A2A 0.3 (a2a-go's a2av0 compat REST transport) the proofs name
// the 0.3 routes: /v1 paths, no tenant, GET to subscribe, /v1/card.
func TestProofsMatchThe03RESTRoutes(t *testing.T) {
	s := signer(t)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(seen{method: r.Method, url: dpop.RequestURL(r, ""), auth: r.Header.Get("Authorization"), proof: r.Header.Get(dpop.Header)})
		http.Error(w, `{"error":"no"}`, http.StatusTeapot)
	}))
	defer srv.Close()
	ctx := context.Background()
	iface := &a2a.AgentInterface{URL: srv.URL + "/rest", ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: a2av0.Version}
	card := &a2a.AgentCard{Name: "x", Capabilities: a2a.AgentCapabilities{Streaming: true, ExtendedAgentCard: true},
		SupportedInterfaces: []*a2a.AgentInterface{iface}}
	f := a2aclient.NewFactory(a2aclient.WithDefaultsDisabled(), ClientOption(s),
		a2aclient.WithCompatTransport(a2av0.Version, a2a.TransportProtocolHTTPJSON, a2av0.NewRESTTransportFactory(a2av0.RESTTransportConfig{})))
	c, err := f.CreateFromCard(ctx, card)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	want := []string{"POST /rest/v1/message:send", "GET /rest/v1/tasks/t1", "POST /rest/v1/tasks/t2:cancel",
		"GET /rest/v1/tasks/t3:subscribe", "GET /rest/v1/card"}
	calls := []func(){
		func() {
			_, _ = c.SendMessage(ctx, &a2a.SendMessageRequest{Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("hi")), Tenant: "ignored"})
		},
		func() { _, _ = c.GetTask(ctx, &a2a.GetTaskRequest{ID: "t1"}) },
		func() { _, _ = c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: "t2"}) },
		func() {
			for range c.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: "t3"}) {
			}
		},
		func() { _, _ = c.GetExtendedAgentCard(ctx, &a2a.GetExtendedAgentCardRequest{}) },
	}
	for i, call := range calls {
		call()
		got := rec.take()
		check(t, s, want[i], got)
		if g := got[0].method + " " + strings.TrimPrefix(got[0].url, srv.URL); g != want[i] {
			t.Fatalf("request %s, want %s", g, want[i])
		}
	}
}

// A call whose binding the interceptor cannot tell is failed, not sent
// unsigned; WithBinding tells it.
func TestUnknownBindingFailsTheCall(t *testing.T) {
	s := signer(t)
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	ctx := context.Background()
	ep := []*a2a.AgentInterface{{URL: srv.URL, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: "1.0"}}
	c, err := a2aclient.NewFromEndpoints(ctx, ep, ClientOption(s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "x"}); err == nil || !strings.Contains(err.Error(), "WithBinding") || hits != 0 {
		t.Fatalf("no card: %v, %d requests", err, hits)
	}
	c, err = a2aclient.NewFromEndpoints(ctx, ep, ClientOption(s, WithBinding(a2a.TransportProtocolJSONRPC)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.GetTask(ctx, &a2a.GetTaskRequest{ID: "x"})
	if hits != 1 {
		t.Fatalf("WithBinding: %d requests", hits)
	}
}

// HTTPClient signs the request it carries, replacing whatever the
// interceptor (or anything else) set.
func TestHTTPClientSignsTheRequestSent(t *testing.T) {
	s := signer(t)
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(seen{method: r.Method, url: dpop.RequestURL(r, ""), auth: r.Header.Get("Authorization"), proof: r.Header.Get(dpop.Header)})
	}))
	defer srv.Close()
	hc := HTTPClient(s, &http.Client{Timeout: time.Minute})
	if hc.Timeout != time.Minute {
		t.Fatal("the base client's settings were lost")
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/a/b%2Fc?q=1", nil)
	req.Header.Set("Authorization", "Bearer other")
	req.Header.Set("X-Chio-Capability", "other")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	check(t, s, "HTTPClient", rec.take())
}
