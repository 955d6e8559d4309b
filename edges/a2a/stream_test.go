package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// stepServer's tool streams stepChunks chunks, each one only when the test
// opens the gate, so a test can observe a tool while it runs.
type stepServer struct {
	tools.Running
	gate chan struct{}
}

const stepChunks = 3

func newStep() *stepServer { return &stepServer{gate: make(chan struct{}, 64)} }

func (s *stepServer) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: "step-srv", Name: "step", Version: "1",
		Tools: []schemas.ToolDefinition{{Name: "step_task", Description: "streams when told",
			InputSchema: json.RawMessage(`{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true}`),
			Metadata:    map[string]json.RawMessage{"a2a.expose": json.RawMessage(`true`)}}}}
}
func (s *stepServer) ServerID() string    { return "step-srv" }
func (s *stepServer) ToolNames() []string { return []string{"step_task"} }
func (s *stepServer) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	return json.RawMessage(`"step done"`), nil
}
func (s *stepServer) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	for i := range stepChunks {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.gate:
		}
		if err := emit(tools.Chunk{Data: json.RawMessage(fmt.Sprintf(`"chunk-%d"`, i)), Last: i == stepChunks-1}); err != nil {
			return err
		}
	}
	return nil
}

func (s *stepServer) open(n int) {
	for range n {
		s.gate <- struct{}{}
	}
}

var stepTarget = map[string]any{"chio": map[string]any{"targetSkillId": "step_task"}}

// collect reads a stream to its end, reporting the task id on first (once
// the first event, which must be the task, arrives).
func collect(t *testing.T, events func(func(a2apb.Event, error) bool), first chan<- string) ([]a2apb.Event, error) {
	var out []a2apb.Event
	for ev, err := range events {
		if err != nil {
			return out, err
		}
		if len(out) == 0 && first != nil {
			task, ok := ev.(*a2apb.Task)
			if !ok {
				return out, fmt.Errorf("first event %T, want the task", ev)
			}
			first <- string(task.ID)
		}
		out = append(out, ev)
	}
	return out, nil
}

func eventJSON(t *testing.T, evs []a2apb.Event) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%T %s", ev, b))
	}
	return out
}

// A tool runs on replica A, streaming to the client that sent the message;
// two clients subscribe on replica B while it runs. All three see the
// tool's chunks as artifact updates, in order, and the terminal status
// carrying the receipt; both subscribers see identical sequences.
func TestStreamAcrossReplicas(t *testing.T) {
	cl := startCluster(t, 2, "")
	for _, binding := range []a2apb.TransportProtocol{a2apb.TransportProtocolJSONRPC, a2apb.TransportProtocolHTTPJSON} {
		t.Run(string(binding), func(t *testing.T) { streamAcrossReplicas(t, cl, binding) })
	}
}

func streamAcrossReplicas(t *testing.T, cl *cluster, binding a2apb.TransportProtocol) {
	tok := token(t, agentKey, "cap-stream")
	a, b := sdkClientOver(t, cl.edges[0].URL, tok, binding), sdkClientOver(t, cl.edges[1].URL, tok, binding)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	var sent, sub1, sub2 []a2apb.Event
	var sentErr, err1, err2 error
	taskID := make(chan string, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		req := &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")), Metadata: stepTarget}
		sent, sentErr = collect(t, a.SendStreamingMessage(ctx, req), taskID)
	}()
	id := <-taskID
	subscribed := make(chan string, 2)
	for _, dst := range []struct {
		evs *[]a2apb.Event
		err *error
	}{{&sub1, &err1}, {&sub2, &err2}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*dst.evs, *dst.err = collect(t, b.SubscribeToTask(ctx, &a2apb.SubscribeToTaskRequest{ID: a2apb.TaskID(id)}), subscribed)
		}()
	}
	<-subscribed
	<-subscribed
	cl.step.open(stepChunks)
	wg.Wait()
	for name, err := range map[string]error{"sender": sentErr, "subscriber 1": err1, "subscriber 2": err2} {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	j1, j2, js := eventJSON(t, sub1), eventJSON(t, sub2), eventJSON(t, sent)
	if strings.Join(j1, "\n") != strings.Join(j2, "\n") {
		t.Fatalf("subscribers differ:\n%s\n---\n%s", strings.Join(j1, "\n"), strings.Join(j2, "\n"))
	}
	// Everything after the snapshot: three chunks and the end.
	tail := stepChunks + 1
	if len(j1) < tail+1 || len(js) < tail+1 || strings.Join(js[len(js)-tail:], "\n") != strings.Join(j1[len(j1)-tail:], "\n") {
		t.Fatalf("sender and subscriber tails differ:\n%s\n---\n%s", strings.Join(js, "\n"), strings.Join(j1, "\n"))
	}
	for i := range stepChunks {
		u, ok := sub1[len(sub1)-tail+i].(*a2apb.TaskArtifactUpdateEvent)
		if !ok {
			t.Fatalf("event %d: %T, want an artifact update", i, sub1[len(sub1)-tail+i])
		}
		text := u.Artifact.Parts[0].Text()
		if text != fmt.Sprintf("chunk-%d", i) || u.Append != (i > 0) || u.LastChunk != (i == stepChunks-1) || string(u.TaskID) != id {
			t.Fatalf("chunk %d: %q append=%v last=%v task=%s", i, text, u.Append, u.LastChunk, u.TaskID)
		}
	}
	end, ok := sub1[len(sub1)-1].(*a2apb.TaskStatusUpdateEvent)
	if !ok || end.Status.State != a2apb.TaskStateCompleted {
		t.Fatalf("last event %+v", sub1[len(sub1)-1])
	}
	if meta := chioMetaOf(t, end.Metadata); meta["receiptId"] == nil || meta["decision"] != "allow" {
		t.Fatalf("terminal metadata %v", meta)
	}
	// The task as stored holds one artifact of the three chunks.
	got, err := b.GetTask(ctx, &a2apb.GetTaskRequest{ID: a2apb.TaskID(id)})
	if err != nil || len(got.Artifacts) != 1 || len(got.Artifacts[0].Parts) != stepChunks {
		t.Fatalf("stored task %+v %v", got, err)
	}
	// A terminal task has nothing to subscribe to.
	for _, err := range b.SubscribeToTask(ctx, &a2apb.SubscribeToTaskRequest{ID: a2apb.TaskID(id)}) {
		if !errors.Is(err, a2apb.ErrUnsupportedOperation) {
			t.Fatalf("subscribe to a terminal task: %v", err)
		}
		break
	}
}

