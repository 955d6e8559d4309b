package worker

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// DefaultConcurrency bounds the calls one worker runs at once; past it,
// requests wait in the subscription (and other replicas take the load).
const DefaultConcurrency = 64

// MaxRequestBytes bounds an invoke request a worker reads.
const MaxRequestBytes = 8 << 20

// DefaultDrainTimeout bounds how long Stop waits for the calls running.
const DefaultDrainTimeout = 10 * time.Second

// answerHeadroom is left, under the connection's max_payload, for the
// headers of an answer.
const answerHeadroom = 4 << 10

// DefaultFreshness is how far a call's signing time may be from the
// worker's clock (WithEdgeTrust).
const DefaultFreshness = 30 * time.Second

// maxSeenCalls bounds the signed calls a worker remembers to refuse them
// a second time; past it (after the expired are forgotten) calls are
// refused unrun until older ones expire.
const maxSeenCalls = 1 << 20

type workerOptions struct {
	name        string
	concurrency int
	drain       time.Duration
	key         ed25519.PrivateKey
	trust       *schemas.EdgeVerifier
	freshness   time.Duration
	log         *slog.Logger
}

// WorkerOption configures a Worker.
type WorkerOption func(*workerOptions)

// WithName sets the worker's name in its service metadata (default: the
// service instance id only).
func WithName(name string) WorkerOption { return func(o *workerOptions) { o.name = name } }

// WithConcurrency bounds the calls run at once (default DefaultConcurrency).
func WithConcurrency(n int) WorkerOption { return func(o *workerOptions) { o.concurrency = n } }

// WithManifestKey is the Ed25519 key that signs each served manifest as
// chio.signed_manifest.v1; edges register a server only if its manifest
// verifies under the key they pin. Serve requires it.
func WithManifestKey(key ed25519.PrivateKey) WorkerOption {
	return func(o *workerOptions) { o.key = key }
}

// WithEdgeTrust makes the worker run only calls a certified edge signed
// (schemas.EdgeSigner.SignToolCall, sent by a Remote WithEdgeSigner): the
// credential issued by a trusted issuer and not revoked, the signature
// made within the freshness window, the request naming its decision's
// receipt id, and never sent before. Others are refused unrun. Without
// it every call is run: NATS permissions are then all that keeps a
// stranger from running tools without the kernel.
func WithEdgeTrust(v *schemas.EdgeVerifier) WorkerOption {
	return func(o *workerOptions) { o.trust = v }
}

// WithFreshness sets how far a signed call's time may be from the
// worker's clock (default DefaultFreshness).
func WithFreshness(d time.Duration) WorkerOption { return func(o *workerOptions) { o.freshness = d } }

// WithDrainTimeout bounds how long Stop waits for the calls running
// (default DefaultDrainTimeout).
func WithDrainTimeout(d time.Duration) WorkerOption { return func(o *workerOptions) { o.drain = d } }

// WithWorkerLogger sets the logger (default slog.Default()).
func WithWorkerLogger(l *slog.Logger) WorkerOption { return func(o *workerOptions) { o.log = l } }

// Worker serves tool servers on a NATS connection as one micro service.
type Worker struct {
	svc      micro.Service
	nc       *nats.Conn
	log      *slog.Logger
	drain    time.Duration
	sem      chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	served   atomic.Int64
	byID     map[string]*served
	key      ed25519.PrivateKey
	trust    *schemas.EdgeVerifier
	fresh    time.Duration
	seen     seenCalls
	refused  atomic.Int64 // calls refused as not sent by a certified edge
	stopOnce sync.Once
	stopErr  error

	// mu guards stopping and calls.Add: no call is added once Stop has
	// begun, so calls.Wait never races an Add.
	mu       sync.Mutex
	stopping bool
	calls    sync.WaitGroup
}

