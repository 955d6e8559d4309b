package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// startStepTask starts a step_task that waits for the test's gate, and
// returns its id.
func startStepTask(t *testing.T, url, tok string) string {
	t.Helper()
	m := rpc(t, url, tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"step_task"}}}}`)
	r, _ := m["result"].(map[string]any)
	task, _ := r["task"].(map[string]any)
	id, _ := task["id"].(string)
	if id == "" {
		t.Fatalf("send: %v", m)
	}
	return id
}

// streamPost posts a streaming request and returns the response; for a
// stream (HTTP 200), once its first event has arrived.
func streamPost(t *testing.T, ctx context.Context, url, tok, body string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	if resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("stream ended before its first event: %v", err)
			}
			if strings.HasPrefix(line, "data:") {
				break
			}
		}
	}
	return resp, r
}

// One caller holds at most Config.MaxStreamsPerCaller streams, over SSE
// and gRPC together: one more is refused in each binding's form (HTTP 429
// with a JSON-RPC error or an AIP-193 body, gRPC RESOURCE_EXHAUSTED) with
// no event written, while another caller is not held back; a stream that
// ends gives its slot back.
func TestStreamsPerCallerBounded(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t), func(c *Config, _ jetstream.JetStream) { c.MaxStreamsPerCaller = 2 })
	g.serve(t, cl)
	url := cl.edges[0].URL
	tok := token(t, agentKey, "cap-streams")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	raw := rawGRPC(t, cl.raw[0].cfg.GRPCURL)
	gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	id := startStepTask(t, url, tok)
	// The task's call writes its decision in the background: wait for it,
	// or a slow machine counts it below as written by a refused stream.
	for deadline := time.Now().Add(time.Minute); eventCount(t, cl.js) < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the step task's decision was never written")
		}
	}
	subscribe := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":%q}}`, id)
	streamSend := `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"role":"ROLE_USER","messageId":"m2","parts":[{"text":"x"}]},"metadata":{"chio":{"targetSkillId":"step_task"}}}}`

	// The caller's two streams: one over SSE, one over gRPC.
	sse, sseBody := streamPost(t, ctx, url+"/a2a", tok, subscribe)
	if sse.StatusCode != http.StatusOK {
		t.Fatalf("first subscription: HTTP %d", sse.StatusCode)
	}
	gs, err := raw.SubscribeToTask(gctx, &pb.SubscribeToTaskRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.Recv(); err != nil {
		t.Fatalf("second subscription: %v", err)
	}

	before := eventCount(t, cl.js)
	for _, body := range []string{subscribe, streamSend} {
		resp, r := streamPost(t, ctx, url+"/a2a", tok, body)
		var m map[string]any
		_ = json.NewDecoder(r).Decode(&m)
		if resp.StatusCode != http.StatusTooManyRequests || errCode(m) != wire.CodeResourceExhausted {
			t.Fatalf("JSON-RPC stream past the bound: HTTP %d %v", resp.StatusCode, m)
		}
	}
	status, _, body := restCall(t, http.MethodPost, url+RESTPath+"/tasks/"+id+":subscribe", tok, "application/json", "")
	if _, reason := restReason(t, body); status != http.StatusTooManyRequests || reason != "RESOURCE_EXHAUSTED" {
		t.Fatalf("REST subscription past the bound: HTTP %d %s", status, body)
	}
	for name, open := range map[string]func() (grpc.ServerStreamingClient[pb.StreamResponse], error){
		"subscribe": func() (grpc.ServerStreamingClient[pb.StreamResponse], error) {
			return raw.SubscribeToTask(gctx, &pb.SubscribeToTaskRequest{Id: id})
		},
		"send": func() (grpc.ServerStreamingClient[pb.StreamResponse], error) {
			return raw.SendStreamingMessage(gctx, &pb.SendMessageRequest{Message: &pb.Message{MessageId: "m3", Role: pb.Role_ROLE_USER,
				Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "x"}}}}})
		},
	} {
		s, err := open()
		if err == nil {
			_, err = s.Recv()
		}
		if code, _, _ := grpcStatusOf(t, err); code != codes.ResourceExhausted {
			t.Fatalf("gRPC %s past the bound: %v", name, err)
		}
	}
	if after := eventCount(t, cl.js); after != before {
		t.Fatalf("refused streams wrote %d events", after-before)
	}
	// Another caller has its own slots (and no such task).
	if m := rpc(t, url, token(t, otherKey, "cap-other"), "1.0", subscribe); errCode(m) != wire.CodeTaskNotFound {
		t.Fatalf("another caller: %v", m)
	}

	// The task ends, and with it both streams: their slots come back.
	cl.step.open(stepChunks)
	if _, err := io.Copy(io.Discard, sseBody); err != nil {
		t.Fatalf("SSE stream: %v", err)
	}
	for {
		if _, err := gs.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("gRPC stream: %v", err)
			}
			break
		}
	}
	next := startStepTask(t, url, tok)
	for range 2 {
		resp, _ := streamPost(t, ctx, url+"/a2a", tok, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":%q}}`, next))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a subscription after the streams ended: HTTP %d", resp.StatusCode)
		}
	}
	cl.step.open(stepChunks)
}

func TestStreamSlots(t *testing.T) {
	s := newStreamSlots(2)
	r1, ok1 := s.take("a")
	r2, ok2 := s.take("a")
	_, ok3 := s.take("a")
	_, okB := s.take("b")
	if ok1 != slotTaken || ok2 != slotTaken || ok3 != callerFull || okB != slotTaken {
		t.Fatalf("takes: %v %v %v %v", ok1, ok2, ok3, okB)
	}
	r1()
	r1() // a second release gives nothing back twice
	if _, ok := s.take("a"); ok != slotTaken {
		t.Fatal("a released slot was not given back")
	}
	if _, ok := s.take("a"); ok != callerFull {
		t.Fatal("a slot was given back twice")
	}
	r2()

	// The replica's bound holds across callers, and a slot given back
	// is there for any of them.
	s = newStreamSlots(2)
	s.limit(0, 3)
	var releases []func()
	for _, key := range []string{"a", "b", "c"} {
		r, ok := s.take(key)
		if ok != slotTaken {
			t.Fatalf("%s: %v", key, ok)
		}
		releases = append(releases, r)
	}
	if _, ok := s.take("d"); ok != replicaFull {
		t.Fatalf("a fourth stream on a replica bounded at 3: %v", ok)
	}
	releases[0]()
	if _, ok := s.take("d"); ok != slotTaken {
		t.Fatalf("after one ended: %v", ok)
	}
	if perCaller, total := s.bounds(); perCaller != 2 || total != 3 {
		t.Fatalf("bounds %d %d", perCaller, total)
	}
}
