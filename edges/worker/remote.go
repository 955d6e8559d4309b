package worker

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Defaults of a Remote and of discovery.
const (
	// DefaultCallTimeout bounds a call whose context has no deadline: a
	// worker that dies mid-call never answers, and the call must end.
	DefaultCallTimeout = 30 * time.Second
	// DefaultMaxAnswerBytes bounds a worker's answer.
	DefaultMaxAnswerBytes = 8 << 20
	// DefaultDiscoveryWindow is how long Discover gathers $SRV.INFO replies.
	DefaultDiscoveryWindow = 500 * time.Millisecond
	// DefaultManifestTimeout bounds one manifest fetch during discovery:
	// a slow or silent server is skipped, not waited on.
	DefaultManifestTimeout = 5 * time.Second
)

type remoteOptions struct {
	timeout   time.Duration
	fetch     time.Duration
	maxAnswer int
	window    time.Duration
	key       string
	signer    *schemas.EdgeSigner
	log       *slog.Logger
}

// Option configures a Remote and Discover.
type Option func(*remoteOptions)

// WithCallTimeout bounds calls whose context has no earlier deadline
// (default DefaultCallTimeout).
func WithCallTimeout(d time.Duration) Option { return func(o *remoteOptions) { o.timeout = d } }

// WithMaxAnswerBytes bounds an answer (default DefaultMaxAnswerBytes).
func WithMaxAnswerBytes(n int) Option { return func(o *remoteOptions) { o.maxAnswer = n } }

// WithDiscoveryWindow sets how long Discover gathers replies (default
// DefaultDiscoveryWindow).
func WithDiscoveryWindow(d time.Duration) Option { return func(o *remoteOptions) { o.window = d } }

// WithManifestTimeout bounds each manifest fetch of Discover (default
// DefaultManifestTimeout).
func WithManifestTimeout(d time.Duration) Option { return func(o *remoteOptions) { o.fetch = d } }

// WithWorkerKey pins the Ed25519 public key (wire form, 64 hex) workers
// sign their manifests with: Discover keeps only servers whose
// chio.signed_manifest.v1 verifies under it. Discover requires it, since
// anyone who can answer $SRV.INFO could otherwise name any server id and
// manifest (deny_by_default, exposure, hints) for the edge to serve.
func WithWorkerKey(publicKey string) Option { return func(o *remoteOptions) { o.key = publicKey } }

// WithEdgeSigner signs every call and cancel the Remote sends with the
// edge's key (schemas.EdgeSigner.SignToolCall), for workers that run only
// calls a certified edge sent (WithEdgeTrust).
func WithEdgeSigner(s *schemas.EdgeSigner) Option { return func(o *remoteOptions) { o.signer = s } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *remoteOptions) { o.log = l } }

