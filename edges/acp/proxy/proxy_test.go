package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/acptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

var (
	issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agentKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
)

func pub(k ed25519.PrivateKey) string { return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey)) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// grant grants invoke on tool of "acp", with constraints.
func grant(tool string, cs ...schemas.Constraint) schemas.ToolGrant {
	return schemas.ToolGrant{ServerID: ServerID, ToolName: tool, Operations: []schemas.Operation{schemas.OpInvoke}, Constraints: cs}
}

func constraint(t testing.TB, typ string, v any) schemas.Constraint {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return schemas.Constraint{Type: typ, Value: raw}
}

type fixture struct {
	js    jetstream.JetStream
	proxy *Proxy
	root  string
}

// start runs a proxy under a root capability with grants, on a real
// embedded JetStream, kernel and dispatcher.
func start(t testing.TB, record *kernel.RecordConfig, grants ...schemas.ToolGrant) *fixture {
	t.Helper()
	e := newEnv(t, record)
	p, err := e.proxy(e.token(t, grants...), WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	return e.fixture(t, p)
}

// env is a real embedded JetStream, kernel and dispatcher with the
// proxy's tool server registered.
type env struct {
	js  jetstream.JetStream
	k   *kernel.Kernel
	reg *tools.Registry
	d   *dispatch.Dispatcher
	tl  *Tools
}

func newEnv(t testing.TB, record *kernel.RecordConfig) *env {
	t.Helper()
	_, _, js := natstest.Start(t)
	reg := tools.NewRegistry()
	tl := NewTools()
	if err := reg.Register(tl); err != nil {
		t.Fatal(err)
	}
	policy, err := kernel.NewPolicy(kernel.Policy{TrustedIssuers: []string{pub(issuerKey)}, Record: record})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k, err := kernel.New(ctx, js, policy, kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	d, err := dispatch.New(ctx, js, k, reg, "acp-proxy-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	return &env{js: js, k: k, reg: reg, d: d, tl: tl}
}

// token is the editor's capability: grants, for agentKey, for an hour.
func (e *env) token(t testing.TB, grants ...schemas.ToolGrant) string {
	t.Helper()
	now := time.Now()
	tok, err := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{ID: "cap-editor", Issuer: pub(issuerKey), Subject: pub(agentKey),
		Scope: schemas.Scope{Grants: grants}, IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (e *env) proxy(token string, opts ...Option) (*Proxy, error) {
	return New(e.k, e.reg, e.d, e.tl, token, opts...)
}

// fixture is p with a root directory holding a.txt.
func (e *env) fixture(t testing.TB, p *Proxy) *fixture {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("alpha"), 0o644); err != nil {
		t.Fatal(err)
	}
	return &fixture{js: e.js, proxy: p, root: root}
}

// wired is an editor and an agent, both on the official SDK, with the
// proxy between them over pipes.
type wired struct {
	editor *acptest.Editor
	conn   *acp.ClientSideConnection
	agent  *acptest.Agent
	served chan error
	// closeEditor disconnects the editor; the agent's pipes close when
	// its connection ends, as a process exits when its stdin does.
	closeEditor func()
}

func (f *fixture) connect(t *testing.T, ed *acptest.Editor) *wired {
	t.Helper()
	if ed.Root == "" {
		ed.Root = f.root
	}
	t.Cleanup(ed.Close)
	edR, edW := io.Pipe() // editor → proxy
	peR, peW := io.Pipe() // proxy → editor
	paR, paW := io.Pipe() // proxy → agent
	apR, apW := io.Pipe() // agent → proxy
	ag := &acptest.Agent{}
	ag.Crash = func() { apW.Close(); paR.Close() }
	ac := ag.Serve(apW, paR)
	ac.SetLogger(quiet)
	go func() { <-ac.Done(); apW.Close() }()
	s := &wired{editor: ed, agent: ag, served: make(chan error, 1),
		closeEditor: func() { edW.Close(); peR.Close() }}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { s.served <- f.proxy.Serve(ctx, edR, peW, paW, apR) }()
	s.conn = ed.Connect(edW, peR)
	s.conn.SetLogger(quiet)
	t.Cleanup(func() { s.closeEditor() })
	return s
}

// run sends script as one prompt and returns the agent's report lines.
func (s *wired) run(t *testing.T, script ...string) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	said, err := s.editor.Run(ctx, s.conn, strings.Join(script, "\n"))
	if err != nil {
		t.Fatalf("%v (agent said %q)", err, said)
	}
	return lines(said)
}

// lines groups the agent's report lines by step.
func lines(said string) map[string][]string {
	out := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(said), "\n") {
		if step, rest, ok := strings.Cut(l, ": "); ok {
			out[step] = append(out[step], rest)
		}
	}
	return out
}

// byTool is the session's decision events by tool, in receipt order.
func byTool(t *testing.T, js jetstream.JetStream) map[string][]schemas.DecisionEvent {
	t.Helper()
	out := map[string][]schemas.DecisionEvent{}
	for _, d := range natstest.Decisions(t, js) {
		out[d.ToolName] = append(out[d.ToolName], d)
	}
	for _, ds := range out {
		slices.SortFunc(ds, func(a, b schemas.DecisionEvent) int { return strings.Compare(a.ReceiptID, b.ReceiptID) })
	}
	return out
}

type meta struct {
	Protocol string `json:"protocol"`
	ACP      struct {
		SessionID    string `json:"session_id"`
		Method       string `json:"method"`
		PermissionBy string `json:"permission_by"`
	} `json:"acp"`
	Permission struct {
		AnsweredBy string `json:"answered_by"`
		Outcome    string `json:"outcome"`
		OptionID   string `json:"option_id"`
		OptionKind string `json:"option_kind"`
	} `json:"permission"`
}

func metaOf(t *testing.T, raw json.RawMessage) meta {
	t.Helper()
	var m meta
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("metadata %s: %v", raw, err)
		}
	}
	return m
}

