package a2aadapter

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"golang.org/x/mod/semver"
)

// Interface is one interface of the card.
type Interface struct {
	URL             string `json:"url"`
	Binding         string `json:"binding"`
	ProtocolVersion string `json:"protocolVersion"`
	Tenant          string `json:"tenant,omitempty"`
}

// SkippedInterface is an interface discovery did not choose, and why.
type SkippedInterface struct {
	Interface
	Reason string `json:"reason"`
}

// dialect is the protocol family an interface speaks.
type dialect int

const (
	dialect03 dialect = iota
	dialect10
)

// candidate is a usable interface with its selection keys.
type candidate struct {
	iface   *a2a.AgentInterface
	dialect dialect
	rank    int // binding preference: JSON-RPC first
	origin  string
}

// selection is the outcome of selectInterface.
type selection struct {
	chosen  candidate
	skipped []SkippedInterface
}

// selectInterface picks the interface to call: among those the adapter
// speaks (JSON-RPC or HTTP+JSON, A2A 1.x or 0.3) whose URL passes the https
// rule, from an allowed origin, advertising the required tenant, it takes
// A2A 1.x before 0.3, then JSON-RPC before HTTP+JSON, then card order. A
// newer dialect wins over the binding preference because the 0.3 transports
// convert, and a conversion can only lose. allowed is nil when every origin
// is allowed. Origin and tenant failures are *PolicyError.
func selectInterface(card *a2a.AgentCard, allowed map[string]bool, tenant string) (selection, error) {
	var sel selection
	var usable []candidate
	skip := func(i *a2a.AgentInterface, reason string) {
		sel.skipped = append(sel.skipped, SkippedInterface{Interface: describe(i), Reason: reason})
	}
	for _, i := range card.SupportedInterfaces {
		if i == nil {
			continue
		}
		c, reason := classify(i)
		if reason != "" {
			skip(i, reason)
			continue
		}
		usable = append(usable, c)
	}
	if len(usable) == 0 {
		return sel, fmt.Errorf("select interface: %w: %s", ErrNoInterface, reasons(sel.skipped))
	}
	if allowed != nil {
		var kept []candidate
		for _, c := range usable {
			if allowed[c.origin] {
				kept = append(kept, c)
			} else {
				skip(c.iface, "origin "+c.origin+" is not allowed by the partner policy")
			}
		}
		if len(kept) == 0 {
			return sel, &PolicyError{Contract: ContractOrigin,
				Detail: fmt.Sprintf("no usable interface is advertised from an allowed origin (%s)", reasons(sel.skipped))}
		}
		usable = kept
	}
	if tenant != "" {
		var kept, other []candidate
		for _, c := range usable {
			if c.iface.Tenant == tenant {
				kept = append(kept, c)
			} else {
				other = append(other, c)
			}
		}
		if len(kept) == 0 {
			return sel, &PolicyError{Contract: ContractTenant,
				Detail: fmt.Sprintf("interface %s advertises tenant %q, want %q", safeRawURL(other[0].iface.URL), other[0].iface.Tenant, tenant)}
		}
		for _, c := range other {
			skip(c.iface, fmt.Sprintf("tenant %q is not the required %q", c.iface.Tenant, tenant))
		}
		usable = kept
	}
	slices.SortStableFunc(usable, func(a, b candidate) int {
		if c := cmp.Compare(b.dialect, a.dialect); c != 0 {
			return c
		}
		return cmp.Compare(a.rank, b.rank)
	})
	sel.chosen = usable[0]
	for _, c := range usable[1:] {
		skip(c.iface, "a preferred interface was chosen")
	}
	return sel, nil
}

// classify says whether the adapter can use i, and if not why.
func classify(i *a2a.AgentInterface) (candidate, string) {
	c := candidate{iface: i}
	switch i.ProtocolBinding {
	case a2a.TransportProtocolJSONRPC:
		c.rank = 0
	case a2a.TransportProtocolHTTPJSON:
		c.rank = 1
	case a2a.TransportProtocolGRPC:
		return c, "gRPC is not supported: the Authorizer supplies an HTTP client, which a gRPC channel cannot use"
	default:
		return c, fmt.Sprintf("binding %q is not supported", i.ProtocolBinding)
	}
	v := string(i.ProtocolVersion)
	if !strings.HasPrefix(v, "v") {
		v = "v" + v
	}
	switch {
	case semver.Major(v) == "v1":
		c.dialect = dialect10
	case semver.MajorMinor(v) == "v0.3":
		c.dialect = dialect03
	default:
		return c, fmt.Sprintf("protocol version %q is not supported", i.ProtocolVersion)
	}
	u, err := checkURL(i.URL)
	if err != nil {
		return c, err.Error()
	}
	c.origin = origin(u)
	return c, ""
}

func describe(i *a2a.AgentInterface) Interface {
	return Interface{URL: safeRawURL(i.URL), Binding: string(i.ProtocolBinding),
		ProtocolVersion: string(i.ProtocolVersion), Tenant: i.Tenant}
}

func reasons(skipped []SkippedInterface) string {
	if len(skipped) == 0 {
		return "the card lists no interface"
	}
	parts := make([]string, len(skipped))
	for i, s := range skipped {
		parts[i] = s.URL + " (" + s.Binding + " " + s.ProtocolVersion + "): " + s.Reason
	}
	return strings.Join(parts, "; ")
}
