package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// DefaultTaskTTL is how long a deferred task is kept by default.
const DefaultTaskTTL = 7 * 24 * time.Hour

// bucketTimeout bounds creating the tasks bucket.
const bucketTimeout = 30 * time.Second

// Edge serves the exposed tools as ACP capabilities. It is safe for
// concurrent use.
type Edge struct {
	kernel   *kernel.Kernel
	dispatch *dispatch.Dispatcher
	tasks    jetstream.KeyValue
	opts     options
	log      *slog.Logger
	reg      *tools.Registry
	// mu serializes rebuilds of cur, the table of the registry's current
	// exposed tools (see table).
	mu  sync.Mutex
	cur atomic.Pointer[capTable]

	// id holds this replica's task leases; life ends with Close, which
	// cuts its runs and stops its renewals, the sweep and the index.
	id    string
	life  context.Context
	stop  context.CancelFunc
	index *taskIndex
	runs  sync.WaitGroup // tasks taken over by the sweep
}

// capTable is the capability table built from one state of the registry.
type capTable struct {
	key  tools.Version
	caps []*binding          // published, registry order
	byID map[string]*binding // capability id → binding
}

// binding is one published capability and the tool behind it.
type binding struct {
	entry *tools.Entry
	cap   Capability
	// stream says the tool streams its output: a deferred task runs it
	// with InvokeStream and returns the chunks collected.
	stream bool
}

// call is the tool call of b with args, as a tool proof names it.
func (b *binding) call(args json.RawMessage) *dpop.Call {
	return &dpop.Call{ToolServer: b.entry.Manifest.ServerID, ToolName: b.entry.Tool.Name, Arguments: args}
}

// New builds the edge over a kernel built with kernel.WithRegistry(reg),
// its dispatcher and the JetStream that holds deferred tasks. The
// capability table follows the registry: a tool registered or replaced
// later is published on the next request, without a restart.
func New(k *kernel.Kernel, reg *tools.Registry, d *dispatch.Dispatcher, js jetstream.JetStream, opts ...Option) (*Edge, error) {
	if k == nil || reg == nil || d == nil || js == nil {
		return nil, errors.New("new acp edge: kernel, registry, dispatcher and JetStream are required")
	}
	o := options{exposure: tools.Exposure{Protocol: "acp"}, defaultCategory: tools.ACPTool, replicas: 1,
		taskTTL: DefaultTaskTTL, name: "chio", version: "dev",
		maxTasks: DefaultMaxTasks, maxLiveTasks: DefaultMaxLiveTasks, taskLease: DefaultTaskLease}
	for _, opt := range opts {
		opt(&o)
	}
	if o.exposure.Protocol == "" {
		o.exposure.Protocol = "acp"
	}
	if o.defaultCategory == "" {
		o.defaultCategory = tools.ACPTool
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.replicas < 1 {
		o.replicas = 1
	}
	if o.taskLease < 3*time.Millisecond {
		o.taskLease = DefaultTaskLease
	}
	if o.instanceID == "" {
		o.instanceID = uuid.NewString()
	}
	// New takes no context (it is built once at start); a bounded wait
	// keeps an unreachable JetStream from hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), bucketTimeout)
	defer cancel()
	kv, err := js.CreateOrUpdateKeyValue(ctx, TasksBucketConfig(o.replicas, o.taskTTL))
	if err != nil {
		return nil, fmt.Errorf("new acp edge: tasks bucket: %w", err)
	}
	if err := capTasks(ctx, js, o.maxTasks); err != nil {
		return nil, fmt.Errorf("new acp edge: %w", err)
	}
	e := &Edge{kernel: k, dispatch: d, tasks: kv, opts: o, log: o.log, reg: reg, id: o.instanceID, index: newTaskIndex(o.taskTTL)}
	e.life, e.stop = context.WithCancel(context.Background())
	if err := e.index.follow(e.life, kv); err != nil {
		e.stop()
		return nil, fmt.Errorf("new acp edge: %w", err)
	}
	go e.sweep()
	e.table()
	return e, nil
}

// bind builds the capability table. A capability id is a bare tool name,
// so a name two servers expose is withheld rather than silently given to
// one of them; unsupported fidelity is withheld as Chio's ACP profile requires.
func (e *Edge) bind(key tools.Version, entries []*tools.Entry) *capTable {
	t := &capTable{key: key, byID: map[string]*binding{}}
	count := map[string]int{}
	for _, en := range entries {
		count[en.Tool.Name]++
	}
	for _, en := range entries {
		name := en.Tool.Name
		if count[name] > 1 {
			e.log.Warn("acp: capability withheld: several servers expose the tool name",
				"server_id", en.Manifest.ServerID, "tool_name", name)
			continue
		}
		cat, fid := tools.ACPFidelity(en.Tool, e.opts.defaultCategory)
		if !fid.Publishable() {
			e.log.Debug("acp: capability withheld", "tool_name", name, "reason", fid.Reason)
			continue
		}
		// Publishable implies readable hints.
		h, _ := tools.ReadHints(en.Tool)
		b := &binding{entry: en, stream: h.Streaming, cap: Capability{
			ID: name, Name: name, Description: en.Tool.Description, Category: cat,
			RequiresPermission: e.opts.requirePermission || h.SideEffects, BridgeFidelity: fid,
		}}
		t.caps = append(t.caps, b)
		t.byID[name] = b
	}
	return t
}

// table is the capability table of the registry's current exposed tools.
// It is rebuilt only when a server was registered or replaced since the
// last build, so a request pays one registry read-lock to learn that.
func (e *Edge) table() *capTable {
	if t := e.cur.Load(); t != nil && t.key.Matches(e.reg.Servers()) {
		return t
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Read the registry again under the lock: a request holding an older
	// snapshot must not replace a newer table.
	servers := e.reg.Servers()
	if t := e.cur.Load(); t != nil && t.key.Matches(servers) {
		return t
	}
	t := e.bind(tools.VersionOf(servers), e.reg.Exposed(e.opts.exposure))
	e.cur.Store(t)
	return t
}

// Capabilities are every published capability, whoever asks.
func (e *Edge) Capabilities() []Capability {
	t := e.table()
	out := make([]Capability, 0, len(t.caps))
	for _, b := range t.caps {
		out = append(out, b.cap)
	}
	return out
}
