package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/coder/acp-go-sdk"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// ServerID is the tool server of the governed client methods.
const ServerID = "acp"

// The governed methods: ACP's client methods that act on the editor's
// machine, and the permission request. Each is a tool of ServerID.
const (
	MethodRead       = acp.ClientMethodFsReadTextFile
	MethodWrite      = acp.ClientMethodFsWriteTextFile
	MethodTerminal   = acp.ClientMethodTerminalCreate
	MethodOutput     = acp.ClientMethodTerminalOutput
	MethodWait       = acp.ClientMethodTerminalWaitForExit
	MethodKill       = acp.ClientMethodTerminalKill
	MethodRelease    = acp.ClientMethodTerminalRelease
	MethodPermission = acp.ClientMethodSessionRequestPermission
)

// toolDefs describes the tools. Writing a file and starting a command are
// denied by default: a wildcard grant on "acp" reaches only the reads,
// the terminals the agent already has, and asking the human.
func toolDefs() []schemas.ToolDefinition {
	obj := json.RawMessage(`{"type":"object"}`)
	ro := &schemas.ToolAnnotations{ReadOnly: true}
	deny := map[string]json.RawMessage{tools.MetaDenyByDefault: json.RawMessage(`true`)}
	return []schemas.ToolDefinition{
		{Name: MethodRead, Description: "Read a text file in the editor (arguments: sessionId, path, line, limit)", InputSchema: obj, Annotations: ro},
		{Name: MethodWrite, Description: "Write a text file in the editor (arguments: sessionId, path, contentSha256, contentBytes)",
			InputSchema: obj, HasSideEffects: true, Metadata: deny},
		{Name: MethodTerminal, Description: "Start a command in an editor terminal (arguments: sessionId, command, args, cwd, env names)",
			InputSchema: obj, HasSideEffects: true, Metadata: deny},
		{Name: MethodOutput, Description: "Read a terminal's output (arguments: sessionId, terminalId, command)", InputSchema: obj, Annotations: ro},
		{Name: MethodWait, Description: "Wait for a terminal's command to exit (arguments: sessionId, terminalId, command)", InputSchema: obj, Annotations: ro},
		{Name: MethodKill, Description: "Kill a terminal's command (arguments: sessionId, terminalId, command)", InputSchema: obj, HasSideEffects: true},
		{Name: MethodRelease, Description: "Release a terminal (arguments: sessionId, terminalId, command)", InputSchema: obj, HasSideEffects: true},
		{Name: MethodPermission, Description: "Answer an agent's permission request (arguments: sessionId, toolCall, paths, options)", InputSchema: obj},
	}
}

// relay is how the tool of one governed call reaches the editor (or the
// policy): it runs once, when the kernel has allowed the call and its
// decision is durable.
type relay func(ctx context.Context) (json.RawMessage, error)

// Tools is the in-process tool server "acp". A proxy puts the relay of
// each governed call under its receipt id before dispatching it; the
// dispatcher's Invoke takes it out and runs it. One Tools may serve
// several proxies.
type Tools struct {
	tools.Running
	mu      sync.Mutex
	pending map[string]relay
}

var _ tools.Server = (*Tools)(nil)

// NewTools returns the tool server; register it in the registry the
// kernel and dispatcher use.
func NewTools() *Tools { return &Tools{pending: map[string]relay{}} }

// Manifest returns a fresh copy on every call.
func (t *Tools) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: ServerID, Name: "ACP client methods",
		Description: "The editor's files and terminals, as an ACP agent reaches them through chio edge acp --proxy",
		Version:     "1.0.0", Tools: toolDefs()}
}

// ServerID returns "acp".
func (t *Tools) ServerID() string { return ServerID }

// ToolNames lists the governed methods.
func (t *Tools) ToolNames() []string {
	var n []string
	for _, d := range toolDefs() {
		n = append(n, d.Name)
	}
	return n
}

func (t *Tools) put(id string, r relay) {
	t.mu.Lock()
	t.pending[id] = r
	t.mu.Unlock()
}

func (t *Tools) take(id string) relay {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.pending[id]
	delete(t.pending, id)
	return r
}

// errNoRelay: an invocation no proxy is waiting for (a call made from
// another edge, or twice): nothing may reach the editor.
var errNoRelay = errors.New("no ACP request is waiting for this call")

// Invoke runs the relay put under the invocation's receipt id.
func (t *Tools) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	r := t.take(inv.ID)
	if r == nil {
		return nil, fmt.Errorf("invoke %s/%s: %w", ServerID, inv.ToolName, errNoRelay)
	}
	runCtx, finish, err := t.Start(ctx, inv.ID)
	if err != nil {
		return nil, fmt.Errorf("invoke %s/%s: %w", ServerID, inv.ToolName, err)
	}
	defer finish()
	return r(runCtx)
}

// InvokeStream is not offered: ACP client methods answer once.
func (t *Tools) InvokeStream(context.Context, tools.Invocation, func(tools.Chunk) error) error {
	return fmt.Errorf("invoke %s: ACP client methods do not stream", ServerID)
}
