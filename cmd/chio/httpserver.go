package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/chio-ledger/chio/edges/a2a"
	"github.com/chio-ledger/chio/edges/acp"
	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/internal/ratelimit"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/internal/tlsreload"
)

// The bounds every chio HTTP server keeps by default. A header block past
// MaxHeaderBytes is answered 431 before any handler runs; a connection that
// has not sent its headers within the read-header timeout, or its whole
// request within the read timeout, or that sits idle between requests
// past the idle timeout, is closed; so is one whose client stops reading
// an answer for the write timeout. That bounds each write, not the whole
// answer, so a long SSE stream lives as long as its reader keeps up.
const (
	// Capability tokens with delegation chains and DPoP proofs travel in
	// headers: a few KB each, far below this.
	defaultMaxHeaderBytes    = 64 << 10
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = time.Minute
	defaultIdleTimeout       = 2 * time.Minute
	// As long as the A2A edge gives each SSE event.
	defaultWriteTimeout = 30 * time.Second
)

// httpLimits are what the --max-header-bytes, --*-timeout and --rate-limit-*
// flags say of a command's HTTP servers, and the limiters they build.
type httpLimits struct {
	maxHeaderBytes    int
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	idleTimeout       time.Duration
	writeTimeout      time.Duration
	sendBuffer        int // SO_SNDBUF of each connection; 0: the kernel's autotuning
	addr, principal   ratelimit.Config
	// The A2A edge's stream bounds (0: the edge's defaults), on the
	// commands that serve it.
	maxStreams, maxStreamsPerCaller int
	// command names the surface of a path no route table below knows.
	command string

	// tlsFiles are the listener's certificate, key and client CA
	// (--tls-cert, --tls-key, --tls-client-ca); tlsConfig, built by
	// prepare, serves them, nil for plain HTTP.
	tlsFiles  tlsreload.Files
	tlsConfig *tls.Config

	// Built by prepare.
	guard      *ratelimit.Guard
	metrics    *ratelimit.Metrics
	principals *ratelimit.Keyed
}

// defaultHTTPLimits are the limits of a server whose command has no flags
// for them (chio monitor's metrics).
func defaultHTTPLimits() *httpLimits {
	return &httpLimits{maxHeaderBytes: defaultMaxHeaderBytes, readHeaderTimeout: defaultReadHeaderTimeout,
		readTimeout: defaultReadTimeout, idleTimeout: defaultIdleTimeout, writeTimeout: defaultWriteTimeout, command: "http"}
}

type httpLimitsKey struct{}

// limitHTTP gives every command under root that serves HTTP (it has a
// --listen flag) the HTTP limit flags, and puts what they say in the
// command's context before it runs, for newHTTPServer and the read
// authenticator.
func limitHTTP(root *cobra.Command) {
	for _, cmd := range root.Commands() {
		limitHTTP(cmd)
	}
	if root.Flags().Lookup("listen") == nil {
		return
	}
	l := defaultHTTPLimits()
	l.command = root.Name()
	l.register(root)
	pre := root.PreRunE
	root.PreRunE = func(cmd *cobra.Command, args []string) error {
		if pre != nil {
			if err := pre(cmd, args); err != nil {
				return err
			}
		}
		if err := l.prepare(cmd); err != nil {
			return usageError(err)
		}
		cmd.SetContext(context.WithValue(cmd.Context(), httpLimitsKey{}, l))
		return nil
	}
}