// served is one tool server, the hash of its manifest at Serve (the
// endpoints' metadata) and its current manifest, signed: an MCP server's
// tool list may change after Serve.
type served struct {
	srv  tools.Server
	key  ed25519.PrivateKey
	hash string

	mu     sync.Mutex
	canon  []byte // canonical JSON of the manifest last signed
	cur    string // its hash
	signed []byte // its chio.signed_manifest.v1
}

// Serve registers the servers on nc and serves their calls until Stop.
// Each server's manifest is checked as tools.Registry.Register checks it.
func Serve(nc *nats.Conn, servers []tools.Server, opts ...WorkerOption) (*Worker, error) {
	o := workerOptions{concurrency: DefaultConcurrency, log: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	if len(servers) == 0 {
		return nil, errors.New("serve tools: no tool server")
	}
	if o.concurrency < 1 {
		return nil, fmt.Errorf("serve tools: concurrency %d: want at least 1", o.concurrency)
	}
	if o.key == nil {
		return nil, errors.New("serve tools: no manifest key: edges register only manifests signed by the key they pin")
	}
	if o.drain <= 0 {
		o.drain = DefaultDrainTimeout
	}
	if o.freshness <= 0 {
		o.freshness = DefaultFreshness
	}
	check := tools.NewRegistry()
	w := &Worker{nc: nc, log: o.log, drain: o.drain, sem: make(chan struct{}, o.concurrency), byID: map[string]*served{},
		key: o.key, trust: o.trust, fresh: o.freshness, seen: seenCalls{at: map[[32]byte]time.Time{}}}
	for _, s := range servers {
		if err := check.Register(s); err != nil {
			return nil, fmt.Errorf("serve tools: %w", err)
		}
		sv := &served{srv: s, key: o.key}
		h, _, err := sv.current()
		if err != nil {
			return nil, fmt.Errorf("serve tools: %w", err)
		}
		sv.hash = h
		w.byID[s.ServerID()] = sv
	}
	meta := map[string]string{}
	if o.name != "" {
		meta["chio.worker"] = o.name
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name: ServiceName, Version: serviceVersion, Metadata: meta,
		Description: "Chio tool servers: governed calls arrive here after their decision is durable",
	})
	if err != nil {
		return nil, fmt.Errorf("serve tools: add service: %w", err)
	}
	w.svc = svc
	w.ctx, w.cancel = context.WithCancel(context.Background())
	for id, s := range w.byID {
		if err := w.addEndpoints(id, s); err != nil {
			w.Stop()
			return nil, fmt.Errorf("serve tools %q: %w", id, err)
		}
	}
	// Serving means reachable: the server has the subscriptions once the
	// flush returns, so a discovery after Serve finds this worker.
	if err := nc.Flush(); err != nil {
		w.Stop()
		return nil, fmt.Errorf("serve tools: flush: %w", err)
	}
	return w, nil
}

func (w *Worker) addEndpoints(id string, s *served) error {
	key := SubjectKey(id)
	meta := func(role string) micro.EndpointOpt {
		return micro.WithEndpointMetadata(map[string]string{metaServerID: id, metaManifest: s.hash, metaRole: role})
	}
	if err := w.svc.AddEndpoint(roleInvoke+"-"+key, micro.HandlerFunc(w.invoke),
		micro.WithEndpointSubject(subject(id, roleInvoke)), meta(roleInvoke)); err != nil {
		return fmt.Errorf("add invoke endpoint: %w", err)
	}
	if err := w.svc.AddEndpoint(roleManifest+"-"+key, micro.HandlerFunc(func(r micro.Request) { w.manifest(s, r) }),
		micro.WithEndpointSubject(subject(id, roleManifest)), meta(roleManifest)); err != nil {
		return fmt.Errorf("add manifest endpoint: %w", err)
	}
	// Every replica hears a cancel: only the one running the call can stop it.
	if err := w.svc.AddEndpoint(roleCancel+"-"+key, micro.HandlerFunc(func(r micro.Request) { w.cancelCall(s, r) }),
		micro.WithEndpointSubject(subject(id, roleCancel)), meta(roleCancel), micro.WithEndpointQueueGroupDisabled()); err != nil {
		return fmt.Errorf("add cancel endpoint: %w", err)
	}
	return nil
}

