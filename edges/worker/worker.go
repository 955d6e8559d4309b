package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// DefaultConcurrency bounds the calls one worker runs at once; past it,
// requests wait in the subscription (and other replicas take the load).
const DefaultConcurrency = 64

// MaxRequestBytes bounds an invoke request a worker reads.
const MaxRequestBytes = 8 << 20

type workerOptions struct {
	name        string
	concurrency int
	log         *slog.Logger
}

// WorkerOption configures a Worker.
type WorkerOption func(*workerOptions)

// WithName sets the worker's name in its service metadata (default: the
// service instance id only).
func WithName(name string) WorkerOption { return func(o *workerOptions) { o.name = name } }

// WithConcurrency bounds the calls run at once (default DefaultConcurrency).
func WithConcurrency(n int) WorkerOption { return func(o *workerOptions) { o.concurrency = n } }

// WithWorkerLogger sets the logger (default slog.Default()).
func WithWorkerLogger(l *slog.Logger) WorkerOption { return func(o *workerOptions) { o.log = l } }

// Worker serves tool servers on a NATS connection as one micro service.
type Worker struct {
	svc    micro.Service
	log    *slog.Logger
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	calls  sync.WaitGroup
	served atomic.Int64
	byID   map[string]*served
}

// served is one tool server and its manifest's hash.
type served struct {
	srv  tools.Server
	hash string
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
	check := tools.NewRegistry()
	w := &Worker{log: o.log, sem: make(chan struct{}, o.concurrency), byID: map[string]*served{}}
	for _, s := range servers {
		if err := check.Register(s); err != nil {
			return nil, fmt.Errorf("serve tools: %w", err)
		}
		h, err := ManifestHash(s.Manifest())
		if err != nil {
			return nil, fmt.Errorf("serve tools: %w", err)
		}
		w.byID[s.ServerID()] = &served{srv: s, hash: h}
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
	manifest, err := json.Marshal(s.srv.Manifest())
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	if err := w.svc.AddEndpoint(roleInvoke+"-"+key, micro.HandlerFunc(w.invoke),
		micro.WithEndpointSubject(subject(id, roleInvoke)), meta(roleInvoke)); err != nil {
		return fmt.Errorf("add invoke endpoint: %w", err)
	}
	if err := w.svc.AddEndpoint(roleManifest+"-"+key, micro.HandlerFunc(func(r micro.Request) { _ = r.Respond(manifest) }),
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

// Info is the worker's micro service info.
func (w *Worker) Info() micro.Info { return w.svc.Info() }

// Stop stops taking calls, lets the calls running finish and answer, and
// then returns; the connection stays the caller's to close.
func (w *Worker) Stop() error {
	err := w.svc.Stop()
	w.calls.Wait()
	w.cancel()
	if err != nil {
		return fmt.Errorf("stop worker: %w", err)
	}
	return nil
}

// invoke runs on the subscription's goroutine: it takes a slot and runs
// the call on its own goroutine, so calls run concurrently up to the bound.
func (w *Worker) invoke(r micro.Request) {
	w.sem <- struct{}{}
	w.calls.Add(1)
	go func() {
		defer func() { <-w.sem; w.calls.Done() }()
		w.run(r)
	}()
}

func (w *Worker) run(r micro.Request) {
	if len(r.Data()) > MaxRequestBytes {
		w.refuse(r, codeBadRequest, fmt.Sprintf("request larger than %d bytes", MaxRequestBytes))
		return
	}
	var req request
	if err := strictjson.Unmarshal(r.Data(), &req); err != nil {
		w.refuse(r, codeBadRequest, "request: "+err.Error())
		return
	}
	s := w.byID[req.ServerID]
	switch {
	case s == nil || subject(req.ServerID, roleInvoke) != r.Subject():
		w.refuse(r, codeUnknownTool, fmt.Sprintf("server %q is not served here", req.ServerID))
		return
	case req.ManifestSHA256 != s.hash:
		w.refuse(r, codeManifestMismatch, fmt.Sprintf("this worker serves manifest %s of %q, the call names %s", s.hash, req.ServerID, req.ManifestSHA256))
		return
	}
	inv := tools.Invocation{ID: req.ID, ServerID: req.ServerID, ToolName: req.Tool, Arguments: req.Arguments, Governance: req.Governance.tools()}
	var a answer
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("tool %s/%s panicked", req.ServerID, req.Tool)
			}
		}()
		if req.Stream {
			err = s.srv.InvokeStream(w.ctx, inv, func(c tools.Chunk) error {
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
	if err := r.Respond(raw); err != nil {
		w.log.Warn("worker: answer not sent; the call will end incomplete", "server", req.ServerID, "tool", req.Tool, "id", req.ID, "err", err)
	}
}

func (w *Worker) refuse(r micro.Request, code, text string) {
	if err := r.Error(code, headerText(text), nil); err != nil {
		w.log.Warn("worker: error answer not sent", "subject", r.Subject(), "err", err)
	}
}

// cancelCall stops the invocation if it runs here; no answer is sent, as
// every replica hears the request.
func (w *Worker) cancelCall(s *served, r micro.Request) {
	var c cancelRequest
	if strictjson.Unmarshal(r.Data(), &c) != nil || c.ID == "" {
		return
	}
	if err := s.srv.Cancel(w.ctx, c.ID); err != nil && !errors.Is(err, tools.ErrNotRunning) {
		w.log.Warn("worker: cancel", "server", s.srv.ServerID(), "id", c.ID, "err", err)
	}
}
