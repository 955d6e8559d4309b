package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/coder/acp-go-sdk"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
)

// MaxLineBytes bounds one message from either side (a file's content
// travels in one line).
const MaxLineBytes = 16 << 20

// ErrAgentExited: the agent's output ended; Serve returns it.
var ErrAgentExited = errors.New("the ACP agent exited")

// errEditorGone is the cause of a session the editor left.
var errEditorGone = errors.New("the editor disconnected")

// Proxy governs ACP sessions under one capability. It is safe for
// concurrent use; each Serve is one editor and one agent.
type Proxy struct {
	kernel   *kernel.Kernel
	registry *tools.Registry
	dispatch *dispatch.Dispatcher
	tools    *Tools
	token    string
	id       *kernel.Identity
	log      *slog.Logger
}

type options struct{ log *slog.Logger }

// Option configures a Proxy.
type Option func(*options)

// WithLogger sets the logger (slog.Default otherwise).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// New returns a proxy acting under token, whose governed calls run on t
// (registered in reg, the registry of k and d). A capability the kernel
// refuses is an error: no session could do anything.
func New(k *kernel.Kernel, reg *tools.Registry, d *dispatch.Dispatcher, t *Tools, token string, opts ...Option) (*Proxy, error) {
	o := options{log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	if e, ok := reg.Tool(ServerID, MethodRead); !ok || e.Server != t {
		return nil, errors.New("acp proxy: the tool server is not registered")
	}
	id, dec := k.Identify(token)
	if dec != nil {
		return nil, fmt.Errorf("acp proxy: capability refused at %s: %s", dec.Guard, dec.Reason)
	}
	return &Proxy{kernel: k, registry: reg, dispatch: d, tools: t, token: token, id: id, log: o.log}, nil
}

// Serve relays one session: the editor's messages are read from editorIn
// and answered on editorOut, the agent's stdin is agentIn and its stdout
// agentOut. It returns ErrAgentExited when the agent's output ends,
// nil when the editor left and the agent then ended, or ctx's error.
// Every governed call started is finished (or cut off) before it returns.
// agentIn is closed when the editor leaves (so the agent sees EOF) and at
// the end; editorIn is closed at the end when it is an io.Closer.
func (p *Proxy) Serve(ctx context.Context, editorIn io.Reader, editorOut io.Writer, agentIn io.WriteCloser, agentOut io.Reader) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &session{p: p, ctx: sctx, editor: &lineWriter{w: editorOut}, agent: &lineWriter{w: agentIn},
		waiting: map[string]chan []byte{}, editorCalls: map[string]string{}, terminals: map[string]string{}}
	defer s.calls.Wait()
	defer agentIn.Close()
	if c, ok := editorIn.(io.Closer); ok {
		defer c.Close()
	}
	editorDone := make(chan error, 1)
	agentDone := make(chan error, 1)
	go func() { editorDone <- readLines(editorIn, s.fromEditor) }()
	go func() { agentDone <- readLines(agentOut, s.fromAgent) }()
	for {
		select {
		case <-ctx.Done():
			cancel(ctx.Err())
			return ctx.Err()
		case err := <-editorDone:
			if err != nil {
				p.log.Warn("acp proxy: reading the editor", "err", err)
			}
			// The editor is gone: what it was asked can no longer be
			// answered, and the agent is told by the end of its input.
			cancel(errEditorGone)
			agentIn.Close()
			editorDone = nil
		case err := <-agentDone:
			if err != nil {
				p.log.Warn("acp proxy: reading the agent", "err", err)
			}
			if editorDone == nil {
				return nil
			}
			cancel(ErrAgentExited)
			s.agentExited()
			return ErrAgentExited
		}
	}
}

// readLines calls f with each non-blank line of r until r ends.
func readLines(r io.Reader, f func([]byte)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			f(append([]byte(nil), line...))
		}
	}
	return sc.Err()
}

// session is one editor and one agent.
type session struct {
	p      *Proxy
	ctx    context.Context // ends when either side does
	editor *lineWriter
	agent  *lineWriter
	calls  sync.WaitGroup // governed calls in flight

	mu sync.Mutex
	// waiting: the agent's governed requests forwarded to the editor, by
	// id, each waiting for the editor's answer.
	waiting map[string]chan []byte
	// editorCalls: the editor's requests the agent has not answered, by
	// id (their methods), answered by the proxy if the agent exits.
	editorCalls map[string]string
	// terminals: the command of each terminal the editor created.
	terminals map[string]string
}