// Served reports how many calls this worker has answered.
func (w *Worker) Served() int64 { return w.served.Load() }

// Unauthenticated reports how many calls this worker refused, unrun,
// because no certified edge signed them or they were sent before.
func (w *Worker) Unauthenticated() int64 { return w.refused.Load() }

// Info is the worker's micro service info.
func (w *Worker) Info() micro.Info { return w.svc.Info() }

// Stop stops taking calls (those still arriving are refused unrun), lets
// the calls running finish and answer for at most the drain timeout, then
// cancels the rest and returns; the connection stays the caller's to
// close. Stop may be called more than once.
func (w *Worker) Stop() error {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		w.stopping = true
		w.mu.Unlock()
		err := w.svc.Stop()
		done := make(chan struct{})
		go func() { w.calls.Wait(); close(done) }()
		t := time.NewTimer(w.drain)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			w.log.Warn("worker: calls still running at the drain timeout are cancelled", "drain", w.drain)
		}
		w.cancel()
		if err != nil {
			w.stopErr = fmt.Errorf("stop worker: %w", err)
		}
	})
	return w.stopErr
}

// invoke runs on the subscription's goroutine: it takes a slot and runs
// the call on its own goroutine, so calls run concurrently up to the bound.
func (w *Worker) invoke(r micro.Request) {
	if !w.admit() {
		w.refuse(r, codeStopping, "this worker is stopping; the call did not run")
		return
	}
	w.sem <- struct{}{}
	go func() {
		defer func() { <-w.sem; w.calls.Done() }()
		// A call that waited for a slot while Stop began is refused, not
		// run with a context about to be cancelled.
		if w.isStopping() {
			w.refuse(r, codeStopping, "this worker is stopping; the call did not run")
			return
		}
		w.run(r)
	}()
}

// admit counts a call in unless Stop has begun.
func (w *Worker) admit() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return false
	}
	w.calls.Add(1)
	return true
}

func (w *Worker) isStopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

// maxAnswer is the largest answer body the connection can send.
func (w *Worker) maxAnswer() int {
	return int(w.nc.MaxPayload()) - answerHeadroom
}

