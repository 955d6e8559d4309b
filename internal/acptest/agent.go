// Package acptest holds a scripted ACP agent and a small ACP editor, both
// built on the official Go SDK (github.com/coder/acp-go-sdk): the two
// real peers the ACP proxy's tests and the README tour put chio between.
package acptest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/acp-go-sdk"
)

// Agent is an ACP agent whose prompt is its script, one step a line:
//
//	caps                  report the client capabilities initialize gave
//	read PATH             fs/read_text_file
//	write PATH TEXT...    fs/write_text_file
//	run CMD ARGS...       terminal/create, wait_for_exit, output, release
//	start CMD ARGS...     terminal/create only (the terminal is kept)
//	wait                  terminal/wait_for_exit on the kept terminal
//	pid                   report the agent's process id
//	crash-waiting         terminal/wait_for_exit on the kept terminal, then Crash (which
//	                      may wait until the editor has the request)
//	ask KIND TITLE...     session/request_permission (options allow, reject)
//	ext METHOD            an extension request to the client
//
// Each step reports "STEP: ok DETAIL" or "STEP: error ERR" as an agent
// message chunk; the turn then ends.
type Agent struct {
	conn *acp.AgentSideConnection
	// Crash ends the agent abruptly (the process exits, or its pipes close).
	Crash func()

	mu   sync.Mutex
	caps acp.ClientCapabilities
	term string
}

var _ acp.Agent = (*Agent)(nil)

// Serve connects a to a client on w (its input) and r (its output).
func (a *Agent) Serve(w io.Writer, r io.Reader) *acp.AgentSideConnection {
	a.conn = acp.NewAgentSideConnection(a, w, r)
	return a.conn
}

func (a *Agent) Initialize(_ context.Context, p acp.InitializeRequest) (acp.InitializeResponse, error) {
	a.mu.Lock()
	a.caps = p.ClientCapabilities
	a.mu.Unlock()
	return acp.InitializeResponse{ProtocolVersion: acp.ProtocolVersionNumber,
		AgentInfo: &acp.Implementation{Name: "chio-acptest-agent", Version: "1.0.0"}}, nil
}

func (a *Agent) Authenticate(context.Context, acp.AuthenticateRequest) (acp.AuthenticateResponse, error) {
	return acp.AuthenticateResponse{}, nil
}
func (a *Agent) Cancel(context.Context, acp.CancelNotification) error { return nil }
func (a *Agent) CloseSession(context.Context, acp.CloseSessionRequest) (acp.CloseSessionResponse, error) {
	return acp.CloseSessionResponse{}, nil
}
func (a *Agent) ListSessions(context.Context, acp.ListSessionsRequest) (acp.ListSessionsResponse, error) {
	return acp.ListSessionsResponse{}, nil
}
func (a *Agent) NewSession(context.Context, acp.NewSessionRequest) (acp.NewSessionResponse, error) {
	return acp.NewSessionResponse{SessionId: "sess-1"}, nil
}
func (a *Agent) ResumeSession(context.Context, acp.ResumeSessionRequest) (acp.ResumeSessionResponse, error) {
	return acp.ResumeSessionResponse{}, nil
}
func (a *Agent) SetSessionConfigOption(context.Context, acp.SetSessionConfigOptionRequest) (acp.SetSessionConfigOptionResponse, error) {
	return acp.SetSessionConfigOptionResponse{}, nil
}
func (a *Agent) SetSessionMode(context.Context, acp.SetSessionModeRequest) (acp.SetSessionModeResponse, error) {
	return acp.SetSessionModeResponse{}, nil
}

// Prompt runs the script in the prompt's text blocks.
func (a *Agent) Prompt(ctx context.Context, p acp.PromptRequest) (acp.PromptResponse, error) {
	var script []string
	for _, b := range p.Prompt {
		if b.Text != nil {
			script = append(script, strings.Split(b.Text.Text, "\n")...)
		}
	}
	for _, line := range script {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		detail, err := a.step(ctx, p.SessionId, f)
		msg := fmt.Sprintf("%s: ok %s", f[0], detail)
		if err != nil {
			msg = fmt.Sprintf("%s: error %v", f[0], err)
		}
		if err := a.conn.SessionUpdate(ctx, acp.SessionNotification{SessionId: p.SessionId, Update: acp.UpdateAgentMessageText(msg + "\n")}); err != nil {
			return acp.PromptResponse{}, err
		}
	}
	return acp.PromptResponse{StopReason: acp.StopReasonEndTurn}, nil
}

