// Package a2a is Chio's A2A edge: it serves kernel-governed tools as A2A
// skills over JSON-RPC (A2A 1.0 and 0.3) on HTTP and on stdio (the
// hello-a2a profile), and over gRPC. A caller presents its capability as
// a bearer token, or bound to its holder (schemas/dpop): over HTTP as
// "Authorization: DPoP" with an RFC 9449 proof in the DPoP header, over
// gRPC the same in metadata (its htu at the advertised gRPC interface,
// Config.GRPCURL), on stdio as a chio.dpop_proof.v1 in the call's metadata
// naming the tool call the call runs or, for one that runs none, the call
// itself (ServeStdio, StdioOperation); a capability that can delegate is
// honoured only so. A proof that cannot be checked because the replay
// state is out of reach is answered as a server condition to retry (HTTP
// 503 with Retry-After, gRPC UNAVAILABLE), not as the client's fault. Every call goes through edges/dispatch (kernel,
// durable decision event, tool, durable outcome event); tasks live as event
// streams in JetStream (edges/a2a/taskstore), so the edge keeps no state
// another replica would need.
package a2a

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Config configures an edge.
type Config struct {
	AgentName        string
	AgentDescription string
	AgentVersion     string
	// Exposure selects which tools remote agents see (protocol "a2a").
	Exposure tools.Exposure
	// OpenIDProviders are the issuers of the identity providers whose
	// access tokens the kernel takes: the card declares each as an
	// OpenID Connect scheme.
	OpenIDProviders []string
	// DevToken is the capability used for callers that present none (the
	// dev mode of `chio up` and the stdio profile). Empty means such
	// callers are refused with an authentication error.
	DevToken string
	// EdgeID names this replica in claims and events.
	EdgeID string
	// ClaimLease bounds how long a replica holds a deferred task.
	ClaimLease time.Duration
	// AwaitReceipt, when positive, makes a finished call wait (at most this
	// long) until the ledger has integrated its receipt, and embeds the
	// signed receipt and its leaf index in metadata.chio.
	AwaitReceipt time.Duration
	// Push enables push notifications; nil turns them off.
	Push *Push
	// DefaultSkill runs when a message names no skill (else the only
	// skill, if there is exactly one).
	DefaultSkill string
	// KeepAlive is how long a stream may be idle before the edge sends a
	// keep-alive comment (default 15s).
	KeepAlive time.Duration
	// JetStream is needed with AwaitReceipt, to read CHIO_RECEIPTS.
	JetStream jetstream.JetStream
	Logger    *slog.Logger
	// Metrics, if set, registers the edge's Prometheus series
	// (chio_edge_calls_total).
	Metrics prometheus.Registerer
	// TracerProvider traces the gRPC binding (GRPCTracing); the HTTP
	// bindings are traced by their server, the calls by the dispatcher
	// and the kernel. Nil: off.
	TracerProvider trace.TracerProvider
	// PublicURL is the edge's own HTTP origin: the only one (with those
	// AddOrigin adds) whose cards are signed, and the origin of cards built
	// outside an HTTP request (the extended card asked for over gRPC).
	PublicURL string
	// GRPCURL, if set, is the host:port of the gRPC binding (RegisterGRPC)
	// advertised in the card; a port alone (":8081") takes the host of the
	// card's base URL, for an edge that does not know its public name.
	GRPCURL string
	// CardKey, if set, signs the agent card served over HTTP (A2A
	// AgentCard.signatures: a JWS by this Ed25519 key, its kid the key's
	// JWK thumbprint, its jku the edge's /.well-known/jwks.json, which
	// serves the public key). Replicas sharing the key serve the same
	// signed bytes. Nil serves the card unsigned.
	CardKey ed25519.PrivateKey
	// CardModified is the card's Last-Modified (to the second); zero means
	// the time the edge first serves a card.
	CardModified time.Time
	// CardDialect is the card /.well-known/agent-card.json gives a request
	// that names no A2A-Version: wire.V10 (empty means it) or wire.V03, the
	// 0.3-compatible card, for deployments whose 0.3 clients cannot send
	// A2A-Version: 0.3 (that card fails the 1.0 schema check).
	CardDialect wire.Version
	// MaxStreamsPerCaller bounds the streams one caller holds open at once
	// on this replica (0: DefaultMaxStreamsPerCaller); one more is refused
	// with ResourceExhausted (HTTP 429, gRPC RESOURCE_EXHAUSTED).
	MaxStreamsPerCaller int
}

