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
	"strings"
	"sync"
	"time"

	"github.com/coder/acp-go-sdk"

	"github.com/chio-ledger/chio/edges/acp/internal/linewriter"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/strictjson"
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
	registry *tools.Registry
	dispatch *dispatch.Dispatcher
	tools    *Tools
	token    string
	id       *kernel.Identity
	signer   *dpop.Signer
	log      *slog.Logger
	// writeTimeout bounds one line's write to either side; approvalWait
	// how long a person may take to answer a permission request.
	writeTimeout time.Duration
	approvalWait time.Duration
}

// DefaultApprovalWait is how long the proxy waits, by default, for the
// person at the editor to answer a permission request.
const DefaultApprovalWait = time.Hour

type options struct {
	log          *slog.Logger
	signer       *dpop.Signer
	writeTimeout time.Duration
	approvalWait time.Duration
}

// Option configures a Proxy.
type Option func(*options)

// WithLogger sets the logger (slog.Default otherwise).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithSigner gives the proxy its capability's subject key: every governed
// call then carries a chio.dpop_proof.v1 for that call, signed by it, and
// its receipt records the binding. A capability that needs a proof of
// possession (it can delegate, a grant sets dpop_required, or the kernel
// requires proofs) is refused without one. s must be the signer of the
// proxy's token.
func WithSigner(s *dpop.Signer) Option { return func(o *options) { o.signer = s } }

// WithWriteTimeout bounds the write of one message to the editor or the
// agent (default linewriter.DefaultTimeout, 10 s). A side that stops
// reading then fails that write and every later one to it, rather than
// holding the governed calls waiting on it, and the session's end,
// forever. Non-positive means the default.
func WithWriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// WithApprovalWait bounds how long a permission request waits for the
// person at the editor (default DefaultApprovalWait, at most
// schemas.MaxOutcomeDeadline). Its decision event carries an
// outcome_deadline that long (and a minute to record the answer) after
// it, so the ledger does not end it incomplete at its global
// --incomplete-after while the person still may answer. Non-positive
// means the default.
func WithApprovalWait(d time.Duration) Option { return func(o *options) { o.approvalWait = d } }