// A client that goes away stops its stream, not the task; a subscriber
// that closes leaves the others alone.
func TestStreamClientGoesAway(t *testing.T) {
	cl := startCluster(t, 2, "")
	tok := token(t, agentKey, "cap-away")
	a, b := sdkClient(t, cl.edges[0].URL, tok), sdkClient(t, cl.edges[1].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	sendCtx, hangUp := context.WithCancel(ctx)
	req := &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")), Metadata: stepTarget}
	var id a2apb.TaskID
	for ev, err := range a.SendStreamingMessage(sendCtx, req) {
		if err != nil {
			t.Fatal(err)
		}
		id = ev.(*a2apb.Task).ID
		break // hang up after the first event
	}
	hangUp()

	leaverCtx, leave := context.WithCancel(ctx)
	leaverSaw := make(chan string, 1)
	go func() {
		_, _ = collect(t, b.SubscribeToTask(leaverCtx, &a2apb.SubscribeToTaskRequest{ID: id}), leaverSaw)
	}()
	stayerSaw := make(chan string, 1)
	var stayed []a2apb.Event
	var stayErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		stayed, stayErr = collect(t, b.SubscribeToTask(ctx, &a2apb.SubscribeToTaskRequest{ID: id}), stayerSaw)
	}()
	<-leaverSaw
	<-stayerSaw
	leave()
	cl.step.open(stepChunks)
	<-done
	if stayErr != nil {
		t.Fatal(stayErr)
	}
	if end, ok := stayed[len(stayed)-1].(*a2apb.TaskStatusUpdateEvent); !ok || end.Status.State != a2apb.TaskStateCompleted {
		t.Fatalf("the staying subscriber's last event: %+v", stayed[len(stayed)-1])
	}
	got, err := a.GetTask(ctx, &a2apb.GetTaskRequest{ID: id})
	if err != nil || got.Status.State != a2apb.TaskStateCompleted || chioMetaOf(t, got.Metadata)["receiptId"] == nil {
		t.Fatalf("task after its sender hung up: %+v %v", got, err)
	}
}

// The SSE framing as a raw client sees it: headers, keep-alive comments
// while the tool is idle, JSON-RPC envelopes, 0.3 kinds and final.
func TestStreamWire(t *testing.T) {
	cl := startCluster(t, 1, "")
	tok := token(t, agentKey, "cap-wire")
	body := `{"jsonrpc":"2.0","id":7,"method":"message/stream","params":{"message":{"kind":"message","role":"user","messageId":"m1","parts":[{"kind":"text","text":"go"}]},"metadata":{"chio":{"targetSkillId":"step_task"}}}}`
	req, _ := http.NewRequest(http.MethodPost, cl.edges[0].URL+"/a2a", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("headers %v", resp.Header)
	}
	r := bufio.NewReader(resp.Body)
	var kinds []string
	var final []bool
	keepAlives := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == ": keep-alive":
			keepAlives++
			if keepAlives == 1 {
				cl.step.open(stepChunks) // the stream was idle long enough
			}
		case strings.HasPrefix(line, "data: "):
			var env struct {
				ID     int `json:"id"`
				Result struct {
					Kind  string `json:"kind"`
					Final *bool  `json:"final"`
				} `json:"result"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &env); err != nil || env.ID != 7 {
				t.Fatalf("frame %q: %v", line, err)
			}
			kinds = append(kinds, env.Result.Kind)
			if env.Result.Final != nil {
				final = append(final, *env.Result.Final)
			}
		}
	}
	want := []string{"task", "artifact-update", "artifact-update", "artifact-update", "status-update"}
	if keepAlives == 0 || strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("kinds %v, %d keep-alives", kinds, keepAlives)
	}
	if len(final) != 1 || !final[0] {
		t.Fatalf("final flags %v", final)
	}
}

// A tool streaming for many times its lease keeps the lease: its own
// commits renew it, so the renewal never loses a race to them and the run
// is never stopped as if another replica had taken it.
func TestLongStreamKeepsItsLease(t *testing.T) {
	cl := startCluster(t, 1, "", func(c *Config, _ jetstream.JetStream) { c.ClaimLease = 60 * time.Millisecond })
	cl.tick.chunks, cl.tick.pace = 300, time.Millisecond
	tok := token(t, agentKey, "cap-long")
	a := sdkClient(t, cl.edges[0].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl.tick.gate <- struct{}{}
	var last a2apb.Event
	artifacts := 0
	req := &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")),
		Metadata: map[string]any{"chio": map[string]any{"targetSkillId": "tick_task"}}}
	for ev, err := range a.SendStreamingMessage(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*a2apb.TaskArtifactUpdateEvent); ok {
			artifacts++
		}
		last = ev
	}
	end, ok := last.(*a2apb.TaskStatusUpdateEvent)
	if !ok || end.Status.State != a2apb.TaskStateCompleted || artifacts != 300 {
		t.Fatalf("%d artifact updates, last event %+v", artifacts, last)
	}
}
