package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/progress"
	"github.com/chio-ledger/chio/internal/stagedir"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/ledger/scitt"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// ledgerFlags are the tuning flags shared by `chio ledger` and `chio up`.
type ledgerFlags struct {
	keysDir         string
	origin          string
	incompleteAfter time.Duration
	batchSize       int
	batchWait       time.Duration
	replicas        int
	witnessPolicy   string
	witnessInterval time.Duration
	acceptStream    string
	checkpointEvery time.Duration
	lagBound        time.Duration
	eventRetention  time.Duration
	scrubRate       int
	memory          memoryBudget         // set by the command from --memory-limit
	headFile        string               // set by openDataDir: the published head, beside the keys
	tracer          trace.TracerProvider // startTracing's; nil: off
	extra           []ledger.Option      // set by chio up: options of the one process
}

func (f *ledgerFlags) register(cmd *cobra.Command, keysHelp string) {
	cmd.Flags().StringVar(&f.keysDir, "keys", "", keysHelp)
	cmd.Flags().StringVar(&f.origin, "origin", DefaultOrigin, "log origin (the checkpoint key's name): used for keys generated on first start, checked against existing ones")
	cmd.Flags().DurationVar(&f.incompleteAfter, "incomplete-after", 10*time.Minute, "sign an allow decision with no outcome as incomplete after this long")
	cmd.Flags().IntVar(&f.batchSize, "batch-size", 1024, "most events folded into one synced batch")
	cmd.Flags().DurationVar(&f.batchWait, "batch-wait", 2*time.Millisecond, "longest wait for a batch to fill once its first event arrived")
	cmd.Flags().IntVar(&f.replicas, "replicas", 1, "replicas of the streams the ledger creates (3 on a cluster)")
	cmd.Flags().StringVar(&f.witnessPolicy, "witness-policy", "", "witness policy file (witness NAME VKEY URL, group NAME K|all|any MEMBER..., quorum NAME): submit checkpoints to the witnesses and serve the latest one the quorum cosigned")
	cmd.Flags().DurationVar(&f.witnessInterval, "witness-interval", witness.DefaultInterval, "how often the latest checkpoint is submitted to the witnesses")
	cmd.Flags().DurationVar(&f.checkpointEvery, "checkpoint-interval", ledger.DefaultCheckpointInterval, "an idle log signs a new checkpoint statement once its latest is this old, so that chio_ledger_checkpoint_age_seconds measures health (0: never)")
	cmd.Flags().DurationVar(&f.lagBound, "lag-bound", ledger.DefaultLagBound, "readiness fails (integration) while the oldest event not yet in the log is older than this: receipts of answered calls are late (0: never)")
	cmd.Flags().DurationVar(&f.eventRetention, "event-retention", 0, "purge CHIO_EVENTS of events older than this once the log has folded them and every reader (the projections, every durable consumer, every standby ledger) has read them; a log can then no longer be rebuilt from the stream, only restored from a backup of its store (0, the default: keep every event)")
	cmd.Flags().IntVar(&f.scrubRate, "scrub-rate", defaultScrubRate, "leaves a second the background scrub reads back from the log store, checking every leaf and tile against the tree (a pass at start, then one an hour after each pass ends; 0: off)")
	cmd.Flags().StringVar(&f.acceptStream, "accept-events-stream", "", "continue the log from this new CHIO_EVENTS stream (the identity a refusal names, NAME@CREATED) when the stream the log was built from is gone; the log records the break in a receipt")
}

// policy reads the --witness-policy file, nil without one.
func (f *ledgerFlags) policy() (*witness.Policy, error) {
	if f.witnessPolicy == "" {
		return nil, nil
	}
	p, err := witness.LoadPolicy(f.witnessPolicy)
	if err != nil {
		return nil, usageError(fmt.Errorf("--witness-policy: %w", err))
	}
	return p, nil
}

