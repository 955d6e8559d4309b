package main

import (
	"fmt"
	"net"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/acp"
	"github.com/chio-ledger/chio/internal/health"
)

func newEdgeACPCmd() *cobra.Command {
	var ef edgeFlags
	var natsURL, listen, dataDir, token string
	var stdio bool
	cmd := &cobra.Command{
		Use:   "acp (--stdio | --listen ADDR) --nats URL (--policy FILE | --issuer-pub FILE)",
		Short: "Run the ACP edge: Chio tools as ACP capabilities (the seed's profile) over stdio or POST /acp",
		Long: "Serves session/list_capabilities, session/request_permission, tool/invoke, tool/stream, tool/resume and\n" +
			"tool/cancel (also as _chio/ extension methods) and answers ACP's initialize. Tools are shown when their\n" +
			"manifest sets acp.expose: true. Over HTTP callers present a capability (Authorization: Bearer or\n" +
			"X-Chio-Capability); with --stdio every call acts under --token (or @FILE), or a dev capability minted from\n" +
			"DIR/keys/issuer.key (--data-dir), on an embedded NATS server unless --nats is given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var err error
			if stdio {
				if token, err = stdioToken(&ef, dataDir, token); err != nil {
					return err
				}
			} else if token != "" {
				return usageError(fmt.Errorf("--token applies to --stdio; over HTTP each caller presents its own capability"))
			}
			js, stop, err := connectOrEmbed(natsURL, dataDir, "chio-edge-acp", stdio)
			if err != nil {
				return err
			}
			defer stop()
			metrics := newMetricsRegistry()
			g, err := ef.governance(ctx, js, metrics)
			if err != nil {
				return err
			}
			defer g.kernel.Close()
			e, err := acp.New(g.kernel, g.registry, g.dispatch, js, acp.WithExposure(g.policy.ToolExposure("acp", ef.exposeAll)),
				acp.WithReplicas(ef.replicas))
			if err != nil {
				return err
			}
			if stdio {
				return e.ServeStdio(ctx, token, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			ec := newEdgeEcho()
			e.Register(ec)
			serveMetrics(ec, metrics)
			health.Register(ec, append([]health.Check{health.NATS(js)}, edgeChecks(js, g.kernel)...)...)
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio edge acp: http://%s%s\n", ln.Addr(), acp.Path)
			return serve(ctx, ec, ln, ef.drainTimeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+"; with --stdio, an embedded server in --data-dir)")
	f.StringVar(&listen, "listen", "127.0.0.1:8086", "HTTP listen address")
	f.BoolVar(&stdio, "stdio", false, "serve the profile on stdin/stdout (newline-delimited JSON-RPC)")
	f.StringVar(&token, "token", "", "with --stdio: the capability every call acts under, or @FILE (default: a dev capability from --data-dir)")
	f.StringVar(&dataDir, "data-dir", ".chio", "with --stdio: keys and the embedded NATS store")
	f.StringArrayVar(&ef.manifests, "manifest", nil, "chio.manifest.v1 file to register (repeatable)")
	registerGovernanceFlags(f, &ef)
	return cmd
}
