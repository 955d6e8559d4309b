package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/tools/conformance"
)

// shape is a compact rendering of a result or stream, for comparison:
// "task:completed", "message", "status:working", "artifact:text",
// "artifact:text+append+last" …
func shape(ev a2apb.Event) string {
	switch v := ev.(type) {
	case *a2apb.Task:
		return "task:" + strings.TrimPrefix(strings.ToLower(string(v.Status.State)), "task_state_")
	case *a2apb.Message:
		return "message"
	case *a2apb.TaskStatusUpdateEvent:
		return "status:" + strings.TrimPrefix(strings.ToLower(string(v.Status.State)), "task_state_")
	case *a2apb.TaskArtifactUpdateEvent:
		s := "artifact:" + partKind(v.Artifact.Parts[0])
		if v.Append {
			s += "+append"
		}
		if v.LastChunk {
			s += "+last"
		}
		return s
	}
	return fmt.Sprintf("%T", ev)
}

func partKind(p *a2apb.Part) string {
	switch p.Content.(type) {
	case a2apb.Text:
		return "text"
	case a2apb.Raw:
		return "raw"
	case a2apb.URL:
		return "url"
	case a2apb.Data:
		return "data"
	}
	return fmt.Sprintf("%T", p.Content)
}

func tckMessage(id, text string) *a2apb.Message {
	m := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(text))
	m.ID = id
	return m
}

