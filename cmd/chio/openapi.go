package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/net/http/httpguts"

	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/edges/protect"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
)

// defaultOpenAPIServerID is the server id of a bridged API (the
// reference's generator default).
const defaultOpenAPIServerID = "openapi-server"

// openapiFlags describe one bridged API: its spec, server id, upstream
// and the operator's upstream headers.
type openapiFlags struct {
	spec          string
	serverID      string
	upstream      string
	headers       []string
	outputSchemas bool
}

// register adds the flags: --spec, --server-id, --upstream,
// --upstream-header, --output-schemas; with a prefix (chio up: "openapi"),
// --openapi, --openapi-server-id, --openapi-upstream, --openapi-header,
// --openapi-output-schemas.
func (o *openapiFlags) register(f *pflag.FlagSet, prefix string) {
	name := func(n string) string {
		if prefix == "" {
			return n
		}
		return prefix + "-" + n
	}
	specFlag, headerFlag := "spec", "upstream-header"
	if prefix != "" {
		specFlag, headerFlag = prefix, name("header")
	}
	f.StringVar(&o.spec, specFlag, "", "OpenAPI 3.0 or 3.1 document (YAML or JSON): a file or an http(s) URL")
	f.StringVar(&o.serverID, name("server-id"), defaultOpenAPIServerID, "server id of the API's tools")
	f.StringVar(&o.upstream, name("upstream"), "", "base URL of the API (default: the spec's first server)")
	f.StringArrayVar(&o.headers, headerFlag, nil, "header sent upstream on every call, 'Name=value' or 'Name=@file' (repeatable; never shown to clients nor recorded)")
	f.BoolVar(&o.outputSchemas, name("output-schemas"), false, "give each tool an output schema ({httpStatus, method, path, body})")
}

// load reads the spec and builds the bridge.
func (o *openapiFlags) load(ctx context.Context) (*openapi.Bridge, error) {
	if o.spec == "" {
		return nil, usageError(errors.New("an OpenAPI document is required (--spec)"))
	}
	s, err := openapi.Load(ctx, o.spec)
	if err != nil {
		return nil, err // names the spec
	}
	b, err := openapi.Build(s, openapi.Config{ServerID: o.serverID, OutputSchemas: o.outputSchemas})
	if err != nil {
		return nil, err
	}
	for _, sk := range b.Skipped() {
		slog.Warn("openapi: operation left out", "spec", o.spec, "method", sk.Method, "path", sk.Path, "reason", sk.Reason)
	}
	return b, nil
}

// server builds the bridge and the tool server calling the upstream.
func (o *openapiFlags) server(ctx context.Context) (*openapi.Bridge, *openapi.Server, error) {
	b, err := o.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	up := openapi.Upstream{Headers: http.Header{}}
	if len(o.headers) > 0 && o.upstream == "" {
		// Credentials go where the operator says, not where a spec
		// (perhaps fetched from elsewhere) points.
		return nil, nil, usageError(errors.New("upstream headers need an explicit upstream (--upstream, or --openapi-upstream on chio up)"))
	}
	if o.upstream != "" {
		u, err := url.Parse(o.upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return nil, nil, usageError(fmt.Errorf("upstream %q: want an http(s) base URL without credentials", o.upstream))
		}
		up.BaseURL = u
	}
	for _, h := range o.headers {
		k, v, err := headerValue(h)
		if err != nil {
			return nil, nil, err
		}
		up.Headers.Add(k, v)
	}
	s, err := openapi.NewServer(b, up)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream of %s: %w", o.spec, err)
	}
	return b, s, nil
}

// headerValue reads 'Name=value' or 'Name=@file' (the file's content,
// trimmed).
func headerValue(s string) (string, string, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok || !httpguts.ValidHeaderFieldName(name) {
		return "", "", usageError(fmt.Errorf("upstream header %q: want 'Name=value' or 'Name=@file'", name))
	}
	if path, ok := strings.CutPrefix(value, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", fmt.Errorf("upstream header %s: %w", name, err)
		}
		value = strings.TrimSpace(string(b))
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return "", "", usageError(fmt.Errorf("upstream header %s: the value is not a valid header value", name))
	}
	return name, value, nil
}

