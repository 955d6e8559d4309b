package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/edges/a2a"
	"github.com/chio-ledger/chio/edges/a2a/push"
	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/exchange"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/conformance"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/edges/tools/relay"
	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// edgeFlags configure an A2A edge, in `chio edge a2a` and `chio up`.
type edgeFlags struct {
	// natsAuth is how a standalone edge authenticates to NATS (chio up's
	// in-process edge uses its own role credential instead).
	natsAuth natsauth.Client
	// edgeKeyFile and edgeCredFile are the edge's signing key and
	// credential (--edge-key, --edge-credential); signer is what they
	// load, or what chio up issued.
	edgeKeyFile, edgeCredFile string
	signer                    *schemas.EdgeSigner
	// taskIssuers (--edge-issuer) make the task store honour only
	// commits a certified edge signed; taskTrust is that trust (chio up
	// sets it itself).
	taskIssuers    []string
	taskTrust      *schemas.EdgeVerifier
	policyFile     string
	issuerPub      string
	publicURL      string
	trustedProxies []string
	manifests      []string
	exposeAll      bool
	tier           string
	replicas       int
	edgeID         string
	awaitReceipt   time.Duration
	serveRoot      bool
	demos          []string
	defaultSkill   string
	noPush         bool
	pushPrivate    []string
	pushLoopback   bool
	relayAs        string
	relayTo        string
	relaySkill     string
	relayToken     string
	relayKey       string
	drainTimeout   time.Duration
	drainDelay     time.Duration // --drain-delay, where the command has it
	// The gRPC binding: --grpc-listen, --grpc-public-url, and the address
	// the card advertises (set by listenGRPC).
	grpcListen    string
	grpcPublicURL string
	// httpOrigin is http:// and the HTTP listen address when that names a
	// concrete host (listenOrigin), else empty: without --public-url, the
	// origin of cards built off HTTP (the extended card over gRPC) and the
	// one whose card the card key signs.
	httpOrigin string
	grpcURL    string
	// The agent card: --card-key (the signing key file) and
	// --card-version (the dialect of a request that names none).
	cardKey     string
	cardVersion string
	// requireDPoP: every token needs a proof (--require-dpop).
	requireDPoP bool
	// manifestKey signs the registry's manifests (--manifest-key).
	manifestKey string
	// servers are in-process tool servers the command built itself (the
	// OpenAPI bridge), registered beside the demos.
	servers []tools.Server
	// workers: tool servers also come from workers on NATS (--workers),
	// and the demo tool is theirs to serve.
	workers bool
	// workerKey pins the key workers sign their manifests with
	// (--worker-key, a file or 64 hex).
	workerKey string
	tracer    trace.TracerProvider // startTracing's; nil: off
	limits    taskLimits           // --max-live-tasks, --max-push-configs
	oidc      oidcFlags            // --oidc-issuer, --oidc-audience, --oidc-grant, --oidc-ca
}

