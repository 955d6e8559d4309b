package worker

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/edgetest"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// renamed is the hello server under another id, with its manifest's
// policy fields chosen by the test.
type renamed struct {
	*hello.Server
	id      string
	mutate  func(*schemas.ToolManifest)
	toolIDs []string
}

func (s *renamed) ServerID() string { return s.id }

func (s *renamed) ToolNames() []string {
	if s.toolIDs != nil {
		return s.toolIDs
	}
	return s.Server.ToolNames()
}

func (s *renamed) Manifest() *schemas.ToolManifest {
	m := s.Server.Manifest()
	m.ServerID = s.id
	if s.mutate != nil {
		s.mutate(m)
	}
	return m
}

// TestDiscoverTrustAndConflicts: an edge registers only servers whose
// manifest its pinned key signed, and a bad worker (another key, an id
// the edge already holds with other tools) is skipped without keeping the
// good ones out.
func TestDiscoverTrustAndConflicts(t *testing.T) {
	described := func(m *schemas.ToolManifest) { m.Description = "rogue" }
	otherTool := func(m *schemas.ToolManifest) { m.Tools[0].Name = "other_tool" }
	cases := []struct {
		name  string
		rogue func(t *testing.T, ns *natsembed.Server)
		held  tools.Server // registered on the edge before discovery
		want  []string     // server ids registered by discovery
	}{
		{
			name: "rogue key claims a server id",
			rogue: func(t *testing.T, ns *natsembed.Server) {
				startWorkerKey(t, ns, rogueKey(), &renamed{Server: hello.New(), id: "payments", mutate: described})
			},
			want: []string{hello.ServerID},
		},
		{
			name: "rogue key serves the legitimate id",
			rogue: func(t *testing.T, ns *natsembed.Server) {
				startWorkerKey(t, ns, rogueKey(), &renamed{Server: hello.New(), id: "shadow"})
			},
			want: []string{hello.ServerID},
		},
		{
			name: "id held with other tools",
			rogue: func(t *testing.T, ns *natsembed.Server) {
				startWorkerKey(t, ns, workerKey(), &renamed{Server: hello.New(), id: "held", mutate: otherTool, toolIDs: []string{"other_tool"}})
			},
			held: &renamed{Server: hello.New(), id: "held"},
			want: []string{hello.ServerID},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, _, _ := natstest.Start(t)
			tc.rogue(t, ns)
			startWorker(t, ns, hello.New())
			nc, _ := natstest.Connect(t, ns)
			reg := tools.NewRegistry()
			if tc.held != nil {
				if err := reg.Register(tc.held); err != nil {
					t.Fatal(err)
				}
			}
			added, _, err := Register(context.Background(), nc, reg, WithLogger(quiet()), trusted())
			if err != nil {
				t.Fatalf("register: %v", err)
			}
			var got []string
			for _, r := range added {
				got = append(got, r.ServerID())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("registered %v, want %v", got, tc.want)
			}
			if _, ok := reg.Tool("payments", hello.ToolName); ok {
				t.Fatal("a rogue worker's server is registered")
			}
		})
	}
}

// TestDiscoverNeedsKey: without a pinned key nothing is trusted.
func TestDiscoverNeedsKey(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	startWorker(t, ns, hello.New())
	nc, _ := natstest.Connect(t, ns)
	if _, err := Discover(context.Background(), nc, WithLogger(quiet())); err == nil {
		t.Fatal("discovery without a worker key succeeded")
	}
	if _, err := Serve(nc, []tools.Server{hello.New()}, WithWorkerLogger(quiet())); err == nil {
		t.Fatal("a worker without a manifest key started")
	}
}