func newOpenAPICmd() *cobra.Command {
	cmd := &cobra.Command{Use: "openapi", Short: "Work with OpenAPI documents"}
	var o openapiFlags
	manifest := &cobra.Command{
		Use:   "manifest --spec FILE|URL [--server-id ID]",
		Short: "Print the chio.manifest.v1 of an OpenAPI 3.0 or 3.1 document: one tool per operation",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := o.load(cmd.Context())
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(b.Manifest())
		},
	}
	f := manifest.Flags()
	f.StringVar(&o.spec, "spec", "", "OpenAPI 3.0 or 3.1 document (YAML or JSON): a file or an http(s) URL")
	f.StringVar(&o.serverID, "server-id", defaultOpenAPIServerID, "server id of the API's tools")
	f.BoolVar(&o.outputSchemas, "output-schemas", false, "give each tool an output schema ({httpStatus, method, path, body})")
	cmd.AddCommand(manifest)
	return cmd
}

// connectOrEmbed connects to --nats, or, with stdio and no --nats, starts
// an embedded server in dataDir. stop closes it.
func connectOrEmbed(natsURL, dataDir, name string, stdio bool, auth *natsauth.Client) (jetstream.JetStream, func(), error) {
	if natsURL == "" && stdio {
		_, js, stop, err := startEmbeddedNATS(natsembed.Config{StoreDir: filepath.Join(dataDir, "nats"), DontListen: true, ServerName: name})
		return js, stop, err
	}
	nc, js, err := connectNATS(orDefault(natsURL, nats.DefaultURL), name, natsauth.Edge, auth)
	if err != nil {
		return nil, nil, err
	}
	return js, nc.Close, nil
}

func newBridgeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bridge", Short: "Bridge an outside API into governed tools"}
	var ef edgeFlags
	var o openapiFlags
	var sf stdioFlags
	var listen string
	var simulate bool
	bridge := &cobra.Command{
		Use:   "openapi --spec FILE|URL (--listen ADDR | --stdio) --nats URL (--policy FILE | --issuer-pub FILE)",
		Short: "Serve an OpenAPI-described HTTP API as governed MCP tools (streamable HTTP at /mcp, or stdio)",
		Long: "Each operation of the spec becomes an MCP tool; tools/call runs it through the kernel (capability, guards,\n" +
			"durable decision) and then calls the API, with a receipt. Over HTTP callers present a capability\n" +
			"(Authorization: Bearer or X-Chio-Capability). With --stdio every call acts under --token, or a dev\n" +
			"capability minted from DIR/keys/issuer.key (--data-dir), on an embedded NATS server unless --nats is given.\n" +
			"--simulate answers without calling the API and writes no receipts.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stopTracing, err := ef.startTracing(ctx, "chio-bridge-openapi")
			if err != nil {
				return err
			}
			defer stopTracing() // last: after everything that makes spans
			_, srv, err := o.server(ctx)
			if err != nil {
				return err
			}
			ef.servers = append(ef.servers, srv)
			token, err := sf.capability(&ef)
			if err != nil {
				return err
			}
			sa, err := sf.connect("chio-bridge-openapi", &ef.natsAuth)
			if err != nil {
				return err
			}
			defer sa.close()
			if err := sa.govern(ctx, &ef); err != nil {
				return err
			}
			g := sa.g
			e := mcpedge.New(g.kernel, g.registry, g.dispatch, mcpedge.WithExposure(g.policy.ToolExposure("mcp", ef.exposeAll)), mcpedge.WithAuthorizationServers(g.policy.Issuers()), mcpedge.WithPublicOrigin(ef.publicURL),
				mcpedge.WithSimulation(simulate), mcpedge.WithServerInfo("chio-openapi-bridge "+o.serverID, "0.1.0"))
			if sf.stdio {
				return e.ServeStdio(ctx, token, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			ec := newEdgeEcho()
			e.Register(ec)
			ln, err := sa.listenHTTP(ec, listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio bridge openapi: MCP http://%s%s (%d tools of %s)\n", ln.Addr(), mcpedge.Path, len(srv.ToolNames()), o.serverID)
			return serveTraced(ctx, ec, ef.tracer, ln, ef.drainTimeout)
		},
	}
	f := bridge.Flags()
	o.register(f, "")
	sf.register(f, "MCP", "--stdio")
	f.StringVar(&listen, "listen", "127.0.0.1:8084", "HTTP listen address")
	f.BoolVar(&simulate, "simulate", false, "answer with the request that would be sent (bridgeMode simulation): no upstream call, no receipt")
	registerGovernanceFlags(f, &ef)
	cmd.AddCommand(bridge, newBridgeMCPCmd())
	return cmd
}

// stdioToken is --token (a value or @FILE), or the dev capability minted
// from dataDir's issuer key for the registry's tools.
func stdioToken(ef *edgeFlags, dataDir, token string) (string, error) {
	if path, ok := strings.CutPrefix(token, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("--token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if token != "" {
		return token, nil
	}
	keys, err := loadLedgerKeys(filepath.Join(dataDir, "keys"), DefaultOrigin)
	if err != nil {
		return "", err
	}
	if ef.policyFile == "" && ef.issuerPub == "" {
		ef.issuerPub = filepath.Join(keys.Dir, issuerPubFile)
	}
	reg, err := ef.registry()
	if err != nil {
		return "", err
	}
	tok, _, err := devCapability(dataDir, keys, reg)
	return tok, err
}

// registerGovernanceFlags adds the flags every standalone edge shares.
func registerGovernanceFlags(f *pflag.FlagSet, ef *edgeFlags) {
	f.StringVar(&ef.policyFile, "policy", "", "policy document (chio.policy.v1); default: trust --issuer-pub with the default guards")
	f.StringVar(&ef.issuerPub, "issuer-pub", "", "file with the trusted capability issuer's public key (when no --policy)")
	f.BoolVar(&ef.exposeAll, "expose-all", false, "dev only: expose tools without the protocol's expose flag (internal namespaces stay hidden)")
	f.StringVar(&ef.edgeID, "edge-id", "", "this replica's name in events (default: host name and pid)")
	f.IntVar(&ef.replicas, "replicas", 1, "replicas of the streams and buckets the edge creates (3 on a cluster)")
	registerNATSAuth(f, &ef.natsAuth)
	registerEdgeSignerFlags(f, ef)
	f.DurationVar(&ef.drainTimeout, "drain-timeout", defaultDrainTimeout, "on SIGINT/SIGTERM, how long calls in flight get to finish")
	registerHolderFlags(f, ef)
}

// registerHolderFlags adds the holder-binding flags of an edge command
// that does not register edgeFlags whole.
func registerHolderFlags(f *pflag.FlagSet, ef *edgeFlags) {
	registerManifestKeyFlag(f, ef)
	f.BoolVar(&ef.requireDPoP, "require-dpop", false, "honour every capability only with a proof of possession of its subject key (by default only tokens that can delegate, or whose grants ask for it, need one)")
	f.StringVar(&ef.publicURL, "public-url", "", "the origin clients address this edge by (https://host), which their DPoP proofs name; default: each request's Host")
}

func newAPICmd() *cobra.Command {
	cmd := &cobra.Command{Use: "api", Short: "Govern an HTTP API"}
	var ef edgeFlags
	var o openapiFlags
	var natsURL, listen string
	p := &cobra.Command{
		Use:   "protect --spec FILE|URL --upstream URL --listen ADDR --nats URL (--policy FILE | --issuer-pub FILE)",
		Short: "Put capability checks, guards and receipts in front of an OpenAPI-described HTTP API (a reverse proxy)",
		Long: "Each request is matched to its OpenAPI operation (unknown routes: 404, never forwarded), governed as a\n" +
			"call of that operation's tool (a capability as X-Chio-Capability or Authorization: Bearer, the guards on\n" +
			"its parameters and body, a durable decision), forwarded when allowed, and recorded with the response\n" +
			"status and a hash of the response body. Side-effecting operations are denied by default: only a grant\n" +
			"that names the operation's tool reaches them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			b, srv, err := o.server(ctx)
			if err != nil {
				return err
			}
			ef.servers = append(ef.servers, srv)
			sa, err := connectStandalone(natsURL, "", "chio-api-protect", false, &ef.natsAuth)
			if err != nil {
				return err
			}
			defer sa.close()
			if err := sa.govern(ctx, &ef); err != nil {
				return err
			}
			// The proxy's listener carries the API's paths only: no probes
			// or metrics that could shadow an operation.
			pr := protect.New(sa.g.kernel, sa.g.dispatch, b, protect.WithPublicOrigin(ef.publicURL))
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio api protect: http://%s -> %s (%d operations of %s)\n", ln.Addr(), orDefault(o.upstream, "the spec's server"), len(srv.ToolNames()), o.serverID)
			return serveHandler(ctx, pr, ln, ef.drainTimeout)
		},
	}
	f := p.Flags()
	o.register(f, "")
	f.StringVar(&natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+")")
	f.StringVar(&listen, "listen", "127.0.0.1:9090", "HTTP listen address")
	registerGovernanceFlags(f, &ef)
	cmd.AddCommand(p)
	return cmd
}
