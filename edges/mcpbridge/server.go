package mcpbridge

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/internal/redact"
	"github.com/chio-ledger/chio/schemas"
)

// MaxAnswerBytes is the default bound on one message of the upstream.
const MaxAnswerBytes = 4 << 20

// upstreamTimeout bounds a restart's connect and a relisting of the
// tools, so an upstream that stops answering cannot stall the supervisor
// (and with it further restarts and Close).
const upstreamTimeout = 30 * time.Second

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrServerDown: the upstream is not running (it died and is being
	// restarted); the call was not sent.
	ErrServerDown = errors.New("the upstream MCP server is down")
	// ErrServerGone: the upstream died or its connection broke while the
	// call was in flight.
	ErrServerGone = errors.New("the upstream MCP server went away during the call")
	// ErrToolError: the tool answered with isError.
	ErrToolError = errors.New("the MCP tool reported an error")
	// ErrBadAnswer: the answer does not fit the tool's declaration.
	ErrBadAnswer = errors.New("the MCP tool's answer is not usable")
)

// Upstream is the MCP server to wrap: a command run over stdio, or a
// streamable HTTP endpoint.
type Upstream struct {
	// Command is the program and its arguments (stdio). It is run
	// directly, never through a shell, with a minimal environment (PATH,
	// HOME, locale, temp dir) plus Env.
	Command []string
	// Env is "KEY=VALUE" entries added to the command's environment: the
	// operator's credentials, redacted from everything relayed.
	Env []string
	// URL is the streamable HTTP endpoint (http or https, no user info).
	// A query string is allowed (some servers take a key as ?key=), and
	// its values are treated as credentials: redacted from everything
	// relayed, as Headers are.
	URL string
	// Headers are sent on every HTTP request (credentials), redacted from
	// everything relayed. Redirects are not followed, so they never reach
	// another host.
	Headers http.Header
	// HTTPClient sends the HTTP requests; nil: a client without timeout
	// (calls are bounded by their context; the event stream is long-lived).
	HTTPClient *http.Client
}

type options struct {
	onChange func(*schemas.ToolManifest)
	expose   []string
	max      int
	backoff  backoff.Policy
	log      *slog.Logger
}

// Option configures a Server.
type Option func(*options)

// WithExpose sets the protocols whose "<protocol>.expose" the tools carry
// (default Edges(): every edge).
func WithExpose(protocols ...string) Option {
	return func(o *options) { o.expose = slices.Clone(protocols) }
}

// WithMaxAnswerBytes bounds one upstream message (default MaxAnswerBytes).
func WithMaxAnswerBytes(n int) Option { return func(o *options) { o.max = n } }

// WithRestartBackoff paces restarts of a dead upstream.
func WithRestartBackoff(p backoff.Policy) Option { return func(o *options) { o.backoff = p } }

