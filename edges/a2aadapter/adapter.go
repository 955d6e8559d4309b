package a2aadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/chio-ledger/chio/edges/tools"
)

// skill is one card skill and the tool it became.
type skill struct {
	id, name, tool, description string
	// denied fails the tool's calls: the skill's own security
	// requirements are not met.
	denied error
}

// Adapter serves a partner's skills as tools. It is safe for concurrent use.
type Adapter struct {
	tools.Running

	serverID        string
	partner         string
	partnerServerID string
	card            cardInfo
	skills          []skill
	byTool          map[string]*skill
	feat            features
	schema          json.RawMessage

	// iface is the chosen interface; binding the TaskBinding of a tool
	// minus the tool's name.
	iface   *a2a.AgentInterface
	binding TaskBinding
	client  *a2aclient.Client // nil when denied
	denied  error

	tasks  *TaskRegistry
	log    *slog.Logger
	report Report
}

// cardInfo is what the manifest keeps of the card.
type cardInfo struct {
	name, version, description string
}

var _ tools.Server = (*Adapter)(nil)

// Discover fetches the target's card, applies the https rule, the partner
// policy and the authorization plan, chooses an interface and returns the
// adapter. A policy failure is a *PolicyError. An unsatisfiable
// authorization does not fail discovery: the tools are listed, Report says
// why, and every call fails with ErrDeniedLocally before any upstream
// request.
func Discover(ctx context.Context, cfg Config) (*Adapter, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	target, err := checkURL(cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("discover: target: %w", err)
	}
	serverID := serverIDOf(target)
	allowed, err := allowedOrigins(cfg.Policy.AllowOrigins)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", serverID, err)
	}
	cu := cardURL(target)
	raw, err := fetchCard(ctx, discoveryClient(cfg.Discovery), cu)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", serverID, err)
	}
	pc, err := parseCard(raw)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", serverID, err)
	}
	card := pc.card

	a := &Adapter{serverID: serverID, partner: cfg.Policy.Partner, partnerServerID: cfg.PartnerServerID,
		tasks: cfg.Tasks, log: log.With("server", serverID, "partner", cfg.Policy.Partner)}
	a.card = cardInfo{name: card.Name, version: card.Version, description: card.Description}
	a.report = Report{Target: safeURL(target), CardURL: safeURL(cu), ServerID: serverID,
		Card: CardSummary{Name: card.Name, Version: card.Version, Description: card.Description, Format: pc.format,
			Streaming: card.Capabilities.Streaming, PushNotifications: card.Capabilities.PushNotifications},
		Policy: PolicyVerdict{Partner: cfg.Policy.Partner}}
	if err := a.addSkills(card); err != nil {
		return nil, fmt.Errorf("discover %s: %w", serverID, err)
	}

	sel, err := a.admit(card, allowed, cfg.Policy)
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", serverID, err)
	}
	a.chooseInterface(sel.chosen, pc)

	// Policy first: a partner that is not admitted never sees a token
	// request.
	auth := planAuth(ctx, &cfg, card)
	a.report.Auth = auth.plan
	a.denied = auth.denied
	for i := range a.skills {
		if err := auth.skillDenied[a.skills[i].id]; err != nil {
			a.skills[i].denied = err
			a.report.Tools[i].Unsatisfiable = err.Error()
		}
	}
	if auth.client != nil {
		if a.client, err = newClient(ctx, a.iface, sel.chosen.dialect, callClient(auth.client, sel.chosen.origin)); err != nil {
			return nil, fmt.Errorf("discover %s: client for %s: %w", serverID, safeRawURL(sel.chosen.iface.URL), err)
		}
	}
	if a.schema, err = inputSchema(a.feat); err != nil {
		return nil, fmt.Errorf("discover %s: %w", serverID, err)
	}
	if err := a.Manifest().Validate(); err != nil {
		return nil, fmt.Errorf("discover %s: %w", serverID, err)
	}
	a.log.Info("a2a partner discovered", "card", card.Name, "format", pc.format,
		"interface", a.report.Interface.URL, "binding", a.binding.Binding, "version", a.iface.ProtocolVersion,
		"tools", len(a.skills), "auth", authSummary(a.report.Auth))
	return a, nil
}

