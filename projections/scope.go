package projections

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/schemas"
)

// scope decides, for one request, what its reader may see of one snapshot
// of the store. An operator (readauth.Reader.AllViews) sees everything.
// Anyone else sees:
//   - a task whose owner's authority path has one of the reader's
//     principals among its prefixes (the owner itself, or an ancestor
//     learned from the lineage of decision events: the subtree rule);
//   - a capability's lineage when the capability is in the reader's own
//     chain, or when the reader's principals include one of the prefixes
//     of the capability's authority path (read from the stored chain);
//   - a receipt in the authorization-context report only under the second
//     rule: a reader's ancestors' receipts are not its own.
//
// What cannot be decided (no lineage yet, a broken chain) is not visible.
// Results are cached per request: many tasks share an owner and many
// receipts a capability.
type scope struct {
	r      *readauth.Reader
	v      view
	owners map[string]bool     // task owner → visible
	paths  map[string][]string // capability id → its path principals (nil: unknown)
}

func newScope(r *readauth.Reader, v view) *scope {
	return &scope{r: r, v: v, owners: map[string]bool{}, paths: map[string][]string{}}
}

// all reports whether the reader sees everything.
func (s *scope) all() bool { return s.r.AllViews() }

// task reports whether a task owned by owner (schemas.TaskOwner.Subject)
// is visible.
func (s *scope) task(owner string) (bool, error) {
	if s.all() {
		return true, nil
	}
	if ok, cached := s.owners[owner]; cached {
		return ok, nil
	}
	anc, err := ownerAncestry(s.v, owner)
	if err != nil {
		return false, err
	}
	ok := s.r.Sees(anc)
	s.owners[owner] = ok
	return ok, nil
}

// ownerAncestry is owner and the principals of its authority path's
// prefixes, as the lineage fold learned them; owner alone when it has not
// (yet) seen a decision under that path, or when owner is not a principal.
func ownerAncestry(v view, owner string) ([]string, error) {
	if !schemas.ValidPrincipal(owner) {
		return []string{owner}, nil
	}
	raw, err := getFrom(v, ancestryKey(owner))
	if errors.Is(err, errNotFound) {
		return []string{owner}, nil
	}
	if err != nil {
		return nil, err
	}
	var anc []string
	if err := json.Unmarshal(raw, &anc); err != nil {
		return nil, fmt.Errorf("ancestry of %s: %w", owner, err)
	}
	if !slices.Contains(anc, owner) {
		anc = append(anc, owner)
	}
	return anc, nil
}

// lineage reports whether capability id's lineage is visible: the
// reader's own chain, or the reader's subtree.
func (s *scope) lineage(id string) (bool, error) {
	if s.all() || slices.Contains(s.r.CapabilityIDs, id) {
		return true, nil
	}
	return s.subtree(id)
}

// subtree reports whether what was done with capability id is the
// reader's: one of its principals is a prefix of id's authority path.
func (s *scope) subtree(id string) (bool, error) {
	if s.all() {
		return true, nil
	}
	if id == "" {
		return false, nil
	}
	path, cached := s.paths[id]
	if !cached {
		var err error
		if path, err = capabilityPath(s.v, id); err != nil {
			return false, err
		}
		s.paths[id] = path
	}
	return s.r.Sees(path), nil
}

// capabilityPath is the principals of capability id's authority path
// (schemas.PathPrincipals: the root record's issuer, then every subject
// from the root down to id), read from the stored lineage records; nil
// when the projection holds no record of id or its chain is broken.
func capabilityPath(v view, id string) ([]string, error) {
	var subjects []string
	var depths []int
	var root schemas.CapabilityLineage
	for cur := id; ; {
		if len(subjects) > schemas.MaxDelegationDepth {
			return nil, nil // loops or is too deep: not a chain
		}
		raw, err := getFrom(v, append([]byte{prefixLineage}, cur...))
		if errors.Is(err, errNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var rec schemas.CapabilityLineage
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("lineage %s: %w", cur, err)
		}
		subjects, depths = append(subjects, rec.SubjectKey), append(depths, rec.DelegationDepth)
		if rec.ParentCapabilityID == "" {
			root = rec
			break
		}
		cur = rec.ParentCapabilityID
	}
	slices.Reverse(subjects)
	slices.Reverse(depths)
	for i, d := range depths {
		if d != i {
			return nil, nil // the records do not form one chain
		}
	}
	return schemas.PathPrincipals(root.IssuerKey, subjects), nil
}
