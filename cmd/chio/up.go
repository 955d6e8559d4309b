package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/edges/a2a"
	"github.com/chio-ledger/chio/edges/acp"
	"github.com/chio-ledger/chio/edges/exchange"
	"github.com/chio-ledger/chio/edges/kernel"
	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/edges/mcpbridge"
	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/edges/openapi"
	"github.com/chio-ledger/chio/edges/protect"
	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/leafset"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/readauth"
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
	var c upConfig
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run everything in one process: embedded NATS JetStream, the ledger, the A2A edge with the demo tools, one HTTP address",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runUp(cmd, &c) },
	}
	c.register(cmd)
	// One process, usually at a terminal: no delay unless a load balancer
	// fronts it and asks for one.
	registerDrainDelay(cmd.Flags(), &c.ef.drainDelay, 0)
	return cmd
}

// runUp assembles chio up. The order matters: flag mistakes and tool
// sources fail before anything listens, the log store's lock is taken
// before NATS starts, and the deferred stops unwind in reverse, so the
// edges drain while the ledger runs and NATS closes last.
func runUp(cmd *cobra.Command, c *upConfig) error {
	ctx, out := withDrainDelay(cmd.Context(), c.ef.drainDelay), cmd.OutOrStdout()
	if _, err := c.of.proxy(); err != nil {
		return err // a flag mistake, before anything starts
	}
	budget, err := c.mem.budget()
	if err != nil {
		return err
	}
	budget.apply()
	c.lf.memory = budget
	tp, stopTracing, err := startTracing(ctx, "chio")
	if err != nil {
		return err
	}
	defer stopTracing() // first deferred, so it flushes last
	c.ef.tracer, c.lf.tracer = tp, tp
	bridge, mcpServers, stopMCP, err := c.startLocalTools(ctx)
	if err != nil {
		return err
	}
	defer stopMCP()
	// The log store is opened first: its directory lock is what stops
	// a second `chio up` on the same data dir, before anything else starts.
	keys, store, err := openDataDir(c.dataDir, &c.lf)
	if err != nil {
		return err
	}
	defer store.Close()
	un, err := c.startNATS(ctx)
	if err != nil {
		return err
	}
	defer un.stop()
	ns, edgeJS := un.ns, un.js[natsauth.Edge]
	fmt.Fprintf(out, "chio up: keys in %s (log origin %q, kernel key %s)\n", keys.Dir, keys.Origin(), keys.KernelPub)
	c.edgeDefaults(cmd, keys)
	// Certified first: the edge signs its calls to the workers it finds.
	if err := c.certifyEdge(ctx, out, un, keys); err != nil {
		return err
	}
	defer c.stopEdgeTrust()
	if err := c.addRemoteTools(ctx, out, un, keys); err != nil {
		return err
	}
	reg, err := c.ef.registry()
	if err != nil {
		return err
	}
	devToken, tokenPath, err := devCapability(c.dataDir, keys, reg)
	if err != nil {
		return err
	}
	grpcLn, err := c.listenGRPC(ctx)
	if err != nil {
		return err
	}
	if grpcLn != nil {
		defer grpcLn.Close()
	}
	edgeToken := devToken
	if c.requireCapability {
		edgeToken = "" // tokenless callers get an A2A authentication error
	}
	// One registry for the whole process, served at /metrics.
	metrics := newMetricsRegistry()
	edges, err := c.startEdges(ctx, edgeJS, edgeToken, metrics, mcpServers)
	if err != nil {
		return err
	}
	defer edges.r.close()
	if edges.exchange, err = upExchange(keys.Dir, edges.r.kernel, c.ef.publicURL); err != nil {
		return err
	}
	stopProtect, err := c.startProtect(ctx, out, edges.r, bridge)
	if err != nil {
		return err
	}
	defer stopProtect()
	stopGateway, err := c.gateway.start(ctx, out, "chio up", edges.r.kernel, edges.r.dispatch, edges.r.registry, bridge, &c.ef)
	if err != nil {
		return err
	}
	defer stopGateway()
	hc, err := c.ef.httpConfig()
	if err != nil {
		return err
	}
	drains, stopGRPC := c.serveA2A(ctx, edges.r.edge, grpcLn)
	defer stopGRPC()
	kernelPub, err := schemas.ParsePublicKey(keys.KernelPub)
	if err != nil {
		return err
	}
	// Reads: capabilities from this data dir's issuer, each within its
	// scope; an operator token that reads everything; and the service
	// token, if one is given.
	rf := readFlags{issuers: []string{filepath.Join(keys.Dir, issuerPubFile)}, serviceToken: c.serviceToken, requireDPoP: c.ef.requireDPoP, publicOrigin: c.ef.publicURL}
	// And access tokens of the policy's identity providers, as the edges
	// take them.
	if rf.identities, err = c.ef.oidc.verifier(edges.r.policy); err != nil {
		return err
	}
	auth, stopAuth, err := rf.authenticator(ctx, un.js[natsauth.Projections], c.lf.replicas) // the read side: revocations and DPoP replay
	if err != nil {
		return err
	}
	defer stopAuth()
	opPath, err := operatorToken(c.dataDir, keys.Dir, operatorTokenTTL, c.ef.requireDPoP)
	if err != nil {
		return err
	}
	proj, err := c.startProjections(ctx, un.js[natsauth.Projections], kernelPub, auth, metrics, tp)
	if err != nil {
		return err
	}
	defer proj.stop()
	mount := func(e *echo.Echo, addr net.Addr) {
		c.mountEdges(ctx, e, addr, edges, proj.svc, hc, grpcLn != nil, auth)
		c.announce(out, httpScheme(ctx)+"://"+addr.String(), grpcLn, tokenPath, opPath)
	}
	slog.Debug("starting ledger", "data_dir", c.dataDir)
	// Stopping drains the edge (its calls finish and publish their
	// events) while the ledger still runs; NATS closes after.
	return runLedger(ctx, out, un.js[natsauth.Ledger], store, keys, c.listen, &c.lf, mount, append(drains, withRegistry(metrics), withReadAuth(auth),
		withChecks(append(edges.r.checks, proj.check(), eventStoreCheck(ns))...))...)
}