// New returns a proxy acting under token, whose governed calls run on t
// (registered in reg, the registry of k and d). A capability the kernel
// refuses is an error: no session could do anything. So is one that needs
// a proof of possession when the proxy has no signer (WithSigner) for it.
func New(k *kernel.Kernel, reg *tools.Registry, d *dispatch.Dispatcher, t *Tools, token string, opts ...Option) (*Proxy, error) {
	o := options{log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	if o.approvalWait <= 0 {
		o.approvalWait = DefaultApprovalWait
	}
	o.approvalWait = min(o.approvalWait, schemas.MaxOutcomeDeadline*time.Second-approvalMargin)
	if e, ok := reg.Tool(ServerID, MethodRead); !ok || e.Server != t {
		return nil, errors.New("acp proxy: the tool server is not registered")
	}
	id, dec := k.Held(token)
	if dec != nil {
		return nil, fmt.Errorf("acp proxy: capability refused at %s: %s", dec.Guard, dec.Reason)
	}
	if o.signer != nil && o.signer.Token() != token {
		return nil, errors.New("acp proxy: the signer is not the proxy capability's (WithSigner needs a signer of the same token)")
	}
	if o.signer == nil {
		// Without a proof the kernel refuses only a token that needs one.
		if _, dec := k.Identify(context.Background(), token, nil); dec != nil {
			if dec.DPoPCheck() == dpop.CheckMissing {
				return nil, fmt.Errorf("acp proxy: capability %s needs a proof of possession of its subject key, "+
					"which the proxy makes for each governed call: give it the subject's key (WithSigner): %s", id.CapabilityID, dec.Reason)
			}
			return nil, fmt.Errorf("acp proxy: capability refused at %s: %s", dec.Guard, dec.Reason)
		}
	}
	return &Proxy{registry: reg, dispatch: d, tools: t, token: token, id: id, signer: o.signer, log: o.log,
		writeTimeout: o.writeTimeout, approvalWait: o.approvalWait}, nil
}

// proof is the proof of possession of a governed call of tool with args:
// a chio.dpop_proof.v1 by the signer, nil without one.
func (p *Proxy) proof(tool string, args json.RawMessage) (*kernel.Proof, error) {
	if p.signer == nil {
		return nil, nil
	}
	tp, err := p.signer.ToolProof(ServerID, tool, args)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(tp)
	if err != nil {
		return nil, err
	}
	return &kernel.Proof{Tool: raw}, nil
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
	s := &session{p: p, ctx: sctx, editor: linewriter.New(editorOut, p.writeTimeout), agent: linewriter.New(agentIn, p.writeTimeout),
		outbound: map[string]*outbound{}, inflight: map[string]bool{}, editorCalls: map[string]string{}, terminals: map[string]string{},
		editorStuck: make(chan struct{})}
	defer s.close()
	defer agentIn.Close()
	if c, ok := editorIn.(io.Closer); ok {
		defer c.Close()
	}
	editorDone := make(chan error, 1)
	agentDone := make(chan error, 1)
	go func() { editorDone <- readLines(editorIn, MaxLineBytes, s.fromEditor, s.editorLineTooLong) }()
	go func() { agentDone <- readLines(agentOut, MaxLineBytes, s.fromAgent, s.agentLineTooLong) }()
	stuck := s.editorStuck
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
		case <-stuck:
			// The editor stopped reading: nothing more reaches it, so it
			// is as gone as one that left.
			p.log.Warn("acp proxy: the editor stopped reading; ending the session")
			cancel(errEditorGone)
			agentIn.Close()
			editorDone, stuck = nil, nil
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

// prefixBytes is how much of a skipped line is kept to find its id.
const prefixBytes = 4 << 10

// readLines calls f with each non-blank line of r until r ends. A line
// longer than limit bytes (not counting its CR LF) is skipped, tooLong
// getting its first bytes, and reading goes on: one oversized message
// must not end the session.
func readLines(r io.Reader, limit int, f func([]byte), tooLong func(prefix []byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var buf, prefix []byte
	skipping := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !skipping && len(buf)+len(chunk) > limit+2 {
			skipping, prefix = true, append(prefix[:0], buf[:min(len(buf), prefixBytes)]...)
			prefix = append(prefix, chunk[:min(len(chunk), prefixBytes-len(prefix))]...)
		}
		if !skipping {
			buf = append(buf, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line := bytes.TrimSpace(buf)
		switch {
		case skipping || len(bytes.TrimRight(buf, "\r\n")) > limit:
			if !skipping {
				prefix = append(prefix[:0], buf[:min(len(buf), prefixBytes)]...)
			}
			tooLong(prefix)
		case len(line) > 0:
			f(append([]byte(nil), line...))
		}
		buf, skipping = buf[:0], false
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// leading reads the id and method of a message from its first bytes, as
// far as they go (JSON-RPC peers write them before params or result), to
// answer a message that cannot be read whole. It finds none in a message
// that repeats a member name, exactly or but for case: which copy a peer
// meant is unknown.
func leading(prefix []byte) (id json.RawMessage, method string) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, ""
	}
	var names []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return id, method
		}
		name, _ := t.(string)
		for _, n := range names {
			if strings.EqualFold(n, name) {
				return nil, ""
			}
		}
		names = append(names, name)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return id, method
		}
		switch t {
		case "id":
			if validID(v) {
				id = v
			}
		case "method":
			_ = json.Unmarshal(v, &method)
		}
	}
	return id, method
}

// session is one editor and one agent.
type session struct {
	p      *Proxy
	ctx    context.Context // ends when either side does
	editor *linewriter.Writer
	agent  *linewriter.Writer
	calls  sync.WaitGroup // governed calls in flight

	mu     sync.Mutex
	closed bool // no governed call starts once set
	nextID uint64
	// outbound: the governed requests forwarded to the editor, by the id
	// the proxy gave them (the agent never chooses what the editor sees).
	outbound map[string]*outbound
	// inflight: the agent's request ids being governed; a reused one is refused.
	inflight map[string]bool
	// editorCalls: the editor's requests the agent has not answered, by
	// id (their methods), answered by the proxy if the agent exits.
	editorCalls map[string]string
	// terminals: the command of each terminal the editor created.
	terminals map[string]string
	// editorStuck is closed once a write to the editor timed out.
	editorStuck chan struct{}
	stuckOnce   sync.Once
}

// wrote notes a failed write to w: a write to the editor that timed out
// ends the session as the editor's leaving does.
func (s *session) wrote(w *linewriter.Writer, err error) {
	if err != nil && w == s.editor && errors.Is(err, linewriter.ErrStuck) {
		s.stuckOnce.Do(func() { close(s.editorStuck) })
	}
}

// outbound is one request forwarded to the editor.
type outbound struct {
	agentID json.RawMessage
	answer  chan *message
}

// close stops new governed calls and waits for those in flight.
func (s *session) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.calls.Wait()
}

