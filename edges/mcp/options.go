package mcp

import (
	"log/slog"

	"github.com/chio-ledger/chio/edges/tools"
)

// options is what New is told.
type options struct {
	exposure      tools.Exposure
	devToken      string
	log           *slog.Logger
	simulate      bool
	name, version string
	origin        string
	authServers   []string // WithAuthorizationServers (resource.go)
}

// Option configures an Edge.
type Option func(*options)

// WithExposure sets which tools the edge shows and runs. The default,
// tools.Exposure{Protocol: "mcp"}, exposes only tools whose manifest
// metadata sets "mcp.expose": true.
func WithExposure(e tools.Exposure) Option { return func(o *options) { o.exposure = e } }

// WithDevToken sets the capability used for callers that present none
// (the dev mode of `chio up`); without it such callers get 401.
func WithDevToken(tok string) Option { return func(o *options) { o.devToken = tok } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithSimulation turns simulation mode on: tools/call runs no tool and
// writes no event nor receipt; it answers what the tool's server
// simulates (see Simulator), marked "bridgeMode": "simulation".
func WithSimulation(on bool) Option { return func(o *options) { o.simulate = on } }

// WithPublicOrigin sets the origin ("https://tools.example") clients
// address this edge by, which their DPoP proofs name (htu); by default the
// request's Host and whether it came over TLS decide.
func WithPublicOrigin(origin string) Option { return func(o *options) { o.origin = origin } }

// WithServerInfo sets the name and version initialize reports.
func WithServerInfo(name, version string) Option {
	return func(o *options) { o.name, o.version = name, version }
}