// startWorkerKey serves servers signed with key on a connection of its own.
func startWorkerKey(t *testing.T, ns *natsembed.Server, key ed25519.PrivateKey, servers ...tools.Server) {
	t.Helper()
	nc, _ := natstest.Connect(t, ns)
	w, err := Serve(nc, servers, WithWorkerLogger(quiet()), WithManifestKey(key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
}

// TestOnlyCertifiedEdgesCallWorkers: a worker with edge trust runs a call
// only if a certified edge signed it, within the freshness window, naming
// its decision's receipt id, and only once. A plain request on the invoke
// subject (what any client allowed to publish there could send), a call
// signed under a stranger issuer's or a revoked credential, a stale or
// replayed one are all refused unrun.
func TestOnlyCertifiedEdgesCallWorkers(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	_, issuer, _ := ed25519.GenerateKey(rand.Reader)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	genuine := edgetest.Certified(t, issuer, "e1")
	revoked := edgetest.Certified(t, issuer, "e2")
	foreign := edgetest.Certified(t, stranger, "e3")
	trust := schemas.NewEdgeVerifier([]string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))},
		func(id string) (uint64, bool) { return 0, id == revoked.Credential().ID })
	wnc, _ := natstest.Connect(t, ns)
	w, err := Serve(wnc, []tools.Server{hello.New()}, WithWorkerLogger(quiet()), WithManifestKey(workerKey()), WithEdgeTrust(trust))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	nc, _ := natstest.Connect(t, ns)
	ctx := context.Background()
	remote := func(opts ...Option) *Remote {
		t.Helper()
		rs, err := Discover(ctx, nc, append([]Option{WithLogger(quiet()), trusted()}, opts...)...)
		if err != nil || len(rs) != 1 {
			t.Fatalf("discover: %v, %d servers", err, len(rs))
		}
		return rs[0]
	}
	call := func(id string, g *tools.Governance) tools.Invocation {
		return tools.Invocation{ID: id, ServerID: hello.ServerID, ToolName: hello.ToolName, Arguments: json.RawMessage(`{"text":"world"}`), Governance: g}
	}
	decided := func(id string) *tools.Governance { return &tools.Governance{RequestID: id, ReceiptID: "rcpt-" + id} }

	if out, err := remote(WithEdgeSigner(genuine)).Invoke(ctx, call("ok-1", decided("ok-1"))); err != nil || !strings.Contains(string(out), "hello") {
		t.Fatalf("a certified edge's call: %s, %v", out, err)
	}
	for _, tc := range []struct {
		name string
		r    *Remote
		g    *tools.Governance
		want string
	}{
		{"unsigned", remote(), decided("u"), "no edge signature"},
		{"stranger issuer", remote(WithEdgeSigner(foreign)), decided("f"), "not issued by a trusted issuer"},
		{"revoked credential", remote(WithEdgeSigner(revoked)), decided("r"), "revoked"},
		{"no decision named", remote(WithEdgeSigner(genuine)), &tools.Governance{RequestID: "n"}, "no decision's receipt id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.r.Invoke(ctx, call(tc.name, tc.g))
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want a refusal saying %q", err, tc.want)
			}
		})
	}

	// Signed requests sent by hand: a replay of one, and a stale one.
	subj := subject(hello.ServerID, roleInvoke)
	body, _ := json.Marshal(request{ID: "rp", ServerID: hello.ServerID, Tool: hello.ToolName, Arguments: json.RawMessage(`{}`),
		ManifestSHA256: remote().ManifestSHA256(), Governance: &governance{ReceiptID: "rcpt-rp"}})
	send := func(h nats.Header) nats.Header {
		t.Helper()
		msg, err := nc.RequestMsg(&nats.Msg{Subject: subj, Data: body, Header: h}, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return msg.Header
	}
	signed := genuine.SignToolCall(subj, body, time.Now())
	if h := send(signed); h.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("a signed call sent by hand: %v", h)
	}
	if h := send(signed); h.Get(micro.ErrorCodeHeader) != codeUnauthenticated || !strings.Contains(h.Get(micro.ErrorHeader), "sent before") {
		t.Fatalf("the same signed call again: %v", h)
	}
	body = []byte(strings.Replace(string(body), `"rp"`, `"st"`, 1))
	if h := send(genuine.SignToolCall(subj, body, time.Now().Add(-2*DefaultFreshness))); h.Get(micro.ErrorCodeHeader) != codeUnauthenticated ||
		!strings.Contains(h.Get(micro.ErrorHeader), "freshness") {
		t.Fatalf("a stale call: %v", h)
	}
	if got := w.Served(); got != 2 {
		t.Fatalf("the worker ran %d calls, want the 2 a certified edge sent once", got)
	}
	if got := w.Unauthenticated(); got != 6 {
		t.Fatalf("refused %d calls as unauthenticated, want 6", got)
	}
}

// TestForgedAnswersAreRefused: an edge takes an answer only if the
// pinned worker key signed it for that very request. A client that took
// the call (it joined the queue group with a worker's NATS credential)
// and answers unsigned, under another key, or with a genuine signature
// made for another request, gives no result: the call's outcome is
// unknown, never the forged output.
func TestForgedAnswersAreRefused(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	nc, _ := natstest.Connect(t, ns)
	rnc, _ := natstest.Connect(t, ns)
	r, err := NewRemote(nc, hello.New().Manifest(), WithLogger(quiet()), trusted(), WithCallTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	subj := subject(hello.ServerID, roleInvoke)
	forged := []byte(`{"output":{"text":"transfer approved"}}`)
	sign := func(key ed25519.PrivateKey, request []byte, code, text string, body []byte) nats.Header {
		sig := ed25519.Sign(key, answerSigningInput(subj, request, code, text, body))
		return nats.Header{HeaderWorkerSignature: {base64.RawURLEncoding.EncodeToString(sig)}}
	}
	for _, tc := range []struct {
		name   string
		answer func(req *nats.Msg) *nats.Msg
	}{
		{"unsigned result", func(*nats.Msg) *nats.Msg { return &nats.Msg{Data: forged} }},
		{"unsigned refusal", func(*nats.Msg) *nats.Msg {
			return &nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: {codeStopping}, micro.ErrorHeader: {"did not run"}}}
		}},
		{"another key", func(req *nats.Msg) *nats.Msg {
			return &nats.Msg{Data: forged, Header: sign(rogueKey(), req.Data, "", "", forged)}
		}},
		{"the worker's signature for another request", func(*nats.Msg) *nats.Msg {
			return &nats.Msg{Data: forged, Header: sign(workerKey(), []byte(`{"id":"other"}`), "", "", forged)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := rnc.Subscribe(subj, func(m *nats.Msg) {
				a := tc.answer(m)
				a.Subject = m.Reply
				_ = rnc.PublishMsg(a)
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := rnc.Flush(); err != nil {
				t.Fatal(err)
			}
			out, err := r.Invoke(context.Background(), tools.Invocation{ID: tc.name, ToolName: hello.ToolName, Arguments: json.RawMessage(`{}`)})
			if !errors.Is(err, ErrForgedAnswer) || !errors.Is(err, tools.ErrOutcomeUnknown) || out != nil {
				t.Fatalf("%s, %v: want no output and an unknown outcome", out, err)
			}
		})
	}
}