func (f *edgeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.policyFile, "policy", "", "policy document (chio.policy.v1); default: trust --issuer-pub with the default guards")
	cmd.Flags().StringVar(&f.issuerPub, "issuer-pub", "", "file with the trusted capability issuer's public key (when no --policy)")
	registerManifestKeyFlag(cmd.Flags(), f)
	cmd.Flags().BoolVar(&f.requireDPoP, "require-dpop", false, "honour every capability only with a proof of possession of its subject key (by default only tokens that can delegate, or whose grants ask for it, need one)")
	cmd.Flags().StringVar(&f.publicURL, "public-url", "", "public origin advertised in the agent card (default: from each request)")
	cmd.Flags().StringVar(&f.cardKey, "card-key", "", "Ed25519 key (hex seed) that signs the agent card, its public key served at /.well-known/jwks.json; created if missing; replicas share one (default: unsigned; chio up: DATA_DIR/keys/card.key)")
	cmd.Flags().StringVar(&f.cardVersion, "card-version", "1.0", `agent card served at /.well-known/agent-card.json when a request names no A2A-Version: "1.0", or "0.3" (the 0.3-compatible card, for 0.3 clients that send no version; it fails the 1.0 schema)`)
	cmd.Flags().StringArrayVar(&f.trustedProxies, "trusted-proxy", nil, "CIDR of a reverse proxy whose X-Forwarded-* headers are honoured (repeatable)")
	cmd.Flags().BoolVar(&f.workers, "workers", false, "also call tool servers run by chio worker on this NATS (discovered at start and every "+workerFollowEvery.String()+"; the demo tool is then left to them)")
	cmd.Flags().StringVar(&f.workerKey, "worker-key", "", "with --workers: the Ed25519 public key (64 hex, or a file holding it) workers sign their manifests with (chio worker --manifest-key); a worker's server whose manifest does not verify is skipped (required with --workers; chio up: its own manifest key, DATA_DIR/keys/"+manifestPubFile+")")
	cmd.Flags().StringArrayVar(&f.manifests, "manifest", nil, "chio.manifest.v1 file to register (repeatable; manifest-only tools are listed but have no server here)")
	cmd.Flags().BoolVar(&f.exposeAll, "expose-all", false, "dev only: expose tools without a2a.expose (internal namespaces stay hidden)")
	cmd.Flags().StringVar(&f.tier, "tier", "", "expose only tools whose a2a.tier equals this")
	cmd.Flags().StringVar(&f.edgeID, "edge-id", "", "this replica's name in events and task claims (default: host name and pid)")
	cmd.Flags().BoolVar(&f.serveRoot, "serve-root", false, "also serve JSON-RPC at / (for clients configured with the bare origin)")
	cmd.Flags().StringArrayVar(&f.demos, "demo", nil, `built-in demo tool server to add: "conformance" (the A2A conformance kit's agent; it becomes the default skill)`)
	cmd.Flags().StringVar(&f.defaultSkill, "default-skill", "", "skill that runs when a message names none (default: the only skill, if there is one)")
	cmd.Flags().BoolVar(&f.noPush, "no-push", false, "turn push notifications off (capabilities.pushNotifications false)")
	cmd.Flags().StringArrayVar(&f.pushPrivate, "push-allow-private", nil, "CIDR of a private network webhooks may reach (repeatable; by default only public addresses over https)")
	cmd.Flags().BoolVar(&f.pushLoopback, "push-allow-loopback", false, "let webhooks name localhost/127.0.0.1/::1 (http allowed there); on by default in chio up")
	cmd.Flags().StringVar(&f.relayAs, "relay-as", "", "add a relay agent SERVER/TOOL that forwards to --relay-skill at --relay-to, extending the call chain")
	cmd.Flags().StringVar(&f.relayTo, "relay-to", "", "the relay's downstream A2A JSON-RPC endpoint (e.g. http://127.0.0.1:8082/a2a)")
	cmd.Flags().StringVar(&f.relaySkill, "relay-skill", "", "the downstream skill as SERVER/TOOL")
	cmd.Flags().StringVar(&f.relayToken, "relay-token", "", "file with the capability the relay presents downstream")
	cmd.Flags().StringVar(&f.relayKey, "relay-key", "", "the relay token's subject key (capability keygen's file): the relay proves possession with a DPoP proof per request (needed when the token can delegate)")
	cmd.Flags().DurationVar(&f.awaitReceipt, "await-receipt", 0, "wait up to this long for the ledger to integrate each call's receipt and embed it (signed, with its leaf index) in metadata.chio")
	cmd.Flags().DurationVar(&f.drainTimeout, "drain-timeout", defaultDrainTimeout, "on SIGINT/SIGTERM, how long calls in flight get to finish and publish their events before the rest are cancelled")
	registerTaskLimitFlags(cmd.Flags(), &f.limits)
	registerTaskRetention(cmd.Flags(), &f.limits)
	f.oidc.register(cmd.Flags())
}

func (f *edgeFlags) policy() (*kernel.LoadedPolicy, error) {
	p, err := f.basePolicy()
	if err != nil {
		return nil, err
	}
	return f.oidc.withProviders(p)
}

func (f *edgeFlags) basePolicy() (*kernel.LoadedPolicy, error) {
	if f.policyFile != "" {
		return kernel.LoadPolicy(f.policyFile)
	}
	if f.issuerPub == "" {
		return nil, usageError(errors.New("--policy or --issuer-pub is required: the edge must know whose capabilities to trust"))
	}
	b, err := os.ReadFile(f.issuerPub)
	if err != nil {
		return nil, fmt.Errorf("--issuer-pub: %w", err)
	}
	return kernel.NewPolicy(kernel.Policy{TrustedIssuers: []string{strings.TrimSpace(string(b))}})
}