// message is a JSON-RPC message. Everything the proxy sends the editor on
// the agent's behalf is built from these parsed fields, never relayed as
// read: the editor must see what the proxy judged.
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

// envelopeMembers are the members a JSON-RPC message may have.
var envelopeMembers = map[string]bool{"jsonrpc": true, "id": true, "method": true, "params": true, "result": true, "error": true}

// parse reads one message strictly: a JSON object strictjson accepts (no
// member repeated, exactly or but for case, at any depth; no nesting past
// strictjson.MaxDepth; valid UTF-8; nothing after it) with only the
// JSON-RPC members, each spelt exactly (encoding/json would match
// "Method" to method, while a peer may read it as another member),
// jsonrpc "2.0", and an id that is a string, an integer or null. Its error
// is a *strictjson.Error when the line is not JSON strictjson accepts.
func parse(line []byte) (*message, error) {
	keys, err := members(line)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if !envelopeMembers[k] {
			return nil, fmt.Errorf("unexpected member %q", schemas.TruncateText(k))
		}
	}
	var m message
	// Read strictly by members: this only decodes it.
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	if m.JSONRPC != "2.0" {
		return nil, errors.New(`jsonrpc must be "2.0"`)
	}
	if m.Method == "" && m.ID == nil {
		return nil, errors.New("neither a method nor an id")
	}
	if m.ID != nil && !validID(m.ID) {
		return nil, errors.New("id must be a string, an integer or null")
	}
	return &m, nil
}

