package wire

import "strings"

// Protocol bindings for AgentInterface.ProtocolBinding.
const (
	BindingJSONRPC  = "JSONRPC"
	BindingHTTPJSON = "HTTP+JSON"
	BindingGRPC     = "GRPC"
)

// AgentCard is the agent card, encoded by EncodeAgentCard10 for 1.0
// clients and by EncodeAgentCard in the dual 1.0 + 0.3 format for 0.3 ones.
type AgentCard struct {
	Name             string
	Description      string
	Version          string // the agent's own version
	Provider         *AgentProvider
	DocumentationURL string
	IconURL          string
	// SupportedInterfaces is ordered, preferred first. List every binding
	// once per protocol version served (JSONRPCInterfaces does this for a
	// JSON-RPC endpoint): 0.3 clients pick the "0.3" entries, 1.0 clients
	// the "1.0" ones.
	SupportedInterfaces []AgentInterface
	Capabilities        AgentCapabilities
	// SecuritySchemes maps a scheme name to its scheme.
	SecuritySchemes map[string]SecurityScheme
	// SecurityRequirements are OR-ed; each maps scheme names (AND-ed) to
	// the scopes needed (nil for none).
	SecurityRequirements []map[string][]string
	DefaultInputModes    []string
	DefaultOutputModes   []string
	Skills               []AgentSkill
}

// AgentProvider is the organisation behind the agent.
type AgentProvider struct {
	Organization string `json:"organization"`
	URL          string `json:"url"`
}

// AgentInterface is one endpoint: a URL, a binding and a protocol version.
type AgentInterface struct {
	URL             string `json:"url"`
	ProtocolBinding string `json:"protocolBinding"`
	ProtocolVersion string `json:"protocolVersion"`
	Tenant          string `json:"tenant,omitempty"`
}

// JSONRPCInterfaces returns the two interfaces of a JSON-RPC endpoint at url
// serving both dialects: 1.0 first (preferred), then 0.3.
func JSONRPCInterfaces(url string) []AgentInterface {
	return []AgentInterface{
		{URL: url, ProtocolBinding: BindingJSONRPC, ProtocolVersion: string(V10)},
		{URL: url, ProtocolBinding: BindingJSONRPC, ProtocolVersion: string(V03)},
	}
}

// AgentCapabilities are the optional features the agent implements; every
// flag is emitted, false included, so the card states them explicitly.
type AgentCapabilities struct {
	Streaming         bool
	PushNotifications bool
	ExtendedAgentCard bool
	Extensions        []AgentExtension
}

// AgentExtension declares a protocol extension.
type AgentExtension struct {
	URI         string         `json:"uri"`
	Description string         `json:"description,omitempty"`
	Required    bool           `json:"required,omitempty"`
	Params      map[string]any `json:"params,omitempty"`
}

// SecurityScheme is one authentication scheme: HTTP authentication (the
// capability token), or OpenID Connect (a trusted identity provider's
// access token). Exactly one is set.
type SecurityScheme struct {
	HTTPAuth      *HTTPAuthSecurityScheme
	OpenIDConnect *OpenIDConnectSecurityScheme
}

// OpenIDConnectSecurityScheme names an OpenID provider by its discovery
// document.
type OpenIDConnectSecurityScheme struct {
	OpenIDConnectURL string `json:"openIdConnectUrl"`
	Description      string `json:"description,omitempty"`
}

// HTTPAuthSecurityScheme is HTTP authentication (RFC 7235), such as
// {Scheme: "Bearer"}.
type HTTPAuthSecurityScheme struct {
	Scheme       string `json:"scheme"`
	BearerFormat string `json:"bearerFormat,omitempty"`
	Description  string `json:"description,omitempty"`
}

// BearerScheme is the security scheme of a bearer token in the
// Authorization header; format is a hint such as "JWT" and may be empty.
func BearerScheme(format, description string) SecurityScheme {
	return SecurityScheme{HTTPAuth: &HTTPAuthSecurityScheme{Scheme: "Bearer", BearerFormat: format, Description: description}}
}

