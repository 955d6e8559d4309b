package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/edges/mcpbridge"
)

// mcpServerID is what a wrapped MCP server's id may be: it prefixes the
// per-server flags ('ID:…'), so it has no ':' or '='.
var mcpServerID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// mcpFlags configure wrapped MCP servers. On chio up every value but
// --mcp-server names its server ('ID:…', or 'ID=…' for --mcp-expose);
// on chio bridge mcp there is one server and no prefix.
type mcpFlags struct {
	servers []string // chio up: 'ID=COMMAND LINE' or 'ID=URL'
	expose  []string // '[ID=]EDGE,EDGE'
	headers []string // '[ID:]Name=value|@file|$VAR'
	env     []string // '[ID:]KEY[=value|@file]'
}

// register adds the flags with prefix ("mcp-" on chio up, "" on bridge mcp).
func (m *mcpFlags) register(f *pflag.FlagSet, prefix string) {
	who := ""
	if prefix != "" {
		who = "ID:"
		f.StringArrayVar(&m.servers, prefix+"server", nil, "wrap an MCP server as governed tools of server ID: 'ID=COMMAND ARGS' (stdio; split as a shell splits it, quotes honoured, run without a shell) or 'ID=URL' (streamable HTTP) (repeatable)")
	}
	f.StringArrayVar(&m.expose, prefix+"expose", nil, "the edges its tools are exposed on, '"+strings.ReplaceAll(who, ":", "=")+"EDGE,EDGE' among "+strings.Join(mcpbridge.Edges(), ", ")+" (default: every edge)")
	f.StringArrayVar(&m.headers, prefix+"header", nil, "HTTP header sent to the server on every request, '"+who+"Name=value', '"+who+"Name=@file' or '"+who+"Name=$VAR' (repeatable; never relayed nor recorded)")
	f.StringArrayVar(&m.env, prefix+"env", nil, "environment variable given to the server's command, '"+who+"KEY' (passed from this environment), '"+who+"KEY=@file' or '"+who+"KEY=value' (repeatable; the command otherwise sees only PATH, HOME, locale and temp dir)")
}

// forServer keeps the values of a per-server flag that name id ('id:…' or,
// with sep '=', 'id=…'), without the prefix; with one server, unprefixed
// values are its own.
func forServer(values []string, id, sep string, prefixed bool) []string {
	var out []string
	for _, v := range values {
		if !prefixed {
			out = append(out, v)
			continue
		}
		if rest, ok := strings.CutPrefix(v, id+sep); ok {
			out = append(out, rest)
		}
	}
	return out
}

// upstream reads the server's target and its credential flags.
func (m *mcpFlags) upstream(id, target string, argv []string, prefixed bool) (mcpbridge.Upstream, []mcpbridge.Option, error) {
	var up mcpbridge.Upstream
	switch {
	case target != "" && len(argv) > 0:
		return up, nil, usageError(fmt.Errorf("MCP server %s: give a URL or a command, not both", id))
	case strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://"):
		up.URL = target
	case target != "":
		words, err := mcpbridge.SplitCommand(target)
		if err != nil {
			return up, nil, usageError(fmt.Errorf("MCP server %s: %w", id, err))
		}
		up.Command = words
	case len(argv) > 0:
		up.Command = argv
	default:
		return up, nil, usageError(fmt.Errorf("MCP server %s: a command or a URL is required", id))
	}
	for _, h := range forServer(m.headers, id, ":", prefixed) {
		if up.Headers == nil {
			up.Headers = http.Header{}
		}
		name, value, ok := strings.Cut(h, "=")
		if v, isEnv := strings.CutPrefix(value, "$"); ok && isEnv {
			env, set := os.LookupEnv(v)
			if !set {
				return up, nil, usageError(fmt.Errorf("MCP server %s: header %s: $%s is not set", id, name, v))
			}
			h = name + "=" + env
		}
		k, val, err := headerValue(h)
		if err != nil {
			return up, nil, err
		}
		up.Headers.Add(k, val)
	}
	for _, e := range forServer(m.env, id, ":", prefixed) {
		k, v, ok := strings.Cut(e, "=")
		switch {
		case k == "" || strings.ContainsAny(k, "\x00"):
			return up, nil, usageError(fmt.Errorf("MCP server %s: env %q: want KEY, KEY=@file or KEY=value", id, k))
		case !ok:
			env, set := os.LookupEnv(k)
			if !set {
				return up, nil, usageError(fmt.Errorf("MCP server %s: env %s is not set here", id, k))
			}
			v = env
		case strings.HasPrefix(v, "@"):
			b, err := os.ReadFile(v[1:])
			if err != nil {
				return up, nil, fmt.Errorf("MCP server %s: env %s: %w", id, k, err)
			}
			v = strings.TrimSpace(string(b))
		}
		up.Env = append(up.Env, k+"="+v)
	}
	var opts []mcpbridge.Option
	edges := func(values []string) []string {
		var out []string
		for _, v := range values {
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
		}
		return out
	}
	if prefixed {
		// A value without 'ID=' narrows every server; one with narrows
		// its own, after (so over) that.
		var all []string
		for _, e := range m.expose {
			if !strings.Contains(e, "=") {
				all = append(all, e)
			}
		}
		if len(all) > 0 {
			opts = append(opts, mcpbridge.WithExpose(edges(all)...))
		}
	}
	if ex := forServer(m.expose, id, "=", prefixed); len(ex) > 0 {
		opts = append(opts, mcpbridge.WithExpose(edges(ex)...))
	}
	return up, opts, nil
}