// message is any JSON-RPC message, as much as routing needs.
type message struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      json.RawMessage   `json:"id,omitempty"`
	Method  string            `json:"method,omitempty"`
	Params  json.RawMessage   `json:"params,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *acp.RequestError `json:"error,omitempty"`
}

func (m *message) isRequest() bool      { return m.Method != "" && m.ID != nil }
func (m *message) isNotification() bool { return m.Method != "" && m.ID == nil }
func (m *message) isResponse() bool     { return m.Method == "" && m.ID != nil }

// idKey is a message id as a map key: its compact JSON.
func idKey(id json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, id) != nil {
		return string(id)
	}
	return b.String()
}

// cancelParams are $/cancel_request's.
type cancelParams struct {
	RequestID json.RawMessage `json:"requestId"`
}

const methodCancelRequest = "$/cancel_request"

// relayedFromAgent are the agent's messages to the client that pass
// ungoverned: they show the human something and act on nothing.
var relayedFromAgent = map[string]bool{
	acp.ClientMethodSessionUpdate:       true,
	acp.ClientMethodElicitationCreate:   true,
	acp.ClientMethodElicitationComplete: true,
	methodCancelRequest:                 true,
}

// governed are the methods that become governed calls.
var governed = map[string]bool{
	MethodRead: true, MethodWrite: true, MethodTerminal: true, MethodOutput: true, MethodWait: true,
	MethodKill: true, MethodRelease: true, MethodPermission: true,
}

// fromAgent routes one line the agent wrote.
func (s *session) fromAgent(line []byte) {
	var m message
	if err := json.Unmarshal(line, &m); err != nil || (m.Method == "" && m.ID == nil) {
		s.p.log.Warn("acp proxy: the agent wrote a line that is not a JSON-RPC message; dropped", "err", err)
		return
	}
	switch {
	case m.isResponse():
		s.mu.Lock()
		delete(s.editorCalls, idKey(m.ID))
		s.mu.Unlock()
		s.toEditor(line)
	case m.isRequest() && governed[m.Method]:
		s.calls.Add(1)
		go func() {
			defer s.calls.Done()
			s.govern(&m, line)
		}()
	case relayedFromAgent[m.Method]:
		s.toEditor(line)
	case m.isRequest():
		s.answerAgent(m.ID, nil, &acp.RequestError{Code: -32601, Message: fmt.Sprintf(
			"chio: %s is not relayed to the editor: the proxy governs fs/*, terminal/* and session/request_permission and refuses other client methods", m.Method),
			Data: map[string]any{"method": m.Method}})
	default:
		s.p.log.Debug("acp proxy: an agent notification not relayed", "method", m.Method)
	}
}

// fromEditor routes one line the editor wrote.
func (s *session) fromEditor(line []byte) {
	var m message
	if err := json.Unmarshal(line, &m); err != nil || (m.Method == "" && m.ID == nil) {
		s.write(s.editor, message{JSONRPC: "2.0", ID: json.RawMessage("null"),
			Error: &acp.RequestError{Code: -32700, Message: "chio: not a JSON-RPC message"}})
		return
	}
	switch {
	case m.isResponse():
		s.mu.Lock()
		ch := s.waiting[idKey(m.ID)]
		delete(s.waiting, idKey(m.ID))
		s.mu.Unlock()
		if ch != nil {
			ch <- line
			return
		}
		s.toAgent(line) // the answer to a relayed elicitation
	case m.isRequest():
		if m.Method == acp.AgentMethodInitialize {
			narrowed, err := s.p.narrowInitialize(m.Params)
			if err != nil {
				s.write(s.editor, message{JSONRPC: "2.0", ID: m.ID, Error: &acp.RequestError{Code: -32602, Message: "chio: " + err.Error()}})
				return
			}
			m.Params = narrowed
			if line, err = json.Marshal(m); err != nil {
				s.write(s.editor, message{JSONRPC: "2.0", ID: m.ID, Error: &acp.RequestError{Code: -32603, Message: "chio: " + err.Error()}})
				return
			}
		}
		s.mu.Lock()
		s.editorCalls[idKey(m.ID)] = m.Method
		s.mu.Unlock()
		s.toAgent(line)
	default:
		s.toAgent(line)
	}
}

// agentExited answers every editor request the agent left unanswered.
func (s *session) agentExited() {
	s.mu.Lock()
	calls := s.editorCalls
	s.editorCalls = map[string]string{}
	s.mu.Unlock()
	for id, method := range calls {
		s.write(s.editor, message{JSONRPC: "2.0", ID: json.RawMessage(id), Error: &acp.RequestError{Code: -32603,
			Message: fmt.Sprintf("chio: the agent exited before answering %s", method)}})
	}
}

func (s *session) toEditor(line []byte) {
	if err := s.editor.write(line); err != nil {
		s.p.log.Warn("acp proxy: writing to the editor", "err", err)
	}
}

func (s *session) toAgent(line []byte) {
	if err := s.agent.write(line); err != nil {
		s.p.log.Warn("acp proxy: writing to the agent", "err", err)
	}
}

// answerAgent answers one agent request with result or rerr.
func (s *session) answerAgent(id json.RawMessage, result any, rerr *acp.RequestError) {
	m := message{JSONRPC: "2.0", ID: id, Error: rerr}
	if rerr == nil {
		raw, err := json.Marshal(result)
		if err != nil {
			m.Error = &acp.RequestError{Code: -32603, Message: "chio: " + err.Error()}
		} else {
			m.Result = raw
		}
	}
	s.write(s.agent, m)
}

func (s *session) write(w *lineWriter, m message) {
	m.JSONRPC = "2.0"
	raw, err := json.Marshal(m)
	if err == nil {
		err = w.write(raw)
	}
	if err != nil {
		s.p.log.Warn("acp proxy: answer not written", "err", err)
	}
}

// lineWriter writes one message per line, one at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) write(line []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
