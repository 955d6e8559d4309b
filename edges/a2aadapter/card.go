package a2aadapter

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// maxCardBytes bounds a fetched card: a card is metadata, and an endless
// body must not exhaust memory.
const maxCardBytes = 1 << 20

// Card formats a Report names.
const (
	CardFormat10   = "1.0"
	CardFormat03   = "0.3"
	CardFormatDual = "1.0+0.3"
)

// parsedCard is a card in the 1.0 type plus what the conversion loses.
type parsedCard struct {
	card   *a2a.AgentCard
	format string
	// stateTransitionHistory is the 0.3 capability, gone from 1.0 and
	// from a2a-go's card type; it decides history_length on 0.3.
	stateTransitionHistory bool
}

// cardProbe reads the members that tell the formats apart.
type cardProbe struct {
	SupportedInterfaces  []json.RawMessage `json:"supportedInterfaces"`
	URL                  string            `json:"url"`
	ProtocolVersion      string            `json:"protocolVersion"`
	PreferredTransport   string            `json:"preferredTransport"`
	AdditionalInterfaces []struct {
		URL       string `json:"url"`
		Transport string `json:"transport"`
	} `json:"additionalInterfaces"`
	Capabilities struct {
		StateTransitionHistory bool `json:"stateTransitionHistory"`
	} `json:"capabilities"`
}

// fetchCard GETs the card at u with client.
func fetchCard(ctx context.Context, client *http.Client, u *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch card %s: %w", safeURL(u), err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch card %s: %w", safeURL(u), redactErr(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch card %s: HTTP status %s", safeURL(u), resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCardBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch card %s: read body: %w", safeURL(u), redactErr(err))
	}
	if len(body) > maxCardBytes {
		return nil, fmt.Errorf("fetch card %s: %w: larger than %d bytes", safeURL(u), ErrInvalidCard, maxCardBytes)
	}
	return body, nil
}

// parseCard reads a 1.0, 0.3 or dual-format card into the 1.0 type.
func parseCard(raw []byte) (*parsedCard, error) {
	// The card is the partner's JSON: strictjson first, so that no member
	// is read twice, differently, by the probe and by a2a-go's parser.
	var probe cardProbe
	if err := strictjson.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("parse card: %w: %w", ErrInvalidCard, err)
	}
	// a2a-go's compat parser reads all three formats; it prefers the 1.0
	// members of a dual card.
	card, err := a2av0.NewAgentCardParser()(raw)
	if err != nil {
		return nil, fmt.Errorf("parse card: %w: %w", ErrInvalidCard, err)
	}
	p := &parsedCard{card: card, stateTransitionHistory: probe.Capabilities.StateTransitionHistory}
	switch {
	case len(probe.SupportedInterfaces) > 0 && (probe.URL != "" || probe.ProtocolVersion != ""):
		p.format = CardFormatDual
	case len(probe.SupportedInterfaces) > 0:
		p.format = CardFormat10
	default:
		p.format = CardFormat03
		card.SupportedInterfaces = interfaces03(&probe)
	}
	if err := checkSkills(card); err != nil {
		return nil, err
	}
	return p, nil
}

// interfaces03 lists a 0.3 card's interfaces. The compat parser drops the
// main url when preferredTransport is absent (0.3 defaults it to JSONRPC)
// and any additional interface sharing the main url, even with another
// transport; this keeps both.
func interfaces03(p *cardProbe) []*a2a.AgentInterface {
	version := a2a.ProtocolVersion(p.ProtocolVersion)
	if version == "" {
		version = a2av0.Version
	}
	type key struct{ url, transport string }
	seen := map[key]bool{}
	var out []*a2a.AgentInterface
	add := func(u, transport string) {
		if u == "" || seen[key{u, transport}] {
			return
		}
		seen[key{u, transport}] = true
		out = append(out, &a2a.AgentInterface{URL: u, ProtocolBinding: a2a.TransportProtocol(transport), ProtocolVersion: version})
	}
	main := p.PreferredTransport
	if main == "" {
		main = string(a2a.TransportProtocolJSONRPC)
	}
	add(p.URL, main)
	for _, i := range p.AdditionalInterfaces {
		add(i.URL, i.Transport)
	}
	return out
}

// checkSkills refuses a card without skills, or with a skill the adapter
// cannot name: tools are never invented, so a card without usable skills
// has nothing to offer.
func checkSkills(card *a2a.AgentCard) error {
	if len(card.Skills) == 0 {
		return fmt.Errorf("parse card: %w: no skills", ErrInvalidCard)
	}
	seen := make(map[string]bool, len(card.Skills))
	for i, s := range card.Skills {
		switch {
		case s.ID == "":
			return fmt.Errorf("parse card: %w: skills[%d] has no id", ErrInvalidCard, i)
		case seen[s.ID]:
			return fmt.Errorf("parse card: %w: skill id %q listed twice", ErrInvalidCard, s.ID)
		}
		seen[s.ID] = true
	}
	return nil
}
