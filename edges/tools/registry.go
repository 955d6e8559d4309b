package tools

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/chio-ledger/chio/schemas"
)

// MaxManifestBytes bounds a manifest file read by LoadManifestFile, so a
// wrong path (a log, a device) cannot exhaust memory.
const MaxManifestBytes = 8 << 20

// Entry is one registered tool. Its fields point into the registry's own copy
// of the manifest and must be treated as read-only.
type Entry struct {
	Manifest *schemas.ToolManifest
	Tool     *schemas.ToolDefinition
	Server   Server // nil for a manifest registered without a server
	// Signed is the server's current manifest with its hash and, when the
	// registry has a manifest key, its signature: receipts of calls of the
	// tool name its hash. Shared by the server's entries; read-only.
	Signed *schemas.SignedManifest
	// Origin is where the server's tools come from.
	Origin Origin
}

// DenyByDefault reports whether the tool runs only under a grant naming
// it (MetaDenyByDefault).
func (e *Entry) DenyByDefault() bool {
	return e != nil && string(bytes.TrimSpace(e.Tool.Metadata[MetaDenyByDefault])) == "true"
}

// Invoke calls the tool on its server under invocation id.
func (e *Entry) Invoke(ctx context.Context, id string, args json.RawMessage) (json.RawMessage, error) {
	if e.Server == nil {
		return nil, fmt.Errorf("invoke %s/%s: %w", e.Manifest.ServerID, e.Tool.Name, ErrNoServer)
	}
	return e.Server.Invoke(ctx, e.invocation(id, args))
}

// InvokeStream calls the tool on its server as a stream under invocation id.
func (e *Entry) InvokeStream(ctx context.Context, id string, args json.RawMessage, emit func(Chunk) error) error {
	if e.Server == nil {
		return fmt.Errorf("invoke stream %s/%s: %w", e.Manifest.ServerID, e.Tool.Name, ErrNoServer)
	}
	return e.Server.InvokeStream(ctx, e.invocation(id, args), emit)
}

// Cancel stops invocation id on the tool's server.
func (e *Entry) Cancel(ctx context.Context, id string) error {
	if e.Server == nil {
		return fmt.Errorf("cancel %s/%s: %w", e.Manifest.ServerID, e.Tool.Name, ErrNoServer)
	}
	return e.Server.Cancel(ctx, id)
}

func (e *Entry) invocation(id string, args json.RawMessage) Invocation {
	return Invocation{ID: id, ServerID: e.Manifest.ServerID, ToolName: e.Tool.Name, Arguments: args}
}

// Registry holds the tool servers and manifests an edge serves. It is safe
// for concurrent use.
type Registry struct {
	key     ed25519.PrivateKey // signs manifests; nil: hashed only
	mu      sync.RWMutex
	servers map[string]map[string]*Entry // server id → tool name → entry
	byTool  map[string][]*Entry          // tool name → entries on every server
	info    map[string]ServerInfo        // server id → its origin and signed manifest
}

// RegistryOption configures a Registry.
type RegistryOption func(*Registry)

// WithManifestKey signs every manifest the registry takes (Register,
// Replace, AddManifest) with key, as a chio.signed_manifest.v1 document.
// Without it manifests are hashed, not signed.
func WithManifestKey(key ed25519.PrivateKey) RegistryOption {
	return func(r *Registry) { r.key = key }
}