// startLocalTools starts the tool sources that live beside chio up: the
// --openapi bridge and the wrapped MCP servers. They are listed before the
// kernel is built, so one that cannot be started fails the start.
func (c *upConfig) startLocalTools(ctx context.Context) (*openapi.Bridge, []*mcpbridge.Server, func(), error) {
	if c.protectListen != "" && c.oapi.spec == "" {
		return nil, nil, nil, usageError(errors.New("--openapi-protect-listen needs --openapi"))
	}
	var bridge *openapi.Bridge
	if c.oapi.spec != "" {
		b, srv, err := c.oapi.server(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		bridge, c.ef.servers = b, append(c.ef.servers, srv)
	}
	mcpServers, stopMCP, err := c.mcpf.start(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, s := range mcpServers {
		c.ef.servers = append(c.ef.servers, s)
	}
	return bridge, mcpServers, stopMCP, nil
}

// addRemoteTools adds the tools that live across NATS or HTTP: partner A2A
// agents' skills and, with --workers, the workers found at start. Both
// come before the kernel is built and the dev capability is issued, so
// discovery fails closed and what is found is in the capability.
func (c *upConfig) addRemoteTools(ctx context.Context, out io.Writer, un *upNATS, keys *ledgerKeys) error {
	ef := &c.ef
	ns, js, listening := un.ns, un.js[natsauth.Edge], un.listening
	partners, err := c.a2af.adapters(ctx, js, c.lf.replicas, c.a2aTargets, ef.limits.a2aAdapter())
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
	if listening {
		fmt.Fprintf(out, "chio up: NATS JetStream on %s (data under %s)\n", ns.ClientURL(), c.dataDir)
		fmt.Fprintf(out, "chio up: NATS credentials in %s (one nkey seed per role: %s; pass one with --nats-nkey)\n", un.creds.Dir, roleFiles())
	}
	if ef.workers {
		if !listening {
			return usageError(errors.New("--workers needs a NATS address workers can reach (--nats-listen)"))
		}
		if ef.servers, err = awaitWorkers(ctx, js.Conn(), ef.servers, out, ns.ClientURL(), un.creds.Path(natsauth.Worker), ef.workerKey, ef.signer); err != nil {
			return err
		}
	}
	return nil
}

// listenGRPC checks the listen addresses and binds the gRPC one, if any.
// The dev capability acts for every tokenless caller, so it is never
// handed to the network: off loopback, --require-capability is needed.
func (c *upConfig) listenGRPC(ctx context.Context) (net.Listener, error) {
	if !c.requireCapability && !loopbackAddr(c.listen) {
		return nil, usageError(fmt.Errorf("--listen %s is not a loopback address: pass --require-capability (callers must then present their own capability)", c.listen))
	}
	grpcAddr, err := c.ef.grpcAddr(c.listen)
	if err != nil {
		return nil, err
	}
	c.ef.httpOrigin = schemed(ctx, listenOrigin(c.listen))
	if !c.requireCapability && grpcAddr != "" && !loopbackAddr(grpcAddr) {
		return nil, usageError(fmt.Errorf("--grpc-listen %s is not a loopback address: pass --require-capability (callers must then present their own capability)", grpcAddr))
	}
	return c.ef.listenGRPC(grpcAddr)
}

// upEdges are chio up's edges; all share the A2A replica's kernel,
// dispatcher and registry.
type upEdges struct {
	r   *replica
	oa  *openai.Adapter
	mcp *mcpedge.Edge
	acp *acp.Edge
	// exchange is the token exchange, nil without identity providers.
	exchange *exchange.Exchange
}

// upExchange is chio up's token exchange: with the policy's identity
// providers, it signs with the data dir's issuer key, which chio up's
// policy trusts; nil without providers.
func upExchange(keysDir string, k *kernel.Kernel, origin string) (*exchange.Exchange, error) {
	if k.Identities() == nil {
		return nil, nil
	}
	return newExchange(filepath.Join(keysDir, issuerKeyFile), k, nil, origin)
}

// newExchange is a token exchange signing with the key in keyFile, and
// verifying with k's identity providers. With policy set, the key must be
// one of its trusted issuers: its capabilities would be refused otherwise.
func newExchange(keyFile string, k *kernel.Kernel, policy *kernel.LoadedPolicy, origin string) (*exchange.Exchange, error) {
	if k.Identities() == nil {
		return nil, usageError(errors.New("--token-exchange-key: the policy trusts no identity provider (identity_providers, or --oidc-issuer): there is nothing to exchange"))
	}
	text, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("token exchange: %w", err)
	}
	key, err := schemas.ParsePrivateKey(string(text))
	if err != nil {
		return nil, fmt.Errorf("token exchange: %s: %w", keyFile, err)
	}
	x := exchange.New(key, k.Identities(), exchange.WithPublicOrigin(origin), exchange.WithRevocations(k.Revoked))
	if policy != nil && !slices.Contains(policy.TrustedIssuers, x.Issuer()) {
		return nil, usageError(fmt.Errorf("--token-exchange-key %s: its public key %s is not among the policy's trusted issuers, so the capabilities it signs would be refused: trust it (--issuer-pub, or trusted_issuers)", keyFile, x.Issuer()))
	}
	return x, nil
}

// startEdges builds the A2A edge (startEdge, as chio edge a2a does) and
// the OpenAI, MCP and ACP edges on its kernel. On error nothing is left
// running.
func (c *upConfig) startEdges(ctx context.Context, js jetstream.JetStream, edgeToken string, metrics *prometheus.Registry, mcpServers []*mcpbridge.Server) (*upEdges, error) {
	ef := &c.ef
	r, err := startEdge(ctx, js, ef, edgeToken, metrics)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*upEdges, error) { r.close(); return nil, err }
	for _, s := range mcpServers {
		if err := s.Follow(r.registry); err != nil { // its tool list changes reach the edges
			return fail(err)
		}
	}
	// The OpenAI surface shares the A2A edge's kernel and dispatcher;
	// its exposure reads openai.expose (--tier is A2A's).
	oaOpts, err := openaiOptions(js, r.policy, ef, &c.of, "", edgeToken)
	if err != nil {
		return fail(err)
	}
	oa := openai.New(r.kernel, r.registry, r.dispatch, oaOpts...)
	// MCP serves the tools whose manifests set mcp.expose (the
	// bridged API's, with --openapi).
	mcpEdge := mcpedge.New(r.kernel, r.registry, r.dispatch, mcpedge.WithExposure(r.policy.ToolExposure("mcp", ef.exposeAll)),
		mcpedge.WithAuthorizationServers(r.policy.Issuers()),
		mcpedge.WithDevToken(edgeToken), mcpedge.WithPublicOrigin(ef.publicURL))
	acpEdge, err := acp.New(r.kernel, r.registry, r.dispatch, js, acp.WithExposure(r.policy.ToolExposure("acp", ef.exposeAll)),
		acp.WithDevToken(edgeToken), acp.WithReplicas(c.lf.replicas), acp.WithPublicOrigin(ef.publicURL), ef.limits.acp())
	if err != nil {
		return fail(err)
	}
	return &upEdges{r: r, oa: oa, mcp: mcpEdge, acp: acpEdge}, nil
}

