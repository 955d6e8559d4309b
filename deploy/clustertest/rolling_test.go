package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
)

// A rolling restart under steady load: every edge, then the active ledger,
// is stopped gracefully (SIGTERM) and started again, one at a time, each
// ready again before the next goes. The client through the proxy must not
// see one call fail; every call's receipt is in the log exactly once and
// every task is readable.

// restarter stops one process of a topology gracefully and starts it
// again.
type restarter interface {
	topology
	// stop sends SIGTERM and returns once the process has exited.
	stop(ctx context.Context, name string)
	// logs is the process's output so far (for its drain figures).
	logs(ctx context.Context, name string) string
}

func (c *compose) stop(ctx context.Context, name string) {
	c.docker(ctx, "stop", "--time", "30", c.container(ctx, name))
}

func (c *compose) logs(ctx context.Context, name string) string {
	out, _ := c.run(ctx, "docker", "logs", c.container(ctx, name))
	return out
}

func (p *processes) stop(ctx context.Context, name string) {
	if _, err := p.script(ctx, "stop", name); err != nil {
		p.t.Fatal(err)
	}
}

func (p *processes) logs(_ context.Context, name string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "logs", name+".log"))
	return string(b)
}

func TestComposeRollingRestart(t *testing.T) {
	if os.Getenv("CHIO_CLUSTER_TEST") != "compose" {
		t.Skip("the compose rolling restart runs on demand: bash scripts/images.sh && CHIO_CLUSTER_TEST=compose go test -v ./deploy/clustertest (.ci/run does this)")
	}
	if err := engineAvailable(); err != nil {
		t.Fatalf("CHIO_CLUSTER_TEST=compose but no container engine for the rolling restart: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ft := sayingFailuresLast(t)
	c := startCompose(ctx, ft)
	rollingRestart(ctx, ft, c, filepath.Join(c.dir, "keys"))
}

// TestProcessRollingRestart is the same on scripts/cluster.sh's local
// processes, for machines without a container engine.
func TestProcessRollingRestart(t *testing.T) {
	if os.Getenv("CHIO_CLUSTER_TEST") != "process" {
		t.Skip("the process-level rolling restart runs on demand: CHIO_CLUSTER_TEST=process go test -v ./deploy/clustertest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ft := sayingFailuresLast(t)
	p := startProcesses(ctx, ft, "ledger-1", "ledger-2", "edge-1", "edge-2", "proxy")
	rollingRestart(ctx, ft, p, filepath.Join(p.dir, "keys"))
}

// lastEventIDKey carries a resubscription's Last-Event-ID to the transport.
type lastEventIDKey struct{}

// loadTransport adds the capability (and a resubscription's Last-Event-ID)
// to each request and remembers which edge answered last.
type loadTransport struct {
	token string
	base  http.RoundTripper // trusts the proxy's CA (proxyTransport)
	last  atomic.Value
	// answer is the last answer that was not a stream, for a stream call
	// the client saw end with no event.
	answer atomic.Value
}

func (l *loadTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+l.token)
	if id, ok := r.Context().Value(lastEventIDKey{}).(string); ok {
		r.Header.Set("Last-Event-ID", id)
	}
	resp, err := l.base.RoundTrip(r)
	if err == nil {
		l.last.Store(resp.Header.Get("X-Chio-Upstream"))
		if resp.Header.Get("Content-Type") != "text/event-stream" {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			l.answer.Store(fmt.Sprintf("%d %s from %s: %.300s", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("X-Chio-Upstream"), b))
		}
	}
	return resp, err
}

// rollCall is one call of the load as the client saw it.
type rollCall struct {
	stream   bool
	taskID   string
	failure  string
	resumed  int // times a stream was handed over and resubscribed
	upstream string
	at       time.Time
}

// generation reads the task-generation extension's value from metadata.
func generation(meta map[string]any) int64 {
	for k, v := range meta {
		if strings.HasSuffix(k, "/generation") {
			switch g := v.(type) {
			case float64:
				return int64(g)
			case string:
				n, _ := strconv.ParseInt(g, 10, 64)
				return n
			}
		}
	}
	return 0
}

// streamCall runs one SendStreamingMessage to its terminal event; a stream
// that ends before it (a draining edge handed it over) is resumed with
// SubscribeToTask from the last generation received, as an A2A client
// resumes an interrupted stream.
func streamCall(ctx context.Context, client *a2aclient.Client, tr *loadTransport) (string, int, error) {
	msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("rolling"))
	events := client.SendStreamingMessage(ctx, &a2apb.SendMessageRequest{Message: msg})
	var taskID string
	var last int64
	for resumed := 0; ; resumed++ {
		terminal := false
		for ev, err := range events {
			if err != nil {
				return taskID, resumed, err
			}
			var state a2apb.TaskState
			var meta map[string]any
			switch e := ev.(type) {
			case *a2apb.Task:
				taskID, state, meta = string(e.ID), e.Status.State, e.Metadata
			case *a2apb.TaskStatusUpdateEvent:
				taskID, state, meta = string(e.TaskID), e.Status.State, e.Metadata
			case *a2apb.TaskArtifactUpdateEvent:
				taskID, meta = string(e.TaskID), e.Metadata
			case *a2apb.Message:
				return taskID, resumed, fmt.Errorf("answered with a lone message")
			}
			if g := generation(meta); g > last {
				last = g
			}
			if state.Terminal() {
				if state != a2apb.TaskStateCompleted {
					return taskID, resumed, fmt.Errorf("task %s", state)
				}
				terminal = true
			}
		}
		if terminal {
			return taskID, resumed, nil
		}
		if taskID == "" || last == 0 || resumed >= 3 {
			answer, _ := tr.answer.Load().(string)
			return taskID, resumed, fmt.Errorf("stream ended before its task (task %q, generation %d, resumed %d times; last answer that was no stream: %s)", taskID, last, resumed, answer)
		}
		rctx := context.WithValue(ctx, lastEventIDKey{}, strconv.FormatInt(last, 10))
		events = client.SubscribeToTask(rctx, &a2apb.SubscribeToTaskRequest{ID: a2apb.TaskID(taskID)})
	}
}

// drainLine is an edge's log line at its listener's close; sigtermLine
// the line a process logs when SIGTERM arrives (its time is on the same
// clock as the test's: one host).
var (
	drainLine   = regexp.MustCompile(`stopping: listener closing; draining" .*unready_for=(\S+)`)
	sigtermLine = regexp.MustCompile(`time=(\S+) level=INFO msg="stopping: readiness is false.*reason="stopping: SIGTERM received"`)
)

func rollingRestart(ctx context.Context, t testing.TB, topo restarter, keys string) {
	writer := awaitCluster(ctx, t, keys)
	checkSealed(t, keys)
	pt := proxyTransport(t, keys)
	checkProxyTLS(ctx, t, pt)
	token := issueCapability(t, keys)
	reads := serviceToken()
	vkey := readKey(t, keys, "checkpoint.vkey")
	// Both edges answer through the proxy before the load starts.
	seen := map[string]bool{}
	probe := &loadTransport{token: token, base: pt}
	prober := proxyClient(ctx, t, probe, 15*time.Second)
	waitUntil(ctx, t, "both edges to answer through the proxy", time.Minute, func() bool {
		msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("warm-up"))
		if _, err := prober.SendMessage(ctx, &a2apb.SendMessageRequest{Message: msg}); err == nil {
			u, _ := probe.last.Load().(string)
			seen[u] = true
		}
		return seen[topo.upstream("edge-1")] && seen[topo.upstream("edge-2")]
	})

	// The load: paced calls, one in eight a stream, each worker with its
	// own a2a-go client so the edge that answered is known per call.
	const workers, rate = 8, 40 // calls/s offered overall
	var (
		mu    sync.Mutex
		calls []rollCall
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var n atomic.Int64
	waitLoad := pace(loadCtx, workers, rate, func() func() {
		tr := &loadTransport{token: token, base: pt}
		client := proxyClient(ctx, t, tr, 30*time.Second)
		return func() {
			// The call's own deadline, not the load's: a call started
			// before the load stops is seen through to its end.
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(loadCtx), 30*time.Second)
			cl := rollCall{at: time.Now(), stream: n.Add(1)%8 == 0}
			var err error
			if cl.stream {
				tr.answer.Store("")
				cl.taskID, cl.resumed, err = streamCall(cctx, client, tr)
			} else {
				msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("rolling"))
				var res a2apb.SendMessageResult
				res, err = client.SendMessage(cctx, &a2apb.SendMessageRequest{Message: msg})
				if task, ok := res.(*a2apb.Task); err == nil && ok {
					cl.taskID = string(task.ID)
					if task.Status.State != a2apb.TaskStateCompleted {
						err = fmt.Errorf("task %s", task.Status.State)
					}
				} else if err == nil {
					err = fmt.Errorf("answered with a %T", res)
				}
			}
			ccancel()
			if err != nil {
				cl.failure = err.Error()
			}
			cl.upstream, _ = tr.last.Load().(string)
			mu.Lock()
			calls = append(calls, cl)
			mu.Unlock()
		}
	})
	answeredBy := func(edge string, since time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		for i := len(calls) - 1; i >= 0 && calls[i].at.After(since); i-- {
			if calls[i].failure == "" && calls[i].upstream == topo.upstream(edge) {
				return true
			}
		}
		return false
	}

	// The restarts, one at a time, each process ready before the next.
	type restart struct {
		name           string
		stopped, ready time.Duration
		unready        string // readiness false before the listener closed
	}
	var restarts []restart
	time.Sleep(5 * time.Second)
	for _, edge := range []string{"edge-1", "edge-2"} {
		start := time.Now()
		topo.stop(ctx, edge)
		stopped := time.Since(start)
		unready := "?"
		if m := drainLine.FindAllStringSubmatch(topo.logs(ctx, edge), -1); len(m) > 0 {
			unready = m[len(m)-1][1]
		}
		restarted := time.Now()
		topo.start(ctx, edge)
		waitUntil(ctx, t, edge+" to answer through the proxy again", 2*time.Minute, func() bool { return answeredBy(edge, restarted) })
		restarts = append(restarts, restart{edge, stopped, time.Since(start), unready})
		t.Logf("restart %-8s stopped in %s (readiness false %s before its listener closed), answering again %s after SIGTERM",
			edge, stopped.Round(time.Millisecond), unready, time.Since(start).Round(time.Millisecond))
		time.Sleep(3 * time.Second)
	}
	old := writer()
	if ledgerURLs[old] == "" {
		t.Fatalf("no ledger holds the writer lease before its restart (%q)", old)
	}
	start := time.Now()
	var takeover time.Duration
	var tookOverAt time.Time
	tookOver := make(chan struct{})
	go func() {
		defer close(tookOver)
		for ctx.Err() == nil {
			if w := writer(); w != "" && w != old {
				tookOverAt = time.Now()
				takeover = tookOverAt.Sub(start)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	topo.stop(ctx, old)
	stopped := time.Since(start)
	select {
	case <-tookOver:
	case <-time.After(time.Minute):
		t.Fatalf("the standby did not take the writer lease within a minute of %s's SIGTERM", old)
	}
	// From the SIGTERM as the ledger logged it (the engine's own latency
	// in delivering it is not the hand-over's).
	fromSIGTERM := "?"
	if m := sigtermLine.FindAllStringSubmatch(topo.logs(ctx, old), -1); len(m) > 0 {
		if at, err := time.Parse(time.RFC3339Nano, m[len(m)-1][1]); err == nil {
			fromSIGTERM = tookOverAt.Sub(at).Round(time.Millisecond).String()
		}
	}
	for _, line := range strings.Split(topo.logs(ctx, old), "\n") {
		if strings.Contains(line, "stopping") || strings.Contains(line, "lease") || strings.Contains(line, "writer") {
			t.Logf("%s: %s", old, line)
		}
	}
	topo.start(ctx, old)
	waitUntil(ctx, t, old+" to be ready again", 2*time.Minute, func() bool { return ready(ctx, ledgerURLs[old]) })
	restarts = append(restarts, restart{old + " (active ledger)", stopped, time.Since(start), "-"})
	t.Logf("restart %s (active ledger) stopped in %s; %s held the writer lease %s after the stop was asked, %s after %s logged the SIGTERM (lease TTL 10s); ready again %s after it",
		old, stopped.Round(time.Millisecond), writer(), takeover.Round(time.Millisecond), fromSIGTERM, old, time.Since(start).Round(time.Millisecond))
	time.Sleep(5 * time.Second)
	stopLoad()
	waitLoad()

	// Not one call failed.
	mu.Lock()
	defer mu.Unlock()
	failed, streams, resumed := 0, 0, 0
	reasons, counts := map[string]string{}, map[string]int{}
	for _, cl := range calls {
		if cl.stream {
			streams++
			resumed += cl.resumed
		}
		if cl.failure != "" {
			failed++
			r := uuidPattern.ReplaceAllString(cl.failure, "<id>")
			if reasons[r] == "" {
				reasons[r] = cl.at.Format("15:04:05.000")
			}
			counts[r]++
		}
	}
	for r, n := range counts {
		t.Errorf("failed calls: %4d × %s (first at %s)", n, r, reasons[r])
	}

	// Every task readable, and its receipt in the log exactly once.
	api := ledgerURLs[writer()]
	receipts := map[string]string{} // receipt → task
	unreadable := 0
	for _, cl := range calls {
		if cl.failure != "" {
			continue
		}
		var task *a2apb.Task
		var err error
		for try := 0; try < 3; try++ {
			if task, err = prober.GetTask(ctx, &a2apb.GetTaskRequest{ID: a2apb.TaskID(cl.taskID)}); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil || task.Status.State != a2apb.TaskStateCompleted {
			unreadable++
			t.Errorf("task %s: %v", cl.taskID, err)
			continue
		}
		chio, _ := task.Metadata["chio"].(map[string]any)
		id, _ := chio["receiptId"].(string)
		if id == "" {
			t.Errorf("task %s names no receipt: %v", cl.taskID, task.Metadata)
			continue
		}
		receipts[id] = cl.taskID
	}
	var size uint64
	waitUntil(ctx, t, "the log to settle", 2*time.Minute, func() bool {
		cp, _ := checkpointRaw(ctx, t, api, vkey)
		settled := cp != nil && size == cp.Size && size > 0
		if cp != nil {
			size = cp.Size
		}
		if !settled {
			time.Sleep(2 * time.Second)
		}
		return settled
	})
	inLog := map[string]int{}
	for _, l := range readLeaves(ctx, t, api, reads, size) {
		var head struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(l, &head); err != nil {
			t.Fatalf("leaf: %v", err)
		}
		inLog[head.ID]++
	}
	duplicated, missing := 0, 0
	for id, n := range inLog {
		if n != 1 {
			duplicated++
			t.Errorf("receipt %s appears %d times in the log", id, n)
		}
	}
	for id, task := range receipts {
		if inLog[id] == 0 {
			missing++
			t.Errorf("task %s succeeded but its receipt %s is not in the log", task, id)
		}
	}
	var figures []string
	for _, r := range restarts {
		figures = append(figures, fmt.Sprintf("%s: stopped %s, readiness false %s before the listener closed, back %s after SIGTERM",
			r.name, r.stopped.Round(time.Millisecond), r.unready, r.ready.Round(time.Millisecond)))
	}
	t.Logf("calls %d (streams %d, resumed after a handover %d), failed %d, tasks unreadable %d, receipts missing %d, duplicated %d, log size %d, writer lease taken over %s after the stop was asked; %s",
		len(calls), streams, resumed, failed, unreadable, missing, duplicated, size, takeover.Round(time.Millisecond), strings.Join(figures, "; "))
	if len(calls) == 0 {
		t.Fatal("no calls were made")
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the run's deadline passed")
	}
}