// AgentSkill is one skill (for Chio, one exposed tool).
type AgentSkill struct {
	ID                   string
	Name                 string
	Description          string
	Tags                 []string
	Examples             []string
	InputModes           []string
	OutputModes          []string
	SecurityRequirements []map[string][]string
	// BridgeFidelity is Chio's extension: how faithfully the skill carries
	// the tool. nil omits it.
	BridgeFidelity *BridgeFidelity
}

// BridgeFidelity is the bridgeFidelity JSON of a skill:
// {"kind":"lossless"}, {"kind":"adapted","caveats":[…]} or
// {"kind":"unsupported","reason":…}; the same shape as tools.Fidelity.
type BridgeFidelity struct {
	Kind    string   `json:"kind"`
	Caveats []string `json:"caveats,omitempty"`
	Reason  string   `json:"reason,omitempty"`
}

// BridgeFidelityExtension is the URI of Chio's agent extension that
// carries the skills' bridgeFidelity in a 1.0 card, whose AgentSkill admits
// no extra member: capabilities.extensions[].params.bridgeFidelity maps a
// skill id to its rating.
const BridgeFidelityExtension = "https://chio.dev/a2a/extensions/bridge-fidelity/v1"

// Card wire structs; field order is the emitted order.

// card10Wire is the 1.0 card: exactly the members of the 1.0 AgentCard
// (proto JSON names), none of 0.3.
type card10Wire struct {
	Name                 string                  `json:"name"`
	Description          string                  `json:"description"`
	Version              string                  `json:"version"`
	Provider             *AgentProvider          `json:"provider,omitempty"`
	DocumentationURL     string                  `json:"documentationUrl,omitempty"`
	IconURL              string                  `json:"iconUrl,omitempty"`
	SupportedInterfaces  []AgentInterface        `json:"supportedInterfaces"`
	Capabilities         capabilitiesWire        `json:"capabilities"`
	SecuritySchemes      map[string]scheme10Wire `json:"securitySchemes,omitempty"`
	SecurityRequirements []securityRequirement10 `json:"securityRequirements,omitempty"`
	DefaultInputModes    []string                `json:"defaultInputModes"`
	DefaultOutputModes   []string                `json:"defaultOutputModes"`
	Skills               []skill10Wire           `json:"skills"`
}

// cardWire is the 0.3-compatible card: the 1.0 members, then the 0.3 ones.
type cardWire struct {
	// 1.0 (and shared) fields.
	Name                 string                  `json:"name"`
	Description          string                  `json:"description"`
	Version              string                  `json:"version"`
	Provider             *AgentProvider          `json:"provider,omitempty"`
	DocumentationURL     string                  `json:"documentationUrl,omitempty"`
	IconURL              string                  `json:"iconUrl,omitempty"`
	SupportedInterfaces  []AgentInterface        `json:"supportedInterfaces"`
	Capabilities         capabilitiesWire        `json:"capabilities"`
	SecuritySchemes      map[string]schemeWire   `json:"securitySchemes,omitempty"`
	SecurityRequirements []securityRequirement10 `json:"securityRequirements,omitempty"`
	DefaultInputModes    []string                `json:"defaultInputModes"`
	DefaultOutputModes   []string                `json:"defaultOutputModes"`
	Skills               []skillWire             `json:"skills"`
	// 0.3 fields.
	URL                               string                `json:"url"`
	ProtocolVersion                   string                `json:"protocolVersion"`
	PreferredTransport                string                `json:"preferredTransport"`
	AdditionalInterfaces              []interface03         `json:"additionalInterfaces"`
	Security                          []map[string][]string `json:"security,omitempty"`
	SupportsAuthenticatedExtendedCard bool                  `json:"supportsAuthenticatedExtendedCard,omitempty"`
}