func count(calls []string, m string) int {
	n := 0
	for _, c := range calls {
		if c == m {
			n++
		}
	}
	return n
}

// TestGovernedSession runs a session through the proxy: allowed reads,
// writes and commands reach the editor with receipts; a forbidden path, a
// command outside the grant's constraint and an ungoverned extension
// never reach it; a permission request goes to the human, whose answer
// the receipt records.
func TestGovernedSession(t *testing.T) {
	f := start(t, nil,
		grant("*"),
		grant(MethodWrite, constraint(t, "prefix", map[string]string{"pointer": "/path", "prefix": ""})),
		grant(MethodTerminal, constraint(t, "one_of", map[string]any{"pointer": "/command", "values": []string{"echo"}})))
	s := f.connect(t, &acptest.Editor{})
	a, b := filepath.Join(f.root, "a.txt"), filepath.Join(f.root, "b.txt")
	got := s.run(t,
		"caps",
		"read "+a,
		"write "+b+" hello there",
		"run echo hi",
		"run ls /",
		"read /etc/passwd",
		"ask edit Modify the config",
		"ext _zed/open",
	)
	want := map[string][]string{
		"caps":  {"ok read=true write=true terminal=true"},
		"read":  {`ok "alpha" receipt=`, "error"},
		"write": {"ok " + b + " receipt="},
		"run":   {`ok exit=0 output="hi\n"`, "error"},
		"ask":   {"ok selected allow"},
		"ext":   {"error"},
	}
	for step, ws := range want {
		if len(got[step]) != len(ws) {
			t.Fatalf("%s: %q, want %q", step, got[step], ws)
		}
		for i, w := range ws {
			if !strings.HasPrefix(got[step][i], w) {
				t.Errorf("%s #%d: %q, want %q...", step, i, got[step][i], w)
			}
		}
	}
	for _, denied := range []string{got["run"][1], got["read"][1]} {
		if !strings.Contains(denied, `"code":-32002`) || !strings.Contains(denied, "receiptId") {
			t.Errorf("a denied call's error: %s", denied)
		}
	}
	if !strings.Contains(got["ext"][0], "-32601") {
		t.Errorf("extension: %s", got["ext"][0])
	}
	if b, err := os.ReadFile(b); err != nil || string(b) != "hello there" {
		t.Fatalf("b.txt: %q %v", b, err)
	}
	calls := s.editor.Calls()
	if count(calls, MethodRead) != 1 || count(calls, MethodTerminal) != 1 || count(calls, MethodPermission) != 1 {
		t.Fatalf("the editor was asked %v: a denied call reached it", calls)
	}

	ds, outs := byTool(t, f.js), natstest.Outcomes(t, f.js)
	verdicts := func(tool string) []string {
		var v []string
		for _, d := range ds[tool] {
			v = append(v, string(d.Decision.Verdict))
		}
		return v
	}
	for tool, want := range map[string][]string{
		MethodRead: {"allow", "deny"}, MethodWrite: {"allow"}, MethodTerminal: {"allow", "deny"},
		MethodWait: {"allow"}, MethodOutput: {"allow"}, MethodRelease: {"allow"}, MethodPermission: {"allow"},
	} {
		if got := verdicts(tool); !slices.Equal(got, want) {
			t.Errorf("%s: verdicts %v, want %v", tool, got, want)
		}
	}
	if d := ds[MethodRead][1]; d.Decision.Guard != "PathGuard" {
		t.Errorf("/etc/passwd denied by %q: %s", d.Decision.Guard, d.Decision.Reason)
	}
	for tool, list := range ds {
		for _, d := range list {
			m := metaOf(t, d.Metadata)
			if m.Protocol != "acp" || m.ACP.SessionID != "sess-1" || m.ACP.Method != tool || d.ToolServer != ServerID {
				t.Errorf("%s: metadata %s", tool, d.Metadata)
			}
			if _, ok := outs[d.ReceiptID]; ok != (d.Decision.Verdict == schemas.VerdictAllow) {
				t.Errorf("%s %s: outcome present %v", tool, d.Decision.Verdict, ok)
			}
		}
	}
	var w map[string]any
	_ = json.Unmarshal(ds[MethodWrite][0].Parameters, &w)
	if w["path"] != b || w["contentSha256"] != schemas.SHA256Hex([]byte("hello there")) || w["content"] != nil {
		t.Errorf("write arguments %s", ds[MethodWrite][0].Parameters)
	}
	var wait map[string]any
	_ = json.Unmarshal(ds[MethodWait][0].Parameters, &wait)
	if wait["command"] != "echo" {
		t.Errorf("wait_for_exit arguments %s: no command", ds[MethodWait][0].Parameters)
	}
	perm := ds[MethodPermission][0]
	pm := metaOf(t, perm.Metadata)
	om := metaOf(t, outs[perm.ReceiptID].Metadata)
	if pm.ACP.PermissionBy != byHuman || om.Permission.AnsweredBy != byHuman || om.Permission.OptionID != "allow" || om.Permission.OptionKind != "allow_once" {
		t.Errorf("permission: decision %s, outcome %s", perm.Metadata, outs[perm.ReceiptID].Metadata)
	}
}

