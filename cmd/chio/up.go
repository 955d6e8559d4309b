package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/a2a"
	"github.com/chio-ledger/chio/edges/acp"
	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/edges/protect"
	"github.com/chio-ledger/chio/internal/leafset"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// signedLeavesKept bounds the leaf hashes of receipts chio up's ledger
// signed that its projections remember, so as not to verify those
// receipts' signatures again (about 100 bytes each, 6.5 MB in all): 6.5 s
// of receipts at 10k/s, where the projections fold a receipt milliseconds
// after its batch commits. A hash forgotten costs one verification.
const signedLeavesKept = 1 << 16

// operatorTokenTTL is how long the operator token chio up writes at each
// start is valid.
const operatorTokenTTL = 30 * 24 * time.Hour

func newUpCmd() *cobra.Command {
	var dataDir, listen, natsListen string
	var lf ledgerFlags
	var ef edgeFlags
	var of openaiFlags
	var oapi openapiFlags
	var protectListen string
	var a2af a2aFlags
	var a2aTargets []string
	var mcpf mcpFlags
	var requireCapability bool
	var serviceToken string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run everything in one process: embedded NATS JetStream, the ledger, the A2A edge with the demo tools, one HTTP address",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := of.proxy(); err != nil {
				return err // a flag mistake, before anything starts
			}
			tp, stopTracing, err := startTracing(cmd.Context(), "chio")
			if err != nil {
				return err
			}
			defer stopTracing() // first deferred, so it flushes last
			ef.tracer, lf.tracer = tp, tp
			if protectListen != "" && oapi.spec == "" {
				return usageError(errors.New("--openapi-protect-listen needs --openapi"))
			}
			var bridge *openapi.Bridge
			if oapi.spec != "" {
				b, srv, err := oapi.server(cmd.Context())
				if err != nil {
					return err
				}
				bridge, ef.servers = b, append(ef.servers, srv)
			}
			// Wrapped MCP servers are listed before the kernel is built:
			// one that cannot be started fails the start.
			mcpServers, stopMCP, err := mcpf.start(cmd.Context())
			if err != nil {
				return err
			}
			defer stopMCP()
			for _, s := range mcpServers {
				ef.servers = append(ef.servers, s)
			}
			// The log store is opened first: its directory lock is what stops
			// a second `chio up` on the same data dir, before anything else starts.
			keys, store, err := openDataDir(dataDir, &lf)
			if err != nil {
				return err
			}
			defer store.Close()
			cfg := natsembed.Config{StoreDir: filepath.Join(dataDir, "nats"), ServerName: "chio-up", DontListen: natsListen == "none"}
			if !cfg.DontListen {
				host, port, err := net.SplitHostPort(natsListen)
				if err != nil {
					return usageError(fmt.Errorf("--nats-listen: %w", err))
				}
				if cfg.Port, err = strconv.Atoi(port); err != nil {
					return usageError(errors.New("--nats-listen: port must be a number"))
				}
				if cfg.Port == 0 {
					cfg.Port = -1 // any free port (nats-server reads 0 as its default, 4222)
				}
				cfg.Host = host
			}
			ns, js, stopNATS, err := startEmbeddedNATS(cfg)
			if err != nil {
				return err
			}
			defer stopNATS()
			out := cmd.OutOrStdout()
			// Partner agents' skills become tools before the kernel is
			// built: discovery fails closed at start.
			partners, err := a2af.adapters(cmd.Context(), js, lf.replicas, a2aTargets)
			if err != nil {
				return err
			}
			ef.servers = append(ef.servers, partners...)
			if ef.workers {
				// Workers sign with chio up's manifest key unless told
				// otherwise; it exists before workers learn the NATS address.
				if ef.workerKey, err = ef.upWorkerKey(keys.Dir); err != nil {
					return err
				}
			}
			if !cfg.DontListen {
				fmt.Fprintf(out, "chio up: NATS JetStream on %s (data under %s)\n", ns.ClientURL(), dataDir)
			}
			if ef.workers {
				if cfg.DontListen {
					return usageError(errors.New("--workers needs a NATS address workers can reach (--nats-listen)"))
				}
				// Workers found before the dev capability is issued are in it.
				if ef.servers, err = awaitWorkers(cmd.Context(), js.Conn(), ef.servers, out, ns.ClientURL(), ef.workerKey); err != nil {
					return err
				}
			}
			fmt.Fprintf(out, "chio up: keys in %s (log origin %q, kernel key %s)\n", keys.Dir, keys.Origin(), keys.KernelPub)
			if ef.policyFile == "" && ef.issuerPub == "" {
				ef.issuerPub = filepath.Join(keys.Dir, issuerPubFile)
			}
			if ef.cardKey == "" {
				ef.cardKey = filepath.Join(keys.Dir, cardKeyFile) // the agent card is signed
			}
			if ef.manifestKey == "" {
				ef.manifestKey = filepath.Join(keys.Dir, manifestKeyFile) // every manifest is signed
			}
			if !cmd.Flags().Changed("push-allow-loopback") {
				ef.pushLoopback = true // one machine: webhooks are local
			}
			if ef.edgeID == "" {
				ef.edgeID = "chio-up"
			}
			ef.replicas = lf.replicas
			reg, err := ef.registry()
			if err != nil {
				return err
			}
			devToken, tokenPath, err := devCapability(dataDir, keys, reg)
			if err != nil {
				return err
			}
			if !requireCapability && !loopbackAddr(listen) {
				// The dev capability acts for every tokenless caller: never
				// hand it to the network.
				return usageError(fmt.Errorf("--listen %s is not a loopback address: pass --require-capability (callers must then present their own capability)", listen))
			}
			grpcAddr, err := ef.grpcAddr(listen)
			if err != nil {
				return err
			}
			ef.httpOrigin = listenOrigin(listen)
			if !requireCapability && grpcAddr != "" && !loopbackAddr(grpcAddr) {
				return usageError(fmt.Errorf("--grpc-listen %s is not a loopback address: pass --require-capability (callers must then present their own capability)", grpcAddr))
			}
			grpcLn, err := ef.listenGRPC(grpcAddr)
			if err != nil {
				return err
			}
			if grpcLn != nil {
				defer grpcLn.Close()
			}
			edgeToken := devToken
			if requireCapability {
				edgeToken = "" // tokenless callers get an A2A authentication error
			}
			// One registry for the whole process, served at /metrics.
			metrics := newMetricsRegistry()
			r, err := startEdge(cmd.Context(), js, &ef, edgeToken, metrics)
			if err != nil {
				return err
			}
			defer r.close()
			edge := r.edge
			for _, s := range mcpServers {
				if err := s.Follow(r.registry); err != nil { // its tool list changes reach the edges
					return err
				}
			}
			// The OpenAI surface shares the A2A edge's kernel and dispatcher;
			// its exposure reads openai.expose (--tier is A2A's).
			oaOpts, err := openaiOptions(js, r.policy, &ef, &of, "", edgeToken)
			if err != nil {
				return err
			}
			oa := openai.New(r.kernel, r.registry, r.dispatch, oaOpts...)
			// MCP serves the tools whose manifests set mcp.expose (the
			// bridged API's, with --openapi).
			mcpEdge := mcpedge.New(r.kernel, r.registry, r.dispatch, mcpedge.WithExposure(r.policy.ToolExposure("mcp", ef.exposeAll)),
				mcpedge.WithDevToken(edgeToken), mcpedge.WithPublicOrigin(ef.publicURL))
			acpEdge, err := acp.New(r.kernel, r.registry, r.dispatch, js, acp.WithExposure(r.policy.ToolExposure("acp", ef.exposeAll)),
				acp.WithDevToken(edgeToken), acp.WithReplicas(lf.replicas), acp.WithPublicOrigin(ef.publicURL))
			if err != nil {
				return err
			}
			if protectListen != "" {
				pln, err := net.Listen("tcp", protectListen)
				if err != nil {
					return fmt.Errorf("listen on %s: %w", protectListen, err)
				}
				fmt.Fprintf(out, "chio up: api protect  http://%s -> %s\n", pln.Addr(), orDefault(oapi.upstream, "the spec's server"))
				pctx, stopProtect := context.WithCancel(cmd.Context())
				protected := make(chan struct{})
				go func() {
					defer close(protected)
					if err := serveHandler(pctx, protect.New(r.kernel, r.dispatch, bridge), pln, ef.drainTimeout); err != nil {
						slog.Error("api protect stopped", "err", err)
					}
				}()
				defer func() { stopProtect(); <-protected }()
			}
			hc, err := ef.httpConfig()
			if err != nil {
				return err
			}
			drains := []runOption{withDrain(ef.drainTimeout, edge.Drain)}
			if grpcLn != nil {
				drainGRPC, stopGRPC := serveGRPC(edge, grpcLn)
				defer stopGRPC()
				drains = append(drains, withDrain(ef.drainTimeout, drainGRPC))
			}
			go edge.Sweep(cmd.Context(), sweepEvery)
			go runPush(cmd.Context(), edge)
			kernelPub, err := schemas.ParsePublicKey(keys.KernelPub)
			if err != nil {
				return err
			}
			// Reads: capabilities from this data dir's issuer, each within its
			// scope; an operator token that reads everything; and the service
			// token, if one is given.
			rf := readFlags{issuers: []string{filepath.Join(keys.Dir, issuerPubFile)}, serviceToken: serviceToken, requireDPoP: ef.requireDPoP, publicOrigin: ef.publicURL}
			auth, stopAuth, err := rf.authenticator(cmd.Context(), js, lf.replicas)
			if err != nil {
				return err
			}
			defer stopAuth()
			opPath, err := operatorToken(dataDir, keys.Dir, operatorTokenTTL, ef.requireDPoP)
			if err != nil {
				return err
			}
			// The projections trust exactly the bytes this process's ledger
			// signed, by leaf hash; everything else they verify.
			signed, err := leafset.New(signedLeavesKept)
			if err != nil {
				return err
			}
			lf.extra = append(lf.extra, ledger.WithSignedLeaves(signed.Add))
			proj, err := projections.Open(projectionsDir(dataDir), projections.WithLogger(slog.Default()),
				projections.WithKernelKey(kernelPub), projections.WithAuthenticator(auth), projections.WithMetrics(metrics), projections.WithTracerProvider(tp),
				projections.WithTrustedLeaves(signed.Contains))
			if err != nil {
				return err
			}
			defer proj.Close()
			projCtx, stopProj := context.WithCancel(cmd.Context())
			projDone := make(chan struct{})
			var projErr error // read only after projDone is closed
			go func() {
				defer close(projDone)
				projErr = proj.Run(projCtx, js)
				if projErr != nil && projCtx.Err() == nil {
					slog.Error("projections stopped", "err", projErr)
				}
			}()
			defer func() { stopProj(); <-projDone }()
			mount := func(e *echo.Echo, addr net.Addr) {
				if ef.publicURL == "" {
					edge.AddOrigin(listenOrigin(addr.String())) // the bound port, for --listen HOST:0
				}
				edge.Register(e, hc)
				oa.Register(e)
				mcpEdge.Register(e)
				acpEdge.Register(e)
				proj.Register(e)
				mountConsole(e)
				mountToolsListing(e, r, &ef, grpcLn != nil, auth) // operators: every tool, its origin and signed manifest
				base := "http://" + addr.String()
				fmt.Fprintf(out, "chio up: agent card   %s/.well-known/agent-card.json\n", base)
				fmt.Fprintf(out, "chio up: JSON-RPC     %s/a2a\n", base)
				fmt.Fprintf(out, "chio up: HTTP+JSON    %s%s\n", base, a2a.RESTPath)
				fmt.Fprintf(out, "chio up: OpenAI       %s%s  %s%s\n", base, openai.ToolsPath, base, openai.ToolCallsPath)
				if of.upstream != "" {
					fmt.Fprintf(out, "chio up: OpenAI proxy %s/openai/v1 (chat/completions, responses) -> %s\n", base, of.upstream)
				}
				fmt.Fprintf(out, "chio up: MCP          %s%s   ACP %s%s\n", base, mcpedge.Path, base, acp.Path)
				if grpcLn != nil {
					fmt.Fprintf(out, "chio up: gRPC         %s (A2A 1.0, lf.a2a.v1.A2AService)\n", grpcLn.Addr())
				}
				fmt.Fprintf(out, "chio up: checkpoint   %s/log/checkpoint\n", base)
				fmt.Fprintf(out, "chio up: tasks        %s/v1/tasks   authorization report %s/v1/reports/authorization-context\n", base, base)
				fmt.Fprintf(out, "chio up: probes       %s/healthz %s/readyz   metrics %s/metrics\n", base, base, base)
				fmt.Fprintf(out, "chio up: console      %s/console/ (sign in with the operator token below, or any read credential)\n", base)
				fmt.Fprintf(out, "chio up: dev capability in %s (used for callers that send none)\n", tokenPath)
				if ef.requireDPoP {
					fmt.Fprintf(out, "chio up: operator token in %s, its key in %s (reads every receipt, task and report: --require-dpop, so send it as Authorization: DPoP with a proof, chio capability proof)\n",
						opPath, filepath.Join(dataDir, operatorTokenKeyFile))
				} else {
					fmt.Fprintf(out, "chio up: operator token in %s (reads every receipt, task and report: send it as Authorization: Bearer)\n", opPath)
				}
				fmt.Fprintf(out, "chio up: try: curl -s %s/a2a -H 'Content-Type: application/json' -H \"Authorization: Bearer $(cat %s)\" -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/send\",\"params\":{\"message\":{\"role\":\"user\",\"messageId\":\"m1\",\"parts\":[{\"kind\":\"text\",\"text\":\"world\"}]}}}'\n", base, tokenPath)
			}
			slog.Debug("starting ledger", "data_dir", dataDir)
			// Stopping drains the edge (its calls finish and publish their
			// events) while the ledger still runs; NATS closes after.
			return runLedger(cmd.Context(), out, js, store, keys, listen, &lf, mount, append(drains, withRegistry(metrics), withReadAuth(auth),
				withChecks(append(r.checks, projectionsCheck("projections", proj, projDone, &projErr))...))...)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", ".chio", "where keys, the log and the JetStream store live")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	cmd.Flags().StringVar(&natsListen, "nats-listen", "127.0.0.1:4222", `client address of the embedded NATS server ("none": in-process only)`)
	lf.register(cmd, "key directory (default DIR/keys; generated on first start)")
	ef.register(cmd)
	of.register(cmd.Flags())
	oapi.register(cmd.Flags(), "openapi")
	cmd.Flags().StringVar(&protectListen, "openapi-protect-listen", "", "serve `chio api protect` for the --openapi API on this address")
	cmd.Flags().StringArrayVar(&a2aTargets, "a2a-target", nil, "a partner A2A agent (base or card URL) whose skills become tools a2a:<host>/<skill> (repeatable; the --a2a-* flags configure them)")
	a2af.register(cmd.Flags(), "a2a-")
	mcpf.register(cmd.Flags(), "mcp-")
	ef.registerGRPC(cmd, grpcAuto, `gRPC listen address of the A2A 1.0 gRPC binding ("auto": the --listen host, port+1, e.g. 127.0.0.1:8081; "none": off)`)
	cmd.Flags().StringVar(&serviceToken, "service-token", "", "bootstrap operator credential: a bearer token that reads everything (default $"+serviceTokenEnv+"); the operator token chio up writes does the same")
	cmd.Flags().BoolVar(&requireCapability, "require-capability", false, "refuse callers without a capability instead of acting under the dev capability")
	return cmd
}

// loopbackAddr reports whether a listen address is on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// startEmbeddedNATS starts an embedded server and connects to it in
// process; stop closes the connection, then the server.
func startEmbeddedNATS(cfg natsembed.Config) (*natsembed.Server, jetstream.JetStream, func(), error) {
	ns, err := natsembed.Start(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	nc, err := ns.Connect()
	if err != nil {
		ns.Stop()
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		ns.Stop()
		return nil, nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return ns, js, func() { nc.Close(); ns.Stop() }, nil
}