// startProtect serves `chio api protect` for the --openapi API on its own
// address, if asked; stop cancels it and waits for it to drain.
func (c *upConfig) startProtect(ctx context.Context, out io.Writer, r *replica, bridge *openapi.Bridge) (stop func(), err error) {
	if c.protectListen == "" {
		return func() {}, nil
	}
	pln, err := net.Listen("tcp", c.protectListen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", c.protectListen, err)
	}
	fmt.Fprintf(out, "chio up: api protect  http://%s -> %s\n", pln.Addr(), orDefault(c.oapi.upstream, "the spec's server"))
	pctx, stopProtect := context.WithCancel(ctx)
	protected := make(chan struct{})
	go func() {
		defer close(protected)
		if err := serveHandler(pctx, protect.New(r.kernel, r.dispatch, bridge), pln, c.ef.drainTimeout); err != nil {
			slog.Error("api protect stopped", "err", err)
		}
	}()
	return func() { stopProtect(); <-protected }, nil
}

// serveA2A starts the A2A edge's background work (sweeping expired tasks,
// push notifications) and its gRPC binding, and returns how the ledger's
// shutdown drains them.
func (c *upConfig) serveA2A(ctx context.Context, edge *a2a.Edge, grpcLn net.Listener) (drains []runOption, stop func()) {
	drains = []runOption{withDrain(c.ef.drainTimeout, edge.Drain)}
	stop = func() {}
	if grpcLn != nil {
		drainGRPC, stopGRPC := serveGRPC(ctx, edge, grpcLn)
		stop = stopGRPC
		drains = append(drains, withDrain(c.ef.drainTimeout, drainGRPC))
	}
	go edge.Sweep(ctx, sweepEvery)
	if c.ef.limits.retention > 0 {
		go edge.ExpireTasks(ctx, c.ef.limits.retention, projections.Durable(projections.DefaultName, schemas.TasksStream))
	}
	go runPush(ctx, edge)
	return drains, stop
}