// TestPermissionAnswers: a root grant naming session/request_permission
// answers by policy (allow when the kernel allows, a reject when its
// constraint fails) without asking the human; without it the human
// answers, and a rejection is recorded as the human's.
func TestPermissionAnswers(t *testing.T) {
	t.Run("policy", func(t *testing.T) {
		f := start(t, nil, grant(MethodPermission, constraint(t, "one_of", map[string]any{"pointer": "/toolCall/kind", "values": []string{"read"}})))
		s := f.connect(t, &acptest.Editor{})
		got := s.run(t, "ask read look at a file", "ask execute rm -rf /")
		if !slices.Equal(got["ask"], []string{"ok selected allow", "ok selected reject"}) {
			t.Fatalf("answers %q", got["ask"])
		}
		if n := count(s.editor.Calls(), MethodPermission); n != 0 {
			t.Fatalf("the human was asked %d times", n)
		}
		ds, outs := byTool(t, f.js)[MethodPermission], natstest.Outcomes(t, f.js)
		if len(ds) != 2 || ds[0].Decision.Verdict != schemas.VerdictAllow || ds[1].Decision.Verdict != schemas.VerdictDeny {
			t.Fatalf("decisions %+v", ds)
		}
		if om := metaOf(t, outs[ds[0].ReceiptID].Metadata); om.Permission.AnsweredBy != byPolicy || om.Permission.OptionID != "allow" {
			t.Fatalf("outcome metadata %s", outs[ds[0].ReceiptID].Metadata)
		}
		if pm := metaOf(t, ds[1].Metadata); pm.ACP.PermissionBy != byPolicy {
			t.Fatalf("deny metadata %s", ds[1].Metadata)
		}
	})
	t.Run("human rejects", func(t *testing.T) {
		f := start(t, nil, grant("*"))
		s := f.connect(t, &acptest.Editor{Answer: func(acp.RequestPermissionRequest) string { return "reject" }})
		got := s.run(t, "ask edit change it")
		if !slices.Equal(got["ask"], []string{"ok selected reject"}) || count(s.editor.Calls(), MethodPermission) != 1 {
			t.Fatalf("answers %q, editor %v", got["ask"], s.editor.Calls())
		}
		d := byTool(t, f.js)[MethodPermission][0]
		om := metaOf(t, natstest.Outcomes(t, f.js)[d.ReceiptID].Metadata)
		if om.Permission.AnsweredBy != byHuman || om.Permission.OptionKind != "reject_once" {
			t.Fatalf("outcome metadata %+v", om.Permission)
		}
	})
	t.Run("no grant", func(t *testing.T) {
		f := start(t, nil, grant(MethodRead))
		s := f.connect(t, &acptest.Editor{})
		got := s.run(t, "ask edit change it")
		if !slices.Equal(got["ask"], []string{"ok selected reject"}) || count(s.editor.Calls(), MethodPermission) != 0 {
			t.Fatalf("answers %q, editor %v", got["ask"], s.editor.Calls())
		}
		if d := byTool(t, f.js)[MethodPermission]; len(d) != 1 || d[0].Decision.Verdict != schemas.VerdictDeny {
			t.Fatalf("decisions %+v", d)
		}
	})
}

