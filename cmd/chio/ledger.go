package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/logstore"
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
}

func (f *ledgerFlags) register(cmd *cobra.Command, keysHelp string) {
	cmd.Flags().StringVar(&f.keysDir, "keys", "", keysHelp)
	cmd.Flags().StringVar(&f.origin, "origin", DefaultOrigin, "log origin (the checkpoint key's name): used for keys generated on first start, checked against existing ones")
	cmd.Flags().DurationVar(&f.incompleteAfter, "incomplete-after", 10*time.Minute, "sign an allow decision with no outcome as incomplete after this long")
	cmd.Flags().IntVar(&f.batchSize, "batch-size", 1024, "most events folded into one synced batch")
	cmd.Flags().DurationVar(&f.batchWait, "batch-wait", 2*time.Millisecond, "longest wait for a batch to fill once its first event arrived")
	cmd.Flags().IntVar(&f.replicas, "replicas", 1, "replicas of the streams the ledger creates (3 on a cluster)")
}

func (f *ledgerFlags) options(logger *slog.Logger) []ledger.Option {
	return []ledger.Option{ledger.WithLogger(logger), ledger.WithBatch(f.batchSize, f.batchWait),
		ledger.WithIncompleteAfter(f.incompleteAfter), ledger.WithReplicas(f.replicas)}
}

func newLedgerCmd() *cobra.Command {
	var natsURL, dataDir, listen string
	var lf ledgerFlags
	cmd := &cobra.Command{
		Use:   "ledger --nats URL --data-dir DIR --listen ADDR",
		Short: "Run the ledger: consume events, sign receipts into the Merkle log, serve the log API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, store, err := openDataDir(dataDir, &lf)
			if err != nil {
				return err
			}
			defer store.Close()
			nc, js, err := connectNATS(natsURL, "chio-ledger")
			if err != nil {
				return err
			}
			defer nc.Close()
			return runLedger(cmd.Context(), cmd.OutOrStdout(), js, store, keys, listen, &lf, nil)
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s), comma separated")
	cmd.Flags().StringVar(&dataDir, "data-dir", ".chio", "directory of the log store (DIR/log) and, by default, its keys (DIR/keys)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8081", "address of the log's HTTP read API")
	lf.register(cmd, "key directory (default DIR/keys; generated on first start)")
	cmd.AddCommand(newRebuildCmd())
	return cmd
}

func newRebuildCmd() *cobra.Command {
	var natsURL, dataDir, keysDir string
	cmd := &cobra.Command{
		Use:   "rebuild --nats URL --data-dir NEWDIR",
		Short: "Replay CHIO_EVENTS into an empty store and print its size and root",
		Long: "Replays the event stream into NEWDIR/log through the same fold as the live ledger, signing with the\n" +
			"same keys, and prints the resulting tree size and root: equal to the live log's for the same events.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usageError(errors.New("--data-dir is required"))
			}
			keys, err := loadLedgerKeys(keysDir, "")
			if err != nil {
				return fmt.Errorf("%w (pass --keys: the keys of the log being rebuilt)", err)
			}
			store, err := openStore(filepath.Join(dataDir, "log"), keys)
			if err != nil {
				return err
			}
			defer store.Close()
			nc, js, err := connectNATS(natsURL, "chio-ledger-rebuild")
			if err != nil {
				return err
			}
			defer nc.Close()
			l, err := ledger.New(js, store, keys.Keys, ledger.WithLogger(slog.Default()))
			if err != nil {
				return err
			}
			st, err := l.Rebuild(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "size %d\nroot %s\n", st.Size, schemas.EncodeHash(st.Root))
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "an empty directory to rebuild the log into (NEWDIR/log)")
	cmd.Flags().StringVar(&keysDir, "keys", filepath.Join(".chio", "keys"), "key directory of the log being rebuilt")
	return cmd
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
	store, err := openStore(filepath.Join(dataDir, "log"), keys)
	if err != nil {
		return nil, nil, err
	}
	return keys, store, nil
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// openStore opens the log and checks it against the latest checkpoint, whose
// signature must verify with this ledger's key.
func openStore(dir string, keys *ledgerKeys) (*logstore.Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	s, err := logstore.Open(dir, logstore.WithLogger(slog.Default()),
		logstore.WithCheckpointVerifier(ledger.CheckpointVerifier(keys.Origin(), keys.CheckpointVerifier)))
	if err != nil {
		return nil, fmt.Errorf("%w (is another chio process using this data directory?)", err)
	}
	return s, nil
}

func connectNATS(url, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// runLedger runs the ledger and its HTTP API until ctx ends or either fails;
// mount, if set, adds more routes (the edge, in chio up) to the same server.
func runLedger(ctx context.Context, out io.Writer, js jetstream.JetStream, store *logstore.Store, keys *ledgerKeys, listen string, lf *ledgerFlags, mount func(*echo.Echo, net.Addr)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	l, err := ledger.New(js, store, keys.Keys, append(lf.options(slog.Default()), ledger.WithMetrics(reg))...)
	if err != nil {
		return err
	}
	h := api.New(store, api.Keys{Origin: keys.Origin(), CheckpointVKey: keys.VKey, KernelKey: keys.KernelPub}, slog.Default())
	e := api.NewServer(h)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	fmt.Fprintf(out, "chio ledger: log API on http://%s (checkpoint: http://%s/log/checkpoint)\n", ln.Addr(), ln.Addr())
	if mount != nil {
		mount(e, ln.Addr())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- l.Run(ctx) }()
	go func() { errc <- serve(ctx, e, ln) }()
	err = <-errc
	cancel()
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}

// serve serves e on ln until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, e *echo.Echo, ln net.Listener) error {
	e.Listener = ln
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}
