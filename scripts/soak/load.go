package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/google/uuid"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// callTimeout bounds one client call; a call that takes longer is an error.
const callTimeout = 30 * time.Second

// An operation is one unit of the mix: one or two client calls.
type operation struct {
	name   string
	weight int
	run    func(c *clients, ctx context.Context, seq uint64) error
}

// mix is the load's operations and their shares. A2A gets about half the
// calls (four kinds), the other surfaces a sixth each. earlyCancel cancels
// long-running tasks right after a returnImmediately send instead of once
// they are working.
func mix(earlyCancel bool) []operation {
	cancel := operation{"a2a.cancel", 1, (*clients).a2aCancel}
	if earlyCancel {
		cancel = operation{"a2a.cancel-early", 1, (*clients).a2aCancelEarly}
	}
	return []operation{
		{"a2a.send", 3, (*clients).a2aSend},
		{"a2a.stream", 3, (*clients).a2aStream},
		cancel,
		{"a2a.resubscribe", 1, (*clients).a2aResubscribe},
		{"openai", 4, (*clients).openaiCall},
		{"mcp", 4, (*clients).mcpCall},
		{"acp", 4, (*clients).acpCall},
	}
}

// schedule is the deterministic round of operation indexes the weights
// make, interleaved so that each surface is spread over the round.
func schedule(ops []operation) []int {
	var round []int
	left := make([]int, len(ops))
	total := 0
	for i, o := range ops {
		left[i] = o.weight
		total += o.weight
	}
	for len(round) < total {
		for i := range ops {
			if left[i] > 0 {
				round = append(round, i)
				left[i]--
			}
		}
	}
	return round
}

// bearer adds a capability to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// clients are the surfaces' SDK clients, shared by every operation.
type clients struct {
	base string
	tok  string
	rec  *recorder
	hc   *http.Client // HTTP/1.1 keep-alive, the capability on every request

	a2a    *a2aclient.Client
	openai oa.Client
	mcp    *sdk.ClientSession
	mcpCl  *sdk.Client
	acp    *acpsdk.ClientSideConnection
	acpT   *httpLines
	mcpN   atomic.Uint64
	oaN    atomic.Uint64
	closed sync.Once
}

func newClients(ctx context.Context, base, tok string, rec *recorder) (*clients, error) {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	c := &clients{base: base, tok: tok, rec: rec, hc: &http.Client{Transport: bearer{tok, tr}}}
	var err error
	// SSE streams last as long as the task: the context, not the client,
	// bounds them.
	c.a2a, err = a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(base+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(c.hc))
	if err != nil {
		return nil, fmt.Errorf("a2a client: %w", err)
	}
	c.openai = oa.NewClient(option.WithBaseURL(base+"/openai/v1/"), option.WithAPIKey(tok), option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	c.mcpCl = sdk.NewClient(&sdk.Implementation{Name: "chio-soak", Version: "1"}, nil)
	if c.mcp, err = c.mcpConnect(ctx); err != nil {
		return nil, err
	}
	c.acpT = newHTTPLines(c.hc, base+"/acp")
	c.acp = acpsdk.NewClientSideConnection(noEditor{}, c.acpT, c.acpT.Reader())
	c.acp.SetLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ictx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := c.acp.Initialize(ictx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber}); err != nil {
		c.close()
		return nil, fmt.Errorf("acp initialize: %w", err)
	}
	return c, nil
}

func (c *clients) close() {
	c.closed.Do(func() {
		if c.mcp != nil {
			_ = c.mcp.Close()
		}
		if c.acpT != nil {
			c.acpT.Close()
		}
		if c.a2a != nil {
			_ = c.a2a.Destroy()
		}
	})
}

func (c *clients) mcpConnect(ctx context.Context) (*sdk.ClientSession, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cs, err := c.mcpCl.Connect(cctx, &sdk.StreamableClientTransport{Endpoint: c.base + "/mcp", HTTPClient: c.hc}, nil)
	if err != nil {
		return nil, fmt.Errorf("mcp connect: %w", err)
	}
	return cs, nil
}