type capabilitiesWire struct {
	Streaming         bool             `json:"streaming"`
	PushNotifications bool             `json:"pushNotifications"`
	ExtendedAgentCard bool             `json:"extendedAgentCard"`
	Extensions        []AgentExtension `json:"extensions,omitempty"`
}

// scheme10Wire is the 1.0 oneof wrapper alone.
type scheme10Wire struct {
	HTTPAuth      *HTTPAuthSecurityScheme      `json:"httpAuthSecurityScheme,omitempty"`
	OpenIDConnect *OpenIDConnectSecurityScheme `json:"openIdConnectSecurityScheme,omitempty"`
}

// schemeWire carries both forms in one object: the 0.3 OpenAPI members
// (type, scheme, …) beside the 1.0 oneof wrapper member. 1.0 parsers read
// the wrapper and ignore the rest; 0.3 parsers switch on type.
type schemeWire struct {
	Type             string                       `json:"type"`
	Scheme           string                       `json:"scheme,omitempty"`
	BearerFormat     string                       `json:"bearerFormat,omitempty"`
	OpenIDConnectURL string                       `json:"openIdConnectUrl,omitempty"`
	Description      string                       `json:"description,omitempty"`
	HTTPAuth         *HTTPAuthSecurityScheme      `json:"httpAuthSecurityScheme,omitempty"`
	OpenIDConnect    *OpenIDConnectSecurityScheme `json:"openIdConnectSecurityScheme,omitempty"`
}

// securityRequirement10 is a 1.0 SecurityRequirement in the shape a2a-go v2
// reads and writes, {"schemes":{"name":["scope",…]}}. ProtoJSON of the proto
// would be {"name":{"list":[…]}}, which a2a-go fails to parse; a2a-go is the
// interop target, so its shape wins. (The 1.0 JSON schema wants the
// ProtoJSON shape, so a card that declares a requirement fails its
// CARD-STRUCT-001 check; a card of an edge that enforces none declares none.)
type securityRequirement10 struct {
	Schemes map[string][]string `json:"schemes"`
}

type skill10Wire struct {
	ID                   string                  `json:"id"`
	Name                 string                  `json:"name"`
	Description          string                  `json:"description"`
	Tags                 []string                `json:"tags"`
	Examples             []string                `json:"examples,omitempty"`
	InputModes           []string                `json:"inputModes,omitempty"`
	OutputModes          []string                `json:"outputModes,omitempty"`
	SecurityRequirements []securityRequirement10 `json:"securityRequirements,omitempty"`
}

type skillWire struct {
	ID                   string                  `json:"id"`
	Name                 string                  `json:"name"`
	Description          string                  `json:"description"`
	Tags                 []string                `json:"tags"`
	Examples             []string                `json:"examples,omitempty"`
	InputModes           []string                `json:"inputModes,omitempty"`
	OutputModes          []string                `json:"outputModes,omitempty"`
	SecurityRequirements []securityRequirement10 `json:"securityRequirements,omitempty"`
	Security             []map[string][]string   `json:"security,omitempty"`
	BridgeFidelity       *BridgeFidelity         `json:"bridgeFidelity,omitempty"`
}

type interface03 struct {
	URL       string `json:"url"`
	Transport string `json:"transport"`
}

// EncodeAgentCardFor encodes c for clients of version v: V10 gives the 1.0
// card (EncodeAgentCard10), anything else the 0.3-compatible one
// (EncodeAgentCard).
func EncodeAgentCardFor(c *AgentCard, v Version) ([]byte, error) {
	return DialectOf(v).EncodeAgentCard(c)
}