// TestCapabilitiesNarrowed: the agent is told only of the client
// capabilities the capability grants at all.
func TestCapabilitiesNarrowed(t *testing.T) {
	cases := []struct {
		name   string
		grants []schemas.ToolGrant
		want   string
	}{
		{"read only", []schemas.ToolGrant{grant(MethodRead)}, "ok read=true write=false terminal=false"},
		{"wildcard", []schemas.ToolGrant{grant("*")}, "ok read=true write=false terminal=false"},
		{"named", []schemas.ToolGrant{grant("*"), grant(MethodWrite), grant(MethodTerminal)}, "ok read=true write=true terminal=true"},
		{"terminal only", []schemas.ToolGrant{grant(MethodTerminal)}, "ok read=false write=false terminal=true"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t, nil, tc.grants...)
			got := f.connect(t, &acptest.Editor{}).run(t, "caps")
			if !slices.Equal(got["caps"], []string{tc.want}) {
				t.Fatalf("caps %q, want %q", got["caps"], tc.want)
			}
		})
	}
}

// TestHashedArguments: a policy's record.hash_arguments keeps the path's
// and command's hashes in the receipt while the guards see them as sent.
func TestHashedArguments(t *testing.T) {
	f := start(t, &kernel.RecordConfig{HashArguments: []string{"path", "command"}}, grant("*"), grant(MethodTerminal))
	s := f.connect(t, &acptest.Editor{})
	a := filepath.Join(f.root, "a.txt")
	got := s.run(t, "read "+a, "read /etc/shadow", "run echo x")
	if !strings.HasPrefix(got["read"][0], `ok "alpha" receipt=`) || !strings.HasPrefix(got["read"][1], "error") || !strings.HasPrefix(got["run"][0], "ok exit=0") {
		t.Fatalf("steps %q", got)
	}
	ds := byTool(t, f.js)
	for _, c := range []struct {
		d         schemas.DecisionEvent
		key, want string
	}{
		{ds[MethodRead][0], "path", a}, {ds[MethodRead][1], "path", "/etc/shadow"},
		{ds[MethodTerminal][0], "command", "echo"}, {ds[MethodWait][0], "command", "echo"},
	} {
		var p map[string]any
		_ = json.Unmarshal(c.d.Parameters, &p)
		if p[c.key] != kernel.HashedPrefix+schemas.SHA256Hex([]byte(c.want)) {
			t.Errorf("%s %s recorded as %v", c.d.ToolName, c.key, p[c.key])
		}
	}
	if ds[MethodRead][1].Decision.Guard != "PathGuard" {
		t.Errorf("the hashed path escaped the path guard: %+v", ds[MethodRead][1].Decision)
	}
}

