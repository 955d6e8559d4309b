package main

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/acp"
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
			token, err := stdioCapability(&ef, stdio, dataDir, token)
			if err != nil {
				return err
			}
			sa, err := connectStandalone(natsURL, dataDir, "chio-edge-acp", stdio)
			if err != nil {
				return err
			}
			defer sa.close()
			if err := sa.govern(ctx, &ef); err != nil {
				return err
			}
			g := sa.g
			e, err := acp.New(g.kernel, g.registry, g.dispatch, sa.js, acp.WithExposure(g.policy.ToolExposure("acp", ef.exposeAll)),
				acp.WithReplicas(ef.replicas))
			if err != nil {
				return err
			}
			if stdio {
				return e.ServeStdio(ctx, token, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			ec := newEdgeEcho()
			e.Register(ec)
			ln, err := sa.listenHTTP(ec, listen)
			if err != nil {
				return err
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