func (l *httpLimits) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&l.maxHeaderBytes, "max-header-bytes", l.maxHeaderBytes, "largest request header block accepted (a larger one is answered 431)")
	f.DurationVar(&l.readHeaderTimeout, "read-header-timeout", l.readHeaderTimeout, "a connection that has not sent a request's headers within this is closed")
	f.DurationVar(&l.readTimeout, "read-timeout", l.readTimeout, "a connection that has not sent a whole request (headers and body) within this is closed")
	f.DurationVar(&l.idleTimeout, "idle-timeout", l.idleTimeout, "a keep-alive connection idle between requests for this long is closed")
	f.IntVar(&l.sendBuffer, "socket-send-buffer", 0, "kernel send buffer (SO_SNDBUF) of each HTTP connection, in bytes: bounds the kernel memory a client that stops reading pins (by default the kernel grows it, to 4 MiB on Linux); 0: the kernel's autotuning")
	f.DurationVar(&l.writeTimeout, "write-timeout", l.writeTimeout, "a connection whose client takes no more of an answer for this long is closed (each write is bounded, not the whole answer: streams live on while read)")
	f.Float64Var(&l.addr.Rate, "rate-limit-address", 0, "requests a second one client address (an IPv6 /64) may make, over every HTTP and gRPC surface of the process together; more are answered 429 or RESOURCE_EXHAUSTED (0: no limit)")
	f.IntVar(&l.addr.Burst, "rate-limit-address-burst", 0, "requests one address may make at once above --rate-limit-address (default: one second's worth)")
	f.Float64Var(&l.principal.Rate, "rate-limit-principal", 0, "reads a second one principal (the root of its capability's chain) may make of receipts, tasks and reports, from any address; more are answered 429 (0: no limit)")
	f.IntVar(&l.principal.Burst, "rate-limit-principal-burst", 0, "reads one principal may make at once above --rate-limit-principal (default: one second's worth)")
	f.StringVar(&l.tlsFiles.Cert, "tls-cert", "", "serve HTTPS (and gRPC over TLS) with this certificate (PEM; read again when it changes on disk)")
	f.StringVar(&l.tlsFiles.Key, "tls-key", "", "the --tls-cert certificate's private key (PEM)")
	f.StringVar(&l.tlsFiles.ClientCA, "tls-client-ca", "", "with --tls-cert: require client certificates signed by this CA (PEM; mutual TLS)")
	if p := cmd.CommandPath(); p == "chio up" || p == "chio edge a2a" {
		f.IntVar(&l.maxStreams, "max-streams", a2a.DefaultMaxStreams, "A2A streams (SSE and gRPC) this replica holds open at once, all callers together; one more is refused 429 / RESOURCE_EXHAUSTED")
		f.IntVar(&l.maxStreamsPerCaller, "max-streams-per-caller", a2a.DefaultMaxStreamsPerCaller, "A2A streams one caller (principal, or address without a capability) holds open at once on this replica")
	}
	if f.Lookup("trusted-proxy") == nil {
		f.StringArray("trusted-proxy", nil, "CIDR of a reverse proxy whose X-Forwarded-For is believed: the client address is the first hop from the right not in one (repeatable)")
	}
}

// prepare checks the flags and builds the limiters.
func (l *httpLimits) prepare(cmd *cobra.Command) error {
	switch {
	case l.maxHeaderBytes < 1<<10:
		return fmt.Errorf("--max-header-bytes %d: at least 1024", l.maxHeaderBytes)
	case l.readHeaderTimeout <= 0 || l.readTimeout <= 0 || l.idleTimeout <= 0 || l.writeTimeout <= 0:
		return errors.New("--read-header-timeout, --read-timeout, --idle-timeout and --write-timeout must be positive")
	case l.sendBuffer < 0:
		return errors.New("--socket-send-buffer must not be negative")
	case l.maxStreams < 0 || l.maxStreamsPerCaller < 0:
		return errors.New("--max-streams and --max-streams-per-caller must not be negative")
	case l.addr.Rate < 0 || l.principal.Rate < 0 || l.addr.Burst < 0 || l.principal.Burst < 0:
		return errors.New("--rate-limit-* must not be negative")
	}
	if l.tlsFiles != (tlsreload.Files{}) {
		if l.tlsFiles.Cert == "" || l.tlsFiles.Key == "" {
			return errors.New("--tls-cert and --tls-key go together (and --tls-client-ca needs them)")
		}
		cfg, err := tlsreload.Config(l.tlsFiles)
		if err != nil {
			return fmt.Errorf("--tls-cert: %w", err)
		}
		l.tlsConfig = cfg
	}
	for _, c := range []*ratelimit.Config{&l.addr, &l.principal} {
		if c.Burst == 0 {
			c.Burst = max(1, int(c.Rate+0.5))
		}
	}
	cidrs, err := cmd.Flags().GetStringArray("trusted-proxy")
	if err != nil {
		return err
	}
	var trusted []netip.Prefix
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("--trusted-proxy %q: %w", s, err)
		}
		trusted = append(trusted, p)
	}
	l.metrics = ratelimit.NewMetrics(nil)
	l.principals = ratelimit.New(l.principal)
	l.guard = &ratelimit.Guard{Address: ratelimit.New(l.addr), Trusted: trusted, Metrics: l.metrics, Surface: l.surface}
	return nil
}