func (f *edgeFlags) registry() (*tools.Registry, error) {
	opts, err := f.registryOptions()
	if err != nil {
		return nil, err
	}
	reg := tools.NewRegistry(opts...)
	if !f.workers {
		if err := reg.Register(hello.New()); err != nil {
			return nil, err
		}
	}
	for _, d := range f.demos {
		switch d {
		case "conformance":
			if err := reg.Register(conformance.New()); err != nil {
				return nil, err
			}
			if f.defaultSkill == "" {
				f.defaultSkill = conformance.ToolName
			}
		default:
			return nil, usageError(fmt.Errorf("--demo %q: the demos are: conformance", d))
		}
	}
	if err := f.addRelay(reg); err != nil {
		return nil, err
	}
	for _, s := range f.servers {
		if err := reg.Register(s); err != nil {
			return nil, fmt.Errorf("register %s: %w", s.ServerID(), err)
		}
	}
	for _, path := range f.manifests {
		m, err := tools.LoadManifestFile(path)
		if err != nil {
			return nil, err
		}
		if err := reg.AddManifest(m); err != nil {
			return nil, fmt.Errorf("--manifest %s: %w", path, err)
		}
	}
	return reg, nil
}

// addRelay registers the --relay-as agent, if configured.
func (f *edgeFlags) addRelay(reg *tools.Registry) error {
	if f.relayAs == "" && f.relayTo == "" && f.relaySkill == "" && f.relayToken == "" {
		return nil
	}
	as, okAs := splitSkill(f.relayAs)
	to, okTo := splitSkill(f.relaySkill)
	if !okAs || !okTo || f.relayTo == "" || f.relayToken == "" {
		return usageError(errors.New("a relay needs --relay-as SERVER/TOOL, --relay-to URL, --relay-skill SERVER/TOOL and --relay-token FILE"))
	}
	tok, err := os.ReadFile(f.relayToken)
	if err != nil {
		return fmt.Errorf("--relay-token: %w", err)
	}
	target := relay.Target{URL: f.relayTo, Token: strings.TrimSpace(string(tok)), ServerID: to[0], ToolName: to[1]}
	if f.relayKey != "" {
		if target.Signer, err = signerFromFiles(f.relayKey, target.Token); err != nil {
			return fmt.Errorf("--relay-key: %w", err)
		}
	}
	return reg.Register(relay.New(as[0], as[1], target))
}

func splitSkill(s string) ([2]string, bool) {
	server, tool, ok := strings.Cut(s, "/")
	return [2]string{server, tool}, ok && server != "" && tool != ""
}

func (f *edgeFlags) exposure(p *kernel.LoadedPolicy) tools.Exposure {
	e := p.ToolExposure("a2a", f.exposeAll)
	if f.tier != "" {
		e.Tier = f.tier
	}
	return e
}

func (f *edgeFlags) httpConfig() (a2a.HTTPConfig, error) {
	hc := a2a.HTTPConfig{PublicURL: f.publicURL, ServeRoot: f.serveRoot}
	for _, s := range f.trustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return hc, usageError(fmt.Errorf("--trusted-proxy %q: %w", s, err))
		}
		hc.TrustedProxies = append(hc.TrustedProxies, p)
	}
	return hc, nil
}

// sweepEvery is how often a replica looks for background tasks whose
// accepting replica died.
const sweepEvery = 5 * time.Second

// runPush delivers the edge's push notifications until ctx ends, starting
// the delivery again (with a growing pause) whenever it fails.
func runPush(ctx context.Context, e *a2a.Edge) {
	pause := time.Second
	for {
		err := e.RunPush(ctx)
		if ctx.Err() != nil || err == nil {
			return
		}
		slog.Error("a2a: push delivery failed; restarting", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Minute)
	}
}

// replica is a running A2A edge replica and what its probes look at.
type replica struct {
	edge   *a2a.Edge
	checks []health.Check // beyond nats
	close  func()
	// The parts other surfaces of the same process share (chio up's
	// OpenAI adapter): one kernel, one dispatcher, one registry.
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
	registry *tools.Registry
	policy   *kernel.LoadedPolicy
}

