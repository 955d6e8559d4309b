// Package natsembed runs a NATS server with JetStream inside the process:
// the message bus of `chio up` and of every test. It is process plumbing
// shared by cmd/chio and the tests of each top-level folder, and imports
// nothing of this module.
package natsembed

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/internal/diskspace"
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
	// MinFree is the free space (bytes) the store's filesystem must keep
	// (at most a quarter of the filesystem): below it the watchdog refuses
	// JetStream writes, and accepts them again once half as much again is
	// free. Zero means DefaultMinFree.
	MinFree uint64
	// WatchEvery is how often the watchdog looks at free space and at
	// the streams' write errors; zero means DefaultWatchEvery, negative
	// runs no watchdog.
	WatchEvery time.Duration
	// Users, when set, are the only clients the server accepts (each
	// nkey with its permissions), on TCP and in process alike.
	Users []*server.NkeyUser
}

// Defaults of the store watchdog.
const (
	DefaultMinFree    = 64 << 20
	DefaultWatchEvery = 250 * time.Millisecond
)

// Server is a running embedded server.
type Server struct {
	*server.Server
	cfg  Config
	jsc  server.JetStreamConfig // as first enabled: what a re-enable restores
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	down   error // why the watchdog refuses writes; nil while it accepts them
	downAt time.Time
	reload bool // a stream met a write error: reload the streams once space is back
}

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
		Nkeys: cfg.Users,
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if !opts.DontListen && opts.Port > 0 {
		// A taken address would only show as a server never ready, after
		// the whole wait below: say so at once, naming it.
		addr := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("natsembed: listen on %s: %w", addr, err)
		}
		ln.Close()
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
	s := &Server{Server: ns, cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	if jsc := ns.JetStreamConfig(); jsc != nil {
		s.jsc = *jsc
	}
	if cfg.MinFree == 0 {
		s.cfg.MinFree = DefaultMinFree
	}
	if cfg.WatchEvery == 0 {
		s.cfg.WatchEvery = DefaultWatchEvery
	}
	if s.cfg.WatchEvery > 0 {
		go s.watch()
	} else {
		close(s.done)
	}
	return s, nil
}

// watch is the store watchdog. A single server's file store that meets
// ENOSPC keeps the failed write as a sticky error and answers no publish
// to that stream again (each waits for its timeout) until JetStream
// reloads the stream. So, below MinFree, the watchdog sets the account's
// file storage limit to nothing: every publish to a file-backed stream or
// bucket is refused at once with an error (JetStream checks the limit
// before it writes), while reads, consumers and watches go on. Once 1.5
// times MinFree is free it lifts the limit, restarting JetStream first if a
// stream met a write error meanwhile, which reloads streams and consumers
// from disk. A NATS cluster outside the process recovers by its own means
// (a server that runs out of space turns its JetStream off; it comes back
// when restarted with space).
func (s *Server) watch() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.WatchEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.check()
	}
}

// check is one look of the watchdog.
func (s *Server) check() {
	if !s.Running() {
		return // shut down (Shutdown, not Stop): nothing to bring back
	}
	free, total, err := diskspace.Stat(s.cfg.StoreDir)
	if err != nil {
		slog.Warn("jetstream store watchdog: measure free space", "err", err)
		return
	}
	s.mu.Lock()
	refusing, reload := s.down != nil, s.reload
	s.mu.Unlock()
	minFree := diskspace.Effective(s.cfg.MinFree, total)
	resume := minFree + minFree/2 // a margin, so that writes do not flap on and off
	full := &diskspace.Error{Store: "jetstream store " + s.cfg.StoreDir, Free: free, Reserve: minFree}
	if !s.JetStreamEnabled() {
		// Turned off by the server itself, or a restart that failed.
		if free >= resume {
			s.restart(free)
		} else if !refusing {
			full.Err = errors.New("jetstream is off")
			s.setDown(full, true)
		}
		return
	}
	werr := s.writeError()
	switch {
	case werr != nil && !reload:
		full.Err = werr
		s.refuse(full, true)
	case free < minFree && !refusing:
		s.refuse(full, false)
	case refusing && free >= resume:
		if reload {
			s.restart(free)
		} else {
			s.lift(free)
		}
	}
}

// writeError returns a stream's write error, if any has one.
func (s *Server) writeError() error {
	h := s.Healthz(&server.HealthzOptions{})
	if h == nil || h.Error == "" || !strings.Contains(h.Error, "write error") {
		return nil
	}
	return errors.New(h.Error)
}

func (s *Server) setDown(why error, reload bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down == nil {
		s.downAt = time.Now()
	}
	s.down, s.reload = why, s.reload || reload
}

// refuse sets the account's file storage limit to nothing.
func (s *Server) refuse(why error, reload bool) {
	slog.Error("jetstream store watchdog: refusing writes until space is back", "err", why)
	s.setDown(why, reload)
	if err := s.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": {
		MaxMemory: -1, MaxStore: 0, MaxStreams: -1, MaxConsumers: -1, MaxAckPending: -1,
		MemoryMaxStreamBytes: -1, StoreMaxStreamBytes: -1,
	}}); err != nil {
		slog.Error("jetstream store watchdog: limit file storage", "err", err)
	}
}

// lift restores the account's limits.
func (s *Server) lift(free uint64) {
	if err := s.GlobalAccount().UpdateJetStreamLimits(nil); err != nil {
		slog.Warn("jetstream store watchdog: restore the account's limits; retrying", "err", err)
		return
	}
	s.up(free)
}

// restart turns JetStream off and on, which reloads every stream and
// consumer from disk (dropping a store's sticky write error), with the
// configuration it first started with.
func (s *Server) restart(free uint64) {
	if s.JetStreamEnabled() {
		if err := s.ShutdownJetStream(); err != nil {
			slog.Warn("jetstream store watchdog: turn JetStream off to reload its streams; retrying", "err", err)
			return
		}
	}
	cfg := s.jsc
	cfg.StoreDir = s.cfg.StoreDir // EnableJetStream appends the jetstream directory itself
	if err := s.EnableJetStream(&cfg); err != nil {
		slog.Warn("jetstream store watchdog: turn JetStream back on; retrying", "err", err, "free_bytes", free)
		return
	}
	s.up(free)
}

func (s *Server) up(free uint64) {
	s.mu.Lock()
	was := s.downAt
	s.down, s.reload = nil, false
	s.mu.Unlock()
	slog.Info("jetstream store watchdog: writes accepted again", "free_bytes", free, "refused_for", time.Since(was).Round(time.Millisecond))
}

// StoreErr returns why the watchdog refuses writes (the store's filesystem
// is full, or a stream could not write), or nil: the readiness of
// everything that needs the event store.
func (s *Server) StoreErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down != nil {
		return fmt.Errorf("event store unavailable: %w", s.down)
	}
	return nil
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
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.Shutdown()
	s.WaitForShutdown()
}
