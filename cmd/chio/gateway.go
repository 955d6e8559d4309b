package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/gateway"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/edges/tools"
)

// gatewayFlags are the decision point's listeners.
type gatewayFlags struct {
	listen, grpcListen, apiOrigin string
}

// register adds --NAME-listen and --NAME-grpc-listen (prefix "gateway"
// on chio up), or --listen and --grpc-listen (prefix "").
func (g *gatewayFlags) register(f *pflag.FlagSet, prefix, defaultListen string) {
	name := func(n string) string {
		if prefix == "" {
			return n
		}
		return prefix + "-" + n
	}
	f.StringVar(&g.listen, name("listen"), defaultListen, "serve the decision point for gateways on this address: forward authentication ("+gateway.ForwardPath+") and AuthZEN ("+gateway.EvaluationPath+", "+gateway.EvaluationsPath+", "+gateway.MetadataPath+")")
	f.StringVar(&g.grpcListen, name("grpc-listen"), "", "serve Envoy's ext_authz (envoy.service.auth.v3.Authorization) over gRPC on this address")
	f.StringVar(&g.apiOrigin, name("api-origin"), "", "the origin clients address the gateway's API by (https://api.example), which their DPoP proofs must name; default: the Host the gateway reports, which is the client's")
}

// startGateway serves the decision point on its listeners, if asked; stop
// cancels them and waits for them to drain.
func (g *gatewayFlags) start(ctx context.Context, out io.Writer, label string, k *kernel.Kernel, d *dispatch.Dispatcher, reg *tools.Registry,
	bridge *openapi.Bridge, ef *edgeFlags) (stop func(), err error) {
	if g.listen == "" && g.grpcListen == "" {
		return func() {}, nil
	}
	opts := []gateway.Option{gateway.WithTools(reg, tools.Exposure{Protocol: "authzen", ExposeAll: true}), gateway.WithAPIOrigin(g.apiOrigin)}
	api := "no API (AuthZEN only)"
	if bridge != nil {
		opts = append(opts, gateway.WithAPI(bridge))
		api = "the operations of " + bridge.Manifest().ServerID
	}
	p := gateway.New(k, d, opts...)
	gctx, cancel := context.WithCancel(ctx)
	var waits []chan struct{}
	fail := func(err error) (func(), error) {
		cancel()
		for _, w := range waits {
			<-w
		}
		return nil, err
	}
	if g.listen != "" {
		ln, err := net.Listen("tcp", g.listen)
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", g.listen, err))
		}
		fmt.Fprintf(out, "%s: gateway decisions  http://%s (%s)\n", label, ln.Addr(), api)
		done := make(chan struct{})
		waits = append(waits, done)
		go func() {
			defer close(done)
			if err := serveHandler(gctx, p.Handler(), ln, ef.drainTimeout); err != nil {
				slog.Error("gateway decisions stopped", "err", err)
			}
		}()
	}
	if g.grpcListen != "" {
		ln, err := net.Listen("tcp", g.grpcListen)
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", g.grpcListen, err))
		}
		fmt.Fprintf(out, "%s: envoy ext_authz  %s (%s)\n", label, ln.Addr(), api)
		srv := grpc.NewServer(grpc.ConnectionTimeout(defaultReadHeaderTimeout),
			grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: defaultIdleTimeout}))
		p.RegisterExtAuthz(srv)
		done := make(chan struct{})
		waits = append(waits, done)
		go func() {
			defer close(done)
			go func() {
				<-gctx.Done()
				// Checks in flight finish, within the drain timeout.
				cut := time.AfterFunc(ef.drainTimeout, srv.Stop)
				srv.GracefulStop()
				cut.Stop()
			}()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				slog.Error("envoy ext_authz stopped", "err", err)
			}
		}()
	}
	return func() {
		cancel()
		for _, w := range waits {
			<-w
		}
	}, nil
}

func newGatewayCmd() *cobra.Command {
	var ef edgeFlags
	var o openapiFlags
	var g gatewayFlags
	var natsURL string
	cmd := &cobra.Command{
		Use:   "gateway [--spec FILE|URL] --listen ADDR [--grpc-listen ADDR] --nats URL (--policy FILE | --issuer-pub FILE)",
		Short: "Decide for the gateway in front of your API: forward authentication (nginx, Caddy, Traefik), Envoy ext_authz and AuthZEN",
		Long: "The gateway enforces; Chio decides and signs a receipt for each decision. Forward authentication and\n" +
			"ext_authz match the original request to an operation of the --spec API, as chio api protect does;\n" +
			"AuthZEN evaluations name the tool. The gateway carries the call out, so an allowed call's receipt\n" +
			"records its outcome as not_observed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if g.listen == "" && g.grpcListen == "" {
				return usageError(errors.New("nothing to serve: give --listen, --grpc-listen or both"))
			}
			var bridge *openapi.Bridge
			if o.spec != "" {
				b, srv, err := o.server(ctx)
				if err != nil {
					return err
				}
				bridge, ef.servers = b, append(ef.servers, srv)
			}
			sa, err := connectStandalone(natsURL, "", "chio-gateway", false, &ef.natsAuth)
			if err != nil {
				return err
			}
			defer sa.close()
			if err := sa.govern(ctx, &ef); err != nil {
				return err
			}
			stop, err := g.start(ctx, cmd.OutOrStdout(), "chio gateway", sa.g.kernel, sa.g.dispatch, sa.g.registry, bridge, &ef)
			if err != nil {
				return err
			}
			<-ctx.Done()
			stop()
			return nil
		},
	}
	f := cmd.Flags()
	o.register(f, "")
	g.register(f, "", "127.0.0.1:9191")
	f.StringVar(&natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+")")
	registerGovernanceFlags(f, &ef)
	return cmd
}
