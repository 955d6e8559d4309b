package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/chio-ledger/chio/schemas"
)

// Config configures Build.
type Config struct {
	ServerID string // required: the manifest's server_id
	// OutputSchemas adds each tool's output_schema, in the shape Invoke
	// returns: {httpStatus, method, path, body} with the operation's 200
	// (else 201, else first 2xx) JSON response schema under body.
	OutputSchemas bool
}

// Skipped is an operation the spec declares but the bridge cannot carry.
type Skipped struct {
	Method, Path, Reason string
}

// Bridge is a spec turned into a manifest and a route table. It is
// immutable and safe for concurrent use.
type Bridge struct {
	spec     *Spec
	manifest *schemas.ToolManifest
	routes   []*Route
	byTool   map[string]*Route
	byOp     map[string]*Route // "METHOD path"
	skipped  []Skipped
	router   routers.Router
}

// Methods are published in this order within a path; other methods (TRACE,
// CONNECT, custom ones) are not published.
func publishedMethods() []string {
	return []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions}
}

// candidate is an operation on its way to becoming a tool.
type candidate struct {
	method, path string
	item         *openapi3.PathItem
	op           *openapi3.Operation
	ext          extensions
	params       []*openapi3.Parameter // bound in the order of route.Params
	paramSchemas []*openapi3.SchemaRef // their schemas
	input        json.RawMessage       // the input schema
	tool         string
	route        *Route
	def          schemas.ToolDefinition
}

// Build turns the spec into a chio.manifest.v1 and its route table: one
// tool per (method, path), paths in sorted order and, within a path, methods
// in the order GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS. Operations
// marked x-chio-publish: false are left out; operations the bridge cannot
// carry are left out too and listed by Skipped. With no tool left, the error
// wraps ErrNoOperations. The manifest passes schemas' own validation.
func Build(s *Spec, cfg Config) (*Bridge, error) {
	if s == nil || s.Doc == nil {
		return nil, errors.New("build bridge: spec is nil")
	}
	if !schemas.ValidName(cfg.ServerID) {
		return nil, errors.New("build bridge: server id is required (at most 256 bytes, no control characters)")
	}
	b := &Bridge{spec: s, byTool: make(map[string]*Route), byOp: make(map[string]*Route)}
	var cands []*candidate
	paths := s.Doc.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		item := paths[path]
		if item == nil {
			continue
		}
		for _, method := range publishedMethods() {
			op := item.GetOperation(method)
			if op == nil {
				continue
			}
			// A malformed x-chio-* value fails the build: guessing
			// would publish, or hide, what the operator did not mean.
			ext, err := readExtensions(method, op)
			if err != nil {
				return nil, fmt.Errorf("build bridge: %s %s: %w", method, path, err)
			}
			if !ext.publish {
				continue
			}
			c := &candidate{method: method, path: path, item: item, op: op, ext: ext}
			if c.route, err = bindRoute(c); err != nil {
				b.skipped = append(b.skipped, Skipped{method, path, err.Error()})
				continue
			}
			cands = append(cands, c)
		}
	}
	if err := assignNames(cands); err != nil {
		return nil, fmt.Errorf("build bridge: %w", err)
	}
	cs := newComponents(s.Doc)
	kept := cands[:0]
	for _, c := range cands {
		c.route.Tool = c.tool
		def, err := toolDefinition(cs, c, cfg)
		if err != nil {
			b.skipped = append(b.skipped, Skipped{c.method, c.path, err.Error()})
			continue
		}
		c.def = def
		kept = append(kept, c)
	}
	kept, skipped := compileTools(kept)
	b.skipped = append(b.skipped, skipped...)
	if len(kept) == 0 {
		return nil, fmt.Errorf("build manifest for %s: %w%s", s.Source, ErrNoOperations, skippedSummary(b.skipped))
	}

	m := &schemas.ToolManifest{
		Schema:   schemas.ManifestSchema,
		ServerID: cfg.ServerID,
		Name:     cfg.ServerID,
		Version:  "0",
	}
	if info := s.Doc.Info; info != nil {
		if t := strings.TrimSpace(info.Title); t != "" {
			m.Name = t
		}
		if v := strings.TrimSpace(info.Version); v != "" {
			m.Version = v
		}
		if d := strings.TrimSpace(info.Description); d != "" {
			m.Description = d
		}
	}
	for _, c := range kept {
		m.Tools = append(m.Tools, c.def)
		b.routes = append(b.routes, c.route)
		b.byTool[c.route.Tool] = c.route
		b.byOp[c.method+" "+c.path] = c.route
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("build manifest for %s: %w", s.Source, err)
	}
	b.manifest = m
	router, err := newRouter(s.Doc, kept)
	if err != nil {
		return nil, fmt.Errorf("build bridge: router: %w", err)
	}
	b.router = router
	return b, nil
}

// newRouter routes requests to the published operations only, by path from
// the root: the document's servers are left out, so neither host nor base
// path takes part in matching (see Bridge.Match).
func newRouter(doc *openapi3.T, kept []*candidate) (routers.Router, error) {
	rd := &openapi3.T{OpenAPI: doc.OpenAPI, Info: doc.Info, Paths: openapi3.NewPaths()}
	for _, c := range kept {
		item := rd.Paths.Value(c.path)
		if item == nil {
			item = &openapi3.PathItem{}
			rd.Paths.Set(c.path, item)
		}
		item.SetOperation(c.method, c.op)
	}
	return gorillamux.NewRouter(rd)
}

func skippedSummary(sk []Skipped) string {
	if len(sk) == 0 {
		return ""
	}
	parts := make([]string, 0, len(sk))
	for _, s := range sk {
		parts = append(parts, s.Method+" "+s.Path+": "+s.Reason)
	}
	return " (not supported: " + strings.Join(parts, "; ") + ")"
}

// Manifest returns a copy of the manifest; changing it changes nothing here.
func (b *Bridge) Manifest() *schemas.ToolManifest { return cloneManifest(b.manifest) }

// Spec returns the spec the bridge was built from.
func (b *Bridge) Spec() *Spec { return b.spec }

// Route returns the route of a tool.
func (b *Bridge) Route(tool string) (*Route, bool) {
	rt, ok := b.byTool[tool]
	return rt, ok
}

// Routes returns the routes in manifest order.
func (b *Bridge) Routes() []*Route { return slices.Clone(b.routes) }

// Skipped lists the operations left out because the bridge cannot carry
// them (not those marked x-chio-publish: false).
func (b *Bridge) Skipped() []Skipped { return slices.Clone(b.skipped) }