func newOptions(opts []Option) remoteOptions {
	o := remoteOptions{timeout: DefaultCallTimeout, fetch: DefaultManifestTimeout, maxAnswer: DefaultMaxAnswerBytes,
		window: DefaultDiscoveryWindow, log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Remote is the tools.Server of a tool server served by workers: its
// calls go to whichever replica the queue group picks. It is safe for
// concurrent use.
type Remote struct {
	tools.Running
	nc   *nats.Conn
	id   string
	opts remoteOptions
	pin  ed25519.PublicKey // the worker key every answer must be signed by

	// mu guards the manifest, which Refresh may swap.
	mu       sync.RWMutex
	manifest *schemas.ToolManifest
	hash     string
	names    []string
}

var _ tools.Server = (*Remote)(nil)

// NewRemote returns the Remote of the server m describes, served by
// workers reached on nc. It takes only answers signed by the pinned
// worker key (WithWorkerKey, required).
func NewRemote(nc *nats.Conn, m *schemas.ToolManifest, opts ...Option) (*Remote, error) {
	if m == nil {
		return nil, errors.New("remote tool server: manifest is nil")
	}
	o := newOptions(opts)
	pin, err := schemas.ParsePublicKey(o.key)
	if err != nil {
		return nil, fmt.Errorf("remote tool server %q: worker key: %w", m.ServerID, err)
	}
	hash, err := ManifestHash(m)
	if err != nil {
		return nil, fmt.Errorf("remote tool server: %w", err)
	}
	r := &Remote{nc: nc, id: m.ServerID, opts: o, pin: pin}
	r.set(m, hash)
	return r, nil
}

func (r *Remote) set(m *schemas.ToolManifest, hash string) {
	names := make([]string, 0, len(m.Tools))
	for _, t := range m.Tools {
		names = append(names, t.Name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.manifest, r.hash, r.names = m, hash, names
}

// snapshot is the current manifest, its hash and tool names.
func (r *Remote) snapshot() (*schemas.ToolManifest, string, []string) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.manifest, r.hash, r.names
}

// Refresh fetches the server's signed manifest again, verified under the
// pinned key, and takes it if it changed (an MCP server's tool list did):
// the caller then hands the Remote to tools.Registry.Replace.
func (r *Remote) Refresh(ctx context.Context) (changed bool, err error) {
	m, err := fetchManifest(ctx, r.nc, r.id, r.opts)
	if err != nil {
		return false, err
	}
	hash, err := ManifestHash(m)
	if err != nil {
		return false, fmt.Errorf("refresh %q: %w", r.id, err)
	}
	if _, cur, _ := r.snapshot(); cur == hash {
		return false, nil
	}
	r.set(m, hash)
	return true, nil
}

// Manifest returns a copy of the manifest the workers serve.
func (r *Remote) Manifest() *schemas.ToolManifest {
	cur, _, _ := r.snapshot()
	raw, err := json.Marshal(cur)
	if err != nil {
		panic(fmt.Sprintf("manifest of %q does not encode: %v", r.id, err)) // it was decoded from JSON
	}
	var m schemas.ToolManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		panic(fmt.Sprintf("manifest of %q does not decode: %v", r.id, err))
	}
	return &m
}

// Origin says the server runs on workers (tools.OriginReporter).
func (r *Remote) Origin() tools.Origin { return tools.OriginWorker }

// ServerID is the manifest's server id.
func (r *Remote) ServerID() string { return r.id }

// ToolNames lists the manifest's tools.
func (r *Remote) ToolNames() []string {
	_, _, names := r.snapshot()
	return slices.Clone(names)
}

// ManifestSHA256 is the hash every call names (ManifestHash).
func (r *Remote) ManifestSHA256() string {
	_, h, _ := r.snapshot()
	return h
}

// Invoke runs the call on a worker.
func (r *Remote) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	a, err := r.call(ctx, inv, false)
	if err != nil {
		return nil, err
	}
	return a.Output, nil
}

// InvokeStream runs the call on a worker and emits its chunks, in order,
// once the worker has gathered them all.
func (r *Remote) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	a, err := r.call(ctx, inv, true)
	if err != nil {
		return err
	}
	for _, c := range a.Chunks {
		if err := emit(tools.Chunk{Data: c.Data, Last: c.Last}); err != nil {
			return err
		}
	}
	return nil
}

func (r *Remote) call(ctx context.Context, inv tools.Invocation, stream bool) (*answer, error) {
	_, hash, names := r.snapshot()
	name := r.id + "/" + inv.ToolName
	if inv.ServerID != "" && inv.ServerID != r.id || !slices.Contains(names, inv.ToolName) {
		return nil, fmt.Errorf("invoke %s: %w", name, tools.ErrUnknownTool)
	}
	runCtx, finish, err := r.Start(ctx, inv.ID)
	if err != nil {
		return nil, fmt.Errorf("invoke %s: %w", name, err)
	}
	defer finish()
	data, err := json.Marshal(request{ID: inv.ID, ServerID: r.id, Tool: inv.ToolName, Arguments: inv.Arguments,
		Stream: stream, ManifestSHA256: hash, Governance: governanceOf(inv.Governance)})
	if err != nil {
		return nil, fmt.Errorf("invoke %s: encode request: %w", name, err)
	}
	if err := runCtx.Err(); err != nil {
		return nil, fmt.Errorf("invoke %s: %w", name, context.Cause(runCtx)) // not sent
	}
	if r.nc.IsClosed() {
		return nil, fmt.Errorf("invoke %s: %w", name, nats.ErrConnectionClosed) // not sent
	}
	callCtx, cancel := context.WithTimeout(runCtx, r.opts.timeout)
	defer cancel()
	subj := subject(r.id, roleInvoke)
	req := &nats.Msg{Subject: subj, Data: data}
	if r.opts.signer != nil {
		req.Header = r.opts.signer.SignToolCall(subj, data, time.Now())
	}
	msg, err := r.nc.RequestMsgWithContext(callCtx, req)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("invoke %s: %w", name, ErrNoWorker)
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject), errors.Is(err, nats.ErrInvalidConnection):
		return nil, fmt.Errorf("invoke %s: request not sent: %w", name, err)
	case err != nil:
		// Sent, and no answer will come: the worker may have run it.
		// Every replica hears the cancel; the one running it stops.
		r.publishCancel(inv.ID)
		cause := err
		if c := context.Cause(runCtx); c != nil {
			cause = c
		}
		return nil, fmt.Errorf("invoke %s: %w: %w", name, tools.ErrOutcomeUnknown, cause)
	}
	code, text := msg.Header.Get(micro.ErrorCodeHeader), msg.Header.Get(micro.ErrorHeader)
	if !r.signedAnswer(subj, data, code, text, msg) {
		// Not the worker's: whoever answered may have run it, or not.
		r.publishCancel(inv.ID)
		return nil, fmt.Errorf("invoke %s: %w: %w", name, tools.ErrOutcomeUnknown, ErrForgedAnswer)
	}
	if code != "" {
		return nil, remoteError(name, code, text)
	}
	if len(msg.Data) > r.opts.maxAnswer {
		return nil, fmt.Errorf("invoke %s: %w: larger than %d bytes", name, ErrBadAnswer, r.opts.maxAnswer)
	}
	var a answer
	if err := strictjson.Unmarshal(msg.Data, &a); err != nil {
		return nil, fmt.Errorf("invoke %s: %w: %v", name, ErrBadAnswer, err)
	}
	return &a, nil
}