// upProjections is the projections service chio up runs beside its ledger.
type upProjections struct {
	svc  *projections.Service
	done chan struct{}
	err  error // read only after done is closed
	stop func()
}

// check is the projections' readiness check.
func (p *upProjections) check() health.Check {
	return projectionsCheck("projections", p.svc, p.done, &p.err)
}

// startProjections opens the projections and runs them. They trust exactly
// the bytes this process's ledger signed, by leaf hash (registered with the
// ledger here, so this comes before runLedger); everything else they verify.
func (c *upConfig) startProjections(ctx context.Context, js jetstream.JetStream, kernelPub ed25519.PublicKey, auth *readauth.Authenticator, metrics *prometheus.Registry, tp trace.TracerProvider) (*upProjections, error) {
	signed, err := leafset.New(signedLeavesKept)
	if err != nil {
		return nil, err
	}
	c.lf.extra = append(c.lf.extra, ledger.WithSignedLeaves(signed.Add))
	popts := append([]projections.Option{projections.WithLogger(slog.Default()),
		projections.WithKernelKey(kernelPub), projections.WithAuthenticator(auth), projections.WithMetrics(metrics), projections.WithTracerProvider(tp),
		projections.WithTrustedLeaves(signed.Contains), projections.WithEdgeTrust(c.ef.taskTrust)}, c.lf.memory.projectionStore()...)
	svc, err := projections.Open(projectionsDir(c.dataDir), popts...)
	if err != nil {
		return nil, err
	}
	p := &upProjections{svc: svc, done: make(chan struct{})}
	projCtx, stopProj := context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		p.err = svc.Run(projCtx, js)
		if p.err != nil && projCtx.Err() == nil {
			slog.Error("projections stopped", "err", p.err)
		}
	}()
	p.stop = func() { stopProj(); <-p.done; svc.Close() }
	return p, nil
}

