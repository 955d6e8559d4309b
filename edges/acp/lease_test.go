package acp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
)

// stallServer's first call runs until its context ends (the edge running
// it dies); every later call answers at once.
type stallServer struct {
	*testServer
	runs    atomic.Int32
	started chan struct{}
}

func (s *stallServer) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	if s.runs.Add(1) == 1 {
		s.started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.testServer.Invoke(ctx, inv)
}

// replica is one ACP edge on ns (a replica of a deployment sharing it).
func replica(t *testing.T, ns *natsembed.Server, srv tools.Server, id string, opts ...Option) *fixture {
	t.Helper()
	env := govtest.New(t, govtest.On(ns), govtest.WithServers(srv), govtest.WithIssuers(issuerKey), govtest.WithEdgeID(id))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := New(env.Kernel, env.Registry, env.Dispatch, env.JS, append([]Option{WithLogger(quiet), WithInstanceID(id)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ec := echo.New()
	e.Register(ec)
	hs := httptest.NewServer(ec)
	t.Cleanup(hs.Close)
	return &fixture{url: hs.URL, js: env.JS, edge: e, reg: env.Registry}
}

// storedTask reads a task's record from the bucket.
func storedTask(t *testing.T, f *fixture, id string) taskRecord {
	t.Helper()
	kve, err := f.edge.tasks.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var rec taskRecord
	if err := json.Unmarshal(kve.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestRunningTaskTakenOver: the edge running a resumed task dies mid-run
// (its context is cancelled: Close); its lease runs out, and of two other
// replicas sweeping, exactly one takes the task over and runs it to its
// end, as a second attempt with a receipt of its own. The task is run
// twice in all (the dead edge's cut run and the takeover), never more.
func TestRunningTaskTakenOver(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	srv := &stallServer{testServer: testServer1(), started: make(chan struct{}, 4)}
	const lease = 300 * time.Millisecond
	a := replica(t, ns, srv, "edge-a", WithTaskLease(lease))
	b := replica(t, ns, srv, "edge-b", WithTaskLease(lease))
	c := replica(t, ns, srv, "edge-c", WithTaskLease(lease))
	tok := wildcard(t)
	task := a.newTask(t, tok, "read_file")
	resumed := make(chan answer, 1)
	go func() {
		ans, err := a.try(tok, MethodResume, map[string]any{"taskId": task.ID})
		if err != nil {
			t.Error(err)
		}
		resumed <- ans
	}()
	select {
	case <-srv.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the resume never ran the tool")
	}
	if rec := storedTask(t, a, task.ID); rec.Task.State != TaskRunning || rec.Holder != "edge-a" || rec.Attempt != 1 || rec.Token == "" {
		t.Fatalf("running task: %+v", rec)
	}
	// Every replica sweeps (each third of the lease). Time passes with the holder alive: its renewals keep the task.
	time.Sleep(2 * lease)
	if n := srv.runs.Load(); n != 1 {
		t.Fatalf("the task ran %d times while its holder lived", n)
	}
	a.edge.Close() // the holder dies mid-run
	if ans := <-resumed; ans.code() != CodeInternal || !strings.Contains(ans.Error.Message, "another replica takes it over") {
		t.Fatalf("the dead holder's resume: %+v", ans.Error)
	}
	var got taskResult
	deadline := time.Now().Add(20 * time.Second)
	for {
		ans := b.call(t, tok, MethodResume, map[string]any{"taskId": task.ID})
		if ans.Error == nil {
			ok(t, ans, &got)
			break
		}
		if ans.code() != CodeTaskState || time.Now().After(deadline) {
			t.Fatalf("resume while taken over: %+v", ans.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got.Task.State != TaskCompleted || got.Result["tool"] != "read_file" {
		t.Fatalf("taken-over task: %+v", got)
	}
	time.Sleep(3 * lease) // further sweeps find nothing to take
	if n := srv.runs.Load(); n != 2 {
		t.Fatalf("the task ran %d times, want 2 (the dead holder's, one takeover)", n)
	}
	rec := storedTask(t, c, task.ID)
	if rec.Attempt != 2 || (rec.Holder != "" || rec.Token != "" || !rec.LeaseExpires.IsZero()) {
		t.Fatalf("finished task keeps its lease or token: %+v", rec)
	}
	ds := decisionsOf(t, b, task.ID)
	if len(ds) != 2 || ds[0].ReceiptID == ds[1].ReceiptID || (got.Task.ReceiptID != ds[0].ReceiptID && got.Task.ReceiptID != ds[1].ReceiptID) {
		t.Fatalf("decisions %+v, task receipt %s", ds, got.Task.ReceiptID)
	}
}

// TestTaskQuota: a principal holding its quota of live tasks is refused
// another by tool/stream (CodeResourceExhausted naming count and limit)
// on every replica, the count being the bucket's; another principal is
// not; a task that ends makes room.
func TestTaskQuota(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	a := replica(t, ns, testServer1(), "edge-a", WithMaxLiveTasks(2))
	b := replica(t, ns, testServer1(), "edge-b", WithMaxLiveTasks(2))
	tok := wildcard(t)
	first := a.newTask(t, tok, "read_file")
	b.newTask(t, tok, "read_file")
	stream := map[string]any{"capabilityId": "read_file", "arguments": map[string]any{"path": "/x"}}
	// Each replica counts from its own watch of the bucket: wait, without
	// a probe that could itself start a task, until both saw both tasks.
	id, d := a.edge.kernel.Identify(context.Background(), tok, nil)
	if d != nil {
		t.Fatalf("identify: %+v", d)
	}
	for _, f := range []*fixture{a, b} {
		waitFor(t, "both replicas count both tasks", func() bool { return f.edge.admit(context.Background(), id.Principal) != nil })
	}
	for _, f := range []*fixture{a, b} {
		waitFor(t, "both replicas refuse a third task", func() bool {
			ans := f.call(t, tok, MethodStream, stream)
			return ans.code() == CodeResourceExhausted && strings.Contains(ans.Error.Message, "task quota exceeded") &&
				strings.Contains(ans.Error.Message, "holds 2 live tasks (limit 2)")
		})
	}
	other := token(t, "cap-other", otherKey, grant("*"))
	b.newTask(t, other, "read_file")
	ok(t, b.call(t, tok, MethodCancel, map[string]any{"taskId": first.ID}), nil)
	waitFor(t, "a canceled task frees its slot", func() bool { return a.call(t, tok, MethodStream, stream).Error == nil })
}

// TestTaskBucketCap: the bucket refuses a new task past its cap, with
// CodeResourceExhausted, while the tasks it holds can still be resumed
// to their end.
func TestTaskBucketCap(t *testing.T) {
	f := start(t, WithMaxTasks(3), WithMaxLiveTasks(0))
	tok := wildcard(t)
	var tasks []Task
	for range 3 {
		tasks = append(tasks, f.newTask(t, tok, "read_file"))
	}
	ans := f.call(t, tok, MethodStream, map[string]any{"capabilityId": "read_file", "arguments": map[string]any{"path": "/x"}})
	if ans.code() != CodeResourceExhausted || !strings.Contains(ans.Error.Message, "task store full") {
		t.Fatalf("a task past the cap: %+v", ans.Error)
	}
	for _, task := range tasks {
		var got taskResult
		ok(t, f.call(t, tok, MethodResume, map[string]any{"taskId": task.ID}), &got)
		if got.Task.State != TaskCompleted {
			t.Fatalf("resume at the cap: %+v", got)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTaskQuotaAfterTTL: a task the bucket's TTL removed no longer counts
// against its principal (the removal leaves nothing for the watch to see,
// so the index ages entries out by the same TTL).
func TestTaskQuotaAfterTTL(t *testing.T) {
	f := start(t, WithMaxLiveTasks(1), WithTaskTTL(time.Second))
	tok := wildcard(t)
	f.newTask(t, tok, "read_file")
	stream := map[string]any{"capabilityId": "read_file", "arguments": map[string]any{"path": "/x"}}
	if ans := f.call(t, tok, MethodStream, stream); ans.code() != CodeResourceExhausted {
		t.Fatalf("second task within the TTL: %+v", ans.Error)
	}
	waitFor(t, "the expired task frees its slot", func() bool { return f.call(t, tok, MethodStream, stream).Error == nil })
}
