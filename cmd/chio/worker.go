package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/edges/worker"
)

// workerFollowEvery is how often an edge with --workers looks for tool
// servers whose workers started after it.
const workerFollowEvery = 5 * time.Second

func newWorkerCmd() *cobra.Command {
	var natsURL, name string
	var demo bool
	var concurrency int
	var oa openapiFlags
	var mf mcpFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Serve tool servers over NATS (service " + worker.ServiceName + ") for edges started with --workers",
		Long: `Serve tool servers as a NATS service: edges started with --workers discover them
($SRV.INFO) and send each governed call, once its decision is durable, to one
replica of the queue group. Run as many replicas as the load needs; a replica
that dies mid-call leaves its calls incomplete, and while none runs, calls fail
without running.

Tool servers: the demo tool (--demo), an OpenAPI bridge (--openapi SPEC
--openapi-upstream URL) and wrapped MCP servers (--mcp-server, repeatable).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var servers []tools.Server
			if demo {
				servers = append(servers, hello.New())
			}
			if oa.spec != "" {
				_, s, err := oa.server(ctx)
				if err != nil {
					return err
				}
				servers = append(servers, s)
			}
			mcps, stopMCP, err := mf.start(ctx)
			if err != nil {
				return err
			}
			defer stopMCP()
			for _, s := range mcps {
				servers = append(servers, s)
			}
			if len(servers) == 0 {
				return usageError(errors.New("no tool server: give --demo, --openapi or --mcp-server"))
			}
			url := orDefault(natsURL, nats.DefaultURL)
			nc, err := nats.Connect(url, nats.Name("chio-worker"), nats.MaxReconnects(-1),
				nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(3))
			if err != nil {
				return fmt.Errorf("connect to NATS at %s: %w", url, err)
			}
			defer nc.Close()
			w, err := worker.Serve(nc, servers, worker.WithName(name), worker.WithConcurrency(concurrency))
			if err != nil {
				return err
			}
			info := w.Info()
			for _, s := range servers {
				fmt.Fprintf(cmd.OutOrStdout(), "chio worker: serving %s (%d tools) as %s instance %s on %s\n",
					s.ServerID(), len(s.ToolNames()), worker.ServiceName, info.ID, nc.ConnectedUrlRedacted())
			}
			<-ctx.Done()
			// Calls running finish and answer before the connection closes.
			return w.Stop()
		},
	}
	f := cmd.Flags()
	f.StringVar(&natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+")")
	f.StringVar(&name, "name", "", "this worker's name in its service metadata")
	f.IntVar(&concurrency, "concurrency", worker.DefaultConcurrency, "calls run at once; more wait (or go to other replicas)")
	f.BoolVar(&demo, "demo", false, "serve the demo tool server ("+hello.ServerID+")")
	oa.register(f, "openapi")
	mf.register(f, "mcp-")
	return cmd
}

// addWorkers registers, on reg, the tool servers workers serve on nc, and
// follows them until ctx ends: servers whose workers start later are added.
func addWorkers(ctx context.Context, nc *nats.Conn, reg *tools.Registry) error {
	added, skipped, err := worker.Register(ctx, nc, reg)
	if err != nil {
		return fmt.Errorf("--workers: %w", err)
	}
	for _, r := range added {
		slog.Info("workers: tool server", "server", r.ServerID(), "tools", r.ToolNames(), "manifest_sha256", r.ManifestSHA256())
	}
	for _, id := range skipped {
		// An in-process server of that id, or one found before (chio up).
		slog.Debug("workers: tool server already registered", "server", id)
	}
	if len(added) == 0 {
		slog.Warn("workers: no worker found yet; servers are added as workers start", "every", workerFollowEvery)
	}
	go worker.Follow(ctx, nc, reg, workerFollowEvery)
	return nil
}

// awaitWorkers waits until workers on nc serve at least one tool server
// and returns servers with theirs added: chio up issues its dev capability
// for what is registered at start, so it waits for its workers first.
func awaitWorkers(ctx context.Context, nc *nats.Conn, servers []tools.Server, out io.Writer, natsURL string) ([]tools.Server, error) {
	told := false
	for {
		remotes, err := worker.Discover(ctx, nc)
		if err != nil {
			return nil, fmt.Errorf("--workers: %w", err)
		}
		if len(remotes) > 0 {
			for _, r := range remotes {
				servers = append(servers, r)
			}
			return servers, nil
		}
		if !told {
			fmt.Fprintf(out, "chio up: waiting for a worker (e.g. chio worker --demo --nats %s)\n", natsURL)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("--workers: waiting for a worker: %w", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
