package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/monitor"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/schemas"
)

func newMonitorCmd() *cobra.Command {
	var url, vkey, policyFile, statePath, metricsListen string
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "monitor --url URL --vkey FILE --state FILE [--witness-policy FILE] [--watch [--interval D] [--metrics-listen ADDR]]",
		Short: "Check a ledger's public log from outside: signatures, roots from the tiles, no forks or rollbacks",
		Long: "Reads the log's public half (no credential): the signed checkpoint, verified with the pinned log key\n" +
			"(--vkey: the checkpoint.vkey file chio up writes, or the key itself) and, with --witness-policy, its\n" +
			"witness cosignature quorum; the hash tiles, from which it recomputes the checkpoint's root; and a\n" +
			"consistency proof from the last checkpoint it verified, computed from the tiles and fetched from\n" +
			"/v1/log/consistency-proof, which must agree. The last verified checkpoint is kept in --state (JSON,\n" +
			"written atomically); a missing state file starts from the checkpoint seen first.\n\n" +
			"Findings: fork (same size, another root; or no valid consistency proof), rollback (a smaller size),\n" +
			"bad_signature (the pinned key, origin or witness quorum does not verify), tile_mismatch (the tiles do\n" +
			"not give the checkpoint's root). The state never moves past a checkpoint with a finding.\n\n" +
			"Once: exit 0 when the checkpoint verifies, 1 with a finding, 2 on bad usage, 3 when the log could\n" +
			"not be read (nothing concluded). With --watch it checks every --interval until stopped, logging each\n" +
			"finding as an error with finding=<kind>, and serves Prometheus metrics on --metrics-listen:\n" +
			"chio_monitor_verified_tree_size, chio_monitor_checkpoint_age_seconds (since this monitor first saw the\n" +
			"last verified checkpoint: the note has no timestamp), chio_monitor_findings_total{kind},\n" +
			"chio_monitor_checks_total{result}.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case url == "" || vkey == "" || statePath == "":
				return usageError(errors.New("--url, --vkey and --state are required"))
			case interval <= 0:
				return usageError(fmt.Errorf("--interval %v: must be positive", interval))
			case metricsListen != "" && !watch:
				return usageError(errors.New("--metrics-listen goes with --watch"))
			}
			verifier, err := monitorVKey(vkey)
			if err != nil {
				return usageError(err)
			}
			var policy *witness.Policy
			if policyFile != "" {
				if policy, err = witness.LoadPolicy(policyFile); err != nil {
					return usageError(fmt.Errorf("--witness-policy: %w", err))
				}
			}
			cfg := monitor.Config{URL: url, Verifier: verifier, Policy: policy, StatePath: statePath, Logger: slog.Default()}
			if !watch {
				m, err := monitor.New(cfg)
				if err != nil {
					return usageError(err)
				}
				return monitorOnce(cmd, m)
			}
			reg := newMetricsRegistry()
			cfg.Registerer = reg
			m, err := monitor.New(cfg)
			if err != nil {
				return usageError(err)
			}
			if metricsListen != "" {
				ln, err := net.Listen("tcp", metricsListen)
				if err != nil {
					return usageError(fmt.Errorf("--metrics-listen: %w", err))
				}
				e := echo.New()
				e.HideBanner, e.HidePort = true, true
				serveMetrics(e, reg)
				served := make(chan error, 1)
				go func() { served <- serveHandler(cmd.Context(), e, ln, defaultDrainTimeout) }()
				defer func() {
					if err := <-served; err != nil {
						slog.Warn("monitor metrics server stopped", "err", err)
					}
				}()
				fmt.Fprintf(cmd.OutOrStdout(), "chio monitor: metrics on http://%s/metrics\n", ln.Addr())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio monitor: watching %s every %s\n", url, interval)
			return m.Run(cmd.Context(), interval)
		},
	}
	cmd.Flags().StringVar(&url, "url", "", "the ledger's base URL (the log API, e.g. http://127.0.0.1:8080)")
	cmd.Flags().StringVar(&vkey, "vkey", "", "the pinned log key: a note verifier key, or a file holding one (chio up's keys/checkpoint.vkey)")
	cmd.Flags().StringVar(&policyFile, "witness-policy", "", "witness policy file: checkpoints must carry its quorum of cosignatures")
	cmd.Flags().StringVar(&statePath, "state", "", "state file: the last verified checkpoint (created on the first run)")
	cmd.Flags().BoolVar(&watch, "watch", false, "keep checking every --interval, alerting on findings, instead of checking once")
	cmd.Flags().DurationVar(&interval, "interval", time.Minute, "with --watch: time between checks")
	cmd.Flags().StringVar(&metricsListen, "metrics-listen", "", "with --watch: serve Prometheus metrics at http://ADDR/metrics")
	return cmd
}

// monitorOnce runs one check and turns its outcome into the exit status.
func monitorOnce(cmd *cobra.Command, m *monitor.Monitor) error {
	res, err := m.Check(cmd.Context())
	var f *monitor.Finding
	switch {
	case errors.As(err, &f):
		return &exitError{code: 1, err: fmt.Errorf("monitor: FINDING %s: %s", f.Kind, f.Reason)}
	case err != nil:
		return &exitError{code: 3, err: fmt.Errorf("monitor: could not check the log: %w", err)}
	}
	from := "first run: trusting it as the starting point"
	if res.Previous != nil {
		from = fmt.Sprintf("consistent with size %d verified before", res.Previous.Size)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "monitor: OK size %d root %s (%s)\n", res.Size, schemas.EncodeHash(res.Root), from)
	if len(res.Witness) > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "monitor: cosigned by %s\n", strings.Join(res.Witness, ", "))
	}
	return nil
}

// monitorVKey reads a note verifier key, given itself or as a file holding it.
func monitorVKey(v string) (note.Verifier, error) {
	return vkeyFlag(v)
}