// start connects to every --mcp-server (chio up); stop closes them.
func (m *mcpFlags) start(ctx context.Context) ([]*mcpbridge.Server, func(), error) {
	var out []*mcpbridge.Server
	stop := func() {
		for _, s := range out {
			s.Close()
		}
	}
	seen := map[string]bool{}
	for _, spec := range m.servers {
		id, target, ok := strings.Cut(spec, "=")
		if !ok || !mcpServerID.MatchString(id) {
			stop()
			return nil, nil, usageError(fmt.Errorf("--mcp-server %q: want 'ID=COMMAND ARGS' or 'ID=URL', ID of letters, digits, '.', '_' and '-'", id))
		}
		if seen[id] {
			stop()
			return nil, nil, usageError(fmt.Errorf("--mcp-server %s given twice", id))
		}
		seen[id] = true
		up, opts, err := m.upstream(id, strings.TrimSpace(target), nil, true)
		if err != nil {
			stop()
			return nil, nil, err
		}
		s, err := mcpbridge.New(ctx, id, up, opts...)
		if err != nil {
			stop()
			return nil, nil, err
		}
		out = append(out, s)
	}
	return out, stop, nil
}

func newBridgeMCPCmd() *cobra.Command {
	var ef edgeFlags
	var m mcpFlags
	var sf stdioFlags
	var serverID, target, listen string
	cmd := &cobra.Command{
		Use:   "mcp --server-id ID (--url URL | -- COMMAND ARGS) (--listen ADDR | --stdio) --nats URL (--policy FILE | --issuer-pub FILE)",
		Short: "Serve an MCP server's tools as governed MCP tools (streamable HTTP at /mcp, or stdio)",
		Long: "The MCP server (a command over stdio after --, or a streamable HTTP --url) is listed and each of its tools\n" +
			"becomes a tool of server ID; tools/call runs it through the kernel (capability, guards, durable decision),\n" +
			"then calls the upstream tool, with a receipt. Its annotations are what the server claims: readOnlyHint is\n" +
			"no side effects; destructiveHint (by MCP's default, any tool not read-only that does not say false) makes\n" +
			"the tool run only under a grant that names it. Tool list changes are followed; a server that dies is\n" +
			"restarted with backoff and its calls in flight fail. Over HTTP callers present a capability; with --stdio\n" +
			"every call acts under --token, or a dev capability from --data-dir, on an embedded NATS unless --nats is given.",
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			stopTracing, err := ef.startTracing(ctx, "chio-bridge-mcp")
			if err != nil {
				return err
			}
			defer stopTracing() // last: after everything that makes spans
			if len(args) > 0 && cmd.ArgsLenAtDash() != 0 {
				return usageError(errors.New("the server's command goes after --"))
			}
			if !mcpServerID.MatchString(serverID) {
				return usageError(fmt.Errorf("--server-id %q: letters, digits, '.', '_' and '-'", serverID))
			}
			up, opts, err := m.upstream(serverID, target, args, false)
			if err != nil {
				return err
			}
			srv, err := mcpbridge.New(ctx, serverID, up, opts...)
			if err != nil {
				return err
			}
			defer srv.Close()
			ef.servers = append(ef.servers, srv)
			token, err := sf.capability(&ef)
			if err != nil {
				return err
			}
			sa, err := sf.connect("chio-bridge-mcp", &ef.natsAuth)
			if err != nil {
				return err
			}
			defer sa.close()
			if err := sa.govern(ctx, &ef); err != nil {
				return err
			}
			g := sa.g
			if err := srv.Follow(g.registry); err != nil {
				return err
			}
			e := mcpedge.New(g.kernel, g.registry, g.dispatch, mcpedge.WithExposure(g.policy.ToolExposure("mcp", ef.exposeAll)), mcpedge.WithAuthorizationServers(g.policy.Issuers()), mcpedge.WithPublicOrigin(ef.publicURL),
				mcpedge.WithServerInfo("chio-mcp-bridge "+serverID, "0.1.0"))
			if sf.stdio {
				return e.ServeStdio(ctx, token, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			ec := newEdgeEcho()
			e.Register(ec)
			ln, err := sa.listenHTTP(ec, listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio bridge mcp: MCP http://%s%s (%d tools of %s)\n", ln.Addr(), mcpedge.Path, len(srv.ToolNames()), serverID)
			return serveTraced(ctx, ec, ef.tracer, ln, ef.drainTimeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&serverID, "server-id", "", "server id of the MCP server's tools (required)")
	f.StringVar(&target, "url", "", "the MCP server's streamable HTTP endpoint (instead of a command after --)")
	m.register(f, "")
	sf.register(f, "MCP", "--stdio")
	f.StringVar(&listen, "listen", "127.0.0.1:8087", "HTTP listen address")
	registerGovernanceFlags(f, &ef)
	return cmd
}