// governance is what every edge of a process governs its calls with.
type governance struct {
	policy   *kernel.LoadedPolicy
	registry *tools.Registry
	id       string // this replica's name in events and claims
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
}

// governance builds the policy, registry, kernel and dispatcher from the
// flags, their series registered on metrics; the caller closes the kernel.
func (f *edgeFlags) governance(ctx context.Context, js jetstream.JetStream, metrics prometheus.Registerer) (*governance, error) {
	policy, err := f.policy()
	if err != nil {
		return nil, err
	}
	reg, err := f.registry()
	if err != nil {
		return nil, err
	}
	signer, err := f.edgeSigner()
	if err != nil {
		return nil, err
	}
	if f.workers {
		if err := addWorkers(ctx, js.Conn(), reg, f.workerKey, signer); err != nil {
			return nil, err
		}
	}
	id := f.edgeID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	oidcClient, err := f.oidc.client()
	if err != nil {
		return nil, err
	}
	k, err := kernel.New(ctx, js, policy, kernel.WithRegistry(reg), kernel.WithReplicas(f.replicas), kernel.WithMetrics(metrics),
		kernel.WithRequireDPoP(f.requireDPoP), kernel.WithTracerProvider(f.tracer), kernel.WithIdentityHTTPClient(oidcClient))
	if err != nil {
		return nil, err
	}
	d, err := dispatch.New(ctx, js, k, reg, id, f.replicas, dispatch.WithMetrics(metrics), dispatch.WithTracerProvider(f.tracer),
		dispatch.WithEdgeSigner(signer))
	if err != nil {
		k.Close()
		return nil, err
	}
	return &governance{policy: policy, registry: reg, id: id, kernel: k, dispatch: d}, nil
}

// startEdge builds a replica: kernel, dispatcher, task store and edge,
// their Prometheus series registered on metrics.
func startEdge(ctx context.Context, js jetstream.JetStream, f *edgeFlags, devToken string, metrics prometheus.Registerer) (*replica, error) {
	g, err := f.governance(ctx, js, metrics)
	if err != nil {
		return nil, err
	}
	policy, reg, id, k, d := g.policy, g.registry, g.id, g.kernel, g.dispatch
	if f.taskTrust == nil && len(f.taskIssuers) > 0 {
		trust, stop, err := taskTrust(ctx, js, f.replicas, "the edge's task store", f.taskIssuers)
		if err != nil {
			k.Close()
			return nil, err
		}
		context.AfterFunc(ctx, stop)
		f.taskTrust = trust
	}
	opts := []taskstore.Option{taskstore.WithReplicas(max(f.replicas, 1)), taskstore.WithReplicaID(id), f.limits.taskstore()}
	if f.signer != nil {
		opts = append(opts, taskstore.WithEdgeSigner(f.signer))
	}
	if f.taskTrust != nil {
		opts = append(opts, taskstore.WithEdgeTrust(f.taskTrust))
	}
	ts, err := taskstore.Open(ctx, js, opts...)
	if err != nil {
		k.Close()
		return nil, err
	}
	pc, err := f.push(ctx, js)
	if err != nil {
		k.Close()
		return nil, err
	}
	cfg := a2a.Config{Exposure: f.exposure(policy), DevToken: devToken, EdgeID: id, AwaitReceipt: f.awaitReceipt, OpenIDProviders: policy.Issuers(),
		JetStream: js, DefaultSkill: f.defaultSkill, Push: pc, Metrics: metrics, GRPCURL: f.grpcURL, PublicURL: f.publicURL, TracerProvider: f.tracer}
	if cfg.PublicURL == "" {
		cfg.PublicURL = f.httpOrigin
	}
	if err := f.cardConfig(&cfg); err != nil {
		k.Close()
		return nil, err
	}
	e := a2a.New(cfg, k, reg, d, ts)
	e.LimitStreams(httpLimitsFrom(ctx).streams()) // --max-streams-per-caller, --max-streams
	return &replica{edge: e, checks: edgeChecks(js, k), close: k.Close, kernel: k, dispatch: d, registry: reg, policy: policy}, nil
}