// WithOnChange calls f with a copy of the manifest each time the tools
// change (list_changed, or a restart that lists other tools).
func WithOnChange(f func(*schemas.ToolManifest)) Option { return func(o *options) { o.onChange = f } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Server is the tools.Server of one wrapped MCP server. It keeps one
// session to the upstream, restarts it with backoff when it ends, and
// follows notifications/tools/list_changed. It is safe for concurrent use.
type Server struct {
	tools.Running
	id   string
	up   Upstream
	opts options
	flt  *filter
	env  []string

	// regMu orders changes of the tools with the Replace calls that
	// publish them (install, Follow): a registry never ends up with an
	// older manifest than the server's, and Replace reads one manifest.
	// It is taken before mu.
	regMu    sync.Mutex
	mu       sync.RWMutex
	manifest *schemas.ToolManifest
	byName   map[string]toolDef
	sess     *session // nil while down
	downErr  error
	regs     []*tools.Registry
	upCh     chan struct{} // closed while a session is installed

	progMu   sync.Mutex
	progress map[string]chan *mcp.ProgressNotificationParams

	changed chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

var _ tools.Server = (*Server)(nil)

// session is one connection to the upstream; ctx ends, with a cause
// wrapping ErrServerGone, when it does.
type session struct {
	cs     *mcp.ClientSession
	ctx    context.Context
	cancel context.CancelCauseFunc
	proc   *exec.Cmd
}

// New connects to the upstream, lists its tools and starts following it.
// ctx bounds the start only. The upstream must offer at least one tool the
// bridge can carry. Close stops it.
func New(ctx context.Context, serverID string, up Upstream, opts ...Option) (*Server, error) {
	o := options{expose: Edges(), max: MaxAnswerBytes, backoff: backoff.Policy{Base: 200 * time.Millisecond, Cap: 30 * time.Second}}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.max <= 0 {
		o.max = MaxAnswerBytes
	}
	if !schemas.ValidName(serverID) {
		return nil, errors.New("new mcp bridge: server id is required (at most 256 bytes, no control characters)")
	}
	for _, p := range o.expose {
		if !slices.Contains(Edges(), p) {
			return nil, fmt.Errorf("new mcp bridge %s: expose %q: the edges are %s", serverID, p, strings.Join(Edges(), ", "))
		}
	}
	if err := checkUpstream(up); err != nil {
		return nil, fmt.Errorf("new mcp bridge %s: %w", serverID, err)
	}
	red := redact.New(upstreamSecrets(up)...)
	s := &Server{id: serverID, up: up, opts: o, env: childEnv(up.Env), flt: &filter{max: o.max, redactor: red, log: o.log.With("server_id", serverID)},
		progress: map[string]chan *mcp.ProgressNotificationParams{}, upCh: make(chan struct{}), changed: make(chan struct{}, 1), done: make(chan struct{})}
	sess, ts, err := s.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("new mcp bridge %s: %w", serverID, err)
	}
	if err := s.install(sess, ts); err != nil {
		s.closeSession(sess, errors.New("closed"))
		return nil, fmt.Errorf("new mcp bridge %s: %w", serverID, err)
	}
	if len(s.byName) == 0 {
		s.closeSession(sess, errors.New("closed"))
		return nil, fmt.Errorf("new mcp bridge %s: the upstream offers no tool the bridge can carry", serverID)
	}
	runCtx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go s.supervise(runCtx)
	return s, nil
}

func checkUpstream(up Upstream) error {
	switch {
	case len(up.Command) > 0 && up.URL != "":
		return errors.New("give a command or a URL, not both")
	case len(up.Command) > 0:
		if len(up.Headers) > 0 {
			return errors.New("headers go with a URL; a command takes its credentials in Env")
		}
		for _, kv := range up.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("env entry %q is not KEY=VALUE", k)
			}
		}
		return nil
	case up.URL != "":
		u, err := url.Parse(up.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return errors.New("the URL must be http(s) without user info (credentials go in headers)")
		}
		if len(up.Env) > 0 {
			return errors.New("env goes with a command")
		}
		return nil
	}
	return errors.New("a command or a URL is required")
}

// upstreamSecrets is what the operator gives the upstream and an answer
// or an error must not echo: Env values, header values and the values of
// the URL's query string (raw and decoded, as either may be echoed).
func upstreamSecrets(up Upstream) []string {
	var secrets []string
	for _, kv := range up.Env {
		if _, v, ok := strings.Cut(kv, "="); ok {
			secrets = append(secrets, v)
		}
	}
	for _, vs := range up.Headers {
		secrets = append(secrets, vs...)
	}
	if u, err := url.Parse(up.URL); err == nil && u.RawQuery != "" {
		for _, pair := range strings.Split(u.RawQuery, "&") {
			_, raw, _ := strings.Cut(pair, "=")
			secrets = append(secrets, raw)
			if v, err := url.QueryUnescape(raw); err == nil && v != raw {
				secrets = append(secrets, v)
			}
		}
	}
	return secrets
}