// EncodeAgentCard10 encodes c as a 1.0 card with exactly the members of
// the 1.0 AgentCard, so it passes the 1.0 JSON schema
// (additionalProperties false throughout): no 0.3 member, security schemes
// as the oneof wrapper alone, and the skills' bridgeFidelity carried by
// the BridgeFidelityExtension in capabilities.extensions (appended to c's
// own extensions) instead of inside each skill. Required members are
// always present ([] when empty, never null); optional ones only when set,
// so A2A's "remove default values" step before signing changes nothing.
// It fails only when c has no interface or a scheme without content.
func EncodeAgentCard10(c *AgentCard) ([]byte, error) {
	if err := checkCard(c); err != nil {
		return nil, err
	}
	w := card10Wire{
		Name: c.Name, Description: c.Description, Version: c.Version, Provider: c.Provider,
		DocumentationURL: c.DocumentationURL, IconURL: c.IconURL,
		SupportedInterfaces:  append([]AgentInterface{}, c.SupportedInterfaces...),
		Capabilities:         capabilities(c),
		SecurityRequirements: requirements10(c.SecurityRequirements),
		DefaultInputModes:    nonNil(c.DefaultInputModes),
		DefaultOutputModes:   nonNil(c.DefaultOutputModes),
		Skills:               make([]skill10Wire, 0, len(c.Skills)),
	}
	if len(c.SecuritySchemes) > 0 {
		w.SecuritySchemes = make(map[string]scheme10Wire, len(c.SecuritySchemes))
		for name, s := range c.SecuritySchemes {
			w.SecuritySchemes[name] = scheme10Wire{HTTPAuth: s.HTTPAuth, OpenIDConnect: s.OpenIDConnect}
		}
	}
	for _, s := range c.Skills {
		w.Skills = append(w.Skills, skill10Wire{ID: s.ID, Name: s.Name, Description: s.Description,
			Tags: nonNil(s.Tags), Examples: s.Examples, InputModes: s.InputModes, OutputModes: s.OutputModes,
			SecurityRequirements: requirements10(s.SecurityRequirements)})
	}
	return marshal(w)
}

// EncodeAgentCard encodes c as the 0.3-compatible card: one JSON object
// that both 1.0 and 0.3 card parsers accept (as a2a-go's a2av0 compat
// producer does): the members of EncodeAgentCard10, each skill's
// bridgeFidelity also inside the skill (as the hello-a2a card has it), and
// the 0.3 url, protocolVersion "0.3", preferredTransport,
// additionalInterfaces, security and supportsAuthenticatedExtendedCard
// (only when true). The 0.3 type members sit beside the 1.0 wrapper in
// each security scheme. url and preferredTransport come from the first
// "0.3" interface (else the first interface); additionalInterfaces lists
// every 0.3 interface, that one included, as the 0.3 spec recommends.
// Required arrays are [] when empty, never null. The 1.0 JSON schema
// refuses the 0.3 members: 1.0 clients get EncodeAgentCard10. It fails
// only when c has no interface or a scheme without content.
func EncodeAgentCard(c *AgentCard) ([]byte, error) {
	if err := checkCard(c); err != nil {
		return nil, err
	}
	w := cardWire{
		Name: c.Name, Description: c.Description, Version: c.Version, Provider: c.Provider,
		DocumentationURL: c.DocumentationURL, IconURL: c.IconURL,
		SupportedInterfaces:               append([]AgentInterface{}, c.SupportedInterfaces...),
		Capabilities:                      capabilities(c),
		SecurityRequirements:              requirements10(c.SecurityRequirements),
		DefaultInputModes:                 nonNil(c.DefaultInputModes),
		DefaultOutputModes:                nonNil(c.DefaultOutputModes),
		Skills:                            make([]skillWire, 0, len(c.Skills)),
		ProtocolVersion:                   string(V03),
		Security:                          requirements03(c.SecurityRequirements),
		SupportsAuthenticatedExtendedCard: c.Capabilities.ExtendedAgentCard,
	}
	if len(c.SecuritySchemes) > 0 {
		w.SecuritySchemes = make(map[string]schemeWire, len(c.SecuritySchemes))
		for name, s := range c.SecuritySchemes {
			if o := s.OpenIDConnect; o != nil {
				w.SecuritySchemes[name] = schemeWire{Type: "openIdConnect", OpenIDConnectURL: o.OpenIDConnectURL,
					Description: o.Description, OpenIDConnect: o}
				continue
			}
			h := *s.HTTPAuth
			w.SecuritySchemes[name] = schemeWire{Type: "http", Scheme: strings.ToLower(h.Scheme),
				BearerFormat: h.BearerFormat, Description: h.Description, HTTPAuth: &h}
		}
	}
	for _, s := range c.Skills {
		w.Skills = append(w.Skills, skillWire{ID: s.ID, Name: s.Name, Description: s.Description,
			Tags: nonNil(s.Tags), Examples: s.Examples, InputModes: s.InputModes, OutputModes: s.OutputModes,
			SecurityRequirements: requirements10(s.SecurityRequirements),
			Security:             requirements03(s.SecurityRequirements),
			BridgeFidelity:       s.BridgeFidelity})
	}

	var legacy []AgentInterface
	for _, i := range c.SupportedInterfaces {
		if i.ProtocolVersion == string(V03) {
			legacy = append(legacy, i)
		}
	}
	if len(legacy) == 0 {
		legacy = c.SupportedInterfaces[:1]
	}
	w.URL, w.PreferredTransport = legacy[0].URL, legacy[0].ProtocolBinding
	w.AdditionalInterfaces = make([]interface03, 0, len(legacy))
	seen := map[interface03]bool{}
	for _, i := range legacy {
		k := interface03{URL: i.URL, Transport: i.ProtocolBinding}
		if !seen[k] {
			seen[k] = true
			w.AdditionalInterfaces = append(w.AdditionalInterfaces, k)
		}
	}
	return marshal(w)
}