// surface names the surface a request is for, and how it answers errors.
func (l *httpLimits) surface(r *http.Request) (string, ratelimit.Form) {
	p := r.URL.Path
	rpc := r.Method == http.MethodPost
	switch {
	case p == "/a2a" || p == "/" && rpc:
		return "a2a", ratelimit.JSONRPC
	case p == mcpedge.Path:
		if rpc {
			return "mcp", ratelimit.JSONRPC
		}
		return "mcp", ratelimit.JSON
	case p == acp.Path:
		return "acp", ratelimit.JSONRPC
	case strings.HasPrefix(p, a2a.RESTPath+"/") || strings.HasPrefix(p, "/.well-known/"):
		return "a2a", ratelimit.JSON
	case strings.HasPrefix(p, "/openai/"):
		return "openai", ratelimit.JSON
	case strings.HasPrefix(p, "/log/") || strings.HasPrefix(p, "/v1/receipts") || strings.HasPrefix(p, "/v1/log/") || strings.HasPrefix(p, "/v1/checkpoints/"):
		return "log", ratelimit.JSON
	case strings.HasPrefix(p, "/v1/") && l.command != "protect" && l.command != "openapi":
		return "projections", ratelimit.JSON
	case p == "/metrics" || p == "/healthz" || p == "/readyz":
		return "probes", ratelimit.JSON
	}
	return l.command, ratelimit.JSON
}

// grpcOptions put a gRPC server behind the same per-address limit as
// the HTTP servers (one budget per address across both): a call past it
// is refused RESOURCE_EXHAUSTED with a RetryInfo detail, before its
// handler runs. The address is the connection's peer, or behind a
// --trusted-proxy the one its x-forwarded-for metadata names, as for HTTP.
func (l *httpLimits) grpcOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if l.tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(l.tlsConfig)))
	}
	if l.guard == nil || l.guard.Address == nil {
		return opts
	}
	admit := func(ctx context.Context) error {
		var a netip.Addr
		if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
			if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
				a = ap.Addr().Unmap()
			}
		}
		a = ratelimit.ForwardedAddr(a, metadata.ValueFromIncomingContext(ctx, "x-forwarded-for"), l.guard.Trusted)
		ok, wait := l.guard.Address.Allow(ratelimit.AddressKey(a), time.Now())
		if ok {
			return nil
		}
		l.metrics.Refused("grpc", ratelimit.ReasonAddress)
		st := status.New(codes.ResourceExhausted, fmt.Sprintf("too many requests from this address: retry after %ds", ratelimit.RetryAfterSeconds(wait)))
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)}); err == nil {
			st = d
		}
		return st.Err()
	}
	return append(opts,
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := admit(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := admit(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	)
}

// httpScheme is "https" when the command serves TLS (--tls-cert), else
// "http": what its banners and its own origin say.
func httpScheme(ctx context.Context) string {
	if httpLimitsFrom(ctx).tlsConfig != nil {
		return "https"
	}
	return "http"
}

// schemed puts the command's scheme on an http:// origin.
func schemed(ctx context.Context, origin string) string {
	if rest, ok := strings.CutPrefix(origin, "http://"); ok {
		return httpScheme(ctx) + "://" + rest
	}
	return origin
}

// httpLimitsFrom is the limits ctx carries, the defaults if none.
func httpLimitsFrom(ctx context.Context) *httpLimits {
	if l, ok := ctx.Value(httpLimitsKey{}).(*httpLimits); ok {
		return l
	}
	return defaultHTTPLimits()
}

// readOptions are the read authenticator's per-principal limit.
func (l *httpLimits) readOptions() []readauth.Option {
	if l.principals == nil {
		return nil
	}
	return []readauth.Option{readauth.WithRateLimit(l.principals, l.metrics)}
}

// streams are the A2A edge's stream bounds, for a2a.Edge.LimitStreams.
func (l *httpLimits) streams() (perCaller, total int) { return l.maxStreamsPerCaller, l.maxStreams }

// newHTTPServer is the http.Server every chio HTTP surface is served by:
// bounded headers, timeouts for connections that stall before, during or
// between requests, and h behind the per-address limit.
func newHTTPServer(ctx context.Context, h http.Handler) *http.Server {
	l := httpLimitsFrom(ctx)
	srv := &http.Server{Handler: l.boundWrites(l.withMetrics(l.guard.Wrap(h))), MaxHeaderBytes: l.maxHeaderBytes,
		ReadHeaderTimeout: l.readHeaderTimeout, ReadTimeout: l.readTimeout, IdleTimeout: l.idleTimeout, TLSConfig: l.tlsConfig}
	if l.sendBuffer > 0 {
		srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if tc, ok := c.(*net.TCPConn); ok {
				if err := tc.SetWriteBuffer(l.sendBuffer); err != nil {
					slog.Debug("http: SO_SNDBUF not set", "remote", c.RemoteAddr(), "err", err)
				}
			}
			return ctx
		}
	}
	return srv
}