// Edge serves A2A. It is safe for concurrent use.
type Edge struct {
	cfg      Config
	kernel   *kernel.Kernel
	registry *tools.Registry
	dispatch *dispatch.Dispatcher
	tasks    *taskstore.Store
	hub      *hub
	log      *slog.Logger
	// published are the exposed, publishable tools, computed once: the
	// registry is complete when the edge is built, and reading every
	// tool's hints again on each send would be wasted work.
	published []skill
	metrics   *edgeMetrics
	// cards caches the signed card bytes served per origin (card.go).
	cards cardCache
	// streams counts the streams each caller holds open (streamcap.go).
	streams *streamSlots

	// Shutdown (Drain): the calls running here, a channel closed when the
	// drain begins, and a context cancelled when it runs out of time.
	inflight  inflight
	executing executing
	draining  chan struct{}
	drainOnce sync.Once
	aborted   context.Context
	abort     context.CancelFunc
}

// New builds an edge over a kernel (built with kernel.WithRegistry(reg)),
// its dispatcher and the task store. The registry must be complete: the
// skills it publishes are fixed here.
func New(cfg Config, k *kernel.Kernel, reg *tools.Registry, d *dispatch.Dispatcher, tasks *taskstore.Store) *Edge {
	if cfg.AgentName == "" {
		cfg.AgentName = "chio-a2a-edge"
	}
	if cfg.AgentDescription == "" {
		cfg.AgentDescription = "Chio-governed tools exposed as A2A skills"
	}
	if cfg.AgentVersion == "" {
		cfg.AgentVersion = "0.1.0"
	}
	if cfg.Exposure.Protocol == "" {
		cfg.Exposure.Protocol = "a2a"
	}
	if cfg.ClaimLease == 0 {
		cfg.ClaimLease = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	e := &Edge{cfg: cfg, kernel: k, registry: reg, dispatch: d, tasks: tasks, hub: newHub(tasks), log: cfg.Logger,
		metrics: newEdgeMetrics(cfg.Metrics), draining: make(chan struct{}), streams: newStreamSlots(cfg.MaxStreamsPerCaller)}
	e.aborted, e.abort = context.WithCancel(context.Background())
	e.published = e.publishable()
	return e
}

// AcceptedModes are the media types a message part may declare: tools take
// JSON arguments, built from text or data parts.
var acceptedModes = []string{"text/plain", "application/json"}

// publishable lists the exposed tools that A2A can carry, by name.
func (e *Edge) publishable() []skill {
	var out []skill
	for _, en := range e.registry.Exposed(e.cfg.Exposure) {
		f := tools.A2AFidelity(en.Tool, tools.A2AProfile{})
		if !f.Publishable() {
			continue
		}
		h, _ := tools.ReadHints(en.Tool) // read already by A2AFidelity, which refuses bad ones
		out = append(out, skill{entry: en, fidelity: f, hints: h, native: isNative(en)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].entry.Tool.Name < out[j].entry.Tool.Name })
	return out
}

type skill struct {
	entry    *tools.Entry
	fidelity tools.Fidelity
	hints    tools.Hints
	native   bool
}

// skillOf is what a send reads from en's definition (its fidelity, hints
// and whether it is A2A-native): from e.published when en is one of its
// entries, read when the edge was built, else read now. A registry never
// changes a definition it handed out (it replaces the entry), so the
// entry's identity says the facts still hold; reading them again on
// every send cost ~25 µs of JSON-schema walking per call.
func (e *Edge) skillOf(en *tools.Entry) skill {
	for _, s := range e.published {
		if s.entry == en {
			return s
		}
	}
	h, _ := tools.ReadHints(en.Tool)
	return skill{entry: en, fidelity: tools.A2AFidelity(en.Tool, tools.A2AProfile{}), hints: h, native: isNative(en)}
}

// Card is the agent card of the HTTP edge reachable at baseURL. It declares
// the capability's schemes (as a bearer token; bound to its holder by
// DPoP, which a capability that can delegate must use) and requires one
// only when the edge enforces it: with a DevToken, callers without a token
// act under the dev capability, so the card declares no security at all. Each skill's
// bridgeFidelity is rated for the HTTP edge, which streams (over gRPC too
// when GRPCURL is set).
func (e *Edge) Card(baseURL string) *wire.AgentCard {
	return e.card(baseURL, tools.A2AProfile{GRPC: e.cfg.GRPCURL != ""}, e.cfg.DevToken == "", nil)
}

// card builds a card; keep, if set, selects the skills it lists (the
// extended card lists those the caller's capability may invoke).
func (e *Edge) card(baseURL string, profile tools.A2AProfile, enforced bool, keep func(*tools.Entry) bool) *wire.AgentCard {
	c := &wire.AgentCard{
		Name: e.cfg.AgentName, Description: e.cfg.AgentDescription, Version: e.cfg.AgentVersion,
		SupportedInterfaces: e.interfaces(strings.TrimRight(baseURL, "/")),
		// The extended card is the view of an authenticated caller: offered
		// where authentication is enforced, like the security it declares.
		Capabilities: wire.AgentCapabilities{Streaming: true, PushNotifications: e.cfg.Push != nil, ExtendedAgentCard: enforced,
			Extensions: []wire.AgentExtension{wire.TaskGenerationExtension()}},
		DefaultInputModes: acceptedModes, DefaultOutputModes: acceptedModes,
		Skills: []wire.AgentSkill{},
	}
	if enforced {
		// Either scheme will do (requirements are alternatives): the token
		// as a bearer token, or bound to its holder by DPoP, which a token
		// that can delegate (or a dpop_required grant, or an edge run with
		// --require-dpop) must use.
		c.SecuritySchemes = map[string]wire.SecurityScheme{
			"chio_capability": wire.BearerScheme("chio.capability.v1",
				"A chio.capability.v1 token, base64url, as Authorization: Bearer or X-Chio-Capability. "+
					"A capability that can delegate, or whose grant has dpop_required, must come as chio_capability_dpop instead"),
			"chio_capability_dpop": {HTTPAuth: &wire.HTTPAuthSecurityScheme{Scheme: "DPoP", BearerFormat: "chio.capability.v1",
				Description: "A chio.capability.v1 token as Authorization: DPoP <token>, with a DPoP header holding an RFC 9449 proof " +
					"(alg EdDSA, jwk the token's subject key, htm and htu the request's method and URL, ath the token's hash, a new jti each request); " +
					"over gRPC the same in metadata authorization and dpop, htm POST and htu <http|https>://<host:port></package.Service/Method>, " +
					"host:port the gRPC interface's as this card lists it"}},
		}
		c.SecurityRequirements = []map[string][]string{{"chio_capability": {}}, {"chio_capability_dpop": {}}}
		for i, iss := range e.cfg.OpenIDProviders {
			name := fmt.Sprintf("oidc_%d", i)
			c.SecuritySchemes[name] = wire.SecurityScheme{OpenIDConnect: &wire.OpenIDConnectSecurityScheme{
				OpenIDConnectURL: strings.TrimSuffix(iss, "/") + "/.well-known/openid-configuration",
				Description: "An access token (JWT) of this OpenID provider, for this agent's audience, as Authorization: Bearer " +
					"(or Authorization: DPoP with an RFC 9449 proof, for a token bound by cnf.jkt); the edge's policy maps its claims to skills"}}
			c.SecurityRequirements = append(c.SecurityRequirements, map[string][]string{name: {}})
		}
	}
	for _, s := range e.published {
		if keep != nil && !keep(s.entry) {
			continue
		}
		t := s.entry.Tool
		f := tools.A2AFidelity(t, profile)
		c.Skills = append(c.Skills, wire.AgentSkill{
			ID: t.Name, Name: t.Name, Description: t.Description, Tags: []string{s.entry.Manifest.ServerID},
			InputModes: acceptedModes, OutputModes: acceptedModes,
			BridgeFidelity: &wire.BridgeFidelity{Kind: string(f.Kind), Caveats: f.Caveats, Reason: f.Reason},
		})
	}
	return c
}

// StdioBinding is the protocol binding of the hello-a2a stdio profile: one
// JSON-RPC request per line on stdin, one response per line on stdout.
const StdioBinding = "json-rpc-stdio"

// StdioCard is the card of the stdio profile (ServeStdio): its one
// interface is stdio://, it acts under the dev capability, so it declares
// no security, it has no push notifications, and its skills carry the
// stdio profile's caveats (deferred, collated stream output).
func (e *Edge) StdioCard() *wire.AgentCard {
	c := e.card("stdio:", tools.A2AProfile{Stdio: true}, false, nil)
	c.SupportedInterfaces = []wire.AgentInterface{{URL: "stdio://", ProtocolBinding: StdioBinding, ProtocolVersion: string(wire.V10)}}
	c.Capabilities.PushNotifications, c.Capabilities.ExtendedAgentCard = false, false
	return c
}

// interfaces are the bindings an edge at base serves, preferred first:
// JSON-RPC and HTTP+JSON in 1.0, gRPC (1.0 only) when configured, then
// JSON-RPC and HTTP+JSON in 0.3 (whose REST clients add the /v1 prefix
// themselves).
func (e *Edge) interfaces(base string) []wire.AgentInterface {
	rpc := wire.JSONRPCInterfaces(base + "/a2a")
	out := []wire.AgentInterface{rpc[0],
		{URL: base + RESTPath, ProtocolBinding: wire.BindingHTTPJSON, ProtocolVersion: string(wire.V10)}}
	if g := e.cfg.GRPCURL; g != "" {
		if strings.HasPrefix(g, ":") {
			if u, err := url.Parse(base); err == nil && u.Hostname() != "" {
				g = net.JoinHostPort(u.Hostname(), g[1:])
			}
		}
		out = append(out, wire.AgentInterface{URL: g, ProtocolBinding: wire.BindingGRPC, ProtocolVersion: string(wire.V10)})
	}
	return append(out, rpc[1],
		wire.AgentInterface{URL: base + RESTPath, ProtocolBinding: wire.BindingHTTPJSON, ProtocolVersion: string(wire.V03)})
}

// caller is who makes a request: the token presented (or the dev token),
// its proof of possession, and the tenant addressed.
type caller struct {
	token string
	// proof is the request's proof of possession of the token's subject
	// key (nil: presented as a bearer token). One *kernel.Proof is one
	// request: every kernel check and dispatch of the request shares it,
	// so its one-time id is claimed once.
	proof  *kernel.Proof
	tenant string
	// dev: the caller presented no credential and acts under the dev
	// capability; it is not authenticated (no extended card for it).
	dev bool
}

// callerFrom is the caller of a request whose credential was read as p
// (dpop.FromRequest, or gRPC metadata read the same way); err is that
// reading's failure. The dev capability acts only for a request that
// presents no credential at all (presents false): a malformed one is
// refused, never replaced.
func (e *Edge) callerFrom(p dpop.Presented, err error, presents bool) (caller, *wire.Error) {
	if err != nil {
		if !presents && e.cfg.DevToken != "" {
			return caller{token: e.cfg.DevToken, dev: true}, nil
		}
		return caller{}, wire.Unauthenticated(err.Error())
	}
	return caller{token: p.Token, proof: kernel.FromPresented(p)}, nil
}

// httpCaller reads an HTTP request's credential. The proof's htu is the
// request's URL at the edge's public origin (publicURL: configured, else
// the request's own, X-Forwarded-* from trusted proxies), the origin the
// card advertises; path is the request's path as the client sent it
// ("" for r's own).
func (e *Edge) httpCaller(r *http.Request, hc HTTPConfig, path string) (caller, *wire.Error) {
	origin := publicURL(r, hc)
	p, err := dpop.FromRequest(r, origin)
	if err == nil && path != "" {
		p.URL = strings.TrimSuffix(origin, "/") + path
	}
	return e.callerFrom(p, err, dpop.Presents(r.Header))
}

// identify authenticates the caller, with its proof, for a call that runs
// no tool next: the proof's one-time id is settled before it returns.
func (e *Edge) identify(ctx context.Context, c caller) (*kernel.Identity, *wire.Error) {
	id, d := e.kernel.Identify(ctx, c.token, c.proof)
	if d != nil {
		return nil, refusedCapability(d, "")
	}
	return id, nil
}

// refusedCapability is the Unauthenticated answer to a capability the
// kernel refused (d), naming its deny receipt if it has one. A refused
// proof of possession names its check under ErrorInfo metadata
// "dpopCheck", which the HTTP bindings answer with the DPoP challenge.
// A proof that could not be checked because the replay state is out of
// reach (dpop.CheckState) is no fault of the client: that answer is
// Unavailable (HTTP 503 with Retry-After, gRPC UNAVAILABLE, JSON-RPC
// -32603), to retry with a new proof.
func refusedCapability(d *kernel.Decision, receiptID string, meta ...string) *wire.Error {
	kv := append([]string{"receiptId", receiptID}, meta...)
	check := d.DPoPCheck()
	if check != "" {
		kv = append(kv, metaDPoPCheck, string(check))
	}
	if check == dpop.CheckState {
		return wire.Unavailable(fmt.Sprintf("the proof of possession could not be checked, retry with a new proof: %s", d.Reason), stateRetryAfter, kv...)
	}
	return wire.Unauthenticated(fmt.Sprintf("capability refused at %s: %s", d.Guard, d.Reason), kv...)
}

// stateRetryAfter is how long a client is asked to wait before it retries
// a call refused because the replay state was out of reach.
const stateRetryAfter = time.Second

// metaDPoPCheck is the ErrorInfo metadata key of a refused proof's check.
const metaDPoPCheck = "dpopCheck"

// dpopCheckOf is the proof check an Unauthenticated error names, or "".
func dpopCheckOf(werr *wire.Error) dpop.Check {
	if werr == nil || werr.Code != wire.CodeUnauthenticated {
		return ""
	}
	data, _ := werr.Data.([]any)
	for _, d := range data {
		if info, ok := d.(wire.ErrorInfo); ok {
			return dpop.Check(info.Metadata[metaDPoPCheck])
		}
	}
	return ""
}

// owner authenticates the caller for reads: tasks are scoped to the
// capability's authority path (root issuer and every subject down to the
// caller's) and the tenant.
func (e *Edge) owner(ctx context.Context, c caller, tenant string) (taskstore.Owner, *wire.Error) {
	id, werr := e.identify(ctx, c)
	if werr != nil {
		return taskstore.Owner{}, werr
	}
	return taskstore.Owner{Subject: id.Principal, Tenant: tenant}, nil
}

// resolveSkill picks the tool and its arguments for a message: forced
// (a follow-up goes to its task's skill), metadata.chio.targetSkillId, else the only skill, else a data part
// naming one, else a text part starting with one.
func (e *Edge) resolveSkill(p *wire.SendParams, forced string) (*tools.Entry, json.RawMessage, *wire.Error) {
	skills := e.published
	ids := make([]string, len(skills))
	for i, s := range skills {
		ids[i] = s.entry.Tool.Name
	}
	target := targetSkill(p.Metadata)
	if target == "" {
		target = targetSkill(p.Message.Metadata)
	}
	named, args, ok := wire.PartsToArguments(p.Message.Parts, ids)
	switch {
	case forced != "":
		target = forced
	case target != "":
	case ok:
		target = named
	case e.cfg.DefaultSkill != "":
		target = e.cfg.DefaultSkill
	case len(ids) == 1:
		target = ids[0]
	default:
		return nil, nil, wire.InvalidParams(fmt.Sprintf("no skill named: set metadata.chio.targetSkillId, or send a data part {\"skill\":…,\"arguments\":{…}} or a text part starting with the skill id; skills: %s", strings.Join(ids, ", ")))
	}
	en, err := e.registry.ResolveTool(e.cfg.Exposure, target)
	switch {
	case errors.Is(err, tools.ErrInternalTool):
		return nil, nil, wire.InvalidParams(fmt.Sprintf("skill %q is in an internal namespace and is never exposed", target))
	case errors.Is(err, tools.ErrNotExposed):
		// The same answer as for a name that does not exist: a hidden tool's
		// existence is not disclosed to remote agents.
		return nil, nil, wire.InvalidParams(fmt.Sprintf("unknown skill %q; skills: %s", target, strings.Join(ids, ", ")))
	case errors.Is(err, tools.ErrAmbiguousTool):
		return nil, nil, wire.InvalidParams(fmt.Sprintf("skill %q is offered by several servers", target))
	case err != nil:
		return nil, nil, wire.InvalidParams(fmt.Sprintf("unknown skill %q; skills: %s", target, strings.Join(ids, ", ")))
	}
	if f := e.skillOf(en).fidelity; !f.Publishable() {
		return nil, nil, wire.InvalidParams(fmt.Sprintf("skill %q is not published on A2A: %s", target, f.Reason))
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	// The dispatcher's own check, here: arguments written in a text part
	// were never seen by the strict reading of the body, and a refusal
	// must come before the task is stored.
	if err := dispatch.CheckArguments(args); err != nil {
		return nil, nil, wire.InvalidParams(fmt.Sprintf("the arguments of skill %q: %v", target, err))
	}
	return en, args, nil
}

func targetSkill(meta map[string]any) string {
	c, _ := meta["chio"].(map[string]any)
	s, _ := c["targetSkillId"].(string)
	return s
}

// checkParts refuses parts whose media type the tools cannot take.
func checkParts(m *wire.Message) *wire.Error {
	if len(m.Parts) == 0 {
		return wire.InvalidParams("message.parts must hold at least one part")
	}
	for _, p := range m.Parts {
		switch p.Kind() {
		case wire.PartText, wire.PartData:
		default:
			return wire.ContentTypeNotSupported(orDefault(p.MediaType, "file parts"))
		}
		if p.MediaType != "" && !accepted(p.MediaType) {
			return wire.ContentTypeNotSupported(p.MediaType)
		}
	}
	return nil
}

func accepted(mt string) bool {
	mt, _, _ = strings.Cut(mt, ";")
	for _, a := range acceptedModes {
		if strings.EqualFold(strings.TrimSpace(mt), a) {
			return true
		}
	}
	return false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// background is the context of work that must finish even if the request
// that started it is gone (a client disconnecting does not stop a task).
func background(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// isNative reports whether a tool is A2A-native (tools.MetaA2ANative).
func isNative(en *tools.Entry) bool {
	var b bool
	return json.Unmarshal(en.Tool.Metadata[tools.MetaA2ANative], &b) == nil && b
}
