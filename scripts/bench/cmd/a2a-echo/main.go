// Command a2a-echo is the peer of the edge section: the a2a-go v2 server
// (its JSON-RPC binding, default in-memory task store) with an executor
// that answers SendMessage the way chio's hello_task does: a completed task
// carrying the caller's text back in a data artifact and in the final
// status message.
//
//	a2a-echo -listen 127.0.0.1:0
//
// It prints "a2a-echo: JSON-RPC http://ADDR/a2a" once it accepts
// connections, and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"iter"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "loopback address to serve on (port 0: any free one)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen); err != nil {
		fmt.Fprintln(os.Stderr, "a2a-echo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	base := "http://" + ln.Addr().String()
	card := &a2a.AgentCard{
		Name:                "a2a-echo",
		Description:         "echoes the caller's text, like chio's hello_task",
		Version:             "1.0.0",
		SupportedInterfaces: []*a2a.AgentInterface{a2a.NewAgentInterface(base+"/a2a", a2a.TransportProtocolJSONRPC)},
		DefaultInputModes:   []string{"text"},
		DefaultOutputModes:  []string{"application/json"},
		Skills:              []a2a.AgentSkill{{ID: "hello_task", Name: "hello_task", Description: "echo", Tags: []string{"echo"}}},
	}
	mux := http.NewServeMux()
	mux.Handle("/a2a", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(echo{})))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Printf("a2a-echo: JSON-RPC %s/a2a\n", base)
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// echo answers every message with what hello_task returns: a submitted
// task, one artifact with {"arguments":{"text":…},"message":"hello from
// a2a"}, then the completed status carrying the same data.
type echo struct{}

func (echo) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		data := map[string]any{"arguments": map[string]any{"text": text(ec.Message)}, "message": "hello from a2a"}
		art := a2a.NewArtifactEvent(ec, a2a.NewDataPart(data))
		art.Artifact.Name = "result"
		if !yield(art, nil) {
			return
		}
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCompleted, a2a.NewMessageForTask(a2a.MessageRoleAgent, ec, a2a.NewDataPart(data))), nil)
	}
}

func (echo) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		yield(a2a.NewStatusUpdateEvent(ec, a2a.TaskStateCanceled, nil), nil)
	}
}

// text is the message's text parts joined, as hello_task reads them.
func text(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	var s string
	for _, p := range m.Parts {
		if t, ok := p.Content.(a2a.Text); ok {
			s += string(t)
		}
	}
	return s
}