// members lists the member names of the JSON object raw, read with
// strictjson (so no name repeats, exactly or but for case).
func members(raw []byte) ([]string, error) {
	var obj map[string]json.RawMessage
	if err := strictjson.Unmarshal(raw, &obj); err != nil {
		var se *strictjson.Error
		if errors.As(err, &se) {
			return nil, err
		}
		return nil, errors.New("not a JSON object")
	}
	if obj == nil {
		return nil, errors.New("not a JSON object")
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	return keys, nil
}

// parseError is the JSON-RPC error of a line parse refused: -32700 for
// one that is not JSON strictjson accepts, -32600 for JSON that is not a
// JSON-RPC message.
func parseError(err error) func(what string) *acp.RequestError {
	code := -32600
	var se *strictjson.Error
	if errors.As(err, &se) {
		code = -32700
	}
	return func(what string) *acp.RequestError {
		return &acp.RequestError{Code: code, Message: fmt.Sprintf("chio: %s is not a JSON-RPC message: %v", what, err)}
	}
}

// validID: a string, an integer JavaScript holds exactly, or null.
func validID(id json.RawMessage) bool {
	v, err := strictjson.Parse(id)
	if err != nil || len(id) == 0 {
		return false
	}
	switch x := v.(type) {
	case nil, string:
		return true
	case json.Number:
		n, err := x.Int64()
		return err == nil && n >= -(1<<53-1) && n <= 1<<53-1
	}
	return false
}

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

// governed are the methods that become governed calls.
var governed = map[string]bool{
	MethodRead: true, MethodWrite: true, MethodTerminal: true, MethodOutput: true, MethodWait: true,
	MethodKill: true, MethodRelease: true, MethodPermission: true,
}

// fromAgent routes one line the agent wrote. Only session/update, answers
// to the editor's requests, cancellations of the agent's own governed
// requests and governed requests reach the editor.
func (s *session) fromAgent(line []byte) {
	m, err := parse(line)
	if err != nil {
		s.p.log.Warn("acp proxy: the agent wrote a line that is not a JSON-RPC message; dropped", "err", err)
		s.agentUnreadable(line[:min(len(line), prefixBytes)], parseError(err))
		return
	}
	switch {
	case m.isResponse():
		key := idKey(m.ID)
		s.mu.Lock()
		_, asked := s.editorCalls[key]
		delete(s.editorCalls, key)
		s.mu.Unlock()
		if !asked {
			s.p.log.Warn("acp proxy: the agent answered a request the editor did not make; dropped", "id", key)
			return
		}
		s.write(s.editor, message{ID: m.ID, Result: m.Result, Error: m.Error})
	case m.isRequest() && governed[m.Method]:
		if string(m.ID) == "null" {
			s.answerAgent(m.ID, nil, &acp.RequestError{Code: -32600, Message: "chio: a request needs a string or integer id"})
			return
		}
		key := idKey(m.ID)
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return
		case s.inflight[key]:
			s.mu.Unlock()
			s.answerAgent(m.ID, nil, &acp.RequestError{Code: -32600, Message: "chio: a request with this id is already in flight"})
			return
		}
		s.inflight[key] = true
		s.calls.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.calls.Done()
			answer := s.govern(m)
			// The id is free once answered: release it first, so an agent
			// reusing it at once is not refused.
			s.mu.Lock()
			delete(s.inflight, key)
			s.mu.Unlock()
			s.write(s.agent, answer)
		}()
	case m.Method == acp.ClientMethodSessionUpdate && m.isNotification():
		s.write(s.editor, message{Method: m.Method, Params: m.Params})
	case m.Method == methodCancelRequest && m.isNotification():
		s.cancelForAgent(m.Params)
	case m.isRequest():
		s.answerAgent(m.ID, nil, &acp.RequestError{Code: -32601, Message: fmt.Sprintf(
			"chio: %s is not relayed to the editor: the proxy governs fs/*, terminal/* and session/request_permission and refuses other client methods", m.Method),
			Data: map[string]any{"method": m.Method}})
	default:
		s.p.log.Debug("acp proxy: an agent notification not relayed", "method", m.Method)
	}
}

// cancelForAgent passes the agent's $/cancel_request of one of its
// forwarded requests to the editor, under the id the editor knows.
func (s *session) cancelForAgent(params json.RawMessage) {
	var p cancelParams
	if strictjson.Unmarshal(params, &p) != nil || p.RequestID == nil {
		return
	}
	want := idKey(p.RequestID)
	s.mu.Lock()
	var pid string
	for k, o := range s.outbound {
		if idKey(o.agentID) == want {
			pid = k
		}
	}
	s.mu.Unlock()
	if pid != "" {
		s.write(s.editor, message{Method: methodCancelRequest, Params: mustJSON(cancelParams{RequestID: json.RawMessage(pid)})})
	}
}

// fromEditor routes one line the editor wrote.
func (s *session) fromEditor(line []byte) {
	m, err := parse(line)
	if err != nil {
		s.editorUnreadable(line[:min(len(line), prefixBytes)], parseError(err))
		return
	}
	switch {
	case m.isResponse():
		s.mu.Lock()
		o := s.outbound[idKey(m.ID)]
		delete(s.outbound, idKey(m.ID))
		s.mu.Unlock()
		if o == nil {
			s.p.log.Warn("acp proxy: the editor answered a request nobody made; dropped", "id", idKey(m.ID))
			return
		}
		o.answer <- m
	case m.isRequest():
		if m.Method == acp.AgentMethodInitialize {
			narrowed, err := s.p.narrowInitialize(m.Params)
			if err != nil {
				s.write(s.editor, message{ID: m.ID, Error: &acp.RequestError{Code: -32602, Message: "chio: " + err.Error()}})
				return
			}
			m.Params = narrowed
		}
		s.mu.Lock()
		s.editorCalls[idKey(m.ID)] = m.Method
		s.mu.Unlock()
		s.write(s.agent, *m)
	default:
		s.write(s.agent, *m)
	}
}

