package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/edges/worker"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// workerFollowEvery is how often an edge with --workers looks for tool
// servers whose workers started after it.
const workerFollowEvery = 5 * time.Second

func newWorkerCmd() *cobra.Command {
	var natsURL, name, keyFile string
	var na natsauth.Client
	var demo bool
	var concurrency int
	var edgeIssuers []string
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
--openapi-upstream URL) and wrapped MCP servers (--mcp-server, repeatable).

Each manifest is served signed (chio.signed_manifest.v1) with --manifest-key;
edges register a worker's server only if its manifest verifies under the key
they pin (--worker-key; chio up pins its own DATA_DIR/keys/manifest.key, so
give that file here). When a wrapped MCP server's tool list changes, the worker
serves the new manifest and refuses calls naming the old one unrun; edges take
the new one within ` + workerFollowEvery.String() + `.

Security: connect with the worker role's credential (--nats-nkey; chio up
writes DATA_DIR/nats-creds/worker.nk). The roles' permissions let only edges
call chio.tools.*.invoke and only workers take those calls. Beyond them, the
worker runs only calls a certified edge signed (--edge-issuer: the issuer of
the edges' credentials, chio up's DATA_DIR/keys/issuer.pub), fresh, naming
their decision's receipt id and never sent before, so an edge's NATS
credential alone runs no tool without the kernel. It signs every answer
with its manifest key, and edges take no answer it did not sign, so a
worker's NATS credential alone answers no call.`,
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
			if keyFile == "" {
				return usageError(errors.New("--manifest-key is required: edges register only manifests signed by the key they pin"))
			}
			key, err := readWorkerManifestKey(keyFile)
			if err != nil {
				return err
			}
			if len(edgeIssuers) == 0 {
				return usageError(errors.New("--edge-issuer is required: a worker runs only calls a certified edge signed (chio up's issuer is DATA_DIR/keys/" + issuerPubFile + ")"))
			}
			issuers, err := edgeIssuerKeys(edgeIssuers)
			if err != nil {
				return usageError(err)
			}
			url := orDefault(natsURL, nats.DefaultURL)
			opts, _, err := natsOptions(natsauth.Worker, &na)
			if err != nil {
				return err
			}
			nc, err := nats.Connect(url, append([]nats.Option{nats.Name("chio-worker"), nats.MaxReconnects(-1),
				nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(3)}, opts...)...)
			if err != nil {
				return fmt.Errorf("connect to NATS at %s: %w", url, err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return fmt.Errorf("connect to JetStream: %w", err)
			}
			// Revocations are read as the ledger reads them: a revoked
			// edge credential's calls are refused from its revocation on.
			kv, err := awaitRevocations(ctx, js)
			if err != nil {
				return err
			}
			revokedAt, stopTrust, err := watchRevocationTimes(ctx, kv)
			if err != nil {
				return err
			}
			defer stopTrust()
			trust := schemas.NewEdgeVerifier(issuers, revokedAt)
			w, err := worker.Serve(nc, servers, worker.WithName(name), worker.WithConcurrency(concurrency),
				worker.WithManifestKey(key), worker.WithEdgeTrust(trust))
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
	registerNATSAuth(f, &na)
	f.StringVar(&keyFile, "manifest-key", "", "file with the Ed25519 key (hex seed) that signs the served manifests; must exist (chio up's is DATA_DIR/keys/"+manifestKeyFile+"; edges pin its public key with --worker-key)")
	f.StringArrayVar(&edgeIssuers, "edge-issuer", nil, "run only calls signed by an edge whose chio.edge_credential.v1 this key issued (64 hex, or a file holding it, e.g. chio up's DATA_DIR/keys/"+issuerPubFile+"; repeatable); required")
	f.StringVar(&name, "name", "", "this worker's name in its service metadata")
	f.IntVar(&concurrency, "concurrency", worker.DefaultConcurrency, "calls run at once; more wait (or go to other replicas)")
	f.BoolVar(&demo, "demo", false, "serve the demo tool server ("+hello.ServerID+")")
	oa.register(f, "openapi")
	mf.register(f, "mcp-")
	return cmd
}

