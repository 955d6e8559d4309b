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
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/progress"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// serviceTokenEnv supplies the service token when --service-token is not
// given, so it need not appear in the process list.
const serviceTokenEnv = "CHIO_SERVICE_TOKEN"

// projectionsDir is where a data directory keeps the projection store.
func projectionsDir(dataDir string) string { return filepath.Join(dataDir, "projections") }

func newProjectionsCmd() *cobra.Command {
	var natsURL, dataDir, listen, kernelKey, name string
	var edgeIssuers []string
	var na natsauth.Client
	var replicas int
	var rf readFlags
	var cf consoleFlags
	var mem memoryFlags
	cmd := &cobra.Command{
		Use:   "projections --nats URL --data-dir DIR --listen ADDR --kernel-key HEX|FILE --reader-issuer HEX|FILE [--service-token TOKEN]",
		Short: "Run the projections: fold tasks, capability lineage and receipts into queryable state and serve it",
		Long: "Consumes CHIO_TASKS, CHIO_EVENTS and CHIO_RECEIPTS with durable consumers NAME-tasks, NAME-events and\n" +
			"NAME-receipts into a Pebble store under DIR/projections, and serves /v1/tasks, /v1/lineage and\n" +
			"/v1/reports/authorization-context. Every route needs a credential (Authorization: Bearer): a capability\n" +
			"from a --reader-issuer reads what was done under its own authority path and what its read grants\n" +
			"(chio.read/…) name; the service token reads everything.\n" +
			"Receipts are verified against --kernel-key, the ledger's kernel public key; a report that reaches one\n" +
			"that does not verify fails closed, as does one whose selection holds a receipt nested too deep for any\n" +
			"reader (422 naming it; narrow the selection to leave it out). The token may come from $" + serviceTokenEnv + "\n" +
			"instead of the flag.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := rf.check(); err != nil {
				return err
			}
			if !rf.any() {
				return usageError(errNoReaders)
			}
			consoleMount, err := cf.mount()
			if err != nil {
				return err
			}
			budget, err := mem.budget()
			if err != nil {
				return err
			}
			budget.apply()
			key, err := readKernelKey(kernelKey)
			if err != nil {
				return err
			}
			tp, stopTracing, err := startTracing(cmd.Context(), "chio-projections")
			if err != nil {
				return err
			}
			defer stopTracing() // flushes after the service has stopped
			nc, js, err := connectNATS(natsURL, name, natsauth.Projections, &na)
			if err != nil {
				return err
			}
			defer nc.Close()
			auth, stop, err := rf.authenticator(cmd.Context(), js, replicas)
			if err != nil {
				return err
			}
			defer stop()
			trust, stopTrust, err := taskTrust(cmd.Context(), js, replicas, "chio projections", edgeIssuers)
			if err != nil {
				return err
			}
			defer stopTrust()
			metrics := newMetricsRegistry()
			svc, err := projections.Open(projectionsDir(dataDir), append([]projections.Option{projections.WithLogger(slog.Default()), projections.WithName(name),
				projections.WithKernelKey(key), projections.WithAuthenticator(auth), projections.WithReplicas(replicas),
				projections.WithMetrics(metrics), projections.WithTracerProvider(tp), projections.WithEdgeTrust(trust)}, budget.projectionStore()...)...)
			if err != nil {
				return err
			}
			defer svc.Close()
			return runProjections(cmd.Context(), cmd.OutOrStdout(), js, svc, metrics, listen, consoleMount)
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s), comma separated")
	registerNATSAuth(cmd.Flags(), &na)
	cmd.Flags().StringVar(&dataDir, "data-dir", ".chio", "directory of the projection store (DIR/projections)")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8088", "address of the projection HTTP API")
	rf.register(cmd)
	mem.register(cmd)
	cf.register(cmd.Flags())
	cmd.Flags().StringVar(&kernelKey, "kernel-key", "", "the trusted kernel public key (64 hex), or a file holding it (the ledger's keys/kernel.pub)")
	registerTaskTrustFlag(cmd.Flags(), &edgeIssuers)
	cmd.Flags().StringVar(&name, "name", projections.DefaultName, "instance name: the stem of the durable consumer names")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of the streams and consumers the service creates (3 on a cluster)")
	cmd.AddCommand(newProjectionsRebuildCmd())
	return cmd
}