// timed runs one client call under callTimeout and records it.
func (c *clients) timed(ctx context.Context, surface, op string, f func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	start := time.Now()
	err := f(cctx)
	if ctx.Err() != nil && err != nil {
		return ctx.Err() // the run is ending: not chio's error
	}
	c.rec.call(surface, op, time.Since(start), err)
	return err
}

// message is an A2A user message whose id selects the conformance demo
// agent's behaviour.
func message(prefix string, seq uint64) *a2apb.Message {
	m := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(fmt.Sprintf("soak %d", seq)))
	m.ID = prefix + "-soak-" + uuid.NewString()
	return m
}

// chioReceipt is metadata.chio.receiptId of an A2A task or event.
func chioReceipt(meta map[string]any) string {
	c, _ := meta["chio"].(map[string]any)
	id, _ := c["receiptId"].(string)
	return id
}

// a2aSend is a blocking SendMessage that completes the task.
func (c *clients) a2aSend(ctx context.Context, seq uint64) error {
	return c.timed(ctx, "a2a", "send", func(ctx context.Context) error {
		res, err := c.a2a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: message("tck-complete-task", seq)})
		if err != nil {
			return err
		}
		c.rec.governedCall("a2a")
		task, ok := res.(*a2apb.Task)
		if ok {
			c.rec.task(string(task.ID))
		}
		if !ok || task.Status.State != a2apb.TaskStateCompleted {
			return fmt.Errorf("send: want a completed task, got %s", describe(res))
		}
		if id := chioReceipt(task.Metadata); id != "" {
			c.rec.receipt(id)
			return nil
		}
		return errors.New("send: completed task without metadata.chio.receiptId")
	})
}

// a2aStream is a SendStreamingMessage read to its terminal event.
func (c *clients) a2aStream(ctx context.Context, seq uint64) error {
	return c.timed(ctx, "a2a", "stream", func(ctx context.Context) error {
		var last a2apb.Event
		n := 0
		for ev, err := range c.a2a.SendStreamingMessage(ctx, &a2apb.SendMessageRequest{Message: message("tck-stream-001", seq)}) {
			if err != nil {
				if n > 0 {
					c.rec.governedCall("a2a")
				}
				return fmt.Errorf("stream after %d events: %w", n, err)
			}
			if n == 0 {
				if t, ok := ev.(*a2apb.Task); ok {
					c.rec.task(string(t.ID))
				}
			}
			n++
			last = ev
		}
		c.rec.governedCall("a2a")
		if st := stateOf(last); st != a2apb.TaskStateCompleted {
			return fmt.Errorf("stream of %d events ended in %q", n, st)
		}
		return nil
	})
}

