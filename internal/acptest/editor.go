package acptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/coder/acp-go-sdk"
)

// Editor is a small ACP client: files under Root, terminals as local
// processes, permission answered by Answer (the human), and the agent's
// messages collected.
type Editor struct {
	// Root is the only directory whose files the editor serves.
	Root string
	// Answer picks the human's option id; "" cancels. Nil selects the
	// first allow option.
	Answer func(acp.RequestPermissionRequest) string
	// WaitStarted, if set, receives once per terminal/wait_for_exit the
	// editor is handling.
	WaitStarted chan struct{}

	mu        sync.Mutex
	text      strings.Builder
	calls     []string
	terminals map[string]*terminal
	next      int
}

var _ acp.Client = (*Editor)(nil)

type terminal struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	mu   sync.Mutex
	done chan struct{}
	code int
}

func (t *terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.Write(p)
}

// Connect starts the editor's side of a connection to an agent whose
// stdin is w and stdout r.
func (e *Editor) Connect(w io.Writer, r io.Reader) *acp.ClientSideConnection {
	return acp.NewClientSideConnection(e, w, r)
}

// Capabilities are the client capabilities this editor offers.
func Capabilities() acp.ClientCapabilities {
	return acp.ClientCapabilities{Fs: acp.FileSystemCapabilities{ReadTextFile: true, WriteTextFile: true}, Terminal: true}
}

// Run initializes, opens a session and sends script as one prompt,
// returning what the agent said.
func (e *Editor) Run(ctx context.Context, c *acp.ClientSideConnection, script string) (string, error) {
	if _, err := c.Initialize(ctx, acp.InitializeRequest{ProtocolVersion: acp.ProtocolVersionNumber, ClientCapabilities: Capabilities(),
		ClientInfo: &acp.Implementation{Name: "chio-acptest-editor", Version: "1.0.0"}}); err != nil {
		return "", fmt.Errorf("initialize: %w", err)
	}
	s, err := c.NewSession(ctx, acp.NewSessionRequest{Cwd: e.Root, McpServers: []acp.McpServer{}})
	if err != nil {
		return "", fmt.Errorf("session/new: %w", err)
	}
	if _, err := c.Prompt(ctx, acp.PromptRequest{SessionId: s.SessionId, Prompt: []acp.ContentBlock{acp.TextBlock(script)}}); err != nil {
		return e.Said(), fmt.Errorf("session/prompt: %w", err)
	}
	return e.Said(), nil
}

// Said is what the agent has said so far.
func (e *Editor) Said() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.text.String()
}

// Calls lists the client methods the editor was asked, in order.
func (e *Editor) Calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.calls...)
}

func (e *Editor) called(m string) {
	e.mu.Lock()
	e.calls = append(e.calls, m)
	e.mu.Unlock()
}

// inRoot resolves p, which must be absolute and inside Root.
func (e *Editor) inRoot(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("path must be absolute: %s", p)
	}
	root, err := filepath.Abs(e.Root)
	if err != nil {
		return "", err
	}
	clean := filepath.Clean(p)
	if clean != root && !strings.HasPrefix(clean, root+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is outside the project", p)
	}
	return clean, nil
}

func (e *Editor) ReadTextFile(_ context.Context, p acp.ReadTextFileRequest) (acp.ReadTextFileResponse, error) {
	e.called(acp.ClientMethodFsReadTextFile)
	path, err := e.inRoot(p.Path)
	if err != nil {
		return acp.ReadTextFileResponse{}, err
	}
	b, err := os.ReadFile(path)
	return acp.ReadTextFileResponse{Content: string(b)}, err
}

func (e *Editor) WriteTextFile(_ context.Context, p acp.WriteTextFileRequest) (acp.WriteTextFileResponse, error) {
	e.called(acp.ClientMethodFsWriteTextFile)
	path, err := e.inRoot(p.Path)
	if err != nil {
		return acp.WriteTextFileResponse{}, err
	}
	return acp.WriteTextFileResponse{}, os.WriteFile(path, []byte(p.Content), 0o644)
}

