package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/chio-ledger/chio/schemas"
)

// Origin says where a server's tools come from, for operators reading a
// listing; it changes nothing in how calls are governed.
type Origin string

// Origins.
const (
	// OriginInProcess: a server compiled into chio (the demos, a relay).
	OriginInProcess Origin = "in-process"
	// OriginOpenAPI: operations of an HTTP API bridged from its OpenAPI spec.
	OriginOpenAPI Origin = "openapi"
	// OriginMCP: tools of a wrapped MCP server.
	OriginMCP Origin = "mcp"
	// OriginA2A: skills of a partner A2A agent.
	OriginA2A Origin = "a2a-partner"
	// OriginWorker: a tool server running as a NATS service (a worker).
	OriginWorker Origin = "worker"
	// OriginManifest: a manifest registered without a server (--manifest).
	OriginManifest Origin = "manifest"
)

// OriginReporter is implemented by servers that are not in-process ones:
// each bridge's server reports its origin, and so does a worker's.
type OriginReporter interface {
	Origin() Origin
}

// OriginOf is s's origin: what it reports, OriginManifest for no server,
// OriginInProcess otherwise.
func OriginOf(s Server) Origin {
	if s == nil {
		return OriginManifest
	}
	if o, ok := s.(OriginReporter); ok && o.Origin() != "" {
		return o.Origin()
	}
	return OriginInProcess
}

// ServerInfo describes one registered server.
type ServerInfo struct {
	ServerID string
	Origin   Origin
	// Signed is its current manifest, hashed and, with a manifest key,
	// signed (chio.signed_manifest.v1).
	Signed *schemas.SignedManifest
	// Manifest is the registry's copy of the manifest; read-only.
	Manifest *schemas.ToolManifest
	// server is the one registered under the id (nil for AddManifest):
	// only it may Replace the tools.
	server Server
}

// Servers lists the registered servers by id.
func (r *Registry) Servers() []ServerInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]ServerInfo, 0, len(r.info))
	for _, in := range r.info {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b ServerInfo) int { return strings.Compare(a.ServerID, b.ServerID) })
	return out
}

// SignedManifests is every server's current chio.signed_manifest.v1
// document, by server id. A document that does not encode is an error,
// not a gap: a listing must not silently leave a server out.
func (r *Registry) SignedManifests() ([]json.RawMessage, error) {
	var out []json.RawMessage
	for _, in := range r.Servers() {
		b, err := json.Marshal(in.Signed)
		if err != nil {
			return nil, fmt.Errorf("signed manifests: encode %q: %w", in.ServerID, err)
		}
		out = append(out, b)
	}
	return out, nil
}
