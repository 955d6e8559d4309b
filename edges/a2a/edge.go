// Package a2a is Chio's A2A edge: it serves kernel-governed tools as A2A
// skills over JSON-RPC (A2A 1.0 and 0.3) on HTTP and on stdio (the
// hello-a2a profile). Every call goes through edges/dispatch (kernel,
// durable decision event, tool, durable outcome event); tasks live as event
// streams in JetStream (edges/a2a/taskstore), so the edge keeps no state
// another replica would need.
package a2a

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// Config configures an edge.
type Config struct {
	AgentName        string
	AgentDescription string
	AgentVersion     string
	// Exposure selects which tools remote agents see (protocol "a2a").
	Exposure tools.Exposure
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
		metrics: newEdgeMetrics(cfg.Metrics), draining: make(chan struct{})}
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
		out = append(out, skill{entry: en, fidelity: f})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].entry.Tool.Name < out[j].entry.Tool.Name })
	return out
}

type skill struct {
	entry    *tools.Entry
	fidelity tools.Fidelity
}

// Card is the agent card for an edge reachable at baseURL.
func (e *Edge) Card(baseURL string) *wire.AgentCard {
	c := &wire.AgentCard{
		Name: e.cfg.AgentName, Description: e.cfg.AgentDescription, Version: e.cfg.AgentVersion,
		SupportedInterfaces: interfaces(strings.TrimRight(baseURL, "/")),
		Capabilities:        wire.AgentCapabilities{Streaming: true, PushNotifications: e.cfg.Push != nil},
		SecuritySchemes: map[string]wire.SecurityScheme{
			"chio_capability": wire.BearerScheme("chio.capability.v1",
				"A chio.capability.v1 token, base64url, as Authorization: Bearer or X-Chio-Capability"),
		},
		DefaultInputModes: acceptedModes, DefaultOutputModes: acceptedModes,
		Skills: []wire.AgentSkill{},
	}
	if e.cfg.DevToken == "" {
		c.SecurityRequirements = []map[string][]string{{"chio_capability": {}}}
	}
	for _, s := range e.published {
		t := s.entry.Tool
		c.Skills = append(c.Skills, wire.AgentSkill{
			ID: t.Name, Name: t.Name, Description: t.Description, Tags: []string{s.entry.Manifest.ServerID},
			InputModes: acceptedModes, OutputModes: acceptedModes,
			BridgeFidelity: &wire.BridgeFidelity{Kind: string(s.fidelity.Kind), Caveats: s.fidelity.Caveats, Reason: s.fidelity.Reason},
		})
	}
	return c
}

// StdioBinding is the protocol binding of the hello-a2a stdio profile: one
// JSON-RPC request per line on stdin, one response per line on stdout.
const StdioBinding = "json-rpc-stdio"

// StdioCard is the card of the stdio profile (ServeStdio): its one
// interface is stdio://, it acts under the dev capability, so it asks for
// none, and it has no push notifications.
func (e *Edge) StdioCard() *wire.AgentCard {
	c := e.Card("stdio:")
	c.SupportedInterfaces = []wire.AgentInterface{{URL: "stdio://", ProtocolBinding: StdioBinding, ProtocolVersion: string(wire.V10)}}
	c.Capabilities.PushNotifications = false
	c.SecurityRequirements = nil
	return c
}

// interfaces are the bindings an edge at base serves, preferred first:
// JSON-RPC and HTTP+JSON in 1.0, then both in 0.3 (whose REST clients add
// the /v1 prefix themselves).
func interfaces(base string) []wire.AgentInterface {
	rpc := wire.JSONRPCInterfaces(base + "/a2a")
	return []wire.AgentInterface{rpc[0],
		{URL: base + RESTPath, ProtocolBinding: wire.BindingHTTPJSON, ProtocolVersion: string(wire.V10)},
		rpc[1],
		{URL: base + RESTPath, ProtocolBinding: wire.BindingHTTPJSON, ProtocolVersion: string(wire.V03)}}
}

// caller is who makes a request: the token presented (or the dev token)
// and the tenant addressed.
type caller struct {
	token  string
	tenant string
}

// callerFrom reads the capability from HTTP headers.
func (e *Edge) callerFrom(h http.Header) (caller, *wire.Error) {
	tok, err := schemas.CapabilityFromHeaders(h)
	if err != nil {
		if h.Get("Authorization") == "" && h.Get("X-Chio-Capability") == "" && e.cfg.DevToken != "" {
			return caller{token: e.cfg.DevToken}, nil
		}
		return caller{}, wire.Unauthenticated(err.Error())
	}
	return caller{token: tok}, nil
}

// owner authenticates the caller for reads: tasks are scoped to the
// capability's authority path (root issuer and every subject down to the
// caller's) and the tenant.
func (e *Edge) owner(c caller, tenant string) (taskstore.Owner, *wire.Error) {
	id, d := e.kernel.Identify(c.token)
	if d != nil {
		return taskstore.Owner{}, wire.Unauthenticated(fmt.Sprintf("capability refused at %s: %s", d.Guard, d.Reason))
	}
	return taskstore.Owner{Subject: id.Principal, Tenant: tenant}, nil
}

// sendOwner is the owner of a task created by a send: the authenticated
// subject, or, for a token the kernel refuses (the call still ends in a
// deny receipt and a failed task), a name only that same token text maps to.
func (e *Edge) sendOwner(c caller, tenant string) taskstore.Owner {
	if id, d := e.kernel.Identify(c.token); d == nil {
		return taskstore.Owner{Subject: id.Principal, Tenant: tenant}
	}
	sum := sha256.Sum256([]byte(c.token))
	return taskstore.Owner{Subject: "unverified:" + hex.EncodeToString(sum[:16]), Tenant: tenant}
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
	if f := tools.A2AFidelity(en.Tool, tools.A2AProfile{}); !f.Publishable() {
		return nil, nil, wire.InvalidParams(fmt.Sprintf("skill %q is not published on A2A: %s", target, f.Reason))
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if len(args) > schemas.MaxParametersBytes || json.Unmarshal(args, &obj) != nil || obj == nil {
		return nil, nil, wire.InvalidParams(fmt.Sprintf("the arguments of skill %q must be a JSON object of at most %d bytes", target, schemas.MaxParametersBytes))
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