// tooLongError answers a message the proxy could not read whole.
func tooLongError(what string) *acp.RequestError {
	return &acp.RequestError{Code: -32600, Message: fmt.Sprintf("chio: %s longer than %d bytes was dropped", what, MaxLineBytes)}
}

func (s *session) editorLineTooLong(prefix []byte) { s.editorUnreadable(prefix, tooLongError) }
func (s *session) agentLineTooLong(prefix []byte) {
	s.p.log.Warn("acp proxy: the agent wrote a message longer than the limit; dropped", "limit", MaxLineBytes)
	s.agentUnreadable(prefix, tooLongError)
}

// editorUnreadable answers a line of the editor that was dropped unread
// (prefix is its first bytes; why(what) the error): a request of the
// editor is refused under its id; an answer to a forwarded request fails
// that call (the agent is told); else the editor gets an error without an
// id.
func (s *session) editorUnreadable(prefix []byte, why func(what string) *acp.RequestError) {
	id, method := leading(prefix)
	if id != nil && method == "" {
		s.mu.Lock()
		o := s.outbound[idKey(id)]
		delete(s.outbound, idKey(id))
		s.mu.Unlock()
		if o != nil {
			o.answer <- &message{ID: id, Error: why("the editor's answer")}
			return
		}
	}
	if id == nil || method == "" {
		id = json.RawMessage("null")
	}
	s.write(s.editor, message{ID: id, Error: why("a message")})
}

// agentUnreadable answers a line of the agent that was dropped unread:
// a request of the agent is refused under its id; an answer to an editor
// request is replaced by an error to the editor; else the agent gets an
// error without an id.
func (s *session) agentUnreadable(prefix []byte, why func(what string) *acp.RequestError) {
	id, method := leading(prefix)
	switch {
	case id != nil && method != "":
		s.answerAgent(id, nil, why("the request"))
		return
	case id != nil:
		s.mu.Lock()
		_, asked := s.editorCalls[idKey(id)]
		delete(s.editorCalls, idKey(id))
		s.mu.Unlock()
		if asked {
			s.write(s.editor, message{ID: id, Error: why("the agent's answer")})
			return
		}
	}
	s.answerAgent(json.RawMessage("null"), nil, why("a message"))
}

// agentExited answers every editor request the agent left unanswered.
func (s *session) agentExited() {
	s.mu.Lock()
	calls := s.editorCalls
	s.editorCalls = map[string]string{}
	s.mu.Unlock()
	for id, method := range calls {
		s.write(s.editor, message{ID: json.RawMessage(id), Error: &acp.RequestError{Code: -32603,
			Message: fmt.Sprintf("chio: the agent exited before answering %s", method)}})
	}
}

// answerAgent answers one agent request with result or rerr.
func (s *session) answerAgent(id json.RawMessage, result any, rerr *acp.RequestError) {
	s.write(s.agent, reply(id, result, rerr))
}

// reply is the answer to request id: result, or rerr when not nil.
func reply(id json.RawMessage, result any, rerr *acp.RequestError) message {
	m := message{ID: id, Error: rerr}
	if rerr == nil {
		raw, err := json.Marshal(result)
		if err != nil {
			m.Error = &acp.RequestError{Code: -32603, Message: "chio: " + err.Error()}
		} else {
			m.Result = raw
		}
	}
	return m
}

func (s *session) write(w *linewriter.Writer, m message) {
	m.JSONRPC = "2.0"
	raw, err := json.Marshal(m)
	if err == nil {
		err = w.WriteLine(raw)
		s.wrote(w, err)
	}
	if err != nil {
		s.p.log.Warn("acp proxy: message not written", "err", err)
	}
}