func (f *ledgerFlags) options(logger *slog.Logger) []ledger.Option {
	return append([]ledger.Option{ledger.WithLogger(logger), ledger.WithBatch(f.batchSize, f.batchWait),
		ledger.WithIncompleteAfter(f.incompleteAfter), ledger.WithReplicas(f.replicas), ledger.WithTracerProvider(f.tracer),
		ledger.WithAcceptEventsStream(f.acceptStream), ledger.WithHeadFile(f.headFile), ledger.WithCheckpointInterval(f.checkpointEvery), ledger.WithLagBound(f.lagBound),
		ledger.WithEventRetention(f.eventRetention, projections.Durable(projections.DefaultName, schemas.EventsStream))}, f.extra...)
}

func newLedgerCmd() *cobra.Command {
	var natsURL, dataDir, listen string
	var na natsauth.Client
	var edgeIssuers []string
	var lf ledgerFlags
	var ha haFlags
	var rf readFlags
	var mem memoryFlags
	cmd := &cobra.Command{
		Use:   "ledger --nats URL --data-dir DIR --listen ADDR",
		Short: "Run the ledger: consume events, sign receipts into the Merkle log, serve the log API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tp, stopTracing, err := startTracing(cmd.Context(), "chio-ledger")
			if err != nil {
				return err
			}
			defer stopTracing() // first deferred, so it flushes last
			lf.tracer = tp
			if lf.memory, err = mem.budget(); err != nil {
				return err
			}
			lf.memory.apply()
			keys, store, err := openDataDir(dataDir, &lf)
			if err != nil {
				return err
			}
			defer store.Close()
			nc, js, err := connectNATS(natsURL, "chio-ledger", natsauth.Ledger, &na)
			if err != nil {
				return err
			}
			defer nc.Close()
			stopTrust, err := withEdgeIssuers(cmd.Context(), cmd.OutOrStdout(), js, &lf, edgeIssuers)
			if err != nil {
				return err
			}
			defer stopTrust()
			var opts []runOption
			if ha.enabled {
				opts = append(opts, withStandby(&ha))
			}
			if err := rf.check(); err != nil {
				return err
			}
			if rf.any() {
				auth, stop, err := rf.authenticator(cmd.Context(), js, lf.replicas)
				if err != nil {
					return err
				}
				defer stop()
				opts = append(opts, withReadAuth(auth))
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "chio ledger: no --reader-issuer or --service-token: serving only the public half of the log (checkpoints, hash tiles, consistency proofs)")
			}
			return runLedger(cmd.Context(), cmd.OutOrStdout(), js, store, keys, listen, &lf, nil, opts...)
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s), comma separated")
	registerNATSAuth(cmd.Flags(), &na)
	registerEdgeIssuerFlag(cmd, &edgeIssuers)
	cmd.Flags().StringVar(&dataDir, "data-dir", ".chio", "directory of the log store (DIR/log) and, by default, its keys (DIR/keys)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8089", "address of the log's HTTP read API")
	lf.register(cmd, "key directory (default DIR/keys; generated on first start)")
	mem.register(cmd)
	ha.register(cmd)
	rf.register(cmd)
	cmd.AddCommand(newRebuildCmd(), newLedgerCheckCmd())
	return cmd
}

// The background scrub: how fast it reads (leaves a second, by default:
// a 10-million-leaf log in under 20 min, a few per cent of a core), and
// how long it rests between passes.
const (
	defaultScrubRate = 10_000
	scrubInterval    = time.Hour
)