// a2aCancel streams a long-running task until it is working, cancels it
// then, and follows the stream to its canceled end: two calls, the stream
// timed to the working event.
func (c *clients) a2aCancel(ctx context.Context, seq uint64) error {
	sctx, stop := context.WithTimeout(ctx, callTimeout)
	defer stop()
	start := time.Now()
	var id a2apb.TaskID
	var last a2apb.Event
	n, canceled := 0, false
	var serr error
	for ev, err := range c.a2a.SendStreamingMessage(sctx, &a2apb.SendMessageRequest{Message: message("tck-long-running", seq)}) {
		if err != nil {
			serr = fmt.Errorf("long-running stream after %d events: %w", n, err)
			break
		}
		if n == 0 {
			if t, ok := ev.(*a2apb.Task); ok {
				id = t.ID
				c.rec.governedCall("a2a")
				c.rec.task(string(t.ID))
			}
		}
		n++
		last = ev
		if !canceled && stateOf(ev) == a2apb.TaskStateWorking && id != "" {
			canceled = true
			c.rec.call("a2a", "stream (to working)", time.Since(start), nil)
			// The cancel goes out even when the run is being
			// interrupted: a task left running would hold chio up's drain.
			if err := c.timed(context.WithoutCancel(ctx), "a2a", "cancel", func(ctx context.Context) error {
				task, err := c.a2a.CancelTask(ctx, &a2apb.CancelTaskRequest{ID: id})
				if err != nil {
					return err
				}
				if task.Status.State != a2apb.TaskStateCanceled {
					return fmt.Errorf("cancel: task in %q", task.Status.State)
				}
				return nil
			}); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if serr == nil && (!canceled || stateOf(last) != a2apb.TaskStateCanceled) {
		serr = fmt.Errorf("long-running stream of %d events (canceled: %v) ended in %q", n, canceled, stateOf(last))
	}
	if serr != nil {
		c.rec.call("a2a", "long-running stream", time.Since(start), serr)
	}
	return serr
}

// a2aCancelEarly starts a long-running task without waiting for it
// (returnImmediately), then cancels it at once, before it may have
// started: two calls. This races the cancel against the task's decision
// event and first output, which a client may well do.
func (c *clients) a2aCancelEarly(ctx context.Context, seq uint64) error {
	var id a2apb.TaskID
	err := c.timed(ctx, "a2a", "send (return immediately)", func(ctx context.Context) error {
		res, err := c.a2a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: message("tck-long-running", seq), Config: &a2apb.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			return err
		}
		task, ok := res.(*a2apb.Task)
		if !ok || task.Status.State.Terminal() {
			return fmt.Errorf("long-running send: want a running task, got %s", describe(res))
		}
		c.rec.governedCall("a2a")
		c.rec.task(string(task.ID))
		id = task.ID
		return nil
	})
	if err != nil {
		return err
	}
	// The cancel goes out even when the run is being interrupted: a task
	// left running would hold chio up's drain.
	ctx = context.WithoutCancel(ctx)
	return c.timed(ctx, "a2a", "cancel", func(ctx context.Context) error {
		task, err := c.a2a.CancelTask(ctx, &a2apb.CancelTaskRequest{ID: id})
		if err != nil {
			return err
		}
		if task.Status.State != a2apb.TaskStateCanceled {
			return fmt.Errorf("cancel: task in %q", task.Status.State)
		}
		return nil
	})
}

// taskState is an A2A task's state as GetTask reports it.
func (c *clients) taskState(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	t, err := c.a2a.GetTask(ctx, &a2apb.GetTaskRequest{ID: a2apb.TaskID(id)})
	if err != nil {
		return "GetTask: " + err.Error()
	}
	return string(t.Status.State)
}

// a2aResubscribe starts a task that works a few seconds without waiting
// for it, then subscribes to it and follows it to completion: two calls,
// the subscription timed to its first event (the stream then lasts as
// long as the task).
func (c *clients) a2aResubscribe(ctx context.Context, seq uint64) error {
	var id a2apb.TaskID
	err := c.timed(ctx, "a2a", "send (return immediately)", func(ctx context.Context) error {
		res, err := c.a2a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: message("test-resubscribe-message-id", seq), Config: &a2apb.SendMessageConfig{ReturnImmediately: true}})
		if err != nil {
			return err
		}
		task, ok := res.(*a2apb.Task)
		if !ok {
			return fmt.Errorf("resubscribe send: want a task, got %s", describe(res))
		}
		c.rec.governedCall("a2a")
		c.rec.task(string(task.ID))
		id = task.ID
		return nil
	})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	start := time.Now()
	var last a2apb.Event
	n := 0
	var serr error
	for ev, err := range c.a2a.SubscribeToTask(sctx, &a2apb.SubscribeToTaskRequest{ID: id}) {
		if err != nil {
			serr = fmt.Errorf("subscribe after %d events: %w", n, err)
			break
		}
		if n == 0 {
			c.rec.call("a2a", "subscribe", time.Since(start), nil)
		}
		n++
		last = ev
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if serr == nil && stateOf(last) != a2apb.TaskStateCompleted {
		serr = fmt.Errorf("subscription of %d events ended in %q", n, stateOf(last))
	}
	if serr != nil {
		if n == 0 {
			c.rec.call("a2a", "subscribe", time.Since(start), serr)
		} else {
			c.rec.call("a2a", "subscribe (to the end)", 0, serr)
		}
	}
	return serr
}

