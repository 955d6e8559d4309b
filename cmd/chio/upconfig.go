package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/internal/natsembed"
)

// upConfig is everything `chio up` is told on its command line. The
// standalone commands' flag types are reused, so each component is
// configured the same way in one process as on its own.
type upConfig struct {
	dataDir, listen, natsListen string
	lf                          ledgerFlags
	ef                          edgeFlags
	of                          openaiFlags
	oapi                        openapiFlags
	protectListen               string
	gateway                     gatewayFlags
	a2af                        a2aFlags
	a2aTargets                  []string
	mcpf                        mcpFlags
	mem                         memoryFlags
	requireCapability           bool
	serviceToken                string
	stopTrust                   func() // the ledger's revocation watch (certifyEdge)
}

// register declares chio up's flags, all of them here so that --help and
// the code read the same list.
func (c *upConfig) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&c.dataDir, "data-dir", ".chio", "where keys, the log and the JetStream store live")
	cmd.Flags().StringVar(&c.listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	cmd.Flags().StringVar(&c.natsListen, "nats-listen", "127.0.0.1:4222", `client address of the embedded NATS server ("none": in-process only)`)
	c.lf.register(cmd, "key directory (default DIR/keys; generated on first start)")
	c.mem.register(cmd)
	c.ef.register(cmd)
	c.of.register(cmd.Flags())
	c.oapi.register(cmd.Flags(), "openapi")
	cmd.Flags().StringVar(&c.protectListen, "openapi-protect-listen", "", "serve chio api protect for the --openapi API on this address")
	c.gateway.register(cmd.Flags(), "gateway", "")
	cmd.Flags().StringArrayVar(&c.a2aTargets, "a2a-target", nil, "a partner A2A agent (base or card URL) whose skills become tools a2a:<host>/<skill> (repeatable; the --a2a-* flags configure them)")
	c.a2af.register(cmd.Flags(), "a2a-")
	c.mcpf.register(cmd.Flags(), "mcp-")
	c.ef.registerGRPC(cmd, grpcAuto, `gRPC listen address of the A2A 1.0 gRPC binding ("auto": the --listen host, port+1, e.g. 127.0.0.1:8081; "none": off)`)
	cmd.Flags().StringVar(&c.serviceToken, "service-token", "", "bootstrap operator credential: a bearer token that reads everything (default $"+serviceTokenEnv+"); the operator token chio up writes does the same")
	cmd.Flags().BoolVar(&c.requireCapability, "require-capability", false, "refuse callers without a capability instead of acting under the dev capability")
}

// natsConfig is the embedded NATS server --data-dir and --nats-listen
// describe; "none" keeps it in process.
func (c *upConfig) natsConfig() (natsembed.Config, error) {
	cfg := natsembed.Config{StoreDir: filepath.Join(c.dataDir, "nats"), ServerName: "chio-up", DontListen: c.natsListen == "none"}
	if cfg.DontListen {
		return cfg, nil
	}
	host, port, err := net.SplitHostPort(c.natsListen)
	if err != nil {
		return cfg, usageError(fmt.Errorf("--nats-listen: %w", err))
	}
	if cfg.Port, err = strconv.Atoi(port); err != nil {
		return cfg, usageError(errors.New("--nats-listen: port must be a number"))
	}
	if cfg.Port == 0 {
		cfg.Port = -1 // any free port (nats-server reads 0 as its default, 4222)
	}
	cfg.Host = host
	return cfg, nil
}

// edgeDefaults fills in what one machine implies for the A2A edge: the
// keys of this data dir, loopback webhooks and the edge's name.
func (c *upConfig) edgeDefaults(cmd *cobra.Command, keys *ledgerKeys) {
	ef := &c.ef
	if ef.policyFile == "" && ef.issuerPub == "" {
		ef.issuerPub = filepath.Join(keys.Dir, issuerPubFile)
	}
	if ef.cardKey == "" {
		ef.cardKey = filepath.Join(keys.Dir, cardKeyFile) // the agent card is signed
	}
	if ef.manifestKey == "" {
		ef.manifestKey = filepath.Join(keys.Dir, manifestKeyFile) // every manifest is signed
	}
	if !cmd.Flags().Changed("push-allow-loopback") {
		ef.pushLoopback = true // one machine: webhooks are local
	}
	if ef.edgeID == "" {
		ef.edgeID = "chio-up"
	}
	ef.replicas = c.lf.replicas
}