func newLedgerCheckCmd() *cobra.Command {
	var dataDir, keysDir string
	cmd := &cobra.Command{
		Use:   "check --data-dir DIR",
		Short: "Check a stopped ledger's log store offline: every leaf, every tile and the root",
		Long: "Opens DIR/log (the ledger must be stopped: a running one holds it, and scrubs it in the background,\n" +
			"see --scrub-rate) with the checks every start makes (the root recomputed from the tiles, the right edge's\n" +
			"leaves, the latest checkpoint's signature), then reads back every entry bundle and tile: each leaf must\n" +
			"hash to its entry in the tile above it, each full tile to its entry in the next. It prints the size and\n" +
			"root on success (exit 0), and what is wrong and where otherwise (exit 1). The cure for a corrupt store\n" +
			"is a rebuild from the events stream: chio ledger rebuild --data-dir NEWDIR.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usageError(errors.New("--data-dir is required"))
			}
			logDir := filepath.Join(dataDir, "log")
			noStore := usageError(fmt.Errorf("--data-dir %s: no log store in %s", dataDir, logDir))
			if _, err := os.Stat(logDir); errors.Is(err, fs.ErrNotExist) {
				return noStore
			}
			keys, err := loadLedgerKeys(orDefault(keysDir, filepath.Join(dataDir, "keys")), "")
			if err != nil {
				return usageError(fmt.Errorf("%w (pass --keys: the keys of the log being checked)", err))
			}
			start := time.Now()
			store, err := openExistingStore(logDir, keys, logstore.WithReadOnly())
			switch {
			case errors.Is(err, logstore.ErrNoStore):
				return noStore
			case errors.Is(err, logstore.ErrCorrupt):
				return fmt.Errorf("ledger check: %w; rebuild it: chio ledger rebuild --data-dir NEWDIR", err)
			case err != nil:
				return fmt.Errorf("ledger check: %w", err)
			}
			defer store.Close()
			res, err := store.Check(cmd.Context(), nil)
			if err != nil {
				return fmt.Errorf("ledger check: %w (after %d entry bundles; the cure: chio ledger rebuild --data-dir NEWDIR)", err, res.Bundles)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ledger check: OK: size %d, %d entry bundles and %d full tiles checked in %s\nroot %s\nroot-hex %s\n",
				res.Size, res.Bundles, res.Tiles, time.Since(start).Round(time.Millisecond), base64.StdEncoding.EncodeToString(res.Root), schemas.EncodeHash(res.Root))
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the stopped ledger's data directory (DIR/log)")
	cmd.Flags().StringVar(&keysDir, "keys", "", "key directory of the log (default DIR/keys)")
	return cmd
}

func newRebuildCmd() *cobra.Command {
	var natsURL, dataDir, keysDir string
	var na natsauth.Client
	var edgeIssuers []string
	var force bool
	cmd := &cobra.Command{
		Use:   "rebuild --nats URL --data-dir NEWDIR",
		Short: "Replay CHIO_EVENTS into an empty store and print its size and root",
		Long: "Replays the event stream into NEWDIR/log through the same fold as the live ledger, signing with the\n" +
			"same keys, and prints the resulting tree size and root: equal to the live log's for the same events.\n" +
			"The root is printed in base64, as the checkpoint's third line has it, and as root-hex in hex.\n\n" +
			"Progress goes to stderr: one line redrawn in place on a terminal, otherwise a line at each tenth\n" +
			"of the messages (and at least every 5 s), then a summary line. The log is built in a marked\n" +
			"directory beside NEWDIR/log and renamed to NEWDIR/log when complete: an interrupted rebuild (Ctrl-C)\n" +
			"leaves no NEWDIR/log, and the next one removes what it left. A finished rebuild in NEWDIR/log is\n" +
			"refused unless --force, which replaces it once the new one is complete; a directory rebuild did not\n" +
			"make (a live store) is never replaced.\n\n" +
			"Give it the --edge-issuer keys the ledger ran with: the log it folds only certified edges' events, and\n" +
			"its receipts name the edge (metadata.edge), so a rebuild without them folds to another root.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usageError(errors.New("--data-dir is required"))
			}
			keys, err := loadLedgerKeys(keysDir, "")
			if err != nil {
				return fmt.Errorf("%w (pass --keys: the keys of the log being rebuilt)", err)
			}
			stage, err := stageRebuild(filepath.Join(dataDir, "log"), force)
			if err != nil {
				return fmt.Errorf("ledger rebuild: %w", err)
			}
			nc, js, err := connectNATS(natsURL, "chio-ledger-rebuild", natsauth.Reader, &na)
			if err != nil {
				return err
			}
			defer nc.Close()
			var lf ledgerFlags
			stopTrust, err := withEdgeIssuers(cmd.Context(), io.Discard, js, &lf, edgeIssuers)
			if err != nil {
				return err
			}
			defer stopTrust()
			p := progress.New(cmd.ErrOrStderr(), "ledger rebuild", 0, progress.WithUnit("messages"))
			defer p.Stop()
			st, err := rebuildLog(cmd.Context(), js, stage.Path, keys, p.Func(), lf.extra...)
			if err == nil {
				err = stage.Commit()
			}
			if err != nil {
				return errors.Join(err, stage.Discard())
			}
			p.Done() // once the rebuild is in place
			fmt.Fprintf(cmd.OutOrStdout(), "size %d\nroot %s\nroot-hex %s\n", st.Size, base64.StdEncoding.EncodeToString(st.Root), schemas.EncodeHash(st.Root))
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s)")
	registerNATSAuth(cmd.Flags(), &na)
	registerEdgeIssuerFlag(cmd, &edgeIssuers)
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the directory to rebuild the log into (NEWDIR/log)")
	cmd.Flags().StringVar(&keysDir, "keys", filepath.Join(".chio", "keys"), "key directory of the log being rebuilt")
	cmd.Flags().BoolVar(&force, "force", false, "replace a finished rebuild in NEWDIR/log (never a running ledger's data directory)")
	return cmd
}