func stateOf(ev a2apb.Event) a2apb.TaskState {
	switch e := ev.(type) {
	case *a2apb.Task:
		return e.Status.State
	case *a2apb.TaskStatusUpdateEvent:
		return e.Status.State
	}
	return ""
}

func describe(v any) string {
	switch e := v.(type) {
	case *a2apb.Task:
		return fmt.Sprintf("task in %q", e.Status.State)
	case *a2apb.Message:
		return "a message"
	}
	return fmt.Sprintf("%T", v)
}

// openaiCall runs one Chat Completions tool call through
// /openai/v1/tool-calls; every tenth also lists the tools first.
func (c *clients) openaiCall(ctx context.Context, seq uint64) error {
	if c.oaN.Add(1)%10 == 1 {
		err := c.timed(ctx, "openai", "tools", func(ctx context.Context) error {
			var tools struct {
				Tools []oa.ChatCompletionFunctionToolParam `json:"tools"`
			}
			if err := c.openai.Get(ctx, "tools", nil, &tools); err != nil {
				return err
			}
			for _, t := range tools.Tools {
				if t.Function.Name == "hello_task" {
					return nil
				}
			}
			return fmt.Errorf("tools: no hello_task among %d", len(tools.Tools))
		})
		if err != nil {
			return err
		}
	}
	return c.timed(ctx, "openai", "tool-calls", func(ctx context.Context) error {
		callID := fmt.Sprintf("call_soak_%d", seq)
		body := oa.ChatCompletionAssistantMessageParam{ToolCalls: []oa.ChatCompletionMessageToolCallUnionParam{{
			OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{ID: callID,
				Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "hello_task", Arguments: fmt.Sprintf(`{"text":"soak %d"}`, seq)}},
		}}}
		var out struct {
			Messages []struct {
				ToolCallID string `json:"tool_call_id"`
				Content    string `json:"content"`
				Chio       struct {
					Denied     bool   `json:"denied"`
					ReceiptRef string `json:"receipt_ref"`
					Decision   string `json:"decision"`
					Reason     string `json:"reason"`
				} `json:"chio"`
			} `json:"messages"`
		}
		if err := c.openai.Post(ctx, "tool-calls", body, &out); err != nil {
			return err
		}
		if len(out.Messages) != 1 || out.Messages[0].ToolCallID != callID {
			return fmt.Errorf("tool-calls: %d messages for one call", len(out.Messages))
		}
		m := out.Messages[0]
		if m.Chio.ReceiptRef != "" {
			c.rec.governedCall("openai")
			c.rec.receipt(m.Chio.ReceiptRef)
		}
		if m.Chio.Denied || m.Chio.Decision != "allow" || m.Chio.ReceiptRef == "" {
			return fmt.Errorf("tool-calls: %s (%s), receipt %q", m.Chio.Decision, m.Chio.Reason, m.Chio.ReceiptRef)
		}
		return nil
	})
}