func checkCard(c *AgentCard) error {
	if c == nil {
		return invalid("nil agent card")
	}
	if len(c.SupportedInterfaces) == 0 {
		return invalid("an agent card needs at least one interface")
	}
	for name, s := range c.SecuritySchemes {
		if (s.HTTPAuth == nil) == (s.OpenIDConnect == nil) {
			return invalid("security scheme %q must have exactly one form", name)
		}
	}
	return nil
}

// capabilities are c's, with the BridgeFidelityExtension appended when a
// skill has a rating.
func capabilities(c *AgentCard) capabilitiesWire {
	w := capabilitiesWire{Streaming: c.Capabilities.Streaming,
		PushNotifications: c.Capabilities.PushNotifications,
		ExtendedAgentCard: c.Capabilities.ExtendedAgentCard,
		Extensions:        c.Capabilities.Extensions}
	ratings := map[string]*BridgeFidelity{}
	for _, s := range c.Skills {
		if s.BridgeFidelity != nil {
			ratings[s.ID] = s.BridgeFidelity
		}
	}
	if len(ratings) > 0 {
		w.Extensions = append(append([]AgentExtension{}, w.Extensions...), AgentExtension{
			URI:         BridgeFidelityExtension,
			Description: "Chio bridge fidelity: how faithfully each skill carries its governed tool (lossless, or adapted with caveats); params.bridgeFidelity maps skill ids to ratings",
			Params:      map[string]any{"bridgeFidelity": ratings},
		})
	}
	return w
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func requirements10(rs []map[string][]string) []securityRequirement10 {
	if len(rs) == 0 {
		return nil
	}
	out := make([]securityRequirement10, 0, len(rs))
	for _, r := range rs {
		out = append(out, securityRequirement10{Schemes: scopes(r)})
	}
	return out
}

func requirements03(rs []map[string][]string) []map[string][]string {
	if len(rs) == 0 {
		return nil
	}
	out := make([]map[string][]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, scopes(r))
	}
	return out
}

// scopes copies r with nil scope lists as [], since both parsers want arrays.
func scopes(r map[string][]string) map[string][]string {
	out := make(map[string][]string, len(r))
	for k, v := range r {
		out[k] = nonNil(v)
	}
	return out
}