// rebuildLog rebuilds the log into dir, reporting progress to report,
// and closes the store so dir can be renamed.
func rebuildLog(ctx context.Context, js jetstream.JetStream, dir string, keys *ledgerKeys, report func(done, total uint64), opts ...ledger.Option) (logstore.State, error) {
	store, err := openStore(dir, keys)
	if err != nil {
		return logstore.State{}, err
	}
	st, err := func() (logstore.State, error) {
		l, err := ledger.New(js, store, keys.Keys, append([]ledger.Option{ledger.WithLogger(slog.Default())}, opts...)...)
		if err != nil {
			return logstore.State{}, err
		}
		return l.Rebuild(ctx, ledger.WithProgress(report))
	}()
	if cerr := store.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("ledger rebuild: %w", cerr)
	}
	if err != nil {
		return logstore.State{}, err
	}
	return st, nil
}

// stageRebuild prepares a rebuild into target (internal/stagedir): built
// beside it and renamed into place when complete. A finished rebuild is
// replaced only with force, and never while a process holds its store
// open (its Pebble lock); a directory the command did not build, never.
func stageRebuild(target string, force bool) (*stagedir.Dir, error) {
	return stagedir.New(target, stagedir.Options{Replace: force, What: "rebuild", InUse: func(dir string) error {
		lock, err := vfs.Default.Lock(filepath.Join(dir, "LOCK"))
		if err != nil {
			return err
		}
		return lock.Close()
	}})
}

// openDataDir loads (generating on first use) the keys of a data directory,
// DIR/keys unless keysDir says otherwise, and opens its log, DIR/log.
func openDataDir(dataDir string, lf *ledgerFlags) (*ledgerKeys, *logstore.Store, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("create data dir: %w", err)
	}
	keys, err := loadLedgerKeys(orDefault(lf.keysDir, filepath.Join(dataDir, "keys")), lf.origin)
	if err != nil {
		return nil, nil, err
	}
	store, err := openStore(filepath.Join(dataDir, "log"), keys, lf.memory.logStore()...)
	if err != nil {
		return nil, nil, err
	}
	lf.headFile = filepath.Join(dataDir, publishedHeadFile)
	return keys, store, nil
}

// publishedHeadFile, in the data directory beside keys/ and log/, holds
// the largest checkpoint the log published (ledger.WithHeadFile).
const publishedHeadFile = "published-head.json"

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// openStore opens the log and checks it against the latest checkpoint, whose
// signature must verify with this ledger's key.
func openStore(dir string, keys *ledgerKeys, opts ...logstore.Option) (*logstore.Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	return openExistingStore(dir, keys, opts...)
}