// childEnv is the minimal environment a command runs with, plus extra.
func childEnv(extra []string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TZ", "SYSTEMROOT"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// Close stops following the upstream and ends its session (a command is
// asked to exit, then killed). Calls in flight end failed.
func (s *Server) Close() error {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	return nil
}

// Follow keeps reg's entry for this server in step with the upstream's
// tools: it is replaced now and after every change. The server must be
// registered in reg already.
func (s *Server) Follow(reg *tools.Registry) error {
	// Under regMu no install can change the tools between this Replace
	// and reg joining s.regs, so reg misses no change.
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if err := reg.Replace(s); err != nil {
		return fmt.Errorf("follow %s: %w", s.id, err)
	}
	s.mu.Lock()
	s.regs = append(s.regs, reg)
	s.mu.Unlock()
	return nil
}

// connect starts a session and lists the upstream's tools.
func (s *Server) connect(ctx context.Context) (*session, []*mcp.Tool, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "chio-mcp-bridge", Version: "0.1.0"}, &mcp.ClientOptions{
		Logger: slog.New(slog.DiscardHandler),
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.changed <- struct{}{}:
			default: // a refresh is pending already
			}
		},
		ProgressNotificationHandler: s.onProgress,
	})
	sess := &session{}
	var transport mcp.Transport
	if len(s.up.Command) > 0 {
		cmd := exec.Command(s.up.Command[0], s.up.Command[1:]...)
		cmd.Env = s.env
		ownGroup(cmd)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("start %s: %w", s.up.Command[0], err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("start %s: %w", s.up.Command[0], err)
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("start %s: %w", s.up.Command[0], err)
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("start %s: %w", s.up.Command[0], err)
		}
		go s.relayStderr(stderr)
		sess.proc = cmd
		transport = &mcp.IOTransport{Reader: io.NopCloser(newLineFilter(stdout, s.flt)), Writer: stdin, MaxLineLength: -1}
	} else {
		hc := &http.Client{}
		if s.up.HTTPClient != nil {
			c := *s.up.HTTPClient
			hc = &c
		}
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		headers := make(http.Header, len(s.up.Headers))
		for k, vs := range s.up.Headers {
			headers[http.CanonicalHeaderKey(k)] = slices.Clone(vs)
		}
		hc.Transport = &httpFilter{base: base, headers: headers, f: s.flt}
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		transport = &mcp.StreamableClientTransport{Endpoint: s.up.URL, HTTPClient: hc, MaxRetries: -1}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		s.reap(sess)
		return nil, nil, fmt.Errorf("connect: %w", s.clean(err))
	}
	sess.cs = cs
	sess.ctx, sess.cancel = context.WithCancelCause(context.Background())
	ts, err := s.list(ctx, cs)
	if err != nil {
		s.closeSession(sess, err)
		return nil, nil, err
	}
	return sess, ts, nil
}

// list reads every page of tools/list.
func (s *Server) list(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var ts []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", s.clean(err))
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// install makes sess the current session and ts the current tools, and
// replaces the followed registries' entries.
func (s *Server) install(sess *session, ts []*mcp.Tool) error {
	defs, skipped := describeTools(ts, s.opts.expose)
	for _, sk := range skipped {
		s.opts.log.Warn("mcpbridge: upstream tool left out", "server_id", s.id, "reason", sk)
	}
	m := &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: s.id, Name: s.id, Version: "0",
		Description: "Tools of the MCP server " + s.id + ", called through the Chio MCP bridge"}
	if sess != nil && sess.cs != nil {
		if ir := sess.cs.InitializeResult(); ir != nil && ir.ServerInfo != nil {
			if n := strings.TrimSpace(ir.ServerInfo.Name); schemas.ValidName(n) {
				m.Name = n
			}
			if v := strings.TrimSpace(ir.ServerInfo.Version); schemas.ValidName(v) {
				m.Version = v
			}
		}
	}
	byName := make(map[string]toolDef, len(defs))
	for _, d := range defs {
		m.Tools = append(m.Tools, d.def)
		byName[d.def.Name] = d
	}
	if len(m.Tools) > 0 {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
	}
	// The new tools and their Replace calls go together under regMu, so
	// the last manifest a registry takes is the current one.
	s.regMu.Lock()
	s.mu.Lock()
	first := s.manifest == nil
	s.manifest, s.byName, s.sess, s.downErr = m, byName, sess, nil
	select {
	case <-s.upCh:
	default:
		close(s.upCh)
	}
	regs := slices.Clone(s.regs)
	s.mu.Unlock()
	for _, reg := range regs {
		if err := reg.Replace(s); err != nil {
			s.opts.log.Error("mcpbridge: registry not updated", "server_id", s.id, "err", err)
		}
	}
	s.regMu.Unlock()
	if !first && s.opts.onChange != nil {
		s.opts.onChange(s.Manifest())
	}
	return nil
}

