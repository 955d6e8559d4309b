// Package natsembed runs a NATS server with JetStream inside the process:
// the message bus of `chio up` and of every test. It is process plumbing
// shared by cmd/chio and the tests of each top-level folder, and imports
// nothing of this module.
package natsembed

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config of an embedded server.
type Config struct {
	// StoreDir is where JetStream keeps its file storage.
	StoreDir string
	// Host and Port to listen on for clients; Port -1 picks a free port and
	// DontListen serves in-process connections only.
	Host       string
	Port       int
	DontListen bool
	// SyncInterval is how often the file store fsyncs; zero means SyncAlways
	// (fsync before every acknowledgement), the only safe choice for a
	// single-node ledger (nats-server's default syncs every two minutes).
	SyncInterval time.Duration
	// ServerName names the server in logs and cluster views.
	ServerName string
	// Logging routes the server's own log lines to the process log.
	Logging bool
}

// Server is a running embedded server.
type Server struct{ *server.Server }

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("natsembed: a JetStream store directory is required")
	}
	opts := &server.Options{
		ServerName: cfg.ServerName, Host: cfg.Host, Port: cfg.Port, DontListen: cfg.DontListen,
		JetStream: true, StoreDir: cfg.StoreDir,
		SyncAlways: cfg.SyncInterval == 0, SyncInterval: cfg.SyncInterval,
		NoSigs: true, NoLog: !cfg.Logging,
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: configure server: %w", err)
	}
	if cfg.Logging {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("natsembed: server not ready within 30s")
	}
	return &Server{ns}, nil
}

// Connect opens an in-process client connection (no TCP).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(s.Server)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("natsembed: connect: %w", err)
	}
	return nc, nil
}

// Stop shuts the server down and waits for it to finish.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