// openExistingStore is openStore without making dir (with
// logstore.WithReadOnly, a directory with no store is ErrNoStore).
func openExistingStore(dir string, keys *ledgerKeys, opts ...logstore.Option) (*logstore.Store, error) {
	s, err := logstore.Open(dir, append([]logstore.Option{logstore.WithLogger(slog.Default()),
		logstore.WithCheckpointVerifier(ledger.CheckpointVerifier(keys.Origin(), keys.CheckpointVerifier))}, opts...)...)
	if errors.Is(err, logstore.ErrNoStore) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w (is another chio process using this data directory?)", err)
	}
	return s, nil
}

// connectNATS connects to url as role, with the credential and TLS
// settings of auth (nil: anonymous), and waits for JetStream.
func connectNATS(url, name string, role natsauth.Role, auth *natsauth.Client) (*nats.Conn, jetstream.JetStream, error) {
	opts, refused, err := natsOptions(role, auth)
	if err != nil {
		return nil, nil, err
	}
	// Pings every 2 s: a node cut off the network drops no TCP connection
	// (no RST), and with the default 2-minute interval a client would wait
	// minutes before moving to another node of the cluster.
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false),
		nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(3)}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	// A cluster that is starting accepts connections before JetStream has
	// a meta leader; creating replicated streams then times out. Wait for
	// JetStream to answer (bounded) instead of failing the first start.
	deadline := time.Now().Add(jetStreamWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case perr := <-refused:
			// The credential is not the role's: waiting would not help.
			nc.Close()
			return nil, nil, fmt.Errorf("NATS at %s refused what the %s role needs (is the credential the %s role's?): %w", url, role, role, perr)
		default:
		}
		if time.Now().After(deadline) {
			nc.Close()
			return nil, nil, fmt.Errorf("JetStream at %s did not answer within %s: %w", url, jetStreamWait, err)
		}
		slog.Warn("waiting for JetStream", "nats", url, "err", err)
		time.Sleep(500 * time.Millisecond)
	}
	return nc, js, nil
}

// jetStreamWait bounds how long a starting process waits for JetStream.
const jetStreamWait = time.Minute

