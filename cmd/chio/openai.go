package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsauth"
)

// openaiExposure is the OpenAI surface's audience: the policy's "openai"
// settings, --expose-all, and --tier where the command has its own.
func openaiExposure(p *kernel.LoadedPolicy, f *edgeFlags, tier string) tools.Exposure {
	e := p.ToolExposure("openai", f.exposeAll)
	if tier != "" {
		e.Tier = tier
	}
	return e
}

// openaiFlags are the governing proxy's flags.
type openaiFlags struct {
	upstream  string
	keyFile   string
	maxRounds int
}

func (o *openaiFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.upstream, "openai-upstream", "", "OpenAI-compatible API base URL (e.g. https://api.openai.com/v1): serves the governing proxy at "+
		openai.ChatCompletionsPath+" and "+openai.ResponsesPath)
	f.StringVar(&o.keyFile, "openai-key-file", "", "file holding the upstream API key (default $"+openaiKeyEnv+")")
	f.IntVar(&o.maxRounds, "openai-max-rounds", openai.DefaultMaxRounds, "upstream requests per proxied request, at most")
}

// openaiKeyEnv holds the upstream key when no --openai-key-file is given.
const openaiKeyEnv = "OPENAI_API_KEY"

// proxy is the WithUpstream option, or nil without --openai-upstream. The
// key goes only to an https upstream or a loopback one: sent in clear
// over the network it would be anyone's.
func (o *openaiFlags) proxy() (openai.Option, error) {
	if o.upstream == "" {
		if o.keyFile != "" {
			return nil, usageError(errors.New("--openai-key-file needs --openai-upstream"))
		}
		return nil, nil
	}
	u, err := url.Parse(o.upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, usageError(fmt.Errorf("--openai-upstream %q: want an http(s) base URL without credentials, such as https://api.openai.com/v1", o.upstream))
	}
	if o.maxRounds < 1 {
		return nil, usageError(fmt.Errorf("--openai-max-rounds %d: want at least 1", o.maxRounds))
	}
	key := os.Getenv(openaiKeyEnv)
	if o.keyFile != "" {
		b, err := os.ReadFile(o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("read --openai-key-file: %w", err)
		}
		if key = strings.TrimSpace(string(b)); key == "" {
			return nil, usageError(fmt.Errorf("--openai-key-file %s is empty", o.keyFile))
		}
	}
	if key != "" && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return nil, usageError(fmt.Errorf("--openai-upstream %s is plain http to a non-loopback host: the API key would cross the network in clear; use https", u.Redacted()))
	}
	return openai.WithUpstream(openai.Upstream{BaseURL: u, APIKey: key, MaxRounds: o.maxRounds}), nil
}

// openaiOptions are the adapter's options from the flags: its exposure,
// the dev capability (empty: none), --await-receipt and the proxy.
func openaiOptions(js jetstream.JetStream, p *kernel.LoadedPolicy, f *edgeFlags, of *openaiFlags, tier, devToken string) ([]openai.Option, error) {
	opts := []openai.Option{openai.WithExposure(openaiExposure(p, f, tier)), openai.WithDevToken(devToken), openai.WithPublicOrigin(f.publicURL)}
	if f.awaitReceipt > 0 {
		opts = append(opts, openai.WithAwaitReceipt(js, f.awaitReceipt))
	}
	proxy, err := of.proxy()
	if err != nil {
		return nil, err
	}
	if proxy != nil {
		opts = append(opts, proxy)
	}
	return opts, nil
}

// startOpenAI builds a standalone OpenAI replica: kernel, dispatcher and
// adapter, their series registered on metrics. close stops the kernel.
func startOpenAI(ctx context.Context, js jetstream.JetStream, f *edgeFlags, of *openaiFlags, metrics prometheus.Registerer) (*openai.Adapter, []health.Check, func(), error) {
	g, err := f.governance(ctx, js, metrics)
	if err != nil {
		return nil, nil, nil, err
	}
	opts, err := openaiOptions(js, g.policy, f, of, f.tier, "")
	if err != nil {
		g.kernel.Close()
		return nil, nil, nil, err
	}
	a := openai.New(g.kernel, g.registry, g.dispatch, opts...)
	return a, edgeChecks(js, g.kernel), g.kernel.Close, nil
}