// mcpCall is tools/call of the bridged API's read on the long-lived
// session; every twentieth opens a fresh session, lists the tools, calls
// and closes it, as short-lived clients do.
func (c *clients) mcpCall(ctx context.Context, seq uint64) error {
	cs := c.mcp
	if c.mcpN.Add(1)%20 == 0 {
		var fresh *sdk.ClientSession
		err := c.timed(ctx, "mcp", "connect+list", func(ctx context.Context) error {
			var err error
			if fresh, err = c.mcpConnect(ctx); err != nil {
				return err
			}
			list, err := fresh.ListTools(ctx, nil)
			if err != nil {
				return fmt.Errorf("tools/list: %w", err)
			}
			for _, t := range list.Tools {
				if t.Name == "httpGet" {
					return nil
				}
			}
			return fmt.Errorf("tools/list: no httpGet among %d", len(list.Tools))
		})
		if fresh != nil {
			defer fresh.Close()
		}
		if err != nil {
			return err
		}
		cs = fresh
	}
	return c.timed(ctx, "mcp", "tools/call", func(ctx context.Context) error {
		q := fmt.Sprintf("soak-%d", seq)
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "httpGet", Arguments: map[string]any{"q": q}})
		if err != nil {
			return err
		}
		raw, _ := json.Marshal(res.Meta["chio"])
		var v struct {
			ReceiptRef string `json:"receipt_ref"`
			Decision   string `json:"decision"`
			Reason     string `json:"reason"`
		}
		_ = json.Unmarshal(raw, &v)
		if v.ReceiptRef != "" {
			c.rec.governedCall("mcp")
			c.rec.receipt(v.ReceiptRef)
		}
		if res.IsError || v.Decision != "allow" || v.ReceiptRef == "" {
			return fmt.Errorf("tools/call: isError %v, decision %q (%s), receipt %q", res.IsError, v.Decision, v.Reason, v.ReceiptRef)
		}
		var out struct {
			HTTPStatus int `json:"httpStatus"`
			Body       struct {
				Args map[string][]string `json:"args"`
			} `json:"body"`
		}
		sc, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(sc, &out); err != nil || out.HTTPStatus != http.StatusOK || len(out.Body.Args["q"]) != 1 || out.Body.Args["q"][0] != q {
			return fmt.Errorf("tools/call: structured content %.200s", sc)
		}
		return nil
	})
}

// acpCall is _chio/tool/invoke of the demo tool over the ACP SDK's
// connection.
func (c *clients) acpCall(ctx context.Context, seq uint64) error {
	return c.timed(ctx, "acp", "tool/invoke", func(ctx context.Context) error {
		raw, err := c.acp.CallExtension(ctx, "_chio/tool/invoke", map[string]any{
			"capabilityId": "hello_task", "arguments": map[string]any{"text": fmt.Sprintf("soak %d", seq)},
		})
		if err != nil {
			var re *acpsdk.RequestError
			if errors.As(err, &re) && re.Data != nil {
				if d, ok := re.Data.(map[string]any); ok && d["receiptId"] != nil {
					c.rec.governedCall("acp")
				}
			}
			return err
		}
		var res struct {
			Result    json.RawMessage `json:"result"`
			ReceiptID string          `json:"receiptId"`
		}
		if err := json.Unmarshal(raw, &res); err != nil || res.ReceiptID == "" {
			return fmt.Errorf("tool/invoke: answer %.200s", raw)
		}
		c.rec.governedCall("acp")
		c.rec.receipt(res.ReceiptID)
		return nil
	})
}

// noEditor is the editor side of the ACP connection. Chio's /acp profile
// never calls the client, so every method is an error, never a panic.
type noEditor struct{}

var errNoEditor = errors.New("the soak's ACP client serves no editor methods")

func (noEditor) ReadTextFile(context.Context, acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	return acpsdk.ReadTextFileResponse{}, errNoEditor
}
func (noEditor) WriteTextFile(context.Context, acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	return acpsdk.WriteTextFileResponse{}, errNoEditor
}
func (noEditor) RequestPermission(context.Context, acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	return acpsdk.RequestPermissionResponse{}, errNoEditor
}
func (noEditor) SessionUpdate(context.Context, acpsdk.SessionNotification) error { return nil }
func (noEditor) CreateTerminal(context.Context, acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	return acpsdk.CreateTerminalResponse{}, errNoEditor
}
func (noEditor) KillTerminal(context.Context, acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	return acpsdk.KillTerminalResponse{}, errNoEditor
}
func (noEditor) TerminalOutput(context.Context, acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	return acpsdk.TerminalOutputResponse{}, errNoEditor
}
func (noEditor) ReleaseTerminal(context.Context, acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	return acpsdk.ReleaseTerminalResponse{}, errNoEditor
}
func (noEditor) WaitForTerminalExit(context.Context, acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	return acpsdk.WaitForTerminalExitResponse{}, errNoEditor
}
