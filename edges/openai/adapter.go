package openai

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
)

// Adapter serves the OpenAI surface. It is safe for concurrent use.
type Adapter struct {
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
	exposure tools.Exposure
	reg      *tools.Registry
	// mu serializes rebuilds of names, the function-name table of the
	// registry's current exposed tools (see table).
	mu       sync.Mutex
	names    atomic.Pointer[namesAt]
	devToken string
	log      *slog.Logger
	await    awaitConfig
	upstream *Upstream
	origin   string
}

// Option configures an Adapter.
type Option func(*Adapter)

// WithExposure sets which tools the surface shows and runs (protocol
// "openai": "openai.expose" and "openai.tier"). The default exposes only
// tools whose manifest sets "openai.expose": true.
func WithExposure(e tools.Exposure) Option { return func(a *Adapter) { a.exposure = e } }

// WithDevToken sets the capability used for callers that present none
// (the dev mode of `chio up`); without it such callers get 401.
func WithDevToken(tok string) Option { return func(a *Adapter) { a.devToken = tok } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(a *Adapter) { a.log = l } }

// WithPublicOrigin sets the origin ("https://tools.example") clients
// address this surface by, which their DPoP proofs name (htu); by default
// the request's Host and whether it came over TLS decide.
func WithPublicOrigin(origin string) Option { return func(a *Adapter) { a.origin = origin } }

// New builds the adapter over a kernel built with kernel.WithRegistry(reg)
// and its dispatcher. Function names follow the registry: a tool
// registered or replaced later is listed and callable on the next request,
// without a restart.
func New(k *kernel.Kernel, reg *tools.Registry, d *dispatch.Dispatcher, opts ...Option) *Adapter {
	a := &Adapter{kernel: k, dispatch: d, exposure: tools.Exposure{Protocol: "openai"}, log: slog.Default()}
	for _, o := range opts {
		o(a)
	}
	if a.exposure.Protocol == "" {
		a.exposure.Protocol = "openai"
	}
	a.reg = reg
	a.table()
	return a
}

// namesAt is a function-name table and the registry state it was built from.
type namesAt struct {
	key   tools.Version
	names *Names
}

// table is the function-name table of the registry's current exposed
// tools. It is rebuilt only when a server was registered or replaced since
// the last build, so a request pays one registry read-lock to learn that.
func (a *Adapter) table() *Names {
	if n := a.names.Load(); n != nil && n.key.Matches(a.reg.Servers()) {
		return n.names
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Read the registry again under the lock: a request holding an older
	// snapshot must not replace a newer table.
	servers := a.reg.Servers()
	if n := a.names.Load(); n != nil && n.key.Matches(servers) {
		return n.names
	}
	n := &namesAt{key: tools.VersionOf(servers), names: NewNames(a.reg.Exposed(a.exposure), a.log)}
	a.names.Store(n)
	return n.names
}

// Names is the adapter's current function-name table.
func (a *Adapter) Names() *Names { return a.table() }

// Format is the shape of listed function definitions.
type Format string

// The two formats of GET /openai/v1/tools.
const (
	FormatChat      Format = "chat"
	FormatResponses Format = "responses"
)

// emptyParameters is the schema of a tool whose manifest gives none:
// OpenAI wants an object schema.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// Definitions are the function definitions of the exposed tools id may
// invoke, in registry order: Chat Completions tool envelopes, or flat
// Responses function tools (non-strict: Chio's input schemas are not
// written for OpenAI's strict subset).
func (a *Adapter) Definitions(id *kernel.Identity, f Format) []any {
	out := []any{}
	for _, b := range a.invokable(id) {
		out = append(out, definition(b, f))
	}
	return out
}

// invokable are the bindings of the exposed tools id may invoke, in
// registry order.
func (a *Adapter) invokable(id *kernel.Identity) []*Binding {
	var out []*Binding
	for _, b := range a.table().All() {
		if id.Invokes(b.Entry) {
			out = append(out, b)
		}
	}
	return out
}

// definition is b's function definition in format f.
func definition(b *Binding, f Format) any {
	en := b.Entry
	params := en.Tool.InputSchema
	if t := bytes.TrimSpace(params); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		params = emptyParameters
	}
	fn := map[string]any{"name": b.Function, "description": en.Tool.Description, "parameters": params}
	if f == FormatResponses {
		fn["type"], fn["strict"] = "function", false
		return fn
	}
	return map[string]any{"type": "function", "function": fn}
}

// ParseFormat reads the format query parameter; empty means chat.
func ParseFormat(s string) (Format, *Error) {
	switch Format(s) {
	case "", FormatChat:
		return FormatChat, nil
	case FormatResponses:
		return FormatResponses, nil
	}
	return "", invalid("invalid_format", "format", "format %q: use chat or responses", s)
}