func newEdgeOpenAICmd() *cobra.Command {
	var ef edgeFlags
	var of openaiFlags
	var natsURL, listen string
	cmd := &cobra.Command{
		Use:   "openai --nats URL --listen ADDR (--policy FILE | --issuer-pub FILE)",
		Short: "Run a stateless OpenAI function-calling edge replica",
		Long: "Serves governed tools as OpenAI function definitions at GET " + openai.ToolsPath + "?format=chat|responses\n" +
			"and runs a model's function calls (a Chat Completions assistant message with tool_calls, or Responses\n" +
			"output items) at POST " + openai.ToolCallsPath + ", each through the kernel, with a receipt.\n" +
			"Callers must present a capability (Authorization: Bearer or X-Chio-Capability). Tools are shown\n" +
			"when their manifest sets openai.expose: true (or with --expose-all). With --openai-upstream it also\n" +
			"serves a governing proxy for unchanged OpenAI clients at POST " + openai.ChatCompletionsPath + " and\n" +
			openai.ResponsesPath + ": the governed tools are added to each request and the model's calls to them\n" +
			"run here, with receipts, until it answers without one.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stopTracing, err := ef.startTracing(ctx, "chio-edge-openai")
			if err != nil {
				return err
			}
			defer stopTracing() // last: after everything that makes spans
			if _, err := of.proxy(); err != nil {
				return err // before connecting: a flag mistake is a usage error
			}
			nc, js, err := connectNATS(orDefault(natsURL, nats.DefaultURL), "chio-edge-openai", natsauth.Edge, &ef.natsAuth)
			if err != nil {
				return err
			}
			defer nc.Close()
			metrics := newMetricsRegistry()
			a, checks, closeKernel, err := startOpenAI(ctx, js, &ef, &of, metrics)
			if err != nil {
				return err
			}
			defer closeKernel() // before the connection closes (deferred earlier)
			ec := newEdgeEcho()
			a.Register(ec)
			serveMetrics(ec, metrics)
			health.Register(ec, append([]health.Check{health.NATS(js)}, checks...)...)
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio edge openai: tools http://%s%s, tool calls http://%s%s\n", ln.Addr(), openai.ToolsPath, ln.Addr(), openai.ToolCallsPath)
			if of.upstream != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "chio edge openai: proxy base URL http://%s/openai/v1 (upstream %s)\n", ln.Addr(), of.upstream)
			}
			// Shutdown waits for the batches in flight: each call's events
			// are published before the kernel and NATS close.
			return serveTraced(withDrainDelay(ctx, ef.drainDelay), ec, ef.tracer, ln, ef.drainTimeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+")")
	registerNATSAuth(f, &ef.natsAuth)
	registerEdgeSignerFlags(f, &ef)
	f.StringVar(&listen, "listen", "127.0.0.1:8083", "HTTP listen address")
	f.StringVar(&ef.policyFile, "policy", "", "policy document (chio.policy.v1); default: trust --issuer-pub with the default guards")
	f.StringVar(&ef.issuerPub, "issuer-pub", "", "file with the trusted capability issuer's public key (when no --policy)")
	f.StringArrayVar(&ef.manifests, "manifest", nil, "chio.manifest.v1 file to register (repeatable; manifest-only tools are listed but have no server here)")
	f.BoolVar(&ef.exposeAll, "expose-all", false, "dev only: expose tools without openai.expose (internal namespaces stay hidden)")
	f.StringVar(&ef.tier, "tier", "", "expose only tools whose openai.tier equals this")
	f.StringArrayVar(&ef.demos, "demo", nil, `built-in demo tool server to add: "conformance"`)
	f.StringVar(&ef.edgeID, "edge-id", "", "this replica's name in events (default: host name and pid)")
	f.IntVar(&ef.replicas, "replicas", 1, "replicas of the streams and buckets the edge creates (3 on a cluster)")
	f.DurationVar(&ef.awaitReceipt, "await-receipt", 0, "wait up to this long for the ledger to integrate each call's receipt and embed it under chio.receipt")
	f.DurationVar(&ef.drainTimeout, "drain-timeout", defaultDrainTimeout, "on SIGINT/SIGTERM, how long batches in flight get to finish")
	registerDrainDelay(f, &ef.drainDelay, defaultDrainDelay)
	registerHolderFlags(f, &ef)
	of.register(f)
	return cmd
}
