package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

// exitError carries a process exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	stopProfile, err := startCPUProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chio:", err)
		os.Exit(1)
	}
	stopTrace, err := startTrace()
	if err != nil {
		stopProfile()
		fmt.Fprintln(os.Stderr, "chio:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = newRoot().ExecuteContext(ctx)
	stop()
	stopTrace()
	stopProfile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chio:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var level string
	root := &cobra.Command{
		Use:           "chio",
		Short:         "Chio ledger: governed tool calls, signed receipts, a verifiable Merkle log",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var l slog.Level
			if err := l.UnmarshalText([]byte(level)); err != nil {
				return usageError(fmt.Errorf("--log-level: %w", err))
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: l})))
			return nil
		},
	}
	root.PersistentFlags().StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.AddCommand(newKeygenCmd(), newLedgerCmd(), newVerifyCmd(), newUpCmd(), newEmitCmd(), newCapabilityCmd(), newEdgeCmd())
	root.AddCommand(newProjectionsCmd())
	root.AddCommand(newTrustCmd())
	root.AddCommand(newOpenAPICmd(), newBridgeCmd(), newAPICmd(), newGatewayCmd(), newA2ACmd(), newToolsCmd())
	root.AddCommand(newEvidenceCmd())
	root.AddCommand(newMonitorCmd())
	root.AddCommand(newWorkerCmd())
	root.AddCommand(newVersionCmd())
	// chio --version says the same as chio version.
	root.Version = buildVersion()
	root.SetVersionTemplate("{{.Version}}\n")
	limitHTTP(root) // after every command is added: it gives each that listens its HTTP limit flags
	return root
}

// usageError exits with status 2, as for a bad flag.
func usageError(err error) error { return &exitError{code: 2, err: err} }

// defaultDrainTimeout bounds a graceful stop: the requests in flight when
// SIGINT or SIGTERM arrives get this long to finish.
const defaultDrainTimeout = 10 * time.Second

// newMetricsRegistry is a process's own Prometheus registry (never the
// global default), with the Go runtime and process collectors.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveMetrics mounts GET /metrics for reg, and the rate-limit refusals of
// the server it is reached through (metricsHandler). A collector that
// fails does not fail the scrape: the other series are still served.
func serveMetrics(e *echo.Echo, reg *prometheus.Registry) {
	e.GET("/metrics", echo.WrapHandler(metricsHandler(reg)))
}
