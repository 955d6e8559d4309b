package a2aadapter

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"iter"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"github.com/a2aproject/a2a-go/v2/a2asrv/push"
	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/tools"
)

// The test partner is a real a2a-go agent (a2asrv handlers on httptest)
// with three skills whose behaviour the adapter's selector picks: "echo"
// completes at once, "slow" stays working until released (for follow-ups),
// "stream" streams status and artifact updates.

// seenCall is what the partner's executor saw of one message.
type seenCall struct {
	skill       string
	requestMeta map[string]any
	messageMeta map[string]any
	parts       []*a2a.Part
	tenant      string
}

// agent is the partner's executor.
type agent struct {
	mu   sync.Mutex
	seen []seenCall
	// release lets one waiting "slow" task finish; stop ends them all.
	release chan struct{}
	stop    chan struct{}
}

func newAgent(t *testing.T) *agent {
	ag := &agent{release: make(chan struct{}, 8), stop: make(chan struct{})}
	t.Cleanup(func() { close(ag.stop) })
	return ag
}

func (ag *agent) calls() []seenCall {
	ag.mu.Lock()
	defer ag.mu.Unlock()
	return append([]seenCall(nil), ag.seen...)
}

func (ag *agent) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		c, _ := ec.Metadata["chio"].(map[string]any)
		skill, _ := c["targetSkillId"].(string)
		ag.mu.Lock()
		ag.seen = append(ag.seen, seenCall{skill: skill, requestMeta: ec.Metadata, messageMeta: ec.Message.Metadata,
			parts: ec.Message.Parts, tenant: ec.Tenant})
		ag.mu.Unlock()
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		echo := "data"
		if len(ec.Message.Parts) > 0 && ec.Message.Parts[0].Text() != "" {
			echo = ec.Message.Parts[0].Text()
		}
		switch skill {
		case "slow":
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
				return
			}
			select {
			case <-ag.release:
			case <-ctx.Done():
				return
			case <-ag.stop:
				return
			}
		case "stream":
			if !yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateWorking, nil), nil) {
				return
			}
			first := a2a.NewArtifactEvent(ec, a2a.NewTextPart("part-1 "))
			if !yield(first, nil) {
				return
			}
			next := a2a.NewArtifactUpdateEvent(ec, first.Artifact.ID, a2a.NewTextPart("part-2"))
			next.LastChunk = true
			if !yield(next, nil) {
				return
			}
			yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
			return
		}
		if !yield(a2a.NewArtifactEvent(ec, a2a.NewTextPart(echo)), nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, nil), nil)
	}
}

func (ag *agent) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// pushSink accepts push notifications without sending them anywhere.
type pushSink struct{}

func (pushSink) SendPush(context.Context, *a2a.PushConfig, a2a.Event) error { return nil }

// partnerOpts shapes a test partner.
type partnerOpts struct {
	// bindings are the interfaces the card lists, in order (default
	// JSON-RPC alone).
	bindings []a2a.TransportProtocol
	// legacy serves A2A 0.3 handlers and a 0.3 card (noHistory: without
	// capabilities.stateTransitionHistory).
	legacy, noHistory bool
	// dual serves a 1.0 + 0.3 card (a2a-go's compat producer) listing
	// JSON-RPC in both versions.
	dual bool
	tls  bool
	// bearer, when set, is required on every call; unless schemes are
	// given the card declares scheme "bearer" and requires it.
	bearer       string
	schemes      a2a.NamedSecuritySchemes
	requirements a2a.SecurityRequirementsOptions
	tenant       string
	skills       []a2a.AgentSkill
	// extra interfaces are listed first, before the partner's own.
	extra []*a2a.AgentInterface
	// noPush and noStreaming withdraw those capabilities.
	noPush, noStreaming bool
	// enforce, when set, is the partner's authentication of each A2A call
	// (the card fetch is public): an error answers 401.
	enforce func(*http.Request) error
	// serverTLS, when set, serves TLS with this configuration (its own
	// certificate, client certificate checks) instead of httptest's.
	serverTLS *tls.Config
	// answer, when set, answers every A2A call instead of the agent (a
	// partner that misbehaves on the wire).
	answer http.HandlerFunc
	// rewrite, when set, rewrites the agent's whole answer to each A2A
	// call (a JSON body, or an SSE stream) before it is sent.
	rewrite func([]byte) []byte
	// rewriteFor is rewrite given the request too.
	rewriteFor func(*http.Request, []byte) []byte
}