func (a *Agent) step(ctx context.Context, sid acp.SessionId, f []string) (string, error) {
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "caps":
		a.mu.Lock()
		c := a.caps
		a.mu.Unlock()
		return fmt.Sprintf("read=%v write=%v terminal=%v", c.Fs.ReadTextFile, c.Fs.WriteTextFile, c.Terminal), nil
	case "read":
		r, err := a.conn.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: sid, Path: arg(1)})
		return strconv.Quote(r.Content) + receipt(r.Meta), err
	case "write":
		r, err := a.conn.WriteTextFile(ctx, acp.WriteTextFileRequest{SessionId: sid, Path: arg(1), Content: strings.Join(f[min(2, len(f)):], " ")})
		return arg(1) + receipt(r.Meta), err
	case "run", "start":
		t, err := a.conn.CreateTerminal(ctx, acp.CreateTerminalRequest{SessionId: sid, Command: arg(1), Args: f[min(2, len(f)):]})
		if err != nil {
			return "", err
		}
		if f[0] == "start" {
			a.mu.Lock()
			a.term = t.TerminalId
			a.mu.Unlock()
			return t.TerminalId, nil
		}
		ex, err := a.conn.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: t.TerminalId})
		if err != nil {
			return "", err
		}
		out, err := a.conn.TerminalOutput(ctx, acp.TerminalOutputRequest{SessionId: sid, TerminalId: t.TerminalId})
		if err != nil {
			return "", err
		}
		if _, err := a.conn.ReleaseTerminal(ctx, acp.ReleaseTerminalRequest{SessionId: sid, TerminalId: t.TerminalId}); err != nil {
			return "", err
		}
		code := -1
		if ex.ExitCode != nil {
			code = *ex.ExitCode
		}
		return fmt.Sprintf("exit=%d output=%q", code, out.Output), nil
	case "pid":
		return strconv.Itoa(os.Getpid()), nil
	case "wait":
		a.mu.Lock()
		term := a.term
		a.mu.Unlock()
		ex, err := a.conn.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: term})
		if err != nil || ex.ExitCode == nil {
			return "", err
		}
		return fmt.Sprintf("exit=%d", *ex.ExitCode), nil
	case "crash-waiting":
		a.mu.Lock()
		term := a.term
		a.mu.Unlock()
		go func() {
			_, _ = a.conn.WaitForTerminalExit(ctx, acp.WaitForTerminalExitRequest{SessionId: sid, TerminalId: term})
		}()
		a.Crash()
		<-ctx.Done()
		return "", ctx.Err()
	case "ask":
		kind := acp.ToolKind(arg(1))
		title := strings.Join(f[min(2, len(f)):], " ")
		r, err := a.conn.RequestPermission(ctx, acp.RequestPermissionRequest{SessionId: sid,
			ToolCall: acp.ToolCallUpdate{ToolCallId: "call-1", Kind: &kind, Title: &title},
			Options: []acp.PermissionOption{{Kind: acp.PermissionOptionKindAllowOnce, Name: "Allow", OptionId: "allow"},
				{Kind: acp.PermissionOptionKindRejectOnce, Name: "Reject", OptionId: "reject"}}})
		if err != nil {
			return "", err
		}
		if r.Outcome.Selected != nil {
			return "selected " + string(r.Outcome.Selected.OptionId), nil
		}
		return "cancelled", nil
	case "ext":
		_, err := a.conn.CallExtension(ctx, arg(1), map[string]any{})
		return arg(1), err
	}
	return "", fmt.Errorf("unknown step %q", f[0])
}

// receipt is " receipt=ID" when the answer's _meta names a chio receipt.
func receipt(meta map[string]any) string {
	if id, ok := meta["chioReceiptId"].(string); ok {
		return " receipt=" + id
	}
	return ""
}

// RunStdio serves an Agent on the process's stdin and stdout until the
// client goes; "crash-waiting" exits the process with status 3.
func RunStdio() {
	a := &Agent{Crash: func() { os.Exit(3) }}
	c := a.Serve(os.Stdout, os.Stdin)
	c.SetLogger(Quiet())
	<-c.Done()
}

// Quiet is a logger for the SDK's connections that keeps only warnings:
// its per-connection notices would fill an editor's log.
func Quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