// TestAgentCrashMidCall: the agent dies while the editor holds its
// terminal/wait_for_exit. The call has its durable allow decision and no
// outcome, so the ledger closes it as incomplete; the editor's pending
// prompt is answered with an error, and the proxy reports the exit.
func TestAgentCrashMidCall(t *testing.T) {
	f := start(t, nil, grant("*"), grant(MethodTerminal))
	ed := &acptest.Editor{WaitStarted: make(chan struct{}, 1)}
	s := f.connect(t, ed)
	crash := s.agent.Crash
	s.agent.Crash = func() { <-ed.WaitStarted; crash() }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := ed.Run(ctx, s.conn, "start sleep 30\ncrash-waiting")
	if err == nil || !strings.Contains(err.Error(), "agent exited") {
		t.Fatalf("prompt: %v", err)
	}
	if err := <-s.served; !errors.Is(err, ErrAgentExited) {
		t.Fatalf("serve: %v", err)
	}
	wait := byTool(t, f.js)[MethodWait]
	if len(wait) != 1 || wait[0].Decision.Verdict != schemas.VerdictAllow {
		t.Fatalf("wait_for_exit decisions %+v", wait)
	}
	if o, ok := natstest.Outcomes(t, f.js)[wait[0].ReceiptID]; ok {
		t.Fatalf("a cut-off call has an outcome: %+v", o)
	}
}

