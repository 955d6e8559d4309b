// Package tools is the tool layer shared by the outward edges (A2A, ACP):
// in-process tool servers, a registry of chio.manifest.v1 manifests, the
// exposure rules that decide which tools an audience may discover and call,
// the x-chio-* bridge hints and the per-protocol fidelity ratings.
//
// Exposure and fidelity are separate questions. Exposure (Registry.Exposed,
// Registry.Resolve) is the operator's opt-in; fidelity (A2AFidelity,
// ACPFidelity) says whether a protocol can carry the tool honestly. An edge
// publishes a tool only when both say yes.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/chio-ledger/chio/schemas"
)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrNotRunning: Cancel named an invocation that is not running here.
	ErrNotRunning = errors.New("invocation is not running")
	// ErrUnknownTool: no registered server has the tool.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrNotExposed: the tool exists but this audience may not see it.
	ErrNotExposed = errors.New("tool is not exposed")
	// ErrInternalTool: the tool or its server is in an internal namespace
	// (the hard floor); it is never exposed nor invocable from outside.
	ErrInternalTool = errors.New("tool is in an internal namespace and is never exposed")
	// ErrAmbiguousTool: a bare tool name matches tools on several exposed servers.
	ErrAmbiguousTool = errors.New("tool name is ambiguous")
	// ErrNoServer: the tool's manifest is registered without an in-process server.
	ErrNoServer = errors.New("tool has no in-process server")
	// ErrCanceled is the context cause a tool sees when Cancel stopped it.
	ErrCanceled = errors.New("invocation canceled")
	// ErrDuplicateInvocation: an invocation id is already running; ids are
	// receipt ids, so a reuse is a caller bug, and Cancel could not tell
	// the two calls apart.
	ErrDuplicateInvocation = errors.New("invocation id is already running")
	// ErrNoInvocationID: an invocation without an id cannot be cancelled
	// nor tied to a receipt.
	ErrNoInvocationID = errors.New("invocation id is empty")
	// ErrOutcomeUnknown: the tool was cut off and cannot tell whether its
	// effect happened (a relayed request whose answer can no longer come).
	// The dispatcher then records no outcome, and the ledger closes the
	// call as incomplete: claiming completed or cancelled would be a guess.
	ErrOutcomeUnknown = errors.New("outcome unknown: the call was cut off")
)

// Invocation is one call of a tool.
type Invocation struct {
	ID        string // the call's receipt id; unique per call
	ServerID  string
	ToolName  string
	Arguments json.RawMessage
	// Governance describes the governed call running the tool, so that a
	// tool which relays it to another agent can extend its call chain.
	Governance *Governance
}

// Governance is what a tool may know of the call it serves.
type Governance struct {
	// RequestID and ReceiptID identify the call: a relayed call names
	// them as its chain's parent.
	RequestID, ReceiptID string
	// Subject is the key of the capability the caller exercised: the
	// delegator of any call the tool relays.
	Subject string
	// Intent is the caller's governed intent, if any; a relay extends its
	// call chain and never replaces it.
	Intent *schemas.GovernedIntent
}

// Chunk is one piece of streamed output.
type Chunk struct {
	Data json.RawMessage
	// Last marks the final chunk, when the tool knows it is; edges pass
	// it on (A2A: artifactUpdate.lastChunk) and never infer it. For an
	// A2A-native tool it only ends the stream: its events carry their own
	// lastChunk.
	Last bool
}

// MetaA2ANative is the tool metadata key (value true) of an A2A-native
// tool: it takes {"message": <the A2A 1.0 Message>} as arguments and
// streams A2A 1.0 StreamResponse objects as chunks (see edges/a2a).
const MetaA2ANative = "a2a.native"

// MetaDenyByDefault is the tool metadata key (value true) of a tool that
// runs only under a grant that names it: a wildcard grant ("*") on its
// server does not reach it. The OpenAPI bridge sets it on side-effecting
// operations (DenyByDefault).
const MetaDenyByDefault = "chio.deny_by_default"

// Server is an in-process tool server.
type Server interface {
	// Manifest describes its tools; ServerID() == Manifest().ServerID.
	Manifest() *schemas.ToolManifest
	ServerID() string
	ToolNames() []string
	Invoke(ctx context.Context, inv Invocation) (json.RawMessage, error)
	// InvokeStream produces output as chunks; emit returning an error
	// stops the tool with that error.
	InvokeStream(ctx context.Context, inv Invocation, emit func(Chunk) error) error
	// Cancel stops a running invocation by id (ErrNotRunning if it is not
	// running here).
	Cancel(ctx context.Context, invocationID string) error
}

// Running tracks the running invocations of a server so that Cancel can stop
// them by id. Servers embed it; the zero value is ready and it is safe for
// concurrent use. It must not be copied after first use.
type Running struct {
	mu      sync.Mutex
	running map[string]*run
}

// run is one tracked invocation; its address tells a finished call from a
// later one that reused the id.
type run struct{ cancel context.CancelCauseFunc }

// Start registers invocation id as running and returns the context the tool
// must honour and a finish func the tool must call (defer) when it returns.
// The context ends with cause ErrCanceled when Cancel(id) is called. On error
// the returned context is ctx and finish is a no-op, so both are always usable.
func (r *Running) Start(ctx context.Context, id string) (context.Context, func(), error) {
	if id == "" {
		return ctx, func() {}, fmt.Errorf("start invocation: %w", ErrNoInvocationID)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	me := &run{cancel: cancel}
	r.mu.Lock()
	if _, dup := r.running[id]; dup {
		r.mu.Unlock()
		cancel(nil)
		return ctx, func() {}, fmt.Errorf("start invocation %q: %w", id, ErrDuplicateInvocation)
	}
	if r.running == nil {
		r.running = make(map[string]*run)
	}
	r.running[id] = me
	r.mu.Unlock()

	var once sync.Once
	finish := func() {
		once.Do(func() {
			r.mu.Lock()
			if r.running[id] == me {
				delete(r.running, id)
			}
			r.mu.Unlock()
			cancel(nil) // releases the context's resources
		})
	}
	return runCtx, finish, nil
}

// Cancel stops the running invocation id. It never blocks, so the context is
// not consulted; the tool observes the cancellation through its own context.
func (r *Running) Cancel(_ context.Context, id string) error {
	// The entry stays until the tool's finish runs, so the id cannot be
	// reused while the cancelled call winds down and a repeated Cancel is
	// a harmless no-op (A2A cancel is idempotent).
	r.mu.Lock()
	me, ok := r.running[id]
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("cancel invocation %q: %w", id, ErrNotRunning)
	}
	me.cancel(ErrCanceled)
	return nil
}

// Len reports how many invocations are running.
func (r *Running) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}
