package a2aadapter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/chio-ledger/chio/schemas"
)

func TestDiscoverCards(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     partnerOpts
		format   string
		binding  string
		version  string
		path     string // of the chosen interface
		history  bool
		skipped  int
		features []string // input schema properties that must be present
		absent   []string // and absent
	}{
		{name: "1.0", opts: partnerOpts{}, format: CardFormat10, binding: "JSONRPC", version: "1.0", path: "/jsonrpc", history: true,
			features: []string{"history_length", "stream", ModeSubscribeTask, ModeCreatePushConfig}},
		{name: "1.0 prefers JSON-RPC", opts: partnerOpts{bindings: []a2a.TransportProtocol{a2a.TransportProtocolHTTPJSON, a2a.TransportProtocolJSONRPC}},
			format: CardFormat10, binding: "JSONRPC", version: "1.0", path: "/jsonrpc", history: true, skipped: 1},
		{name: "1.0 over TLS", opts: partnerOpts{tls: true}, format: CardFormat10, binding: "JSONRPC", version: "1.0", path: "/jsonrpc", history: true},
		{name: "1.0 without streaming or push", opts: partnerOpts{noStreaming: true, noPush: true}, format: CardFormat10, binding: "JSONRPC",
			version: "1.0", path: "/jsonrpc", history: true, absent: []string{"stream", ModeSubscribeTask, ModeCreatePushConfig, ModeListPushConfigs}},
		{name: "0.3", opts: partnerOpts{legacy: true}, format: CardFormat03, binding: "JSONRPC", version: "0.3.0", path: "/jsonrpc", history: true},
		{name: "0.3 without stateTransitionHistory", opts: partnerOpts{legacy: true, noHistory: true}, format: CardFormat03, binding: "JSONRPC",
			version: "0.3.0", path: "/jsonrpc", absent: []string{"history_length"}},
		{name: "dual card picks 1.0", opts: partnerOpts{dual: true}, format: CardFormatDual, binding: "JSONRPC", version: "1.0", path: "/jsonrpc",
			history: true, skipped: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPartner(t, tc.opts)
			a := discover(t, p, Config{})
			r := a.Report()
			if r.Card.Format != tc.format || r.Interface.Binding != tc.binding || r.ProtocolVersion != tc.version ||
				r.Interface.URL != p.srv.URL+tc.path || r.Card.HistoryLength != tc.history || len(r.Skipped) != tc.skipped {
				t.Fatalf("report %+v, interface %+v", r, r.Interface)
			}
			if want := "a2a:" + strings.TrimPrefix(strings.TrimPrefix(p.srv.URL, "http://"), "https://"); a.ServerID() != want || r.ServerID != want {
				t.Fatalf("server id %q, want %q", a.ServerID(), want)
			}
			if got := a.ToolNames(); !slices.Equal(got, []string{"echo", "slow", "stream"}) {
				t.Fatalf("tools %v", got)
			}
			checkManifest(t, a, tc.features, tc.absent)
			if task := taskOf(t, invoke(t, a, "echo", `{"message":"ping"}`)); task.Status.State != a2a.TaskStateCompleted {
				t.Fatalf("echo ended %s", task.Status.State)
			}
		})
	}
}

