package wire

import "strings"

// Protocol bindings for AgentInterface.ProtocolBinding.
const (
	BindingJSONRPC  = "JSONRPC"
	BindingHTTPJSON = "HTTP+JSON"
	BindingGRPC     = "GRPC"
)

// AgentCard is the agent card, encoded by EncodeAgentCard in the dual
// 1.0 + 0.3 format.
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

// SecurityScheme is one authentication scheme. Only HTTP authentication is
// modelled, which covers the capability bearer token.
type SecurityScheme struct {
	HTTPAuth *HTTPAuthSecurityScheme
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

// Card wire structs; field order is the emitted order.

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
	SupportsAuthenticatedExtendedCard bool                  `json:"supportsAuthenticatedExtendedCard"`
}

type capabilitiesWire struct {
	Streaming         bool             `json:"streaming"`
	PushNotifications bool             `json:"pushNotifications"`
	ExtendedAgentCard bool             `json:"extendedAgentCard"`
	Extensions        []AgentExtension `json:"extensions,omitempty"`
}

// schemeWire carries both forms in one object: the 0.3 OpenAPI members
// (type, scheme, …) beside the 1.0 oneof wrapper member. 1.0 parsers read
// the wrapper and ignore the rest; 0.3 parsers switch on type.
type schemeWire struct {
	Type         string                  `json:"type"`
	Scheme       string                  `json:"scheme,omitempty"`
	BearerFormat string                  `json:"bearerFormat,omitempty"`
	Description  string                  `json:"description,omitempty"`
	HTTPAuth     *HTTPAuthSecurityScheme `json:"httpAuthSecurityScheme,omitempty"`
}

// securityRequirement10 is a 1.0 SecurityRequirement in the shape a2a-go v2
// reads and writes, {"schemes":{"name":["scope",…]}}. ProtoJSON of the proto
// would be {"name":{"list":[…]}}, which a2a-go fails to parse; a2a-go is the
// interop target, so its shape wins.
type securityRequirement10 struct {
	Schemes map[string][]string `json:"schemes"`
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

// EncodeAgentCard encodes c as one JSON object that both 1.0 and 0.3 card
// parsers accept (as a2a-go's a2av0 compat producer does): the 1.0 fields,
// plus the 0.3 url, protocolVersion "0.3", preferredTransport,
// additionalInterfaces, security and supportsAuthenticatedExtendedCard.
// url and preferredTransport come from the first "0.3" interface (else the
// first interface); additionalInterfaces lists every 0.3 interface, that
// one included, as the 0.3 spec recommends. Required arrays are [] when
// empty, never null. It fails only when c has no interface or a scheme
// without content.
func EncodeAgentCard(c *AgentCard) ([]byte, error) {
	if c == nil {
		return nil, invalid("nil agent card")
	}
	if len(c.SupportedInterfaces) == 0 {
		return nil, invalid("an agent card needs at least one interface")
	}
	w := cardWire{
		Name: c.Name, Description: c.Description, Version: c.Version, Provider: c.Provider,
		DocumentationURL: c.DocumentationURL, IconURL: c.IconURL,
		SupportedInterfaces: append([]AgentInterface{}, c.SupportedInterfaces...),
		Capabilities: capabilitiesWire{Streaming: c.Capabilities.Streaming,
			PushNotifications: c.Capabilities.PushNotifications,
			ExtendedAgentCard: c.Capabilities.ExtendedAgentCard,
			Extensions:        c.Capabilities.Extensions},
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
			if s.HTTPAuth == nil {
				return nil, invalid("security scheme %q has no content", name)
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