// Every behaviour of the conformance demo agent, selected by the messageId
// prefix as the public conformance kit does, over JSON-RPC and REST, with
// the agent as the default skill (the kit names no skill). Each call goes
// through the kernel and bears a receipt.
func TestConformanceAgent(t *testing.T) {
	cl := startCluster(t, 2, "", func(c *Config, _ jetstream.JetStream) { c.DefaultSkill = conformance.ToolName })
	tok := token(t, agentKey, "cap-tck")
	sends := []struct {
		prefix string
		want   string // the blocking send's result
		check  func(t *testing.T, res a2apb.SendMessageResult)
	}{
		{"tck-complete-task", "task:completed", func(t *testing.T, res a2apb.SendMessageResult) {
			if txt := res.(*a2apb.Task).Status.Message.Parts[0].Text(); txt != "Hello from TCK" {
				t.Fatalf("status message %q", txt)
			}
		}},
		{"tck-artifact-text", "task:completed", artifactOf("text")},
		{"tck-artifact-file", "task:completed", artifactOf("raw")},
		{"tck-artifact-file-url", "task:completed", artifactOf("url")},
		{"tck-artifact-data", "task:completed", artifactOf("data")},
		{"tck-message-response", "message", func(t *testing.T, res a2apb.SendMessageResult) {
			m := res.(*a2apb.Message)
			if m.Parts[0].Text() != "Direct message response" || m.Role != a2apb.MessageRoleAgent || chioMetaOf(t, m.Metadata)["receiptId"] == nil {
				t.Fatalf("message %+v", m)
			}
		}},
		{"tck-input-required", "task:input_required", nil},
		{"tck-reject-task", "task:rejected", nil},
		{"tck-anything-else", "task:completed", func(t *testing.T, res a2apb.SendMessageResult) {
			if txt := res.(*a2apb.Task).Status.Message.Parts[0].Text(); !strings.Contains(txt, "echo me") {
				t.Fatalf("echo %q", txt)
			}
		}},
	}
	streams := []struct{ prefix, want string }{
		{"tck-stream-001", "task:submitted status:working artifact:text+last status:completed"},
		{"tck-stream-003", "task:submitted status:working artifact:text+last status:completed"},
		{"tck-stream-ordering-001", "task:submitted status:working artifact:text+last status:completed"},
		{"tck-stream-artifact-text", "task:submitted status:working artifact:text+last status:completed"},
		{"tck-stream-artifact-file", "task:submitted status:working artifact:raw+last status:completed"},
		{"tck-stream-002", "task:submitted status:completed"},
		{"tck-stream-artifact-chunked", "task:submitted status:working artifact:text artifact:text+append+last status:completed"},
		{"tck-message-response", "message"},
		{"tck-input-required", "task:submitted status:working status:input_required"},
	}
	for _, binding := range []a2apb.TransportProtocol{a2apb.TransportProtocolJSONRPC, a2apb.TransportProtocolHTTPJSON} {
		a, b := sdkClientOver(t, cl.edges[0].URL, tok, binding), sdkClientOver(t, cl.edges[1].URL, tok, binding)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		run := fmt.Sprintf("-%s-%d", strings.ReplaceAll(string(binding), "+", ""), time.Now().UnixNano())
		for _, c := range sends {
			t.Run(string(binding)+"/send/"+c.prefix, func(t *testing.T) {
				res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage(c.prefix+run, "echo me")})
				if err != nil {
					t.Fatal(err)
				}
				if got := shape(res); got != c.want {
					t.Fatalf("result %s, want %s: %+v", got, c.want, res)
				}
				if task, ok := res.(*a2apb.Task); ok && chioMetaOf(t, task.Metadata)["receiptId"] == nil {
					t.Fatalf("no receipt: %v", task.Metadata)
				}
				if c.check != nil {
					c.check(t, res)
				}
			})
		}
		for _, c := range streams {
			t.Run(string(binding)+"/stream/"+c.prefix, func(t *testing.T) {
				var got []string
				for ev, err := range a.SendStreamingMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage(c.prefix+run, "x")}) {
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, shape(ev))
				}
				if strings.Join(got, " ") != c.want {
					t.Fatalf("stream %s\nwant   %s", strings.Join(got, " "), c.want)
				}
			})
		}
		t.Run(string(binding)+"/cancel-input-required", func(t *testing.T) {
			res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage("tck-input-required"+run+"-c", "x")})
			if err != nil {
				t.Fatal(err)
			}
			task, err := b.CancelTask(ctx, &a2apb.CancelTaskRequest{ID: res.(*a2apb.Task).ID})
			if err != nil || task.Status.State != a2apb.TaskStateCanceled {
				t.Fatalf("cancel: %+v %v", task, err)
			}
		})
		t.Run(string(binding)+"/multi-turn", func(t *testing.T) {
			res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage("tck-input-required"+run+"-mt", "x")})
			if err != nil {
				t.Fatal(err)
			}
			first := res.(*a2apb.Task)
			next := tckMessage("tck-complete-task"+run+"-mt2", "here you are")
			next.TaskID = first.ID
			res, err = b.SendMessage(ctx, &a2apb.SendMessageRequest{Message: next})
			if err != nil {
				t.Fatal(err)
			}
			done := res.(*a2apb.Task)
			ids, _ := chioMetaOf(t, done.Metadata)["receiptIds"].([]any)
			if done.ID != first.ID || done.Status.State != a2apb.TaskStateCompleted || len(done.History) != 2 || len(ids) != 2 {
				t.Fatalf("second turn: %s, %d messages, receipts %v", done.Status.State, len(done.History), ids)
			}
			// Two follow-ups at once: one turn runs, the other is refused.
			res, err = a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage("tck-input-required"+run+"-race", "x")})
			if err != nil {
				t.Fatal(err)
			}
			racing := res.(*a2apb.Task).ID
			errs := make(chan error, 2)
			for i := range 2 {
				go func() {
					m := tckMessage(fmt.Sprintf("test-resubscribe-message-id%s-race%d", run, i), "x")
					m.TaskID = racing
					_, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: m, Config: &a2apb.SendMessageConfig{ReturnImmediately: true}})
					errs <- err
				}()
			}
			e1, e2 := <-errs, <-errs
			if (e1 == nil) == (e2 == nil) || !(errors.Is(e1, a2apb.ErrUnsupportedOperation) || errors.Is(e2, a2apb.ErrUnsupportedOperation)) {
				t.Fatalf("concurrent follow-ups: %v / %v", e1, e2)
			}
			// A finished task takes no more turns.
			again := tckMessage("tck-complete-task"+run+"-mt3", "more")
			again.TaskID = first.ID
			if _, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: again}); !errors.Is(err, a2apb.ErrUnsupportedOperation) {
				t.Fatalf("a third turn on a completed task: %v", err)
			}
		})
		t.Run(string(binding)+"/resubscribe", func(t *testing.T) {
			var id a2apb.TaskID
			for ev, err := range a.SendStreamingMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage("test-resubscribe-message-id"+run, "x")}) {
				if err != nil {
					t.Fatal(err)
				}
				id = ev.(*a2apb.Task).ID
				break // the kit drops its first stream
			}
			var got []string
			for ev, err := range b.SubscribeToTask(ctx, &a2apb.SubscribeToTaskRequest{ID: id}) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, shape(ev))
			}
			if len(got) < 2 || !strings.HasPrefix(got[0], "task:") || got[len(got)-1] != "status:completed" {
				t.Fatalf("resubscribed stream %v", got)
			}
		})
		t.Run(string(binding)+"/unsupported-media-type", func(t *testing.T) {
			m := tckMessage("tck-complete-task"+run+"-mt", "x")
			m.Parts = append(m.Parts, &a2apb.Part{Content: a2apb.Text("y"), MediaType: "application/x-unsupported-tck-type"})
			if _, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: m}); !errors.Is(err, a2apb.ErrUnsupportedContentType) {
				t.Fatalf("unsupported media type: %v", err)
			}
		})
	}
}

func artifactOf(kind string) func(t *testing.T, res a2apb.SendMessageResult) {
	return func(t *testing.T, res a2apb.SendMessageResult) {
		task := res.(*a2apb.Task)
		if len(task.Artifacts) != 1 || partKind(task.Artifacts[0].Parts[0]) != kind {
			b, _ := json.Marshal(task.Artifacts)
			t.Fatalf("artifacts %s, want one %s part", b, kind)
		}
	}
}