// boundWrites gives each write of an answer the write timeout, so a
// client that stops reading cuts its connection instead of holding the
// handler (a proxied model stream, a large export) for ever. http.Server's
// WriteTimeout would bound the whole answer, cutting long streams; the
// server clears the deadline after each request, so a kept-alive
// connection starts clean.
func (l *httpLimits) boundWrites(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&stallBound{ResponseWriter: w, rc: http.NewResponseController(w), d: l.writeTimeout}, r)
	})
}

// stallBound is a ResponseWriter whose writes and flushes each get d
// until the handler sets write deadlines itself (through
// http.ResponseController, as the A2A edge's SSE writer does), which then
// stand alone.
type stallBound struct {
	http.ResponseWriter
	rc  *http.ResponseController
	d   time.Duration
	own bool
}

func (s *stallBound) extend() {
	if !s.own {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.d))
	}
}

func (s *stallBound) Write(b []byte) (int, error) {
	s.extend()
	return s.ResponseWriter.Write(b)
}

func (s *stallBound) FlushError() error {
	s.extend()
	return s.rc.Flush()
}

func (s *stallBound) Flush() { _ = s.FlushError() }

func (s *stallBound) SetWriteDeadline(t time.Time) error {
	s.own = true
	return s.rc.SetWriteDeadline(t)
}

func (s *stallBound) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type limitMetricsKey struct{}

// withMetrics hands the refusal counters to GET /metrics (metricsHandler)
// through the request's context: the command's registry is built after
// the limits.
func (l *httpLimits) withMetrics(h http.Handler) http.Handler {
	if l.metrics == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			r = r.WithContext(context.WithValue(r.Context(), limitMetricsKey{}, l.metrics))
		}
		h.ServeHTTP(w, r)
	})
}

// metricsHandler serves reg, and the rate-limit refusals of the server
// the request came through.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	plain := promhttp.HandlerFor(reg, opts)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, ok := r.Context().Value(limitMetricsKey{}).(*ratelimit.Metrics)
		if !ok {
			plain.ServeHTTP(w, r)
			return
		}
		extra := prometheus.NewRegistry()
		extra.MustRegister(m.Collector())
		promhttp.HandlerFor(prometheus.Gatherers{reg, extra}, opts).ServeHTTP(w, r)
	})
}