// partner is a running test partner.
type partner struct {
	srv      *httptest.Server
	agent    *agent
	requests atomic.Int64 // A2A calls (the card fetch not counted)
	cardHits atomic.Int64
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func defaultSkills() []a2a.AgentSkill {
	return []a2a.AgentSkill{
		{ID: "echo", Name: "Echo", Description: "Echoes the text", Tags: []string{"test"}},
		{ID: "slow", Name: "Slow", Description: "Works until released", Tags: []string{"test"}},
		{ID: "stream", Name: "Stream", Description: "Streams its work", Tags: []string{"test"}},
	}
}

func startPartner(t *testing.T, o partnerOpts) *partner {
	t.Helper()
	if len(o.bindings) == 0 {
		o.bindings = []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC}
	}
	if o.skills == nil {
		o.skills = defaultSkills()
	}
	caps := a2a.AgentCapabilities{Streaming: !o.noStreaming, PushNotifications: !o.noPush}
	p := &partner{agent: newAgent(t)}
	h := a2asrv.NewHandler(p.agent, a2asrv.WithCapabilityChecks(&caps),
		a2asrv.WithPushNotifications(push.NewInMemoryStore(), pushSink{}))
	var jsonrpc, rest http.Handler
	if o.legacy {
		jsonrpc, rest = a2av0.NewJSONRPCHandler(h), a2av0.NewRESTHandler(h)
	} else {
		jsonrpc, rest = a2asrv.NewJSONRPCHandler(h), a2asrv.NewRESTHandler(h)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/agent-card.json", func(w http.ResponseWriter, r *http.Request) {
		p.cardHits.Add(1)
		raw, err := p.card(o, caps)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(raw)
	})
	mux.Handle("/jsonrpc", jsonrpc)
	mux.Handle("/rest/", http.StripPrefix("/rest", rest))
	mux.Handle("/jsonrpc03", a2av0.NewJSONRPCHandler(h))
	calls := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/.well-known/") {
			p.requests.Add(1)
			if o.bearer != "" && r.Header.Get("Authorization") != "Bearer "+o.bearer {
				http.Error(w, "unauthenticated", http.StatusUnauthorized)
				return
			}
			if o.enforce != nil {
				if err := o.enforce(r); err != nil {
					http.Error(w, "unauthenticated", http.StatusUnauthorized)
					return
				}
			}
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/.well-known/"):
		case o.answer != nil:
			o.answer(w, r)
			return
		case o.rewrite != nil || o.rewriteFor != nil:
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.Header().Del("Content-Length")
			w.WriteHeader(rec.Code)
			if o.rewrite != nil {
				w.Write(o.rewrite(rec.Body.Bytes()))
			} else {
				w.Write(o.rewriteFor(r, rec.Body.Bytes()))
			}
			return
		}
		mux.ServeHTTP(w, r)
	})
	switch {
	case o.serverTLS != nil:
		p.srv = httptest.NewUnstartedServer(calls)
		p.srv.TLS = o.serverTLS
		// Refused handshakes are expected in the mTLS tests; keep them quiet.
		p.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		p.srv.StartTLS()
	case o.tls:
		p.srv = httptest.NewTLSServer(calls)
	default:
		p.srv = httptest.NewServer(calls)
	}
	t.Cleanup(p.srv.Close)
	return p
}

