package hello

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/edges/tools"
)

func inv(id, args string) tools.Invocation {
	return tools.Invocation{ID: id, ServerID: ServerID, ToolName: ToolName, Arguments: json.RawMessage(args)}
}

func TestInvoke(t *testing.T) {
	s := New()
	cases := []struct {
		name string
		inv  tools.Invocation
		want string
	}{
		{"text", inv("r1", `{"text":"world"}`), `{"message":"hello from a2a","arguments":{"text":"world"}}`},
		{"compacted", inv("r2", "{ \"text\" :\n \"world\" }"), `{"message":"hello from a2a","arguments":{"text":"world"}}`},
		{"no arguments", inv("r3", ``), `{"message":"hello from a2a","arguments":{}}`},
		{"array, HTML unescaped", inv("r4", `[1,"<b>"]`), `{"message":"hello from a2a","arguments":[1,"<b>"]}`},
		{"no server id", tools.Invocation{ID: "r5", ToolName: ToolName, Arguments: json.RawMessage(`null`)}, `{"message":"hello from a2a","arguments":null}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := s.Invoke(context.Background(), c.inv)
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			if string(out) != c.want {
				t.Errorf("Invoke = %s\nwant     %s", out, c.want)
			}
		})
	}
	if s.Len() != 0 {
		t.Errorf("%d invocations still tracked", s.Len())
	}
}

func TestInvokeErrors(t *testing.T) {
	s := New()
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	cases := []struct {
		name string
		ctx  context.Context
		inv  tools.Invocation
		want error
	}{
		{"unknown tool", ctx, tools.Invocation{ID: "r", ToolName: "other"}, tools.ErrUnknownTool},
		{"other server", ctx, tools.Invocation{ID: "r", ServerID: "srv", ToolName: ToolName}, tools.ErrUnknownTool},
		{"no id", ctx, inv("", `{}`), tools.ErrNoInvocationID},
		{"context done", canceled, inv("r", `{}`), context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if out, err := s.Invoke(c.ctx, c.inv); !errors.Is(err, c.want) || out != nil {
				t.Errorf("Invoke = %s, %v; want %v", out, err, c.want)
			}
			err := s.InvokeStream(c.ctx, c.inv, func(tools.Chunk) error {
				t.Error("emitted a chunk")
				return nil
			})
			if !errors.Is(err, c.want) {
				t.Errorf("InvokeStream = %v; want %v", err, c.want)
			}
		})
	}
	if _, err := s.Invoke(ctx, inv("r", `{"text":`)); err == nil {
		t.Error("Invoke accepted invalid JSON arguments")
	}
	if err := s.InvokeStream(ctx, inv("r", `{"text":`), func(tools.Chunk) error { return nil }); err == nil {
		t.Error("InvokeStream accepted invalid JSON arguments")
	}
	if err := s.InvokeStream(ctx, inv("r", `{}`), nil); err == nil {
		t.Error("InvokeStream accepted a nil emit")
	}
}

func TestInvokeStream(t *testing.T) {
	const done = `{"content":[{"type":"text","text":"stream complete"}]}`
	cases := []struct {
		name, args string
		want       []string
	}{
		{"text", `{"text":"world"}`, []string{`{"type":"text","text":"hello from a2a, world"}`, done}},
		{"other text", `{"text":"Ada & <Bob>"}`, []string{`{"type":"text","text":"hello from a2a, Ada & <Bob>"}`, done}},
		{"no arguments", ``, []string{`{"type":"text","text":"hello from a2a, world"}`, done}},
		{"text not a string", `{"text":42}`, []string{`{"type":"text","text":"hello from a2a, world"}`, done}},
		{"key is case-sensitive", `{"Text":"x"}`, []string{`{"type":"text","text":"hello from a2a, world"}`, done}},
		{"arguments not an object", `["text"]`, []string{`{"type":"text","text":"hello from a2a, world"}`, done}},
		{"quotes escaped", `{"text":"say \"hi\""}`, []string{`{"type":"text","text":"hello from a2a, say \"hi\""}`, done}},
	}
	s := New()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			err := s.InvokeStream(context.Background(), inv("r-"+c.name, c.args), func(ch tools.Chunk) error {
				got = append(got, string(ch.Data))
				return nil
			})
			if err != nil {
				t.Fatalf("InvokeStream: %v", err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("chunks = %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestInvokeStreamEmitError(t *testing.T) {
	stop := errors.New("client went away")
	n := 0
	err := New().InvokeStream(context.Background(), inv("r", `{}`), func(tools.Chunk) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("InvokeStream = %v after %d chunks; want the emit error after 1", err, n)
	}
}

// Cancel lands while the client holds the first chunk; the stream stops
// before the second with ErrCanceled, and the id is released.
func TestCancelRunningStream(t *testing.T) {
	s := New()
	ctx := context.Background()
	first := make(chan struct{})
	release := make(chan struct{})
	result := make(chan error, 1)
	var chunks []string
	go func() {
		result <- s.InvokeStream(ctx, inv("r-cancel", `{}`), func(ch tools.Chunk) error {
			chunks = append(chunks, string(ch.Data))
			if len(chunks) == 1 {
				close(first)
				<-release
			}
			return nil
		})
	}()
	<-first
	if _, err := s.Invoke(ctx, inv("r-cancel", `{}`)); !errors.Is(err, tools.ErrDuplicateInvocation) {
		t.Errorf("Invoke with a running id = %v, want ErrDuplicateInvocation", err)
	}
	if err := s.Cancel(ctx, "r-cancel"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	close(release)
	if err := <-result; !errors.Is(err, tools.ErrCanceled) {
		t.Errorf("InvokeStream = %v, want ErrCanceled", err)
	}
	if len(chunks) != 1 {
		t.Errorf("chunks after cancel: %q", chunks)
	}
	if err := s.Cancel(ctx, "r-cancel"); !errors.Is(err, tools.ErrNotRunning) {
		t.Errorf("Cancel after the stream ended = %v, want ErrNotRunning", err)
	}
	if err := s.Cancel(ctx, "never"); !errors.Is(err, tools.ErrNotRunning) {
		t.Errorf("Cancel(never) = %v, want ErrNotRunning", err)
	}
}

// The demo end to end through the tools package: registered, exposed on
// A2A only, rated with exactly the hello-a2a card's caveats, dispatchable.
func TestHelloThroughRegistry(t *testing.T) {
	s := New()
	m := s.Manifest()
	if err := m.Validate(); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if m.Name != "Hello A2A Server" || m.Version != "0.1.0" || m.Description != "A tiny receipt-bearing A2A hello surface" ||
		len(m.Tools) != 1 || m.Tools[0].Description != "Return a collated greeting" || m.Tools[0].HasSideEffects {
		t.Errorf("manifest = %+v", m)
	}
	raw, err := json.Marshal(m.Tools[0])
	if err != nil {
		t.Fatal(err)
	}
	const wantTool = `{"name":"hello_task","description":"Return a collated greeting","input_schema":{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true},"has_side_effects":false,"metadata":{"a2a.expose":true,"acp.expose":true,"openai.expose":true}}`
	if string(raw) != wantTool {
		t.Errorf("tool JSON = %s\nwant       %s", raw, wantTool)
	}
	m.Tools[0].Name = "changed"
	if s.Manifest().Tools[0].Name != ToolName {
		t.Error("Manifest shares state between calls")
	}

	r := tools.NewRegistry()
	if err := r.Register(s); err != nil {
		t.Fatalf("Register: %v", err)
	}
	a2a := tools.Exposure{Protocol: "a2a"}
	exposed := r.Exposed(a2a)
	if len(exposed) != 1 || exposed[0].Tool.Name != ToolName {
		t.Fatalf("Exposed(a2a) = %v", exposed)
	}
	if got := r.Exposed(tools.Exposure{Protocol: "mcp"}); len(got) != 0 {
		t.Errorf("Exposed(mcp) = %v; hello opts in to A2A, OpenAI and ACP only", got)
	}

	fid := tools.A2AFidelity(exposed[0].Tool, tools.A2AProfile{Stdio: true})
	wantCaveats := []string{
		"stream-capable tools execute through 'message/stream' deferred tasks; output is surfaced on follow-up 'task/get' rather than incremental transport updates",
		"stream chunks are collated into the terminal task payload instead of pushed as incremental A2A events",
		"partial output is preserved only in the terminal task payload, not incremental updates",
	}
	if fid.Kind != tools.FidelityAdapted || !slices.Equal(fid.Caveats, wantCaveats) {
		t.Errorf("A2AFidelity = %+v", fid)
	}
	// The HTTP edge streams: its caveats say so instead.
	if fid := tools.A2AFidelity(exposed[0].Tool, tools.A2AProfile{}); fid.Kind != tools.FidelityAdapted || len(fid.Caveats) != 2 ||
		!strings.Contains(fid.Caveats[0], "delivered incrementally") || !strings.Contains(fid.Caveats[1], "artifact updates") {
		t.Errorf("A2AFidelity (HTTP edge) = %+v", fid)
	}

	en, err := r.ResolveTool(a2a, ToolName)
	if err != nil {
		t.Fatalf("ResolveTool: %v", err)
	}
	out, err := en.Invoke(context.Background(), "rcpt-1", json.RawMessage(`{"text":"world"}`))
	if err != nil || string(out) != `{"message":"hello from a2a","arguments":{"text":"world"}}` {
		t.Errorf("Invoke = %s, %v", out, err)
	}
	var texts []string
	err = en.InvokeStream(context.Background(), "rcpt-2", json.RawMessage(`{"text":"world"}`), func(c tools.Chunk) error {
		texts = append(texts, string(c.Data))
		return nil
	})
	if err != nil || len(texts) != 2 {
		t.Errorf("InvokeStream = %q, %v", texts, err)
	}
}