// startEdgeRetrying starts a replica, trying again while creating its
// streams and buckets times out: on a cluster that is starting (or busy
// electing leaders) the first creations of replicated assets can. Each try
// gets a fresh registry, so a failed try leaves no series behind.
func startEdgeRetrying(ctx context.Context, js jetstream.JetStream, f *edgeFlags, devToken string) (*prometheus.Registry, *replica, error) {
	deadline := time.Now().Add(jetStreamWait)
	for {
		metrics := newMetricsRegistry()
		r, err := startEdge(ctx, js, f, devToken, metrics)
		if err == nil {
			return metrics, r, nil
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, nil, err
		}
		slog.Warn("a2a: setting up the edge's streams and buckets timed out; retrying", "err", err)
		time.Sleep(time.Second)
	}
}

// push opens the push config store and outbox, unless --no-push.
func (f *edgeFlags) push(ctx context.Context, js jetstream.JetStream) (*a2a.Push, error) {
	if f.noPush {
		return nil, nil
	}
	policy := push.Policy{AllowInsecureLoopback: f.pushLoopback}
	for _, s := range f.pushPrivate {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, usageError(fmt.Errorf("--push-allow-private %q: %w", s, err))
		}
		policy.AllowPrivate = append(policy.AllowPrivate, p)
	}
	store, err := push.OpenStore(ctx, js, push.WithStoreReplicas(max(f.replicas, 1)), f.limits.push())
	if err != nil {
		return nil, err
	}
	outbox, err := push.OpenOutbox(ctx, js, policy, push.WithOutboxReplicas(max(f.replicas, 1)))
	if err != nil {
		return nil, err
	}
	return &a2a.Push{Store: store, Outbox: outbox, Policy: policy}, nil
}

// devCapability issues the token `chio up` acts under for callers without
// one: the data dir's dev agent key, every tool of every registered server,
// valid for a day. It is written to DIR/dev-capability.token (0600).
func devCapability(dataDir string, keys *ledgerKeys, reg *tools.Registry) (string, string, error) {
	agent, err := loadOrCreateKey(filepath.Join(keys.Dir, "dev-agent.key"))
	if err != nil {
		return "", "", err
	}
	var grants []schemas.ToolGrant
	for _, en := range reg.Exposed(tools.Exposure{Protocol: "a2a", ExposeAll: true}) {
		grants = append(grants, schemas.ToolGrant{ServerID: en.Manifest.ServerID, ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}})
	}
	path := filepath.Join(dataDir, "dev-capability.token")
	h, err := writeLocalToken(keys.Dir, path, "dev-"+time.Now().UTC().Format("20060102T150405Z"),
		agent.Public().(ed25519.PublicKey), dedupGrants(grants), 24*time.Hour)
	if err != nil {
		return "", "", fmt.Errorf("dev capability: %w", err)
	}
	return h, path, nil
}

// writeLocalToken issues a capability from the issuer key in keysDir to
// subject, valid from a minute ago for ttl, and writes its header form to
// path (0600).
func writeLocalToken(keysDir, path, id string, subject ed25519.PublicKey, grants []schemas.ToolGrant, ttl time.Duration) (string, error) {
	issuerText, err := os.ReadFile(filepath.Join(keysDir, issuerKeyFile))
	if err != nil {
		return "", err
	}
	issuer, err := schemas.ParsePrivateKey(string(issuerText))
	if err != nil {
		return "", fmt.Errorf("%s: %w", issuerKeyFile, err)
	}
	now := time.Now()
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: id, Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject: schemas.EncodePublicKey(subject), Scope: schemas.Scope{Grants: grants},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(ttl).Unix()),
	})
	if err != nil {
		return "", err
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(h+"\n"), 0o600); err != nil {
		return "", err
	}
	return h, nil
}

func dedupGrants(gs []schemas.ToolGrant) []schemas.ToolGrant {
	seen := map[string]bool{}
	var out []schemas.ToolGrant
	for _, g := range gs {
		if !seen[g.ServerID] {
			seen[g.ServerID] = true
			out = append(out, g)
		}
	}
	return out
}

func loadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return schemas.ParsePrivateKey(string(b))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(schemas.EncodePrivateKey(priv)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return priv, nil
}

func newEdgeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "edge", Short: "Run a protocol edge"}
	cmd.AddCommand(newEdgeA2ACmd(), newEdgeOpenAICmd(), newEdgeACPCmd())
	return cmd
}

func newEdgeA2ACmd() *cobra.Command {
	var ef edgeFlags
	var natsURL, listen, dataDir, exchangeKey string
	var stdio bool
	cmd := &cobra.Command{
		Use:   "a2a --nats URL --listen ADDR (--policy FILE | --issuer-pub FILE)",
		Short: "Run a stateless A2A edge replica (JSON-RPC over HTTP, or the hello-a2a stdio profile with --stdio)",
		Long: "Serves governed tools as A2A skills: the agent card at /.well-known/agent-card.json and JSON-RPC at /a2a.\n" +
			"Callers must present a capability (Authorization: Bearer or X-Chio-Capability). With --stdio it reads one\n" +
			"JSON-RPC request per line and acts under a dev capability minted from DIR/keys/issuer.key (--data-dir),\n" +
			"on an embedded NATS server in DIR unless --nats is given.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			tp, stopTracing, err := startTracing(ctx, "chio-edge-a2a")
			if err != nil {
				return err
			}
			defer stopTracing() // first deferred, so it flushes last
			ef.tracer = tp
			if ef.workers { // checked before connecting: a usage error, not a NATS one
				signer, err := ef.edgeSigner()
				if err != nil {
					return err
				}
				if _, err := workerOptions(ef.workerKey, signer); err != nil {
					return err
				}
			}
			var js jetstream.JetStream
			devToken := ""
			if stdio {
				keys, err := loadLedgerKeys(filepath.Join(dataDir, "keys"), DefaultOrigin)
				if err != nil {
					return err
				}
				if ef.policyFile == "" && ef.issuerPub == "" {
					ef.issuerPub = filepath.Join(keys.Dir, issuerPubFile)
				}
				reg, err := ef.registry()
				if err != nil {
					return err
				}
				if devToken, _, err = devCapability(dataDir, keys, reg); err != nil {
					return err
				}
			}
			if natsURL == "" && stdio {
				_, j, stopNATS, err := startEmbeddedNATS(natsembed.Config{StoreDir: filepath.Join(dataDir, "nats"), DontListen: true, ServerName: "chio-edge-stdio"})
				if err != nil {
					return err
				}
				defer stopNATS()
				js = j
			} else {
				nc, j, err := connectNATS(orDefault(natsURL, nats.DefaultURL), "chio-edge-a2a", natsauth.Edge, &ef.natsAuth)
				if err != nil {
					return err
				}
				defer nc.Close()
				js = j
			}
			grpcAddr, err := ef.grpcAddr(listen)
			if err != nil {
				return err
			}
			ef.httpOrigin = schemed(ctx, listenOrigin(listen))
			if stdio && grpcAddr != "" {
				return usageError(errors.New("--grpc-listen does not apply to --stdio"))
			}
			grpcLn, err := ef.listenGRPC(grpcAddr)
			if err != nil {
				return err
			}
			if grpcLn != nil {
				defer grpcLn.Close()
			}
			metrics, r, err := startEdgeRetrying(ctx, js, &ef, devToken)
			if err != nil {
				return err
			}
			// Deferred after the NATS connection's close, so it runs
			// before it: the kernel's watch stops on a live connection.
			defer r.close()
			e := r.edge
			if stdio {
				err := e.ServeStdio(ctx, cmd.InOrStdin(), cmd.OutOrStdout())
				// Background sends started from stdio finish (and publish
				// their events) before NATS closes.
				dctx, cancel := context.WithTimeout(context.Background(), ef.drainTimeout)
				defer cancel()
				if derr := e.Drain(dctx); derr != nil {
					slog.Warn("a2a: stopped before every call finished", "err", derr)
				}
				return err
			}
			go e.Sweep(ctx, sweepEvery)
			if ef.limits.retention > 0 {
				go e.ExpireTasks(ctx, ef.limits.retention, projections.Durable(projections.DefaultName, schemas.TasksStream))
			}
			go runPush(ctx, e)
			hc, err := ef.httpConfig()
			if err != nil {
				return err
			}
			ec := newEdgeEcho()
			e.Register(ec, hc)
			if exchangeKey != "" {
				x, err := newExchange(exchangeKey, r.kernel, r.policy, ef.publicURL)
				if err != nil {
					return err
				}
				ec.Any(exchange.Path, echo.WrapHandler(x))
			}
			serveMetrics(ec, metrics)
			health.Register(ec, append([]health.Check{health.NATS(js)}, r.checks...)...)
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			if ef.publicURL == "" {
				e.AddOrigin(schemed(ctx, listenOrigin(ln.Addr().String()))) // the bound port, for --listen HOST:0
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio edge a2a: agent card %s://%s/.well-known/agent-card.json, JSON-RPC %s://%s/a2a\n", httpScheme(ctx), ln.Addr(), httpScheme(ctx), ln.Addr())
			drains := []func(context.Context) error{e.Drain}
			if grpcLn != nil {
				drainGRPC, stopGRPC := serveGRPC(ctx, e, grpcLn)
				defer stopGRPC()
				drains = append(drains, drainGRPC)
				fmt.Fprintf(cmd.OutOrStdout(), "chio edge a2a: gRPC %s (A2A 1.0, advertised as %s)\n", grpcLn.Addr(), ef.grpcURL)
			}
			// serve returns once the calls in flight have finished and
			// published their events (or the drain timed out): only then
			// do the deferred closes of the kernel and NATS run.
			return serveTraced(withDrainDelay(ctx, ef.drainDelay), ec, ef.tracer, ln, ef.drainTimeout, drains...)
		},
	}
	ef.register(cmd)
	cmd.Flags().StringVar(&exchangeKey, "token-exchange-key", "", "serve the token exchange (RFC 8693) at "+exchange.Path+", signing capabilities with the key in this file (capability keygen's), whose public half the policy must trust; needs identity providers")
	cmd.Flags().StringVar(&natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+"; with --stdio, an embedded server in --data-dir)")
	registerNATSAuth(cmd.Flags(), &ef.natsAuth)
	registerEdgeSignerFlags(cmd.Flags(), &ef)
	registerTaskTrustFlag(cmd.Flags(), &ef.taskIssuers)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8082", "HTTP listen address")
	cmd.Flags().StringVar(&dataDir, "data-dir", ".chio", "with --stdio: keys and the embedded NATS store")
	cmd.Flags().BoolVar(&stdio, "stdio", false, "serve the hello-a2a stdio profile on stdin/stdout")
	cmd.Flags().IntVar(&ef.replicas, "replicas", 1, "replicas of the streams and buckets the edge creates (3 on a cluster)")
	ef.registerGRPC(cmd, "", `gRPC listen address of the A2A 1.0 gRPC binding (default off; "none": off)`)
	registerDrainDelay(cmd.Flags(), &ef.drainDelay, defaultDrainDelay)
	cmd.AddCommand(newAgentCardCmd())
	return cmd
}