// card is the partner's card: 1.0 (a2a-go's type as JSON), or a 0.3 card
// written as 0.3 JSON.
func (p *partner) card(o partnerOpts, caps a2a.AgentCapabilities) ([]byte, error) {
	base := p.srv.URL
	urlOf := func(b a2a.TransportProtocol) string {
		if b == a2a.TransportProtocolHTTPJSON {
			return base + "/rest"
		}
		return base + "/jsonrpc"
	}
	if o.bearer != "" && o.schemes == nil {
		o.schemes = a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"}}
		o.requirements = a2a.SecurityRequirementsOptions{{"bearer": {}}}
	}
	if o.legacy {
		skills := make([]map[string]any, len(o.skills))
		for i, s := range o.skills {
			skills[i] = map[string]any{"id": s.ID, "name": s.Name, "description": s.Description, "tags": s.Tags}
		}
		var extra []map[string]any
		for _, b := range o.bindings[1:] {
			extra = append(extra, map[string]any{"url": urlOf(b), "transport": string(b)})
		}
		c := map[string]any{
			"name": "Legacy partner", "description": "an A2A 0.3 agent", "version": "0.3.1",
			"protocolVersion": "0.3.0", "url": urlOf(o.bindings[0]), "preferredTransport": string(o.bindings[0]),
			"additionalInterfaces": extra,
			"capabilities":         map[string]any{"streaming": caps.Streaming, "pushNotifications": caps.PushNotifications, "stateTransitionHistory": !o.noHistory},
			"defaultInputModes":    []string{"text/plain"}, "defaultOutputModes": []string{"text/plain"},
			"skills": skills,
		}
		if o.bearer != "" {
			c["securitySchemes"] = map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}
			c["security"] = []map[string][]string{{"bearer": {}}}
		}
		return json.Marshal(c)
	}
	card := &a2a.AgentCard{Name: "Partner", Description: "an A2A 1.0 agent", Version: "1.2.3",
		Capabilities: caps, DefaultInputModes: []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
		Skills: o.skills, SecuritySchemes: o.schemes, SecurityRequirements: o.requirements,
		SupportedInterfaces: slices.Clone(o.extra)}
	for _, b := range o.bindings {
		card.SupportedInterfaces = append(card.SupportedInterfaces,
			&a2a.AgentInterface{URL: urlOf(b), ProtocolBinding: b, ProtocolVersion: a2a.Version, Tenant: o.tenant})
	}
	if o.dual {
		card.SupportedInterfaces = append(card.SupportedInterfaces,
			&a2a.AgentInterface{URL: base + "/jsonrpc03", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2av0.Version})
		return a2av0.NewStaticAgentCardProducer(card).(a2asrv.AgentCardJSONProducer).CardJSON(context.Background())
	}
	return json.Marshal(card)
}

// bearerAuthorizer satisfies scheme "bearer" with token, over p's client.
func bearerAuthorizer(p *partner, token string) Authorizer {
	return func(_ context.Context, card *a2a.AgentCard) (*http.Client, []string, error) {
		return &http.Client{Transport: bearerTransport{token: token, next: p.srv.Client().Transport}}, []string{"bearer"}, nil
	}
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// discover runs Discover against p, failing the test on error.
func discover(t *testing.T, p *partner, cfg Config) *Adapter {
	t.Helper()
	cfg.Target = p.srv.URL
	if cfg.Discovery == nil {
		cfg.Discovery = p.srv.Client()
	}
	if cfg.Log == nil {
		cfg.Log = quiet()
	}
	a, err := Discover(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return a
}

// call is an invocation of tool with args (JSON), with a fresh id.
func call(a *Adapter, tool, args string) tools.Invocation {
	return tools.Invocation{ID: uuid.NewString(), ServerID: a.ServerID(),
		ToolName: tool, Arguments: json.RawMessage(args)}
}

// invoke runs Invoke and decodes its result, failing the test on error.
func invoke(t *testing.T, a *Adapter, tool, args string) map[string]json.RawMessage {
	t.Helper()
	out, err := a.Invoke(t.Context(), call(a, tool, args))
	if err != nil {
		t.Fatalf("Invoke %s %s: %v", tool, args, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("Invoke %s: result %s: %v", tool, out, err)
	}
	return m
}

// streamChunks runs InvokeStream and returns its chunks.
func streamChunks(t *testing.T, a *Adapter, tool, args string) ([]tools.Chunk, error) {
	t.Helper()
	var chunks []tools.Chunk
	err := a.InvokeStream(t.Context(), call(a, tool, args), func(c tools.Chunk) error {
		chunks = append(chunks, c)
		return nil
	})
	return chunks, err
}

// taskOf decodes a {"task":…} result.
func taskOf(t *testing.T, m map[string]json.RawMessage) *a2a.Task {
	t.Helper()
	var task a2a.Task
	if err := json.Unmarshal(m["task"], &task); err != nil || task.ID == "" {
		t.Fatalf("result has no task: %v (%s)", err, m["task"])
	}
	return &task
}

// eventKinds are the StreamResponse members of chunks, in order.
func eventKinds(t *testing.T, chunks []tools.Chunk) []string {
	t.Helper()
	var kinds []string
	for _, c := range chunks {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(c.Data, &m); err != nil || len(m) != 1 {
			t.Fatalf("chunk %s is not one StreamResponse member", c.Data)
		}
		for k := range m {
			kinds = append(kinds, k)
		}
	}
	return kinds
}