// NewRegistry returns an empty registry.
func NewRegistry(opts ...RegistryOption) *Registry {
	r := &Registry{
		servers: make(map[string]map[string]*Entry),
		byTool:  make(map[string][]*Entry),
		info:    make(map[string]ServerInfo),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// ManifestSigner returns the public key (wire form) manifests are signed
// with, or "" when they are only hashed.
func (r *Registry) ManifestSigner() string {
	if r.key == nil {
		return ""
	}
	return schemas.EncodePublicKey(r.key.Public().(ed25519.PublicKey))
}

// entries builds the entries of a private copy of m, signed.
func (r *Registry) entries(m *schemas.ToolManifest, s Server) (ServerInfo, map[string]*Entry, error) {
	c := cloneManifest(m)
	signed, err := schemas.SignManifest(r.key, c)
	if err != nil {
		return ServerInfo{}, nil, err
	}
	in := ServerInfo{ServerID: c.ServerID, Origin: OriginOf(s), Signed: signed, Manifest: c, server: s}
	tools := make(map[string]*Entry, len(c.Tools))
	for i := range c.Tools {
		tools[c.Tools[i].Name] = &Entry{Manifest: c, Tool: &c.Tools[i], Server: s, Signed: signed, Origin: in.Origin}
	}
	return in, tools, nil
}

// Register adds an in-process server. Its manifest must be valid, name the
// server's own id and list exactly the tools the server reports.
func (r *Registry) Register(s Server) error {
	if s == nil {
		return errors.New("register server: server is nil")
	}
	m := s.Manifest()
	if m == nil {
		return fmt.Errorf("register server %q: manifest is nil", s.ServerID())
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("register server %q: %w", s.ServerID(), err)
	}
	if id := s.ServerID(); id != m.ServerID {
		return fmt.Errorf("register server %q: manifest server_id is %q", id, m.ServerID)
	}
	if err := sameTools(s.ToolNames(), m); err != nil {
		return fmt.Errorf("register server %q: %w", m.ServerID, err)
	}
	if err := r.add(m, s); err != nil {
		return fmt.Errorf("register server %q: %w", m.ServerID, err)
	}
	return nil
}

// Replace swaps the tools of a registered server for what it reports now:
// a bridge whose upstream changed its tool list calls it. The server must
// already be registered under its id, with the same Server; its new
// manifest is checked as Register checks it, except that it may list no
// tools (an upstream may withdraw all of them). Calls already resolved keep
// the entry they resolved; later lookups see the new tools only.
func (r *Registry) Replace(s Server) error {
	if s == nil {
		return errors.New("replace server: server is nil")
	}
	m := s.Manifest()
	if m == nil {
		return fmt.Errorf("replace server %q: manifest is nil", s.ServerID())
	}
	if len(m.Tools) > 0 {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("replace server %q: %w", s.ServerID(), err)
		}
	} else if m.Schema != schemas.ManifestSchema || !schemas.ValidName(m.ServerID) {
		return fmt.Errorf("replace server %q: manifest schema or server_id is invalid", s.ServerID())
	}
	if id := s.ServerID(); id != m.ServerID {
		return fmt.Errorf("replace server %q: manifest server_id is %q", id, m.ServerID)
	}
	if err := sameTools(s.ToolNames(), m); err != nil {
		return fmt.Errorf("replace server %q: %w", m.ServerID, err)
	}
	// A new manifest is signed: calls resolved from now on name its hash.
	c, fresh, err := r.entries(m, s)
	if err != nil {
		return fmt.Errorf("replace server %q: %w", m.ServerID, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.servers[c.ServerID]
	if !ok {
		return fmt.Errorf("replace server %q: not registered", c.ServerID)
	}
	// The identity is the info's, not an entry's: a server that withdrew
	// every tool has no entries left, and must still not be taken over.
	if r.info[c.ServerID].server != s {
		return fmt.Errorf("replace server %q: registered with another server", c.ServerID)
	}
	for name, e := range old {
		r.byTool[name] = slices.DeleteFunc(r.byTool[name], func(x *Entry) bool { return x == e })
		if len(r.byTool[name]) == 0 {
			delete(r.byTool, name)
		}
	}
	r.servers[c.ServerID] = fresh
	r.info[c.ServerID] = c
	for name, e := range fresh {
		r.byTool[name] = append(r.byTool[name], e)
	}
	return nil
}

// AddManifest adds a manifest without an in-process server: its tools are
// discoverable, and dispatching one gives ErrNoServer.
func (r *Registry) AddManifest(m *schemas.ToolManifest) error {
	if m == nil {
		return errors.New("add manifest: manifest is nil")
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("add manifest %q: %w", m.ServerID, err)
	}
	if err := r.add(m, nil); err != nil {
		return fmt.Errorf("add manifest %q: %w", m.ServerID, err)
	}
	return nil
}

// LoadManifestFile reads and parses a chio.manifest.v1 file.
func LoadManifestFile(path string) (*schemas.ToolManifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", path, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", path, err)
	}
	if len(raw) > MaxManifestBytes {
		return nil, fmt.Errorf("load manifest %s: larger than %d bytes", path, MaxManifestBytes)
	}
	m, err := schemas.ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", path, err)
	}
	return m, nil
}

// Tool returns a registered tool without any exposure filtering; outward
// edges use Resolve instead.
func (r *Registry) Tool(serverID, tool string) (*Entry, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.servers[serverID][tool]
	return e, ok
}

// add stores a private copy of m, so that a server changing the manifest it
// returned cannot change what was validated and exposed.
func (r *Registry) add(m *schemas.ToolManifest, s Server) error {
	c, tools, err := r.entries(m, s)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.servers[c.ServerID]; dup {
		return errors.New("server id is already registered")
	}
	r.servers[c.ServerID] = tools
	r.info[c.ServerID] = c
	for name, e := range tools {
		r.byTool[name] = append(r.byTool[name], e)
	}
	return nil
}

// sameTools checks that a server reports exactly its manifest's tools, so
// the registry never advertises a tool the server cannot run, nor the reverse.
func sameTools(names []string, m *schemas.ToolManifest) error {
	want := make(map[string]bool, len(m.Tools))
	for _, t := range m.Tools {
		want[t.Name] = false
	}
	for _, n := range names {
		seen, ok := want[n]
		switch {
		case !ok:
			return fmt.Errorf("server reports tool %q that its manifest does not list", n)
		case seen:
			return fmt.Errorf("server reports tool %q twice", n)
		}
		want[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(want)) {
		if !want[n] {
			return fmt.Errorf("manifest lists tool %q that the server does not report", n)
		}
	}
	return nil
}

func cloneManifest(m *schemas.ToolManifest) *schemas.ToolManifest {
	c := *m
	c.ServerTools = cloneRaw(m.ServerTools)
	c.RequiredPermissions = cloneRaw(m.RequiredPermissions)
	c.Tools = make([]schemas.ToolDefinition, len(m.Tools))
	for i, t := range m.Tools {
		t.InputSchema = cloneRaw(t.InputSchema)
		t.OutputSchema = cloneRaw(t.OutputSchema)
		t.Pricing = cloneRaw(t.Pricing)
		if t.Annotations != nil {
			a := *t.Annotations
			t.Annotations = &a
		}
		if t.Metadata != nil {
			md := make(map[string]json.RawMessage, len(t.Metadata))
			for k, v := range t.Metadata {
				md[k] = cloneRaw(v)
			}
			t.Metadata = md
		}
		c.Tools[i] = t
	}
	return &c
}

func cloneRaw(raw json.RawMessage) json.RawMessage {
	return json.RawMessage(bytes.Clone(raw))
}
