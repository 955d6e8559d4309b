package openai

import (
	"bytes"
	"encoding/json"
	"log/slog"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
)

// Adapter serves the OpenAI surface. It is safe for concurrent use.
type Adapter struct {
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
	exposure tools.Exposure
	names    *Names
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
// and its dispatcher. The registry must be complete: function names are
// fixed here.
func New(k *kernel.Kernel, reg *tools.Registry, d *dispatch.Dispatcher, opts ...Option) *Adapter {
	a := &Adapter{kernel: k, dispatch: d, exposure: tools.Exposure{Protocol: "openai"}, log: slog.Default()}
	for _, o := range opts {
		o(a)
	}
	if a.exposure.Protocol == "" {
		a.exposure.Protocol = "openai"
	}
	a.names = NewNames(reg.Exposed(a.exposure), a.log)
	return a
}

// Names is the adapter's function-name table.
func (a *Adapter) Names() *Names { return a.names }

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
	for _, b := range a.names.All() {
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
