package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// rawSSE posts body to url and returns every line of the SSE answer, read
// to its end (the stream ends, or ctx does).
func rawSSE(ctx context.Context, t *testing.T, url, tok, body string, lines chan<- string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		close(lines)
		return
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("answer %d %s, want a stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	go func() {
		defer close(lines)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
}

// A replica that drains hands its streams over instead of holding them to
// the task's end: a send's stream (JSON-RPC, raw SSE) and a subscription
// (the a2a-go client) both end cleanly, before the task has, the SSE one
// with a comment naming its last event id; the client resumes at another
// replica with Last-Event-ID and gets exactly the rest, while the run goes
// on at the draining replica, whose drain waits for it.
func TestDrainHandsStreamsOver(t *testing.T) {
	cl := startCluster(t, 2, "")
	tok := token(t, agentKey, "cap-drain")
	a, b := cl.edges[0].URL, cl.edges[1].URL
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	lines := make(chan string, 64)
	rawSSE(ctx, t, a+"/a2a", tok, fmt.Sprintf(stepStreamBody, "drain-1"), lines)
	// The snapshot (generation 2) names the task; one chunk (3) follows.
	var id string
	for line := range lines {
		if strings.HasPrefix(line, "data: ") && id == "" {
			var ev sseEvent
			ev.id = "2"
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data); err != nil {
				t.Fatal(err)
			}
			_, task := ev.member(t)
			id, _ = task["id"].(string)
			cl.step.open(1)
		}
		if line == "id: 3" {
			<-lines // its data
			<-lines // and the blank line ending it
			break
		}
	}
	if id == "" {
		t.Fatal("the send's stream ended before its snapshot")
	}

	// The a2a-go client subscribes to the same task on the same replica.
	type sdkEnd struct {
		events []a2apb.Event
		err    error
	}
	sdkDone := make(chan sdkEnd, 1)
	subscribed := make(chan struct{})
	go func() {
		var end sdkEnd
		for ev, err := range sdkClient(t, a, tok).SubscribeToTask(ctx, &a2apb.SubscribeToTaskRequest{ID: a2apb.TaskID(id)}) {
			if err != nil {
				end.err = err
				break
			}
			if len(end.events) == 0 {
				close(subscribed)
			}
			end.events = append(end.events, ev)
		}
		sdkDone <- end
	}()
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("the subscription never opened")
	}

	drained := make(chan error, 1)
	go func() { drained <- cl.raw[0].Drain(ctx) }()

	// The send's stream ends at once, its task still running: nothing but
	// the handover comment after generation 3.
	var rest []string
	for line := range lines {
		rest = append(rest, line)
	}
	want := ": this replica is stopping; subscribe to the task again with Last-Event-ID: 3"
	if got := strings.Join(rest, "\n"); strings.TrimSpace(got) != want {
		t.Fatalf("after generation 3 the stream sent %q, want only %q", got, want)
	}
	end := <-sdkDone
	if end.err != nil {
		t.Fatalf("the a2a-go subscription ended with %v, want a clean end", end.err)
	}
	if len(end.events) != 1 {
		t.Fatalf("the subscription got %d events, want the snapshot alone", len(end.events))
	}
	snap, ok := end.events[0].(*a2apb.Task)
	if !ok || snap.Status.State.Terminal() {
		t.Fatalf("the subscription's last event is %#v: a client could not tell it must resume", end.events[0])
	}
	last, werr := wire.MetadataGeneration(snap.Metadata, wire.GenerationKey, "metadata")
	if werr != nil || last == nil || *last != 3 {
		t.Fatalf("the snapshot's generation %v (%v), want 3", last, werr)
	}
	select {
	case err := <-drained:
		t.Fatalf("the drain returned (%v) while the run it waits for was still gated", err)
	default:
	}

	// Resumed at replica B from the generation the client has: the rest
	// of the run, which goes on at A.
	rs, _, res := openSSE(t, b+"/a2a", tok, true, subscribeBody(id), map[string]string{"Last-Event-ID": "3"})
	if rs == nil {
		t.Fatalf("resume at the other replica refused: %v", res)
	}
	cl.step.open(stepChunks - 1)
	if got := strings.Join(contiguous(t, rs.all(t), 4), " "); got != "artifactUpdate artifactUpdate statusUpdate:TASK_STATE_COMPLETED" {
		t.Fatalf("resumed frames %s", got)
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// Over gRPC a drain hands a send's stream over with UNAVAILABLE (retry
// elsewhere, never OK, which reads as "done") and the last generation sent
// in the trailer's last-event-id, which a SubscribeToTask sends back.
func TestDrainHandsGRPCStreamsOver(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	tok := token(t, agentKey, "cap-grpc-drain")
	raw := rawGRPC(t, cl.raw[0].cfg.GRPCURL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	msg := &pb.Message{MessageId: "m-grpc-drain", Role: pb.Role_ROLE_USER, Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "go"}}}}
	meta, _ := structpb.NewStruct(stepTarget)
	st, err := raw.SendStreamingMessage(ctx, &pb.SendMessageRequest{Message: msg, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil || first.GetTask() == nil {
		t.Fatalf("first event %v %v, want the task", first, err)
	}
	cl.step.open(1)
	if ev, err := st.Recv(); err != nil || ev.GetArtifactUpdate() == nil {
		t.Fatalf("second event %v %v, want the first chunk", ev, err)
	}
	drained := make(chan error, 1)
	go func() { drained <- cl.raw[0].Drain(context.Background()) }()
	ev, err := st.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("after the drain began the stream gave %v %v, want UNAVAILABLE", ev, err)
	}
	if got := st.Trailer().Get("last-event-id"); len(got) != 1 || got[0] != "3" {
		t.Fatalf("trailer last-event-id %v, want [3]", got)
	}
	cl.step.open(stepChunks - 1)
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
}