// checkManifest validates the manifest against chio.manifest.v1 and checks
// the tool metadata and the contract's properties.
func checkManifest(t *testing.T, a *Adapter, present, absent []string) {
	t.Helper()
	m := a.Manifest()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := compileSchema(t, mustRead(t, "jsonschema/manifest.v1.schema.json")).Validate(mustJSON(t, raw)); err != nil {
		t.Fatalf("manifest does not validate: %v", err)
	}
	for i, tool := range m.Tools {
		md := tool.Metadata
		if string(md["mcp.expose"]) != "true" || string(md["openai.expose"]) != "true" || !tool.HasSideEffects ||
			string(md[MetaSkillID]) != `"`+a.Report().Tools[i].SkillID+`"` {
			t.Fatalf("tool %s: metadata %s, side effects %v", tool.Name, md, tool.HasSideEffects)
		}
		var schema struct{ Properties map[string]json.RawMessage }
		if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
			t.Fatal(err)
		}
		for _, p := range present {
			if schema.Properties[p] == nil {
				t.Fatalf("tool %s: input schema lacks %s", tool.Name, p)
			}
		}
		for _, p := range absent {
			if schema.Properties[p] != nil {
				t.Fatalf("tool %s: input schema offers %s", tool.Name, p)
			}
		}
	}
	m.Tools[0].Name = "changed"
	if a.Manifest().Tools[0].Name == "changed" {
		t.Fatal("Manifest returned shared state")
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := schemas.FS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustJSON(t *testing.T, raw []byte) any {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func compileSchema(t *testing.T, raw []byte) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem://schema.json", mustJSON(t, raw)); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// noDial is a transport that fails the test if anything is sent.
type noDial struct {
	t     *testing.T
	calls atomic.Int64
}

func (n *noDial) RoundTrip(r *http.Request) (*http.Response, error) {
	n.calls.Add(1)
	n.t.Errorf("request sent to %s", r.URL)
	return nil, errors.New("no dialing in this test")
}

func TestHTTPSRule(t *testing.T) {
	for _, tc := range []struct {
		name, target string
		want         error
	}{
		{"http to a named host", "http://partner.example", ErrInsecureURL},
		{"http card URL to a named host", "http://partner.example:8080/agents/card.json", ErrInsecureURL},
		{"http to a private address", "http://10.0.0.7", ErrInsecureURL},
		{"http to a lookalike of localhost", "http://localhost.partner.example", ErrInsecureURL},
		{"another scheme", "ftp://partner.example", nil},
		{"user info", "https://operator:hunter2@partner.example", nil},
		{"not absolute", "partner.example/agent", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd := &noDial{t: t}
			_, err := Discover(t.Context(), Config{Target: tc.target, Discovery: &http.Client{Transport: nd}})
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
	t.Run("a card redirected to http on a named host is not fetched", func(t *testing.T) {
		srv := httptest.NewTLSServer(http.RedirectHandler("http://partner.example/card.json", http.StatusFound))
		t.Cleanup(srv.Close)
		_, err := Discover(t.Context(), Config{Target: srv.URL, Discovery: srv.Client(), Log: quiet()})
		if !errors.Is(err, ErrInsecureURL) {
			t.Fatalf("err = %v, want ErrInsecureURL", err)
		}
	})
	t.Run("an https card's http interface to a named host is not used", func(t *testing.T) {
		insecure := &a2a.AgentInterface{URL: "http://partner.example/jsonrpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version}
		p := startPartner(t, partnerOpts{tls: true, extra: []*a2a.AgentInterface{insecure}})
		a := discover(t, p, Config{})
		r := a.Report()
		if len(r.Skipped) != 1 || r.Skipped[0].URL != insecure.URL || !strings.Contains(r.Skipped[0].Reason, ErrInsecureURL.Error()) {
			t.Fatalf("skipped %+v", r.Skipped)
		}
		if !strings.HasPrefix(r.Interface.URL, "https://127.0.0.1") {
			t.Fatalf("chose %s", r.Interface.URL)
		}
	})
	t.Run("a card with only such interfaces has none to use", func(t *testing.T) {
		insecure := &a2a.AgentInterface{URL: "http://partner.example/jsonrpc", ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version}
		grpc := &a2a.AgentInterface{URL: "127.0.0.1:1", ProtocolBinding: a2a.TransportProtocolGRPC, ProtocolVersion: a2a.Version}
		p := startPartner(t, partnerOpts{tls: true, bindings: []a2a.TransportProtocol{"CUSTOM"}, extra: []*a2a.AgentInterface{insecure, grpc}})
		_, err := Discover(t.Context(), Config{Target: p.srv.URL, Discovery: p.srv.Client()})
		if !errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), "gRPC") {
			t.Fatalf("err = %v, want ErrNoInterface naming each reason", err)
		}
	})
}

func TestServerID(t *testing.T) {
	for target, want := range map[string]string{
		"https://agent.example.com":                         "a2a:agent.example.com",
		"https://Agent.Example.com:443/a2a":                 "a2a:agent.example.com",
		"https://agent.example.com:8443/.well-known/x.json": "a2a:agent.example.com:8443",
		"http://127.0.0.1:8080":                             "a2a:127.0.0.1:8080",
		"http://[::1]:80":                                   "a2a:[::1]",
	} {
		u, err := checkURL(target)
		if err != nil {
			t.Fatal(err)
		}
		if got := serverIDOf(u); got != want {
			t.Errorf("serverIDOf(%s) = %q, want %q", target, got, want)
		}
	}
}

func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST": true, "localhost.": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"10.0.0.1": false, "partner.example": false, "localhost.partner.example": false, "::": false, "": false,
	} {
		if got := isLoopback(host); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestPartnerPolicy(t *testing.T) {
	unused := a2a.NamedSecuritySchemes{
		"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"},
		"apikey": a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationHeader, Name: "X-API-Key"},
	}
	bearerOnly := a2a.SecurityRequirementsOptions{{"bearer": {}}}
	for _, tc := range []struct {
		name     string
		policy   func(p *partner) Policy
		contract string // "" when admitted
	}{
		{"admitted", func(p *partner) Policy {
			return Policy{Partner: "acme", RequiredTenant: "tenant-alpha", RequireSkills: []string{"echo"},
				RequireSchemes: []string{"bearer"}, AllowOrigins: []string{p.srv.URL + "/"}}
		}, ""},
		{"tenant", func(*partner) Policy { return Policy{Partner: "acme", RequiredTenant: "tenant-beta"} }, ContractTenant},
		{"skill", func(*partner) Policy { return Policy{Partner: "acme", RequireSkills: []string{"echo", "research"}} }, ContractSkill},
		{"scheme not declared", func(*partner) Policy { return Policy{Partner: "acme", RequireSchemes: []string{"oauth"}} }, ContractScheme},
		{"scheme declared, never required", func(*partner) Policy { return Policy{Partner: "acme", RequireSchemes: []string{"apikey"}} }, ContractScheme},
		{"origin", func(*partner) Policy {
			return Policy{Partner: "acme", AllowOrigins: []string{"https://partner.example"}}
		}, ContractOrigin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPartner(t, partnerOpts{tenant: "tenant-alpha", bearer: "tok", schemes: unused, requirements: bearerOnly})
			var authorized atomic.Int64
			auth := bearerAuthorizer(p, "tok")
			cfg := Config{Target: p.srv.URL, Discovery: p.srv.Client(), Policy: tc.policy(p), Log: quiet(),
				Authorize: func(ctx context.Context, card *a2a.AgentCard) (*http.Client, []string, error) {
					authorized.Add(1)
					return auth(ctx, card)
				}}
			a, err := Discover(t.Context(), cfg)
			if tc.contract == "" {
				if err != nil {
					t.Fatal(err)
				}
				r := a.Report()
				if !r.Policy.Admitted || r.Policy.Partner != "acme" || r.Interface.Tenant != "tenant-alpha" {
					t.Fatalf("report %+v", r.Policy)
				}
				invoke(t, a, "echo", `{"message":"hi"}`)
				if got := p.agent.calls()[0].tenant; got != "tenant-alpha" {
					t.Fatalf("partner saw tenant %q", got)
				}
				return
			}
			var pe *PolicyError
			if !errors.As(err, &pe) || pe.Contract != tc.contract || pe.Partner != "acme" ||
				pe.Report.Policy.Contract != tc.contract || pe.Report.Policy.Admitted || !strings.Contains(err.Error(), tc.contract+" contract") {
				t.Fatalf("err = %v (%+v), want the %s contract", err, pe, tc.contract)
			}
			if authorized.Load() != 0 || p.requests.Load() != 0 {
				t.Fatalf("a refused partner was authorized %d times and called %d times", authorized.Load(), p.requests.Load())
			}
		})
	}
}

func TestToolName(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		id, want string
	}{
		{"echo", "echo"},
		{"Deep_research-2", "Deep_research-2"},
		{long, long},
		{"research.deep v2", "research_deep_v2-" + digest8("research.deep v2")},
		{strings.Repeat("x.", 40), strings.Repeat("x_", 27) + "x-" + digest8(strings.Repeat("x.", 40))},
	} {
		if got := toolName(tc.id); got != tc.want {
			t.Errorf("toolName(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
	for _, id := range []string{"a.b", "a/b", "a b", long + "a", strings.Repeat("ü", 40), "résumé"} {
		got := toolName(id)
		if !validToolName(got) || got != toolName(id) {
			t.Errorf("toolName(%q) = %q: not a stable valid name", id, got)
		}
	}
	if toolName("a.b") == toolName("a/b") {
		t.Error("two skill ids share a tool name")
	}
}

func digest8(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}