func (w *Worker) run(r micro.Request) {
	if len(r.Data()) > MaxRequestBytes {
		w.refuse(r, codeBadRequest, fmt.Sprintf("request larger than %d bytes", MaxRequestBytes))
		return
	}
	if err := w.authentic(r); err != nil {
		w.refused.Add(1)
		w.log.Warn("worker: call refused unrun: not sent by a certified edge", "subject", r.Subject(), "reason", schemas.EdgeReason(err), "err", err)
		w.refuse(r, codeUnauthenticated, "call refused unrun: "+err.Error())
		return
	}
	var req request
	if err := strictjson.Unmarshal(r.Data(), &req); err != nil {
		w.refuse(r, codeBadRequest, "request: "+err.Error())
		return
	}
	if w.trust != nil && (req.Governance == nil || req.Governance.ReceiptID == "") {
		w.refused.Add(1)
		w.refuse(r, codeUnauthenticated, "call refused unrun: it names no decision's receipt id")
		return
	}
	s := w.byID[req.ServerID]
	switch {
	case s == nil || subject(req.ServerID, roleInvoke) != r.Subject():
		w.refuse(r, codeUnknownTool, fmt.Sprintf("server %q is not served here", req.ServerID))
		return
	}
	// The live manifest, not Serve's: a tool redefined upstream is not
	// run under the definition the edge governed the call by.
	cur, _, err := s.current()
	switch {
	case err != nil:
		w.refuse(r, codeFailed, err.Error())
		return
	case req.ManifestSHA256 != cur:
		w.refuse(r, codeManifestMismatch, fmt.Sprintf("this worker serves manifest %s of %q, the call names %s (edges take a changed manifest at their next discovery)", cur, req.ServerID, req.ManifestSHA256))
		return
	}
	inv := tools.Invocation{ID: req.ID, ServerID: req.ServerID, ToolName: req.Tool, Arguments: req.Arguments, Governance: req.Governance.tools()}
	var a answer
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("tool %s/%s panicked", req.ServerID, req.Tool)
			}
		}()
		if req.Stream {
			// Chunks are gathered into one answer, so they are bounded
			// by what one NATS message can carry.
			size, limit := 0, w.maxAnswer()
			err = s.srv.InvokeStream(w.ctx, inv, func(c tools.Chunk) error {
				if size += len(c.Data) + 32; size > limit {
					return errTooLarge
				}
				a.Chunks = append(a.Chunks, chunk{Data: c.Data, Last: c.Last})
				return nil
			})
		} else {
			a.Output, err = s.srv.Invoke(w.ctx, inv)
		}
	}()
	w.served.Add(1)
	if err != nil {
		code := codeFailed
		switch {
		case errors.Is(err, errTooLarge):
			code = codeTooLarge
			err = fmt.Errorf("the streamed chunks exceed %d bytes, the NATS max_payload less headers", w.maxAnswer())
		case errors.Is(err, tools.ErrOutcomeUnknown):
			code = codeOutcomeUnknown
		case errors.Is(err, tools.ErrCanceled) || errors.Is(err, context.Canceled):
			code = codeCancelled
		case errors.Is(err, tools.ErrUnknownTool):
			code = codeUnknownTool
		}
		w.refuse(r, code, err.Error())
		return
	}
	raw, err := json.Marshal(a)
	if err != nil {
		w.refuse(r, codeFailed, "encode answer: "+err.Error())
		return
	}
	if len(raw) > w.maxAnswer() {
		// Sending it would fail with the requester left to time out.
		w.refuse(r, codeTooLarge, fmt.Sprintf("the answer is %d bytes, more than the NATS max_payload less headers (%d)", len(raw), w.maxAnswer()))
		return
	}
	if err := w.nc.PublishMsg(&nats.Msg{Subject: r.Reply(), Data: raw, Header: w.sign(r, "", "", raw)}); err != nil {
		w.log.Warn("worker: answer not sent; the call will end incomplete", "server", req.ServerID, "tool", req.Tool, "id", req.ID, "err", err)
	}
}

// refuse answers r with a service error. Answers go out on the connection
// rather than through r.Respond or r.Error: a call runs on a goroutine of
// its own, and the micro handler that received it reads r's error state
// once it returns, so r must not be written to after that.
func (w *Worker) refuse(r micro.Request, code, text string) {
	text = headerText(text)
	h := w.sign(r, code, text, nil)
	h.Set(micro.ErrorHeader, text)
	h.Set(micro.ErrorCodeHeader, code)
	msg := &nats.Msg{Subject: r.Reply(), Header: h}
	if err := w.nc.PublishMsg(msg); err != nil {
		w.log.Warn("worker: error answer not sent", "subject", r.Subject(), "err", err)
	}
}

// sign returns the header holding the worker's signature of an answer to
// r (answerSigningInput).
func (w *Worker) sign(r micro.Request, code, text string, body []byte) nats.Header {
	sig := ed25519.Sign(w.key, answerSigningInput(r.Subject(), r.Data(), code, text, body))
	return nats.Header{HeaderWorkerSignature: {base64.RawURLEncoding.EncodeToString(sig)}}
}