// addWorkers registers, on reg, the tool servers workers serve on nc, and
// follows them until ctx ends: servers whose workers start later are added.
func addWorkers(ctx context.Context, nc *nats.Conn, reg *tools.Registry, keyArg string, signer *schemas.EdgeSigner) error {
	opts, err := workerOptions(keyArg, signer)
	if err != nil {
		return err
	}
	added, skipped, err := worker.Register(ctx, nc, reg, opts...)
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
	go worker.Follow(ctx, nc, reg, workerFollowEvery, opts...)
	return nil
}

// awaitWorkers waits until workers on nc serve at least one tool server
// and returns servers with theirs added: chio up issues its dev capability
// for what is registered at start, so it waits for its workers first.
func awaitWorkers(ctx context.Context, nc *nats.Conn, servers []tools.Server, out io.Writer, natsURL, credFile, keyArg string, signer *schemas.EdgeSigner) ([]tools.Server, error) {
	opts, err := workerOptions(keyArg, signer)
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	for _, s := range servers {
		held[s.ServerID()] = true
	}
	told := false
	for {
		remotes, err := worker.Discover(ctx, nc, opts...)
		if err != nil {
			return nil, fmt.Errorf("--workers: %w", err)
		}
		n := 0
		for _, r := range remotes {
			// A server chio up runs itself keeps its id; the worker's is
			// skipped rather than failing the start.
			if held[r.ServerID()] {
				slog.Warn("workers: tool server already served in process; the worker's is skipped", "server", r.ServerID())
				continue
			}
			servers = append(servers, r)
			n++
		}
		if n > 0 {
			return servers, nil
		}
		if !told {
			fmt.Fprintf(out, "chio up: waiting for a worker (e.g. chio worker --demo --nats %s --nats-nkey %s --manifest-key DATA_DIR/keys/%s --edge-issuer DATA_DIR/keys/%s)\n", natsURL, credFile, manifestKeyFile, issuerPubFile)
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("--workers: waiting for a worker: %w", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// workerOptions are an edge's options for its workers: the pinned worker
// key, and the edge's signer, without which workers refuse its calls.
func workerOptions(keyArg string, signer *schemas.EdgeSigner) ([]worker.Option, error) {
	pin, err := workerPublicKey(keyArg)
	if err != nil {
		return nil, err
	}
	if signer == nil {
		return nil, usageError(errors.New("--workers needs --edge-key and --edge-credential: workers run only calls a certified edge signed"))
	}
	return []worker.Option{worker.WithWorkerKey(pin), worker.WithEdgeSigner(signer)}, nil
}

// workerPublicKey is the pinned worker key: 64 hex, or a file holding it.
func workerPublicKey(arg string) (string, error) {
	key := keyText(arg)
	if key == "" {
		return "", usageError(errors.New("--workers needs --worker-key, the public key workers sign their manifests with (chio worker --manifest-key)"))
	}
	if _, err := schemas.ParsePublicKey(key); err != nil {
		return "", usageError(fmt.Errorf("--worker-key: %w", err))
	}
	return key, nil
}

// upWorkerKey is the worker key chio up pins: --worker-key if given, else
// the public key of its own manifest key (--manifest-key, or
// DATA_DIR/keys/manifest.key, created if missing as the registry would).
func (f *edgeFlags) upWorkerKey(keysDir string) (string, error) {
	if f.workerKey != "" {
		return workerPublicKey(f.workerKey)
	}
	path := f.manifestKey
	if path == "" {
		path = filepath.Join(keysDir, manifestKeyFile)
	}
	key, err := loadOrCreateKey(path)
	if err != nil {
		return "", fmt.Errorf("--workers: manifest key: %w", err)
	}
	return schemas.EncodePublicKey(key.Public().(ed25519.PublicKey)), nil
}

// readWorkerManifestKey reads chio worker's --manifest-key; unlike an
// edge's, it is not created when missing: a mistyped path would otherwise
// sign with a new key every edge rejects.
func readWorkerManifestKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError(fmt.Errorf("--manifest-key: %w", err))
	}
	key, err := schemas.ParsePrivateKey(string(b))
	if err != nil {
		return nil, usageError(fmt.Errorf("--manifest-key %s: %w", path, err))
	}
	return key, nil
}