// signedAnswer reports whether the pinned worker key signed msg as the
// answer to the request data on subj.
func (r *Remote) signedAnswer(subj string, data []byte, code, text string, msg *nats.Msg) bool {
	sig, err := base64.RawURLEncoding.DecodeString(msg.Header.Get(HeaderWorkerSignature))
	if err != nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(r.pin, answerSigningInput(subj, data, code, text, msg.Data), sig)
}

// remoteError is the error of a worker's error answer.
func remoteError(name, code, text string) error {
	switch code {
	case codeOutcomeUnknown:
		return fmt.Errorf("invoke %s: %w: %s", name, tools.ErrOutcomeUnknown, text)
	case codeCancelled:
		return fmt.Errorf("invoke %s: %w: %s", name, tools.ErrCanceled, text)
	case codeUnknownTool:
		return fmt.Errorf("invoke %s: %w: %w: %s", name, ErrRefused, tools.ErrUnknownTool, text)
	case codeTooLarge:
		return fmt.Errorf("invoke %s: %w: %s", name, ErrBadAnswer, text)
	case codeBadRequest, codeManifestMismatch, codeStopping, codeUnauthenticated:
		return fmt.Errorf("invoke %s: %w: %s", name, ErrRefused, text)
	default:
		return fmt.Errorf("invoke %s: %w: %s", name, ErrRemoteTool, text)
	}
}

// Cancel stops a call in flight from here: its request/reply ends with
// ErrCanceled (the outcome is then unknown) and every replica is told.
func (r *Remote) Cancel(ctx context.Context, id string) error {
	if err := r.Running.Cancel(ctx, id); err != nil {
		return err
	}
	r.publishCancel(id)
	return nil
}

func (r *Remote) publishCancel(id string) {
	raw, err := json.Marshal(cancelRequest{ID: id})
	if err == nil {
		subj := subject(r.id, roleCancel)
		msg := &nats.Msg{Subject: subj, Data: raw}
		if r.opts.signer != nil {
			msg.Header = r.opts.signer.SignToolCall(subj, raw, time.Now())
		}
		err = r.nc.PublishMsg(msg)
	}
	if err != nil {
		r.opts.log.Warn("worker: cancel not sent", "server", r.id, "id", id, "err", err)
	}
}