// supervise restarts the session when it ends and refreshes the tools on
// list_changed, until ctx ends.
func (s *Server) supervise(ctx context.Context) {
	defer close(s.done)
	attempt := 0
	for {
		s.mu.RLock()
		sess := s.sess
		s.mu.RUnlock()
		if sess != nil {
			started := time.Now()
			ended := make(chan error, 1)
			go func() { ended <- sess.cs.Wait() }()
		watch:
			for {
				select {
				case <-ctx.Done():
					s.down(sess, errors.New("the bridge is closing"))
					return
				case <-s.changed:
					lctx, cancel := context.WithTimeout(ctx, upstreamTimeout)
					ts, err := s.list(lctx, sess.cs)
					cancel()
					if err != nil {
						s.opts.log.Warn("mcpbridge: relisting tools failed", "server_id", s.id, "err", err)
						continue
					}
					if err := s.install(sess, ts); err != nil {
						s.opts.log.Warn("mcpbridge: new tool list refused", "server_id", s.id, "err", err)
					}
				case err := <-ended:
					reason := "the connection closed"
					if err != nil {
						reason = s.clean(err).Error()
					}
					s.down(sess, errors.New(reason))
					s.opts.log.Warn("mcpbridge: upstream MCP server went away; restarting", "server_id", s.id, "reason", reason)
					if time.Since(started) > s.opts.backoff.Cap {
						attempt = 0 // it ran a while: start the pacing over
					}
					break watch
				}
			}
		}
		attempt++
		if backoff.Sleep(ctx, s.opts.backoff.Delay(attempt)) != nil {
			return
		}
		cctx, cancel := context.WithTimeout(ctx, upstreamTimeout)
		next, ts, err := s.connect(cctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.downErr = err
			s.mu.Unlock()
			s.opts.log.Warn("mcpbridge: restart failed", "server_id", s.id, "attempt", attempt, "err", err)
			continue
		}
		if err := s.install(next, ts); err != nil {
			s.opts.log.Warn("mcpbridge: restarted server's tools refused", "server_id", s.id, "err", err)
			s.closeSession(next, err)
			continue
		}
		s.opts.log.Info("mcpbridge: upstream MCP server restarted", "server_id", s.id, "tools", len(ts))
	}
}

// down marks the server down and ends sess: its calls in flight fail.
func (s *Server) down(sess *session, reason error) {
	s.lost(sess, reason)
	s.closeSession(sess, reason)
}

// lost marks the server down if sess is its session; the supervisor ends
// sess and restarts.
func (s *Server) lost(sess *session, reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == sess {
		s.sess, s.downErr = nil, s.clean(reason)
		s.upCh = make(chan struct{})
	}
}

// closeSession ends sess; its calls fail with reason.
func (s *Server) closeSession(sess *session, reason error) {
	if sess.cancel != nil {
		sess.cancel(fmt.Errorf("%w: %w", ErrServerGone, reason))
	}
	if sess.cs != nil {
		_ = sess.cs.Close()
	}
	s.reap(sess)
}

// reap ends a command: closing its stdin asks it to exit (the SDK has
// done so on Close); it is killed if it has not after a grace period.
// Either way its process group is killed then, so nothing it started
// (a wrapper's child) outlives it.
func (s *Server) reap(sess *session) {
	if sess.proc == nil || sess.proc.Process == nil {
		return
	}
	exited := make(chan struct{})
	go func() { _ = sess.proc.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		killGroup(sess.proc)
		<-exited
	}
	killGroup(sess.proc)
}

// relayStderr logs the command's stderr, each line bounded and redacted.
func (s *Server) relayStderr(r io.Reader) {
	br := bufio.NewReaderSize(r, 4096)
	for {
		line, _, err := readBounded(br, '\n', 4096)
		if t := strings.TrimSpace(string(line)); t != "" {
			s.opts.log.Debug("mcpbridge: upstream stderr", "server_id", s.id, "line", s.flt.redactor.String(t))
		}
		if err != nil {
			return
		}
	}
}

// clean is err with the operator's credentials redacted from its text;
// errors.Is still sees through it.
func (s *Server) clean(err error) error {
	if err == nil {
		return nil
	}
	msg := s.flt.redactor.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Manifest returns a copy of the current manifest (it may list no tools
// after the upstream withdrew them all).
func (s *Server) Manifest() *schemas.ToolManifest {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c := *s.manifest
	c.Tools = make([]schemas.ToolDefinition, len(s.manifest.Tools))
	for i, t := range s.manifest.Tools {
		t.InputSchema = slices.Clone(t.InputSchema)
		t.OutputSchema = slices.Clone(t.OutputSchema)
		if t.Annotations != nil {
			a := *t.Annotations
			t.Annotations = &a
		}
		md := make(map[string]json.RawMessage, len(t.Metadata))
		for k, v := range t.Metadata {
			md[k] = slices.Clone(v)
		}
		t.Metadata = md
		c.Tools[i] = t
	}
	return &c
}

// Up waits until the upstream is connected (at once, unless it died and
// is being restarted), or ctx ends.
func (s *Server) Up(ctx context.Context) error {
	s.mu.RLock()
	up := s.upCh
	s.mu.RUnlock()
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for %s: %w", s.id, ctx.Err())
	}
}

// ServerID returns the server id.
func (s *Server) ServerID() string { return s.id }

// ToolNames returns the current tools in manifest order.
func (s *Server) ToolNames() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	names := make([]string, len(s.manifest.Tools))
	for i, t := range s.manifest.Tools {
		names[i] = t.Name
	}
	return names
}
