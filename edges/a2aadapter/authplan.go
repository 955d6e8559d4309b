package a2aadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// AuthPlan is how the adapter authenticates to the partner.
type AuthPlan struct {
	// Required are the card's requirement sets: any one set, all of its
	// schemes.
	Required [][]string `json:"required,omitempty"`
	// Schemes are the schemes the Authorizer satisfies.
	Schemes []string `json:"schemes,omitempty"`
	// Unsatisfiable says why every call is denied locally; empty when the
	// plan holds.
	Unsatisfiable string `json:"unsatisfiable,omitempty"`
}

// authResult is the outcome of planAuth.
type authResult struct {
	plan   AuthPlan
	client *http.Client
	// denied fails every call; skillDenied the calls of one skill whose
	// own requirements the schemes do not meet.
	denied      error
	skillDenied map[string]error
}

// planAuth calls the Authorizer once and checks its answer against the card:
// every scheme it claims must be declared, and the schemes must meet one
// requirement set of the card (and of each skill that has its own). Any
// failure is kept as an ErrDeniedLocally for the calls; discovery itself
// goes on, so the operator sees the tools and the reason.
func planAuth(ctx context.Context, cfg *Config, card *a2a.AgentCard) authResult {
	r := authResult{plan: AuthPlan{Required: requirementSets(card.SecurityRequirements)}, skillDenied: map[string]error{}}
	deny := func(err error) authResult {
		r.client, r.denied = nil, fmt.Errorf("%w: %w", ErrDeniedLocally, redactErr(err))
		r.plan.Unsatisfiable = r.denied.Error()
		return r
	}
	var schemes []string
	if cfg.Authorize == nil {
		r.client = defaultCallClient(cfg.Discovery)
	} else {
		view, err := cloneCard(card)
		if err != nil {
			return deny(fmt.Errorf("authorize: %w", err))
		}
		// The Authorizer gets a copy: the checks below read the card the
		// adapter fetched, whatever the Authorizer does with its own.
		c, s, err := cfg.Authorize(ctx, view)
		switch {
		case err != nil:
			return deny(fmt.Errorf("authorize: %w", err))
		case c == nil:
			return deny(errors.New("authorize: the Authorizer returned no client"))
		}
		r.client, schemes = c, slices.Clone(s)
		slices.Sort(schemes)
		r.plan.Schemes = schemes
		for _, name := range schemes {
			if _, ok := card.SecuritySchemes[a2a.SecuritySchemeName(name)]; !ok {
				return deny(fmt.Errorf("authorize: the Authorizer claims scheme %q, which the card does not declare", name))
			}
		}
	}
	if !satisfies(card.SecurityRequirements, schemes) {
		return deny(unmet("the card", card.SecurityRequirements, schemes, cfg.Authorize == nil))
	}
	for _, s := range card.Skills {
		if !satisfies(s.SecurityRequirements, schemes) {
			r.skillDenied[s.ID] = fmt.Errorf("%w: %w", ErrDeniedLocally, unmet("skill "+s.ID, s.SecurityRequirements, schemes, cfg.Authorize == nil))
		}
	}
	return r
}

// satisfies reports whether schemes meet one requirement set of opts; no
// sets means no requirement.
func satisfies(opts a2a.SecurityRequirementsOptions, schemes []string) bool {
	if len(opts) == 0 {
		return true
	}
	for _, req := range opts {
		met := true
		for name := range req {
			if !slices.Contains(schemes, string(name)) {
				met = false
				break
			}
		}
		if met {
			return true
		}
	}
	return false
}

func unmet(what string, opts a2a.SecurityRequirementsOptions, schemes []string, noAuthorizer bool) error {
	sets := requirementSets(opts)
	alts := make([]string, len(sets))
	for i, s := range sets {
		alts[i] = "[" + strings.Join(s, " + ") + "]"
	}
	if noAuthorizer {
		return fmt.Errorf("%s requires one of %s and no Authorizer is configured", what, strings.Join(alts, ", "))
	}
	return fmt.Errorf("%s requires one of %s; the Authorizer satisfies [%s]", what, strings.Join(alts, ", "), strings.Join(schemes, ", "))
}

func requirementSets(opts a2a.SecurityRequirementsOptions) [][]string {
	var out [][]string
	for _, req := range opts {
		set := make([]string, 0, len(req))
		for name := range req {
			set = append(set, string(name))
		}
		slices.Sort(set)
		out = append(out, set)
	}
	return out
}

// cloneCard is a deep copy of card, through its JSON form.
func cloneCard(card *a2a.AgentCard) (*a2a.AgentCard, error) {
	raw, err := json.Marshal(card)
	if err != nil {
		return nil, fmt.Errorf("copy card: %w", err)
	}
	var c a2a.AgentCard
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("copy card: %w", err)
	}
	return &c, nil
}