// Discover asks every worker on nc what it serves ($SRV.INFO), gathering
// replies for the discovery window, and returns a Remote per tool server,
// by server id, its signed manifest fetched from one replica and verified
// under the pinned key (WithWorkerKey). A server whose manifest cannot be
// fetched in time or does not verify is logged and skipped: one bad
// worker does not hide the others. Replicas that serve another manifest
// of a server are logged: a call they pick is refused unrun (ErrRefused),
// so they should be replaced. Only the $SRV.INFO request itself, or a
// missing key, fails Discover.
func Discover(ctx context.Context, nc *nats.Conn, opts ...Option) ([]*Remote, error) {
	o := newOptions(opts)
	if _, err := schemas.ParsePublicKey(o.key); err != nil {
		return nil, fmt.Errorf("discover workers: worker key: %w", err)
	}
	infos, err := infos(ctx, nc, o)
	if err != nil {
		return nil, err
	}
	hashes := map[string][]string{} // server id → the manifest hashes replicas serve
	var order []string
	for _, in := range infos {
		for _, ep := range in.Endpoints {
			id, h := ep.Metadata[metaServerID], ep.Metadata[metaManifest]
			if ep.Metadata[metaRole] != roleInvoke || id == "" {
				continue
			}
			if _, ok := hashes[id]; !ok {
				order = append(order, id)
			}
			if !slices.Contains(hashes[id], h) {
				hashes[id] = append(hashes[id], h)
			}
		}
	}
	// Fetched concurrently, each bounded: discovery takes about one
	// fetch timeout at worst, however many servers are silent.
	found := make([]*Remote, len(order))
	var wg sync.WaitGroup
	for i, id := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := fetchManifest(ctx, nc, id, o)
			if err == nil {
				found[i], err = NewRemote(nc, m, opts...)
			}
			if err != nil {
				o.log.Warn("worker: tool server skipped", "server", id, "err", err)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("discover workers: %w", err)
	}
	var out []*Remote
	for _, r := range found {
		if r == nil {
			continue
		}
		if len(hashes[r.ServerID()]) > 1 {
			o.log.Warn("worker: replicas serve different manifests; calls reaching the others are refused",
				"server", r.ServerID(), "manifest_sha256", r.ManifestSHA256(), "served", hashes[r.ServerID()])
		}
		out = append(out, r)
	}
	return out, nil
}

// infos gathers the $SRV.INFO replies of ServiceName for the window.
func infos(ctx context.Context, nc *nats.Conn, o remoteOptions) ([]micro.Info, error) {
	subj, err := micro.ControlSubject(micro.InfoVerb, ServiceName, "")
	if err != nil {
		return nil, fmt.Errorf("discover workers: %w", err)
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("discover workers: %w", err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, fmt.Errorf("discover workers: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, o.window)
	defer cancel()
	var out []micro.Info
	for {
		msg, err := sub.NextMsgWithContext(wctx)
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, nil // no worker at all: no need to wait the window out
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("discover workers: %w", ctx.Err())
			}
			return out, nil // the window ended
		}
		if len(msg.Data) > o.maxAnswer {
			o.log.Warn("worker: discovery reply too large, ignored", "bytes", len(msg.Data))
			continue
		}
		var in micro.Info
		if err := json.Unmarshal(msg.Data, &in); err != nil || in.Name != ServiceName {
			o.log.Warn("worker: discovery reply unreadable, ignored", "err", err)
			continue
		}
		out = append(out, in)
	}
}

// fetchManifest asks one replica for server id's signed manifest and
// verifies it under the pinned key.
func fetchManifest(ctx context.Context, nc *nats.Conn, id string, o remoteOptions) (*schemas.ToolManifest, error) {
	rctx, cancel := context.WithTimeout(ctx, o.fetch)
	defer cancel()
	msg, err := nc.RequestWithContext(rctx, subject(id, roleManifest), nil)
	if err != nil {
		return nil, fmt.Errorf("discover %q: manifest: %w", id, err)
	}
	if len(msg.Data) > o.maxAnswer {
		return nil, fmt.Errorf("discover %q: manifest: %w: larger than %d bytes", id, ErrBadAnswer, o.maxAnswer)
	}
	signed, err := schemas.ParseSignedManifest(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("discover %q: %w", id, err)
	}
	if err := signed.Verify(o.key); err != nil {
		return nil, fmt.Errorf("discover %q: not signed by the worker key: %w", id, err)
	}
	m, err := schemas.ParseManifest(signed.Manifest)
	if err != nil {
		return nil, fmt.Errorf("discover %q: %w", id, err)
	}
	if m.ServerID != id {
		return nil, fmt.Errorf("discover %q: %w: the manifest names server %q", id, ErrBadAnswer, m.ServerID)
	}
	// The calls name the hash of the decoded manifest: it must be the
	// one signed.
	if h, err := ManifestHash(m); err != nil || h != signed.ManifestHash {
		return nil, fmt.Errorf("discover %q: %w: the manifest does not re-encode to its signed hash", id, ErrBadAnswer)
	}
	return m, nil
}
