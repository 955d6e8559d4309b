package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// tickServer's tool waits for its gate, then streams chunks carrying the
// time each was emitted, so subscribers can measure chunk-to-client time.
type tickServer struct {
	tools.Running
	gate   chan struct{}
	chunks int
	pace   time.Duration
}

func newTick() *tickServer { return &tickServer{gate: make(chan struct{}, 1), chunks: 100} }

func (s *tickServer) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{Schema: schemas.ManifestSchema, ServerID: "tick-srv", Name: "tick", Version: "1",
		Tools: []schemas.ToolDefinition{{Name: "tick_task", Description: "streams timestamps",
			InputSchema: json.RawMessage(`{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true}`),
			Metadata:    map[string]json.RawMessage{"a2a.expose": json.RawMessage(`true`)}}}}
}
func (s *tickServer) ServerID() string    { return "tick-srv" }
func (s *tickServer) ToolNames() []string { return []string{"tick_task"} }
func (s *tickServer) Invoke(context.Context, tools.Invocation) (json.RawMessage, error) {
	return json.RawMessage(`"tick"`), nil
}
func (s *tickServer) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.gate:
	}
	for i := range s.chunks {
		if s.pace > 0 {
			time.Sleep(s.pace)
		}
		if err := emit(tools.Chunk{Data: json.RawMessage(`"t=` + strconv.FormatInt(time.Now().UnixNano(), 10) + `"`), Last: i == s.chunks-1}); err != nil {
			return err
		}
	}
	return nil
}

// sseSubscribe opens a raw SubscribeToTask stream (the a2a-go client's
// per-event cost would dominate at 100 subscribers) and reports, on ready,
// when the snapshot arrived; it returns each chunk's delay.
func sseSubscribe(ctx context.Context, url, tok, taskID string, ready chan<- struct{}) ([]time.Duration, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"SubscribeToTask","params":{"id":"` + taskID + `"}}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/a2a", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var delays []time.Duration
	first := true
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return delays, fmt.Errorf("stream ended early: %w", err)
		}
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		now := time.Now()
		if first {
			first = false
			ready <- struct{}{}
			continue
		}
		if i := strings.Index(line, `"t=`); i >= 0 {
			end := strings.IndexByte(line[i+3:], '"')
			ns, _ := strconv.ParseInt(line[i+3:i+3+end], 10, 64)
			delays = append(delays, now.Sub(time.Unix(0, ns)))
		}
		if strings.Contains(line, "TASK_STATE_COMPLETED") || strings.Contains(line, `"error"`) {
			return delays, nil
		}
	}
}

// BenchmarkStreamFanout: one task's tool streams on replica A while
// subscribers on replica B read it. Reports events/s delivered to all
// subscribers together and the chunk-to-subscriber time (p50, p99). With
// pace=0 the tool streams as fast as it can (latency then includes the
// backlog); a paced tool shows latency below saturation; the 1000-chunk
// case shows that a chunk's cost does not grow with the task.
//
//	go test ./edges/a2a/ -run '^$' -bench StreamFanout -benchtime 3x
func BenchmarkStreamFanout(b *testing.B) {
	for _, c := range []struct {
		subs, chunks int
		pace         time.Duration
	}{{1, 100, 0}, {100, 100, 0}, {100, 100, 5 * time.Millisecond}, {1, 1000, 0}} {
		subs := c.subs
		b.Run(fmt.Sprintf("subscribers=%d/chunks=%d/pace=%s", subs, c.chunks, c.pace), func(b *testing.B) {
			// One caller holds every subscription: let it hold them all.
			cl := startCluster(b, 2, "", func(c *Config, _ jetstream.JetStream) { c.MaxStreamsPerCaller = subs })
			cl.tick.chunks, cl.tick.pace = c.chunks, c.pace
			tok := token(b, agentKey, "cap-bench")
			var delays []time.Duration
			events := 0
			var elapsed time.Duration
			for range b.N {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				send := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"tick_task"}}}}`
				res := rpcB(b, cl.edges[0].URL, tok, send)
				var r struct {
					Result struct {
						Task struct{ ID string } `json:"task"`
					} `json:"result"`
				}
				if err := json.Unmarshal(res, &r); err != nil || r.Result.Task.ID == "" {
					b.Fatalf("send: %s %v", res, err)
				}
				ready := make(chan struct{}, subs)
				var mu sync.Mutex
				var wg sync.WaitGroup
				for range subs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						d, err := sseSubscribe(ctx, cl.edges[1].URL, tok, r.Result.Task.ID, ready)
						if err != nil {
							b.Error(err)
						}
						mu.Lock()
						delays = append(delays, d...)
						events += len(d)
						mu.Unlock()
					}()
				}
				for range subs {
					<-ready
				}
				start := time.Now()
				cl.tick.gate <- struct{}{}
				wg.Wait()
				elapsed += time.Since(start)
				cancel()
			}
			slices.Sort(delays)
			if len(delays) == 0 {
				b.Fatal("no events")
			}
			b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(delays[len(delays)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

func rpcB(b *testing.B, url, tok, body string) []byte {
	req, _ := http.NewRequest(http.MethodPost, url+"/a2a", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var buf strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&buf)
	return []byte(buf.String())
}
