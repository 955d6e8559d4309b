package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsauth"
)

// standalone is what the standalone edge commands (bridge openapi, api
// protect, edge acp, a2a serve) share: a NATS connection (an embedded
// server in the data dir for --stdio without --nats), a metrics registry
// and, once govern ran, the kernel and dispatcher.
type standalone struct {
	js      jetstream.JetStream
	metrics *prometheus.Registry
	g       *governance
	stop    func()
}

// connectStandalone connects (or embeds, see connectOrEmbed).
func connectStandalone(natsURL, dataDir, name string, stdio bool, auth *natsauth.Client) (*standalone, error) {
	js, stop, err := connectOrEmbed(natsURL, dataDir, name, stdio, auth)
	if err != nil {
		return nil, err
	}
	return &standalone{js: js, metrics: newMetricsRegistry(), stop: stop}, nil
}

// govern builds the kernel and dispatcher over ef's registry.
func (s *standalone) govern(ctx context.Context, ef *edgeFlags) error {
	g, err := ef.governance(ctx, s.js, s.metrics)
	s.g = g
	return err
}

// close stops the kernel before the connection: its watch stops on a
// live connection.
func (s *standalone) close() {
	if s.g != nil {
		s.g.kernel.Close()
	}
	s.stop()
}

// listenHTTP mounts the metrics and the probes on ec and listens on addr.
func (s *standalone) listenHTTP(ec *echo.Echo, addr string) (net.Listener, error) {
	serveMetrics(ec, s.metrics)
	health.Register(ec, append([]health.Check{health.NATS(s.js)}, edgeChecks(s.js, s.g.kernel)...)...)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// stdioCapability is the capability a --stdio session acts under (see
// stdioToken); --token without --stdio is a usage error.
func stdioCapability(ef *edgeFlags, stdio bool, dataDir, token string) (string, error) {
	if !stdio {
		if token != "" {
			return "", usageError(errors.New("--token applies to --stdio; over HTTP each caller presents its own capability"))
		}
		return "", nil
	}
	return stdioToken(ef, dataDir, token)
}