func (e *Editor) RequestPermission(_ context.Context, p acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	e.called(acp.ClientMethodSessionRequestPermission)
	id := ""
	if e.Answer != nil {
		id = e.Answer(p)
	} else {
		for _, o := range p.Options {
			if o.Kind == acp.PermissionOptionKindAllowOnce || o.Kind == acp.PermissionOptionKindAllowAlways {
				id = string(o.OptionId)
				break
			}
		}
	}
	if id == "" {
		return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}, nil
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Selected: &acp.RequestPermissionOutcomeSelected{OptionId: acp.PermissionOptionId(id)}}}, nil
}

func (e *Editor) SessionUpdate(_ context.Context, n acp.SessionNotification) error {
	if c := n.Update.AgentMessageChunk; c != nil && c.Content.Text != nil {
		e.mu.Lock()
		e.text.WriteString(c.Content.Text.Text)
		e.mu.Unlock()
	}
	return nil
}

func (e *Editor) CreateTerminal(_ context.Context, p acp.CreateTerminalRequest) (acp.CreateTerminalResponse, error) {
	e.called(acp.ClientMethodTerminalCreate)
	cmd := exec.Command(p.Command, p.Args...)
	cmd.Dir = e.Root
	if p.Cwd != nil {
		dir, err := e.inRoot(*p.Cwd)
		if err != nil {
			return acp.CreateTerminalResponse{}, err
		}
		cmd.Dir = dir
	}
	t := &terminal{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = t, t
	if err := cmd.Start(); err != nil {
		return acp.CreateTerminalResponse{}, err
	}
	go func() {
		_ = cmd.Wait()
		t.code = cmd.ProcessState.ExitCode()
		close(t.done)
	}()
	e.mu.Lock()
	if e.terminals == nil {
		e.terminals = map[string]*terminal{}
	}
	e.next++
	id := fmt.Sprintf("term-%d", e.next)
	e.terminals[id] = t
	e.mu.Unlock()
	return acp.CreateTerminalResponse{TerminalId: id}, nil
}

func (e *Editor) terminal(id string) (*terminal, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.terminals[id]
	if !ok {
		return nil, fmt.Errorf("no terminal %s", id)
	}
	return t, nil
}

func (e *Editor) TerminalOutput(_ context.Context, p acp.TerminalOutputRequest) (acp.TerminalOutputResponse, error) {
	e.called(acp.ClientMethodTerminalOutput)
	t, err := e.terminal(p.TerminalId)
	if err != nil {
		return acp.TerminalOutputResponse{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return acp.TerminalOutputResponse{Output: t.out.String()}, nil
}

func (e *Editor) WaitForTerminalExit(ctx context.Context, p acp.WaitForTerminalExitRequest) (acp.WaitForTerminalExitResponse, error) {
	e.called(acp.ClientMethodTerminalWaitForExit)
	t, err := e.terminal(p.TerminalId)
	if err != nil {
		return acp.WaitForTerminalExitResponse{}, err
	}
	if e.WaitStarted != nil {
		e.WaitStarted <- struct{}{}
	}
	select {
	case <-t.done:
		code := t.code
		return acp.WaitForTerminalExitResponse{ExitCode: &code}, nil
	case <-ctx.Done():
		return acp.WaitForTerminalExitResponse{}, ctx.Err()
	}
}

func (e *Editor) KillTerminal(_ context.Context, p acp.KillTerminalRequest) (acp.KillTerminalResponse, error) {
	e.called(acp.ClientMethodTerminalKill)
	t, err := e.terminal(p.TerminalId)
	if err != nil {
		return acp.KillTerminalResponse{}, err
	}
	if err := t.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return acp.KillTerminalResponse{}, err
	}
	return acp.KillTerminalResponse{}, nil
}

func (e *Editor) ReleaseTerminal(_ context.Context, p acp.ReleaseTerminalRequest) (acp.ReleaseTerminalResponse, error) {
	e.called(acp.ClientMethodTerminalRelease)
	t, err := e.terminal(p.TerminalId)
	if err != nil {
		return acp.ReleaseTerminalResponse{}, err
	}
	_ = t.cmd.Process.Kill()
	e.mu.Lock()
	delete(e.terminals, p.TerminalId)
	e.mu.Unlock()
	return acp.ReleaseTerminalResponse{}, nil
}

// Close kills every terminal still running.
func (e *Editor) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, t := range e.terminals {
		_ = t.cmd.Process.Kill()
		delete(e.terminals, id)
	}
}
