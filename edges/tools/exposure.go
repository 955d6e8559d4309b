package tools

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/chio-ledger/chio/schemas"
)

// Exposure is what one outward protocol and audience may see. Tools are
// hidden by default: a tool is exposed only when its manifest metadata opts
// in with "<protocol>.expose": true.
type Exposure struct {
	// Protocol is the metadata key namespace: "a2a" reads "a2a.expose" and
	// "a2a.tier", "acp" reads "acp.expose" and "acp.tier".
	Protocol string
	// ExposeAll ignores the expose gate (development only); the tier
	// filter and the hard floor still apply.
	ExposeAll bool
	// Tier, when set, keeps only tools whose "<protocol>.tier" is this
	// string, so one deployment can serve several audiences.
	Tier string
	// InternalPrefixes are added to HardFloorPrefixes.
	InternalPrefixes []string
}

// HardFloorPrefixes returns the namespaces that are never exposed nor
// invocable from an edge, whatever the metadata or ExposeAll say: Chio's own
// tools ("chio." and "chio::" for dotted and Rust-style paths,
// "chio_internal") and "$"-prefixed names, which are reserved for
// system-generated tools. A tool is internal when its name or its server id
// starts with one of them. Matching ignores ASCII and Unicode case and
// leading white space, so "CHIO.admin" or " chio.admin" cannot slip past.
// The slice is fresh on every call; changing it changes nothing.
func HardFloorPrefixes() []string {
	return []string{"chio.", "chio::", "chio_internal", "$"}
}

// IsInternal reports whether name (a tool name or a server id) falls under
// the hard floor or e.InternalPrefixes. Empty InternalPrefixes entries are
// ignored: an empty prefix would otherwise hide everything, and it is far
// more likely a configuration slip than an intent.
func (e Exposure) IsInternal(name string) bool {
	n := strings.ToLower(strings.TrimLeftFunc(name, unicode.IsSpace))
	for _, lists := range [][]string{HardFloorPrefixes(), e.InternalPrefixes} {
		for _, p := range lists {
			if p != "" && strings.HasPrefix(n, strings.ToLower(p)) {
				return true
			}
		}
	}
	return false
}

// Check says whether e allows entry en: nil, or an error wrapping
// ErrInternalTool or ErrNotExposed that says why not.
func (e Exposure) Check(en *Entry) error {
	if en == nil || en.Manifest == nil || en.Tool == nil {
		return fmt.Errorf("check exposure: %w", ErrUnknownTool)
	}
	if err := e.valid(); err != nil {
		return fmt.Errorf("check exposure: %w: %w", ErrNotExposed, err)
	}
	switch {
	case e.IsInternal(en.Manifest.ServerID):
		return fmt.Errorf("check exposure of %q: server %q: %w", en.Tool.Name, en.Manifest.ServerID, ErrInternalTool)
	case e.IsInternal(en.Tool.Name):
		return fmt.Errorf("check exposure of %q: %w", en.Tool.Name, ErrInternalTool)
	}
	md := en.Tool.Metadata
	if !e.ExposeAll && !isJSONTrue(md[e.Protocol+".expose"]) {
		return fmt.Errorf("check exposure of %q: %s.expose is not true: %w", en.Tool.Name, e.Protocol, ErrNotExposed)
	}
	if e.Tier != "" {
		if tier, ok := jsonString(md[e.Protocol+".tier"]); !ok || tier != e.Tier {
			return fmt.Errorf("check exposure of %q: %s.tier is not %q: %w", en.Tool.Name, e.Protocol, e.Tier, ErrNotExposed)
		}
	}
	return nil
}

// Exposed lists the tools e allows, sorted by server id then tool name.
// An Exposure with an invalid Protocol allows nothing.
func (r *Registry) Exposed(e Exposure) []*Entry {
	if e.valid() != nil {
		return nil
	}
	r.mu.RLock()
	var out []*Entry
	for _, tools := range r.servers {
		for _, en := range tools {
			if e.Check(en) == nil {
				out = append(out, en)
			}
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Entry) int {
		return cmp.Or(cmp.Compare(a.Manifest.ServerID, b.Manifest.ServerID), cmp.Compare(a.Tool.Name, b.Tool.Name))
	})
	return out
}

// Resolve finds a tool for dispatch and re-checks the exposure gate, since
// the caller may name a tool discovery never showed it. Internal names are
// refused before lookup, whether or not they exist. Errors wrap
// ErrInternalTool, ErrUnknownTool or ErrNotExposed.
func (r *Registry) Resolve(e Exposure, serverID, tool string) (*Entry, error) {
	if e.IsInternal(serverID) || e.IsInternal(tool) {
		return nil, fmt.Errorf("resolve %q/%q: %w", serverID, tool, ErrInternalTool)
	}
	en, ok := r.Tool(serverID, tool)
	if !ok {
		return nil, fmt.Errorf("resolve %q/%q: %w", serverID, tool, ErrUnknownTool)
	}
	if err := e.Check(en); err != nil {
		return nil, fmt.Errorf("resolve %q/%q: %w", serverID, tool, err)
	}
	return en, nil
}

// ResolveTool finds a tool by name alone (an A2A skill id is the tool name)
// among the tools e allows. Two allowed servers with the tool give
// ErrAmbiguousTool rather than a silent pick. When none is allowed the error
// wraps ErrNotExposed if a non-internal server has it hidden, ErrInternalTool
// if only internal servers have it, and ErrUnknownTool otherwise.
func (r *Registry) ResolveTool(e Exposure, tool string) (*Entry, error) {
	if e.IsInternal(tool) {
		return nil, fmt.Errorf("resolve tool %q: %w", tool, ErrInternalTool)
	}
	r.mu.RLock()
	candidates := slices.Clone(r.byTool[tool])
	r.mu.RUnlock()
	if len(candidates) == 0 {
		return nil, fmt.Errorf("resolve tool %q: %w", tool, ErrUnknownTool)
	}
	var allowed []*Entry
	hidden := false
	for _, en := range candidates {
		switch err := e.Check(en); {
		case err == nil:
			allowed = append(allowed, en)
		case !errors.Is(err, ErrInternalTool):
			hidden = true
		}
	}
	switch {
	case len(allowed) == 1:
		return allowed[0], nil
	case len(allowed) > 1:
		ids := make([]string, len(allowed))
		for i, en := range allowed {
			ids[i] = en.Manifest.ServerID
		}
		slices.Sort(ids)
		return nil, fmt.Errorf("resolve tool %q: on servers %q: %w", tool, ids, ErrAmbiguousTool)
	case hidden:
		return nil, fmt.Errorf("resolve tool %q: %w", tool, ErrNotExposed)
	default:
		return nil, fmt.Errorf("resolve tool %q: %w", tool, ErrInternalTool)
	}
}

// valid refuses a Protocol that would build odd metadata keys (".expose",
// "a.b.expose"); such an Exposure fails closed.
func (e Exposure) valid() error {
	if !schemas.ValidName(e.Protocol) || strings.ContainsAny(e.Protocol, ". ") {
		return fmt.Errorf("exposure protocol %q is not a plain name such as \"a2a\"", e.Protocol)
	}
	return nil
}

// isJSONTrue accepts only the JSON literal true: the string "true", 1 or
// null do not opt a tool in.
func isJSONTrue(raw json.RawMessage) bool {
	var v any
	return len(raw) > 0 && json.Unmarshal(raw, &v) == nil && v == true
}

func jsonString(raw json.RawMessage) (string, bool) {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}
