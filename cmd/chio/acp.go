package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/acp"
	"github.com/chio-ledger/chio/edges/acp/proxy"
)

func newEdgeACPCmd() *cobra.Command {
	var ef edgeFlags
	var sf stdioFlags
	var listen, keyFile string
	var proxyMode bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "acp (--stdio | --listen ADDR | --proxy -- AGENT [ARGS...]) --nats URL (--policy FILE | --issuer-pub FILE)",
		Short: "Run the ACP edge: Chio tools as ACP capabilities (Chio's ACP profile) over stdio or POST /acp",
		Long: "Serves session/list_capabilities, session/request_permission, tool/invoke, tool/stream, tool/resume and\n" +
			"tool/cancel (also as _chio/ extension methods) and answers ACP's initialize. Tools are shown when their\n" +
			"manifest sets acp.expose: true. Over HTTP callers present a capability (Authorization: Bearer or\n" +
			"X-Chio-Capability); with --stdio every call acts under --token (or @FILE), or a dev capability minted from\n" +
			"DIR/keys/issuer.key (--data-dir), on an embedded NATS server unless --nats is given.\n\n" +
			"With --proxy, chio is the agent an ACP editor launches: it starts AGENT and relays ACP between them on\n" +
			"stdio, governing the agent's fs/*, terminal/* and session/request_permission requests under --token\n" +
			"(tool server \"acp\", tools named by method) with a receipt each.",
		Args: func(cmd *cobra.Command, args []string) error {
			if proxyMode {
				if len(args) == 0 {
					return usageError(errors.New("--proxy needs the agent's command after --"))
				}
				return nil
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			stopTracing, err := ef.startTracing(ctx, "chio-edge-acp")
			if err != nil {
				return err
			}
			defer stopTracing() // last: after everything that makes spans
			if proxyMode {
				if sf.stdio {
					return usageError(errors.New("--proxy and --stdio are two ways of using stdio: pick one"))
				}
				return runACPProxy(cmd, &ef, sf.natsURL, sf.dataDir, sf.token, keyFile, grace, args)
			}
			token, err := sf.capability(&ef)
			if err != nil {
				return err
			}
			sa, err := sf.connect("chio-edge-acp", &ef.natsAuth)
			if err != nil {
				return err
			}
			defer sa.close()
			if err := sa.govern(ctx, &ef); err != nil {
				return err
			}
			g := sa.g
			e, err := acp.New(g.kernel, g.registry, g.dispatch, sa.js, acp.WithExposure(g.policy.ToolExposure("acp", ef.exposeAll)),
				acp.WithReplicas(ef.replicas), acp.WithPublicOrigin(ef.publicURL), ef.limits.acp())
			if err != nil {
				return err
			}
			if sf.stdio {
				return e.ServeStdio(ctx, token, cmd.InOrStdin(), cmd.OutOrStdout())
			}
			ec := newEdgeEcho()
			e.Register(ec)
			ln, err := sa.listenHTTP(ec, listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio edge acp: http://%s%s\n", ln.Addr(), acp.Path)
			return serveTraced(withDrainDelay(ctx, ef.drainDelay), ec, ef.tracer, ln, ef.drainTimeout)
		},
	}
	f := cmd.Flags()
	sf.register(f, "the profile", "--stdio or --proxy")
	f.StringVar(&listen, "listen", "127.0.0.1:8086", "HTTP listen address")
	f.BoolVar(&proxyMode, "proxy", false, "govern an ACP agent for an editor: relay stdio to the agent command given after --")
	f.DurationVar(&grace, "agent-grace", 5*time.Second, "with --proxy: how long the agent gets to exit once the editor has gone")
	f.StringVar(&keyFile, "key", "", "with --proxy: the --token capability's subject key; the proxy signs a chio.dpop_proof.v1 for each governed call (needed when the capability can delegate)")
	f.StringArrayVar(&ef.manifests, "manifest", nil, "chio.manifest.v1 file to register (repeatable)")
	registerGovernanceFlags(f, &ef)
	registerDrainDelay(f, &ef.drainDelay, defaultDrainDelay)
	registerTaskLimitFlags(f, &ef.limits)
	return cmd
}

// runACPProxy is chio edge acp --proxy: it starts the agent and relays
// the editor's stdio to it through the governing proxy. The agent's
// stderr is chio's; chio's stdout carries only ACP.
func runACPProxy(cmd *cobra.Command, ef *edgeFlags, natsURL, dataDir, token, keyFile string, grace time.Duration, agentArgs []string) error {
	ctx := cmd.Context()
	tl := proxy.NewTools()
	ef.servers = append(ef.servers, tl)
	token, err := stdioToken(ef, dataDir, token)
	if err != nil {
		return err
	}
	sa, err := connectStandalone(natsURL, dataDir, "chio-edge-acp", true, &ef.natsAuth)
	if err != nil {
		return err
	}
	defer sa.close()
	if err := sa.govern(ctx, ef); err != nil {
		return err
	}
	popts := []proxy.Option{proxy.WithLogger(slog.Default())}
	if keyFile != "" {
		s, err := signerFromFiles(keyFile, token)
		if err != nil {
			return usageError(fmt.Errorf("--key: %w", err))
		}
		popts = append(popts, proxy.WithSigner(s))
	}
	p, err := proxy.New(sa.g.kernel, sa.g.registry, sa.g.dispatch, tl, token, popts...)
	if err != nil {
		return err
	}
	agent := exec.Command(agentArgs[0], agentArgs[1:]...)
	agent.Stderr = os.Stderr
	in, err := agent.StdinPipe()
	if err != nil {
		return fmt.Errorf("acp proxy: agent stdin: %w", err)
	}
	out, err := agent.StdoutPipe()
	if err != nil {
		return fmt.Errorf("acp proxy: agent stdout: %w", err)
	}
	if err := agent.Start(); err != nil {
		return fmt.Errorf("acp proxy: start the agent %s: %w", agentArgs[0], err)
	}
	exited := make(chan error, 1)
	// Once the editor is gone the agent's stdin closes; an agent that does
	// not exit within the grace is killed, which ends the session.
	editor := &eofReader{r: cmd.InOrStdin(), eof: func() {
		time.AfterFunc(grace, func() { _ = agent.Process.Kill() })
	}}
	serveErr := p.Serve(ctx, editor, cmd.OutOrStdout(), in, out)
	go func() { exited <- agent.Wait() }()
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-time.After(grace):
		_ = agent.Process.Kill()
		waitErr = <-exited
		slog.Warn("acp proxy: the agent did not exit in time and was killed", "grace", grace)
	}
	switch {
	case errors.Is(serveErr, proxy.ErrAgentExited):
		return fmt.Errorf("acp proxy: the agent exited during the session: %v", waitErr)
	case serveErr != nil && ctx.Err() == nil:
		return serveErr
	}
	return nil
}

// eofReader calls eof once when r ends.
type eofReader struct {
	r    io.Reader
	eof  func()
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(e.eof)
	}
	return n, err
}