// runLedger runs the ledger and its HTTP API (the log, /metrics, /healthz,
// /readyz) until ctx ends or either fails; mount, if set, adds more routes
// (the edge and the projections, in chio up) to the same server, and opts
// what goes with them (their registry, checks and drain).
func runLedger(ctx context.Context, out io.Writer, js jetstream.JetStream, store *logstore.Store, keys *ledgerKeys, listen string, lf *ledgerFlags, mount func(*echo.Echo, net.Addr), opts ...runOption) error {
	rc := runConfig{drainTimeout: defaultDrainTimeout}
	for _, o := range opts {
		o(&rc)
	}
	if rc.reg == nil {
		rc.reg = newMetricsRegistry()
	}
	lopts := append(lf.options(slog.Default()), ledger.WithMetrics(rc.reg))
	var writerFence *fence
	var leaseKV jetstream.KeyValue
	if rc.ha != nil {
		writerFence = &fence{}
		if leaseKV = leaseBucket(ctx, js, lf.replicas, slog.Default()); leaseKV == nil {
			return nil
		}
		// Standbys report where they are, so that the writer's event
		// retention purges nothing they have not folded.
		lopts = append(lopts, ledger.WithFence(writerFence.check), ledger.WithPositions(leaseKV, rc.ha.id()))
	}
	l, err := ledger.New(js, store, keys.Keys, lopts...)
	if err != nil {
		return err
	}
	// Before the API serves: its checkpoints are held to the head this log
	// published (ledger.HeadErr).
	l.LoadPublishedHead(ctx)
	run := l.Run
	if rc.ha != nil {
		writer := prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_writer",
			Help: "1 while this instance holds the writer lease and appends, 0 while it stands by."})
		rc.reg.MustRegister(writer)
		run = func(ctx context.Context) error {
			return standby(ctx, leaseKV, l, writerFence, rc.ha, writer, slog.Default())
		}
	}
	logPub, err := scitt.VKeyPublicKey(keys.VKey)
	if err != nil {
		return fmt.Errorf("the log key: %w", err)
	}
	apiOpts := []api.Option{api.WithServing(l.HeadErr),
		api.WithSCITT(scitt.Signers{Kernel: keys.Kernel, Log: keys.Checkpoint, LogPublic: logPub, Origin: keys.Origin()})}
	if rc.auth != nil {
		apiOpts = append(apiOpts, api.WithAuthenticator(rc.auth))
	}
	policy, err := lf.policy()
	if err != nil {
		return err
	}
	var cosigner *witness.Cosigner
	if policy != nil {
		// The writer submits; every replica serves what is in the bucket
		// (checked against its own tree): the cosigned checkpoint
		// outlives a failover.
		kv, err := witness.OpenKV(ctx, js, lf.replicas)
		if err != nil {
			return err
		}
		// Only the writer submits, and only a head that extends the one
		// published: a ledger rebuilding its store submits nothing smaller.
		copts := []witness.CosignerOption{witness.WithInterval(lf.witnessInterval), witness.WithRegistry(rc.reg),
			witness.WithCosignerLogger(slog.Default()), witness.WithGate(func() bool {
				return l.HeadErr() == nil && (writerFence == nil || writerFence.check() == nil)
			})}
		cosigner, err = witness.NewCosigner(store, kv, policy, keys.CheckpointVerifier, copts...)
		if err != nil {
			return err
		}
		apiOpts = append(apiOpts, api.WithCosigned(kv.Get))
	}
	h := api.New(store, api.Keys{Origin: keys.Origin(), CheckpointVKey: keys.VKey, KernelKey: keys.KernelPub}, slog.Default(), apiOpts...)
	e := api.NewServer(h)
	serveMetrics(e, rc.reg)
	health.Register(e, append([]health.Check{health.NATS(js), logStorageCheck(store),
		{Name: "events_stream", Func: func(context.Context) error { return l.StreamErr() }},
		{Name: "published_head", Func: func(context.Context) error { return l.HeadErr() }},
		{Name: "integration", Func: func(context.Context) error { return l.LagErr() }}}, rc.checks...)...)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	sch := httpScheme(ctx)
	fmt.Fprintf(out, "chio ledger: log API on %s://%s (checkpoint: %s://%s/log/checkpoint)\n", sch, ln.Addr(), sch, ln.Addr())
	if mount != nil {
		mount(e, ln.Addr())
	}
	// The ledger outlives the HTTP server's drain: in chio up, the calls
	// the edge finishes while stopping are folded into the log (and their
	// receipts awaited) before the ledger stops.
	lctx, stopLedger := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLedger()
	sctx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	ledgerDone, serverDone := make(chan error, 1), make(chan error, 1)
	go func() { ledgerDone <- run(lctx) }()
	// Stopped with the ledger, before the caller closes the store.
	scrubDone := make(chan struct{})
	go func() { defer close(scrubDone); store.Scrub(lctx, lf.scrubRate, scrubInterval) }()
	defer func() { stopLedger(); <-scrubDone }()
	if cosigner != nil {
		// Waited for before returning: the caller closes the store.
		cosignerDone := make(chan struct{})
		go func() { defer close(cosignerDone); cosigner.Run(lctx) }()
		defer func() { stopLedger(); <-cosignerDone }()
	}
	go func() { serverDone <- serveTraced(sctx, e, lf.tracer, ln, rc.drainTimeout, rc.drains...) }()
	select {
	case err = <-ledgerDone: // failed (or ctx ended): stop serving
		stopServer()
		if serr := <-serverDone; err == nil {
			err = serr
		}
	case err = <-serverDone: // stopped and drained, or failed
		stopLedger()
		if lerr := <-ledgerDone; err == nil {
			err = lerr
		}
	}
	return err
}
