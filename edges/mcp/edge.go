package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
)

// Path is where Register mounts the streamable HTTP transport.
const Path = "/mcp"

// MaxBodyBytes bounds an HTTP request body, as the SDK's default does.
const MaxBodyBytes = sdk.DefaultMaxRequestBodyBytes

// Edge serves the exposed tools over MCP. It is safe for concurrent use.
type Edge struct {
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
	opts     options
	log      *slog.Logger
	reg      *tools.Registry
	server   *sdk.Server
	http     http.Handler
	// mu serializes rebuilds of cur, the tools of the registry's current
	// state (see tools), and their registration with server.
	mu  sync.Mutex
	cur atomic.Pointer[toolSet]
}

// toolSet is the listed tools built from one state of the registry.
type toolSet struct {
	key      tools.Version
	bindings []*binding // registry order
	byName   map[string]*binding
}

// New builds the edge over a kernel built with kernel.WithRegistry(reg)
// and its dispatcher. The listed tools follow the registry: a tool
// registered or replaced later is listed and callable on the next request,
// without a restart.
func New(k *kernel.Kernel, reg *tools.Registry, d *dispatch.Dispatcher, opts ...Option) *Edge {
	o := options{exposure: tools.Exposure{Protocol: "mcp"}, name: "chio", version: "dev"}
	for _, opt := range opts {
		opt(&o)
	}
	if o.exposure.Protocol == "" {
		o.exposure.Protocol = "mcp"
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	e := &Edge{kernel: k, dispatch: d, opts: o, log: o.log, reg: reg}
	// The list follows the registry, and the SDK tells sessions (stdio)
	// with notifications/tools/list_changed when tools are added to or
	// removed from its server; leaving logging out keeps the SDK's
	// default logging capability off.
	e.server = sdk.NewServer(&sdk.Implementation{Name: o.name, Version: o.version}, &sdk.ServerOptions{
		Logger:       quiet(o.log),
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	e.tools()
	e.server.AddReceivingMiddleware(e.govern)
	e.http = e.authenticate(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return e.server },
		&sdk.StreamableHTTPOptions{
			Stateless: true, JSONResponse: true, Logger: quiet(o.log),
			// authenticate has bounded the body already; stamping request
			// ids into it may add a few bytes per call.
			MaxRequestBodyBytes: -1,
		}))
	return e
}

// tools are the listed tools of the registry's current state. They are
// rebuilt only when a server was registered or replaced since the last
// build, so a request pays one registry read-lock to learn that.
func (e *Edge) tools() *toolSet {
	if t := e.cur.Load(); t != nil && t.key.Matches(e.reg.Servers()) {
		return t
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Read the registry again under the lock: a request holding an older
	// snapshot must not replace a newer set.
	servers := e.reg.Servers()
	old := e.cur.Load()
	if old != nil && old.key.Matches(servers) {
		return old
	}
	t := e.rebind(tools.VersionOf(servers), e.reg.Exposed(e.opts.exposure), old)
	e.cur.Store(t)
	return t
}

// rebind builds the set of entries and brings the SDK server's tools in
// line with it: a tool kept under the same name keeps its registration
// (no needless list_changed), a new or replaced one is added, and one no
// longer listed is removed, so tools/call cannot reach it by name.
func (e *Edge) rebind(key tools.Version, entries []*tools.Entry, old *toolSet) *toolSet {
	t := &toolSet{key: key, byName: map[string]*binding{}}
	for _, b := range bindTools(entries, e.log) {
		if o, ok := old.lookup(b.name); ok && o.entry == b.entry {
			b = o
		} else {
			if e.opts.simulate {
				// A simulation answers the request it would send, not
				// the tool's output: the output schema does not describe it.
				b.tool.OutputSchema = nil
			}
			if err := e.addTool(b); err != nil {
				e.log.Warn("mcp: tool left off this surface", "server_id", b.entry.Manifest.ServerID,
					"tool_name", b.entry.Tool.Name, "err", err)
				continue
			}
		}
		t.bindings = append(t.bindings, b)
		t.byName[b.name] = b
	}
	var gone []string
	if old != nil {
		for name := range old.byName {
			if _, ok := t.byName[name]; !ok {
				gone = append(gone, name)
			}
		}
	}
	if len(gone) > 0 {
		e.server.RemoveTools(gone...)
	}
	return t
}

// lookup is the binding listed under name; t may be nil (no set yet).
func (t *toolSet) lookup(name string) (*binding, bool) {
	if t == nil {
		return nil, false
	}
	b, ok := t.byName[name]
	return b, ok
}

// addTool registers b with the SDK server, turning the SDK's panic on a
// schema it refuses into an error: a manifest must not take a replica down.
func (e *Edge) addTool(b *binding) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("add tool %q: %v", b.name, r)
		}
	}()
	e.server.AddTool(b.tool, e.handle(b))
	return nil
}

// Handler is the streamable HTTP transport, stateless: every request
// carries its capability and needs no session.
func (e *Edge) Handler() http.Handler { return e.http }

// Register mounts Handler at Path (POST; GET and DELETE get the SDK's 405,
// as a stateless server offers no stream nor session).
func (e *Edge) Register(ec *echo.Echo) {
	ec.Match([]string{http.MethodPost, http.MethodGet, http.MethodDelete}, Path, echo.WrapHandler(e.http))
	e.registerResource(ec)
}

// Name is the MCP name of a listed tool.
func (e *Edge) Name(serverID, tool string) (string, bool) {
	for _, b := range e.tools().bindings {
		if b.entry.Manifest.ServerID == serverID && b.entry.Tool.Name == tool {
			return b.name, true
		}
	}
	return "", false
}

// quiet passes on only warnings and errors: the SDK logs every stateless
// request's session at info level.
func quiet(l *slog.Logger) *slog.Logger { return slog.New(minLevel{l.Handler(), slog.LevelWarn}) }

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}
func (h minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(a), h.min}
}
func (h minLevel) WithGroup(n string) slog.Handler { return minLevel{h.Handler.WithGroup(n), h.min} }