func newAgentCardCmd() *cobra.Command {
	var ef edgeFlags
	var url string
	cmd := &cobra.Command{
		Use:   "agent-card [--public-url URL]",
		Short: "Print the agent card the edge serves for its registered tools",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			reg, err := ef.registry()
			if err != nil {
				return err
			}
			exp := tools.Exposure{Protocol: "a2a", ExposeAll: ef.exposeAll, Tier: ef.tier}
			e := a2a.New(a2a.Config{Exposure: exp}, nil, reg, nil, nil)
			card := e.Card(url)
			if url == stdioURL {
				card = e.StdioCard()
			}
			body, err := wire.EncodeAgentCard(card)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(body))
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "public-url", stdioURL, "origin advertised in the card (the default: the stdio profile's card)")
	cmd.Flags().StringArrayVar(&ef.manifests, "manifest", nil, "chio.manifest.v1 file to register (repeatable)")
	cmd.Flags().BoolVar(&ef.exposeAll, "expose-all", false, "dev only: expose tools without a2a.expose")
	cmd.Flags().StringVar(&ef.tier, "tier", "", "expose only tools whose a2a.tier equals this")
	return cmd
}

// stdioURL is the address of the stdio profile in its card.
const stdioURL = "stdio://"

func newEdgeEcho() *echo.Echo {
	ec := echo.New()
	ec.HideBanner, ec.HidePort = true, true
	ec.Use(middleware.Recover())
	return ec
}