// mountEdges puts every surface on the ledger's HTTP server.
func (c *upConfig) mountEdges(ctx context.Context, e *echo.Echo, addr net.Addr, edges *upEdges, proj *projections.Service, hc a2a.HTTPConfig, grpc bool, auth *readauth.Authenticator) {
	if c.ef.publicURL == "" {
		edges.r.edge.AddOrigin(schemed(ctx, listenOrigin(addr.String()))) // the bound port, for --listen HOST:0
	}
	edges.r.edge.Register(e, hc)
	edges.oa.Register(e)
	edges.mcp.Register(e)
	edges.acp.Register(e)
	if edges.exchange != nil {
		e.Any(exchange.Path, echo.WrapHandler(edges.exchange))
	}
	proj.Register(e)
	mountConsole(e)
	mountToolsListing(e, edges.r, &c.ef, grpc, auth) // operators: every tool, its origin and signed manifest
}

// announce prints where everything is served, once the HTTP address is
// bound, and the credentials to call it with.
func (c *upConfig) announce(out io.Writer, base string, grpcLn net.Listener, tokenPath, opPath string) {
	fmt.Fprintf(out, "chio up: agent card   %s/.well-known/agent-card.json\n", base)
	fmt.Fprintf(out, "chio up: JSON-RPC     %s/a2a\n", base)
	fmt.Fprintf(out, "chio up: HTTP+JSON    %s%s\n", base, a2a.RESTPath)
	fmt.Fprintf(out, "chio up: OpenAI       %s%s  %s%s\n", base, openai.ToolsPath, base, openai.ToolCallsPath)
	if c.of.upstream != "" {
		fmt.Fprintf(out, "chio up: OpenAI proxy %s/openai/v1 (chat/completions, responses) -> %s\n", base, c.of.upstream)
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
	if c.ef.requireDPoP {
		fmt.Fprintf(out, "chio up: operator token in %s, its key in %s (reads every receipt, task and report: --require-dpop, so send it as Authorization: DPoP with a proof, chio capability proof)\n",
			opPath, filepath.Join(c.dataDir, operatorTokenKeyFile))
	} else {
		fmt.Fprintf(out, "chio up: operator token in %s (reads every receipt, task and report: send it as Authorization: Bearer)\n", opPath)
	}
	fmt.Fprintf(out, "chio up: try: curl -s %s/a2a -H 'Content-Type: application/json' -H \"Authorization: Bearer $(cat %s)\" -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/send\",\"params\":{\"message\":{\"role\":\"user\",\"messageId\":\"m1\",\"parts\":[{\"kind\":\"text\",\"text\":\"world\"}]}}}'\n", base, tokenPath)
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
