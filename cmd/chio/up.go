package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/internal/natsembed"
)

func newUpCmd() *cobra.Command {
	var dataDir, listen, natsListen string
	var lf ledgerFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run everything in one process: embedded NATS JetStream, the ledger and its HTTP API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			ns, err := natsembed.Start(cfg)
			if err != nil {
				return err
			}
			defer ns.Stop()
			nc, err := ns.Connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !cfg.DontListen {
				fmt.Fprintf(out, "chio up: NATS JetStream on %s (data under %s)\n", ns.ClientURL(), dataDir)
			}
			fmt.Fprintf(out, "chio up: keys in %s (log origin %q, kernel key %s)\n", keys.Dir, keys.Origin(), keys.KernelPub)
			slog.Debug("starting ledger", "data_dir", dataDir)
			return runLedger(cmd.Context(), out, js, store, keys, listen, &lf)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", ".chio", "where keys, the log and the JetStream store live")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	cmd.Flags().StringVar(&natsListen, "nats-listen", "127.0.0.1:4222", `client address of the embedded NATS server ("none": in-process only)`)
	lf.register(cmd, "key directory (default DIR/keys; generated on first start)")
	return cmd
}