// admit chooses the interface and applies the partner policy; a policy
// failure is a *PolicyError carrying the report so far.
func (a *Adapter) admit(card *a2a.AgentCard, allowed map[string]bool, policy Policy) (selection, error) {
	sel, err := selectInterface(card, allowed, policy.RequiredTenant)
	a.report.Skipped = sel.skipped
	if err == nil {
		err = checkSkillsPolicy(card, policy.RequireSkills)
	}
	if err == nil {
		err = checkSchemesPolicy(card, policy.RequireSchemes)
	}
	if pe := (*PolicyError)(nil); errors.As(err, &pe) {
		pe.Partner = policy.Partner
		a.report.Policy.Contract, a.report.Policy.Detail = pe.Contract, pe.Detail
		pe.Report = a.report.clone()
		return sel, pe
	}
	if err != nil {
		return sel, err
	}
	a.report.Policy.Admitted = true
	return sel, nil
}

// addSkills makes one tool per skill, refusing two skills that would share
// a tool name.
func (a *Adapter) addSkills(card *a2a.AgentCard) error {
	a.byTool = make(map[string]*skill, len(card.Skills))
	a.skills = make([]skill, 0, len(card.Skills))
	for _, s := range card.Skills {
		name := toolName(s.ID)
		if _, dup := a.byTool[name]; dup {
			return fmt.Errorf("%w: skills %q and another share tool name %q", ErrInvalidCard, s.ID, name)
		}
		a.skills = append(a.skills, skill{id: s.ID, name: s.Name, tool: name, description: s.Description})
		a.byTool[name] = nil
		a.report.Tools = append(a.report.Tools, ToolReport{SkillID: s.ID, SkillName: s.Name, Tool: name})
	}
	for i := range a.skills {
		a.byTool[a.skills[i].tool] = &a.skills[i]
	}
	return nil
}

// chooseInterface records the chosen interface and what it offers.
func (a *Adapter) chooseInterface(c candidate, pc *parsedCard) {
	iface := *c.iface // the adapter's own copy, whoever holds the card
	a.iface = &iface
	a.binding = TaskBinding{ServerID: a.serverID, InterfaceURL: c.iface.URL,
		Binding: string(c.iface.ProtocolBinding), Tenant: c.iface.Tenant}
	// 1.0 dropped capabilities.stateTransitionHistory and made
	// historyLength part of every send and get, so a 1.x interface always
	// honours it; a 0.3 one does when its card says so.
	a.feat = features{streaming: pc.card.Capabilities.Streaming, push: pc.card.Capabilities.PushNotifications,
		history: c.dialect == dialect10 || pc.stateTransitionHistory}
	d := describe(c.iface)
	a.report.Interface = &d
	a.report.ProtocolVersion = string(c.iface.ProtocolVersion)
	a.report.Card.HistoryLength = a.feat.history
}

// newClient is an a2a-go client bound to the chosen interface alone, with
// only the transport it needs, so no other interface of the card is ever
// tried.
func newClient(ctx context.Context, iface *a2a.AgentInterface, d dialect, hc *http.Client) (*a2aclient.Client, error) {
	opts := []a2aclient.FactoryOption{a2aclient.WithDefaultsDisabled(),
		// The tenant is the interface's; never one a caller's context holds.
		a2aclient.WithConfig(a2aclient.Config{DisableTenantPropagation: true})}
	jsonrpc := iface.ProtocolBinding == a2a.TransportProtocolJSONRPC
	switch {
	case d == dialect10 && jsonrpc:
		opts = append(opts, a2aclient.WithJSONRPCTransport(hc))
	case d == dialect10:
		opts = append(opts, a2aclient.WithRESTTransport(hc))
	case jsonrpc:
		opts = append(opts, a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: hc}))
	default:
		opts = append(opts, a2av0.WithRESTTransport(a2av0.RESTTransportConfig{Client: hc}))
	}
	client, err := a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{iface}, opts...)
	if err != nil {
		return nil, redactErr(err)
	}
	return client, nil
}

func authSummary(p AuthPlan) string {
	if p.Unsatisfiable != "" {
		return p.Unsatisfiable
	}
	if len(p.Schemes) == 0 {
		return "none"
	}
	return strings.Join(p.Schemes, ",")
}

// ServerID is "a2a:<host>", the target's host[:port].
func (a *Adapter) ServerID() string { return a.serverID }

// ToolNames lists one tool per skill, in card order.
func (a *Adapter) ToolNames() []string {
	out := make([]string, len(a.skills))
	for i, s := range a.skills {
		out[i] = s.tool
	}
	return out
}

// Report is what discovery found; a copy.
func (a *Adapter) Report() Report { return a.report.clone() }
