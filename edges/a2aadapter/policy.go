package a2aadapter

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// PolicyVerdict is the admission outcome a Report shows.
type PolicyVerdict struct {
	Partner  string `json:"partner,omitempty"`
	Admitted bool   `json:"admitted"`
	Contract string `json:"contract,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// allowedOrigins normalizes the policy's origins; nil allows every origin.
func allowedOrigins(origins []string) (map[string]bool, error) {
	if len(origins) == 0 {
		return nil, nil
	}
	out := make(map[string]bool, len(origins))
	for _, o := range origins {
		u, err := url.Parse(strings.TrimRight(o, "/"))
		if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("policy: allowed origin %q is not scheme://host[:port]", safeRawURL(o))
		}
		out[origin(u)] = true
	}
	return out, nil
}

// checkSkillsPolicy refuses a card missing a required skill id.
func checkSkillsPolicy(card *a2a.AgentCard, required []string) error {
	for _, id := range required {
		if !slices.ContainsFunc(card.Skills, func(s a2a.AgentSkill) bool { return s.ID == id }) {
			return &PolicyError{Contract: ContractSkill, Detail: fmt.Sprintf("the card does not expose skill %q", id)}
		}
	}
	return nil
}

// checkSchemesPolicy refuses a card that does not declare a required scheme
// or declares it without requiring it anywhere (card or skill level): a
// scheme nothing requires is never used, so it does not hold the contract.
func checkSchemesPolicy(card *a2a.AgentCard, required []string) error {
	for _, name := range required {
		if _, ok := card.SecuritySchemes[a2a.SecuritySchemeName(name)]; !ok {
			return &PolicyError{Contract: ContractScheme, Detail: fmt.Sprintf("the card does not declare security scheme %q", name)}
		}
		if !requiresScheme(card, a2a.SecuritySchemeName(name)) {
			return &PolicyError{Contract: ContractScheme, Detail: fmt.Sprintf("no security requirement of the card names scheme %q", name)}
		}
	}
	return nil
}

func requiresScheme(card *a2a.AgentCard, name a2a.SecuritySchemeName) bool {
	in := func(opts a2a.SecurityRequirementsOptions) bool {
		for _, r := range opts {
			if _, ok := r[name]; ok {
				return true
			}
		}
		return false
	}
	if in(card.SecurityRequirements) {
		return true
	}
	for _, s := range card.Skills {
		if in(s.SecurityRequirements) {
			return true
		}
	}
	return false
}