func newProjectionsRebuildCmd() *cobra.Command {
	var natsURL, dataDir, kernelKey string
	var edgeIssuers []string
	var na natsauth.Client
	var force bool
	cmd := &cobra.Command{
		Use:   "rebuild --nats URL --data-dir NEWDIR --kernel-key HEX|FILE",
		Short: "Fold the streams from the start into an empty store and print its digest",
		Long: "Folds CHIO_TASKS, CHIO_EVENTS and CHIO_RECEIPTS, up to their last messages at the start, into\n" +
			"NEWDIR/projections through the same folds as the live service, and prints the positions reached and the\n" +
			"store's digest (SHA-256 over every key and value): equal to a live projection's that folded the same\n" +
			"messages with the same kernel key. Durable consumers are not touched.\n\n" +
			"Progress goes to stderr: one line redrawn in place on a terminal, otherwise a line at each tenth\n" +
			"of the messages (and at least every 5 s), then a summary line. The store is built in a\n" +
			"marked directory beside NEWDIR/projections and renamed into place when complete: an interrupted\n" +
			"rebuild (Ctrl-C) leaves no NEWDIR/projections, and the next one removes what it left. A finished\n" +
			"rebuild is refused unless --force, which replaces it once the new store is complete; a directory\n" +
			"rebuild did not make (a live store) is never replaced.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return usageError(errors.New("--data-dir is required"))
			}
			key, err := readKernelKey(kernelKey)
			if err != nil {
				return err
			}
			stage, err := stageRebuild(projectionsDir(dataDir), force)
			if err != nil {
				return fmt.Errorf("projections rebuild: %w", err)
			}
			nc, js, err := connectNATS(natsURL, "chio-projections-rebuild", natsauth.Reader, &na)
			if err != nil {
				return err
			}
			defer nc.Close()
			trust, stopTrust, err := taskTrust(cmd.Context(), js, 1, "the rebuild", edgeIssuers)
			if err != nil {
				return errors.Join(err, stage.Discard())
			}
			defer stopTrust()
			prog := progress.New(cmd.ErrOrStderr(), "projections rebuild", 0, progress.WithUnit("messages"))
			defer prog.Stop()
			res, err := projections.RebuildWithProgress(cmd.Context(), js, stage.Path, prog.Func(),
				projections.WithLogger(slog.Default()), projections.WithKernelKey(key), projections.WithEdgeTrust(trust))
			if err == nil {
				err = stage.Commit()
			}
			if err != nil {
				return errors.Join(err, stage.Discard())
			}
			prog.Done()
			p := res.Positions
			fmt.Fprintf(cmd.OutOrStdout(), "tasks %d\nevents %d\nreceipts %d\ndigest %s\n", p.Tasks, p.Events, p.Receipts, res.Digest)
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL(s)")
	registerNATSAuth(cmd.Flags(), &na)
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "the directory to rebuild into (NEWDIR/projections)")
	cmd.Flags().StringVar(&kernelKey, "kernel-key", "", "the trusted kernel public key (64 hex), or a file holding it")
	registerTaskTrustFlag(cmd.Flags(), &edgeIssuers)
	cmd.Flags().BoolVar(&force, "force", false, "replace a finished rebuild in NEWDIR/projections (never a running service's data directory)")
	return cmd
}

// readKernelKey reads --kernel-key: the key itself or a file holding it.
func readKernelKey(v string) (ed25519.PublicKey, error) {
	if strings.TrimSpace(v) == "" {
		return nil, usageError(errors.New("--kernel-key is required: receipts are trusted only if this kernel signed them"))
	}
	return readPublicKey("--kernel-key", v)
}

// readPublicKey reads the value of flag: an Ed25519 public key as 64 hex,
// or a file holding one.
func readPublicKey(flag, v string) (ed25519.PublicKey, error) {
	v = strings.TrimSpace(v)
	if k, err := schemas.ParsePublicKey(v); err == nil {
		return k, nil
	}
	b, err := os.ReadFile(v)
	if err != nil {
		return nil, usageError(fmt.Errorf("%s: neither a 64-hex Ed25519 key nor a readable file: %w", flag, err))
	}
	k, err := schemas.ParsePublicKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, usageError(fmt.Errorf("%s %s: %w", flag, v, err))
	}
	return k, nil
}

// runProjections runs the service and its HTTP API (the projections,
// /metrics, /healthz, /readyz, and what mounts add) until ctx ends or
// either fails.
func runProjections(ctx context.Context, out io.Writer, js jetstream.JetStream, svc *projections.Service, metrics *prometheus.Registry, listen string, mounts ...func(*echo.Echo)) error {
	e := projections.NewServer(svc)
	for _, m := range mounts {
		m(e)
	}
	serveMetrics(e, metrics)
	health.Register(e, health.NATS(js), projectionsCheck("storage", svc, nil, nil))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	sch := httpScheme(ctx)
	fmt.Fprintf(out, "chio projections: API on %s://%s (tasks: %s://%s/v1/tasks)\n", sch, ln.Addr(), sch, ln.Addr())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- svc.Run(ctx, js) }()
	go func() { errc <- serve(ctx, e, ln, defaultDrainTimeout) }()
	err = <-errc
	cancel()
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}
