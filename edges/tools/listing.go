package tools

import (
	"errors"

	"github.com/chio-ledger/chio/schemas"
)

// ListingPath is where an edge serves its Listing to operators.
const ListingPath = "/v1/tools"

// Listing is an operator's view of a registry: every server, exposed or
// not, with where its tools come from, its signed manifest, and for each
// tool its exposure to each audience and its fidelity on A2A and ACP.
type Listing struct {
	// ManifestSigner is the key manifests are signed with, "" when they
	// are only hashed.
	ManifestSigner string         `json:"manifest_signer,omitempty"`
	Servers        []ListedServer `json:"servers"`
}

// ListedServer is one server of a Listing.
type ListedServer struct {
	ServerID       string                  `json:"server_id"`
	Origin         Origin                  `json:"origin"`
	ManifestHash   string                  `json:"manifest_hash"`
	SignedManifest *schemas.SignedManifest `json:"signed_manifest"`
	Tools          []ListedTool            `json:"tools"`
}

// ListedTool is one tool of a ListedServer.
type ListedTool struct {
	Name string `json:"name"`
	// Exposure maps each audience (its protocol) to "exposed", "hidden"
	// (no opt-in, or another tier) or "internal" (the hard floor).
	Exposure map[string]string `json:"exposure"`
	// Fidelity is the tool's rating on "a2a" and "acp".
	Fidelity map[string]Fidelity `json:"fidelity"`
}

// Exposure states in a Listing.
const (
	Exposed  = "exposed"
	Hidden   = "hidden"
	Internal = "internal"
)

// Listing describes every registered server and tool for the given
// audiences; a2a and acpDefault are the edges' fidelity settings.
func (r *Registry) Listing(audiences []Exposure, a2a A2AProfile, acpDefault ACPCategory) Listing {
	l := Listing{ManifestSigner: r.ManifestSigner(), Servers: []ListedServer{}}
	for _, in := range r.Servers() {
		s := ListedServer{ServerID: in.ServerID, Origin: in.Origin, ManifestHash: in.Signed.ManifestHash,
			SignedManifest: in.Signed, Tools: []ListedTool{}}
		for i := range in.Manifest.Tools {
			t := &in.Manifest.Tools[i]
			en := &Entry{Manifest: in.Manifest, Tool: t}
			lt := ListedTool{Name: t.Name, Exposure: make(map[string]string, len(audiences)), Fidelity: make(map[string]Fidelity, 2)}
			for _, a := range audiences {
				switch err := a.Check(en); {
				case err == nil:
					lt.Exposure[a.Protocol] = Exposed
				case errors.Is(err, ErrInternalTool):
					lt.Exposure[a.Protocol] = Internal
				default:
					lt.Exposure[a.Protocol] = Hidden
				}
			}
			lt.Fidelity["a2a"] = A2AFidelity(t, a2a)
			_, lt.Fidelity["acp"] = ACPFidelity(t, acpDefault)
			s.Tools = append(s.Tools, lt)
		}
		l.Servers = append(l.Servers, s)
	}
	return l
}