// TestEditorDisconnect: the editor goes away while it holds a request;
// the call is left without an outcome (incomplete), the agent's input
// ends, and the proxy returns once the agent has.
func TestEditorDisconnect(t *testing.T) {
	f := start(t, nil, grant("*"), grant(MethodTerminal))
	ed := &acptest.Editor{WaitStarted: make(chan struct{}, 1)}
	s := f.connect(t, ed)
	s.agent.Crash = func() {} // the agent stays; the editor leaves
	go func() { <-ed.WaitStarted; s.closeEditor() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := ed.Run(ctx, s.conn, "start sleep 30\ncrash-waiting"); err == nil {
		t.Fatal("the prompt of a disconnected editor succeeded")
	}
	if err := <-s.served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	wait := byTool(t, f.js)[MethodWait]
	if len(wait) != 1 {
		t.Fatalf("wait_for_exit decisions %+v", wait)
	}
	if o, ok := natstest.Outcomes(t, f.js)[wait[0].ReceiptID]; ok {
		t.Fatalf("a cut-off call has an outcome: %+v", o)
	}
}

// TestBadInput: malformed governed requests are refused with -32602 and
// no decision; lines that are not JSON are dropped and answered with
// -32700 (without an id) to the side that wrote them; nothing reaches the
// other side.
func TestBadInput(t *testing.T) {
	f := start(t, nil, grant("*"))
	edR, edW := io.Pipe()
	peR, peW := io.Pipe()
	paR, paW := io.Pipe()
	apR, apW := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- f.proxy.Serve(context.Background(), edR, peW, paW, apR) }()
	toAgent, toEditor := bufio.NewScanner(paR), bufio.NewScanner(peR)
	answer := func(sc *bufio.Scanner) map[string]any {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("no answer: %v", sc.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", sc.Bytes(), err)
		}
		return m
	}
	code := func(m map[string]any) float64 {
		e, _ := m["error"].(map[string]any)
		c, _ := e["code"].(float64)
		return c
	}
	for _, tc := range []struct{ line string }{
		{`{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"sessionId":"s"}}`},
		{`{"jsonrpc":"2.0","id":2,"method":"fs/read_text_file","params":["s","/etc/hosts"]}`},
		{`{"jsonrpc":"2.0","id":3,"method":"terminal/output","params":{"terminalId":"t1"}}`},
		{`{"jsonrpc":"2.0","id":4,"method":"session/request_permission","params":{"sessionId":"s","options":7}}`},
	} {
		if _, err := apW.Write([]byte("not json\n" + tc.line + "\n")); err != nil {
			t.Fatal(err)
		}
		if m := answer(toAgent); code(m) != -32700 || m["id"] != nil {
			t.Errorf("agent garbage: %v", m)
		}
		if m := answer(toAgent); code(m) != -32602 {
			t.Errorf("%s: %v", tc.line, m)
		}
	}
	if _, err := edW.Write([]byte("{oops\n")); err != nil {
		t.Fatal(err)
	}
	if m := answer(toEditor); code(m) != -32700 {
		t.Errorf("editor garbage: %v", m)
	}
	if _, err := edW.Write([]byte(`{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"clientCapabilities":"all"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if m := answer(toEditor); code(m) != -32602 {
		t.Errorf("bad initialize: %v", m)
	}
	if d := natstest.Decisions(t, f.js); len(d) != 0 {
		t.Fatalf("bad input made decisions: %v", d)
	}
	apW.Close()
	if err := <-served; !errors.Is(err, ErrAgentExited) {
		t.Fatalf("serve: %v", err)
	}
}

// raw is a proxy between two raw JSON-RPC line peers: the test writes the
// agent's and the editor's lines itself and reads, byte for byte, what
// each side is sent.
type raw struct {
	t               *testing.T
	agentW, editorW io.WriteCloser
	toAgent         *bufio.Scanner
	toEditor        *bufio.Scanner
	served          chan error
}

func (f *fixture) raw(t *testing.T) *raw {
	edR, edW := io.Pipe()
	peR, peW := io.Pipe()
	paR, paW := io.Pipe()
	apR, apW := io.Pipe()
	r := &raw{t: t, agentW: apW, editorW: edW, toAgent: bufio.NewScanner(paR), toEditor: bufio.NewScanner(peR), served: make(chan error, 1)}
	r.toAgent.Buffer(nil, MaxLineBytes)
	r.toEditor.Buffer(nil, MaxLineBytes)
	go func() { r.served <- f.proxy.Serve(context.Background(), edR, peW, paW, apR) }()
	t.Cleanup(func() { apW.Close(); edW.Close(); paR.Close(); peR.Close() })
	return r
}

func (r *raw) agent(line string)  { r.write(r.agentW, line) }
func (r *raw) editor(line string) { r.write(r.editorW, line) }
func (r *raw) write(w io.Writer, line string) {
	r.t.Helper()
	if _, err := io.WriteString(w, line+"\n"); err != nil {
		r.t.Fatal(err)
	}
}

// next is the next line sent to a side, decoded.
func (r *raw) next(sc *bufio.Scanner) (string, map[string]any) {
	r.t.Helper()
	if !sc.Scan() {
		r.t.Fatalf("nothing more was sent: %v", sc.Err())
	}
	var m map[string]any
	if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
		r.t.Fatalf("%s: %v", sc.Bytes(), err)
	}
	return sc.Text(), m
}

func errCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

// TestHostileAgent: lines an agent could craft to get a request to the
// editor without a decision, or with a decision on other arguments, are
// refused (-32700 for a line strictjson refuses, -32600 for JSON that is
// not a JSON-RPC message, under the request's id when it can be told);
// the editor only ever sees what the proxy judged, under ids the proxy
// chose. Each case ends with a good read: the first line the editor then
// sees must be that read, so nothing else reached it.
func TestHostileAgent(t *testing.T) {
	f := start(t, nil, grant("*"), grant(MethodPermission))
	a := filepath.Join(f.root, "a.txt")
	good := func(id int) string {
		return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`
	}
	cases := []struct {
		name, line string
		answer     float64 // the agent's error code, 0 for no answer
	}{
		{"case-variant method", `{"jsonrpc":"2.0","id":5,"method":"fs/write_text_file","params":{"sessionId":"s","path":"` + a + `","content":"x"},"Method":"session/update"}`, -32700},
		{"response-shaped request", `{"jsonrpc":"2.0","id":5,"result":{},"METHOD":"fs/write_text_file","params":{"sessionId":"s","path":"` + a + `","content":"x"}}`, -32600},
		{"repeated member", `{"jsonrpc":"2.0","id":5,"method":"session/update","method":"fs/write_text_file","params":{}}`, -32700},
		{"case-variant param", `{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/etc/shadow","Path":"` + a + `"}}`, -32700},
		{"governed notification", `{"jsonrpc":"2.0","method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`, 0},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`, -32600},
		{"object id", `{"jsonrpc":"2.0","id":{"x":1},"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`, -32600},
		{"answer to nothing", `{"jsonrpc":"2.0","id":77,"result":{"content":"forged"}}`, 0},
		{"extension", `{"jsonrpc":"2.0","id":5,"method":"_zed/run","params":{}}`, -32601},
		{"elicitation", `{"jsonrpc":"2.0","id":5,"method":"elicitation/create","params":{"sessionId":"s","mode":"url","url":"https://evil.example"}}`, -32601},
		{"oversized line", `{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + strings.Repeat("x", MaxLineBytes) + `"}}`, -32600},
	}
	r := f.raw(t)
	for i, tc := range cases {
		r.agent(tc.line)
		if tc.answer != 0 {
			if _, m := r.next(r.toAgent); errCode(m) != tc.answer {
				t.Fatalf("%s: answered %v, want %v", tc.name, m, tc.answer)
			}
		}
		id := 100 + i
		r.agent(good(id))
		line, m := r.next(r.toEditor)
		if m["method"] != MethodRead || !strings.Contains(line, `"path":"`+a+`"`) {
			t.Fatalf("%s: the editor was sent %s", tc.name, line)
		}
		pid, _ := m["id"].(string)
		if !strings.HasPrefix(pid, "chio-") {
			t.Fatalf("%s: the editor saw the agent's id: %s", tc.name, line)
		}
		// A forged answer under the agent's own id is not taken for the editor's.
		r.editor(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"result":{"content":"forged"}}`)
		r.editor(`{"jsonrpc":"2.0","id":"` + pid + `","result":{"content":"alpha"}}`)
		if line, m := r.next(r.toAgent); m["id"] != float64(id) || !strings.Contains(line, `"content":"alpha"`) || !strings.Contains(line, "chioReceiptId") {
			t.Fatalf("%s: the agent got %s", tc.name, line)
		}
	}
	ds := natstest.Decisions(t, f.js)
	if len(ds) != len(cases) {
		t.Fatalf("%d decisions for %d good reads", len(ds), len(cases))
	}
	for _, d := range ds {
		var p map[string]any
		_ = json.Unmarshal(d.Parameters, &p)
		if d.ToolName != MethodRead || p["path"] != a {
			t.Fatalf("decision %s %s", d.ToolName, d.Parameters)
		}
	}

	// Two requests under one id: the second is refused while the first is in flight.
	r.agent(good(300))
	_, first := r.next(r.toEditor)
	r.agent(good(300))
	if _, m := r.next(r.toAgent); errCode(m) != -32600 {
		t.Fatalf("a reused id: %v", m)
	}
	// The agent cancels its request: the editor is asked under its own id.
	r.agent(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":300}}`)
	if _, m := r.next(r.toEditor); m["method"] != methodCancelRequest || m["params"].(map[string]any)["requestId"] != first["id"] {
		t.Fatalf("cancel: %v", m)
	}
	r.editor(`{"jsonrpc":"2.0","id":"` + first["id"].(string) + `","error":{"code":-32800,"message":"Request cancelled"}}`)
	if _, m := r.next(r.toAgent); errCode(m) != -32800 {
		t.Fatalf("cancelled: %v", m)
	}

	// The policy never picks allow_always: with no allow_once it cancels.
	r.agent(`{"jsonrpc":"2.0","id":400,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[{"optionId":"always","name":"Always","kind":"allow_always"}]}}`)
	if line, m := r.next(r.toAgent); !strings.Contains(line, `"outcome":"cancelled"`) {
		t.Fatalf("permission: %v", m)
	}
}

// TestReadLinesLimit: the limit counts a line without its line end; a
// longer line is skipped whole (its first bytes reported) and the next
// one is read.
func TestReadLinesLimit(t *testing.T) {
	const limit = 10
	ok, long := strings.Repeat("a", limit), strings.Repeat("b", limit+1)
	cases := []struct {
		name, in string
		lines    []string
		skipped  int
	}{
		{"at the limit", ok + "\nnext\n", []string{ok, "next"}, 0},
		{"at the limit, CR LF", ok + "\r\nnext\r\n", []string{ok, "next"}, 0},
		{"at the limit, no line end", ok, []string{ok}, 0},
		{"over the limit", long + "\nnext\n", []string{"next"}, 1},
		{"over the limit, no line end", "first\n" + long, []string{"first"}, 1},
		{"far over, across buffer fills", strings.Repeat("c", 200<<10) + "\n" + ok + "\n", []string{ok}, 1},
		{"blank lines", "\n \n" + ok + "\n", []string{ok}, 0},
	}
	for _, tc := range cases {
		var got []string
		skipped := 0
		err := readLines(strings.NewReader(tc.in), limit, func(l []byte) { got = append(got, string(l)) }, func(p []byte) {
			skipped++
			if len(p) == 0 || len(p) > prefixBytes {
				t.Errorf("%s: prefix of %d bytes", tc.name, len(p))
			}
		})
		if err != nil || !slices.Equal(got, tc.lines) || skipped != tc.skipped {
			t.Errorf("%s: lines %q, skipped %d, %v; want %q, %d", tc.name, got, skipped, err, tc.lines, tc.skipped)
		}
	}
}

// TestRelayedAnswers: the editor's error reaches the agent as an error
// alone, naming the receipt; an answer too long to read fails the call
// instead of leaving it waiting; an id is free again once answered;
// initialize is narrowed whatever the case of its names.
func TestRelayedAnswers(t *testing.T) {
	f := start(t, nil, grant(MethodRead))
	a := filepath.Join(f.root, "a.txt")
	read := func(id int) string {
		return `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`
	}
	r := f.raw(t)

	r.editor(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"ClientCapabilities":{"FS":{"ReadTextFile":true,"writeTextFile":true},"Terminal":true,"Elicitation":{"form":{}}}}}`)
	line, _ := r.next(r.toAgent)
	if !strings.Contains(line, `"ReadTextFile":true`) || !strings.Contains(line, `"writeTextFile":false`) ||
		!strings.Contains(line, `"Terminal":false`) || strings.Contains(line, "Elicitation") {
		t.Fatalf("initialize reached the agent as %s", line)
	}

	r.agent(read(1))
	_, fwd := r.next(r.toEditor)
	r.editor(`{"jsonrpc":"2.0","id":"` + fwd["id"].(string) + `","error":{"code":-32000,"message":"no such file"}}`)
	_, m := r.next(r.toAgent)
	if _, both := m["result"]; both || errCode(m) != -32000 || m["error"].(map[string]any)["data"].(map[string]any)["chioReceiptId"] == nil {
		t.Fatalf("the editor's error reached the agent as %v", m)
	}

	// The same id at once: it was answered, so it is free.
	r.agent(read(1))
	_, fwd = r.next(r.toEditor)
	r.editor(`{"jsonrpc":"2.0","id":"` + fwd["id"].(string) + `","result":{"content":"` + strings.Repeat("z", MaxLineBytes) + `"}}`)
	if _, m := r.next(r.toAgent); errCode(m) != -32600 || m["id"] != float64(1) {
		t.Fatalf("an answer too long: %v", m)
	}
	outs := natstest.Outcomes(t, f.js)
	failed := 0
	for _, o := range outs {
		if o.Outcome == schemas.OutcomeFailed {
			failed++
		}
	}
	if len(outs) != 2 || failed != 2 {
		t.Fatalf("outcomes %+v", outs)
	}
}