// authentic checks, with edge trust, that a certified edge signed the
// call within the freshness window and that it was not sent before.
func (w *Worker) authentic(r micro.Request) error {
	if w.trust == nil {
		return nil
	}
	now := time.Now()
	_, at, err := w.trust.CheckToolCall(r.Subject(), nats.Header(r.Headers()), r.Data(), now, w.fresh)
	if err != nil {
		return err
	}
	// Signed, fresh, and the first time: remembered until its time
	// leaves the window, when the freshness check refuses it anyway.
	return w.seen.first(sha256.Sum256(r.Data()), at.Add(w.fresh), now)
}

// seenCalls remembers the signed calls run, until their signature leaves
// the freshness window, so a captured call sent again is refused.
type seenCalls struct {
	mu    sync.Mutex
	at    map[[32]byte]time.Time // request hash → when it may be forgotten
	swept int                    // the size after the last sweep
}

var (
	errReplayed = errors.New("this signed call was sent before")
	errSeenFull = errors.New("too many recent signed calls to remember; try again")
)

func (s *seenCalls) first(h [32]byte, forget, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.at[h]; ok && now.Before(t) {
		return errReplayed
	}
	// Amortised: the expired are swept when the map has doubled since.
	if len(s.at) >= max(2*s.swept, 1024) {
		for k, t := range s.at {
			if !now.Before(t) {
				delete(s.at, k)
			}
		}
		s.swept = len(s.at)
	}
	if len(s.at) >= maxSeenCalls {
		return errSeenFull
	}
	s.at[h] = forget
	return nil
}

// cancelCall stops the invocation if it runs here; no answer is sent, as
// every replica hears the request. With edge trust only a certified
// edge's signed cancel is heard.
func (w *Worker) cancelCall(s *served, r micro.Request) {
	if w.trust != nil {
		if _, _, err := w.trust.CheckToolCall(r.Subject(), nats.Header(r.Headers()), r.Data(), time.Now(), w.fresh); err != nil {
			w.refused.Add(1)
			w.log.Warn("worker: cancel ignored: not sent by a certified edge", "subject", r.Subject(), "reason", schemas.EdgeReason(err))
			return
		}
	}
	var c cancelRequest
	if strictjson.Unmarshal(r.Data(), &c) != nil || c.ID == "" {
		return
	}
	if err := s.srv.Cancel(w.ctx, c.ID); err != nil && !errors.Is(err, tools.ErrNotRunning) {
		w.log.Warn("worker: cancel", "server", s.srv.ServerID(), "id", c.ID, "err", err)
	}
}

// errTooLarge stops a stream whose gathered chunks would not fit one answer.
var errTooLarge = errors.New("answer too large")

// current is the server's live manifest's hash and signed document,
// signed again only when the manifest changed.
func (s *served) current() (string, []byte, error) {
	m := s.srv.Manifest()
	if m == nil {
		return "", nil, fmt.Errorf("manifest of %q: none", s.srv.ServerID())
	}
	canon, err := schemas.Canonical(m)
	if err != nil {
		return "", nil, fmt.Errorf("manifest of %q: %w", m.ServerID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if string(canon) == string(s.canon) {
		return s.cur, s.signed, nil
	}
	signed, err := schemas.SignManifest(s.key, m)
	if err != nil {
		return "", nil, fmt.Errorf("manifest of %q: %w", m.ServerID, err)
	}
	raw, err := json.Marshal(signed)
	if err != nil {
		return "", nil, fmt.Errorf("manifest of %q: encode: %w", m.ServerID, err)
	}
	s.canon, s.cur, s.signed = canon, signed.ManifestHash, raw
	return s.cur, s.signed, nil
}

// manifest answers the server's current signed manifest.
func (w *Worker) manifest(s *served, r micro.Request) {
	_, signed, err := s.current()
	if err != nil {
		w.refuse(r, codeFailed, err.Error())
		return
	}
	if err := r.Respond(signed); err != nil {
		w.log.Warn("worker: manifest not sent", "server", s.srv.ServerID(), "err", err)
	}
}
