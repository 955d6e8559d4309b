package a2a

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/a2a/push"
	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/govtest"
	"github.com/chio-ledger/chio/internal/natstest"
)

// TestTaskQuota: a principal holding its quota of live tasks is refused
// another with ResourceExhausted (-31429) naming the count and limit,
// before any tool runs, on either replica (the count is the stream's);
// another principal is not; once one of its tasks ends it may send again.
func TestTaskQuota(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	slow := newSlow()
	policy := govtest.Policy(t, pub(issuerKey))
	var urls []string
	var stores []*taskstore.Store
	var kern *kernel.Kernel
	for i := range 2 {
		env := govtest.New(t, govtest.On(ns), govtest.WithPolicy(policy), govtest.WithEdgeID(fmt.Sprintf("edge-%d", i)), govtest.WithServers(slow))
		ts, err := taskstore.Open(context.Background(), env.JS, taskstore.WithMaxLiveTasksPerOwner(2))
		if err != nil {
			t.Fatal(err)
		}
		stores, kern = append(stores, ts), env.Kernel
		e := New(Config{EdgeID: fmt.Sprintf("edge-%d", i), ClaimLease: 2 * time.Second}, env.Kernel, env.Registry, env.Dispatch, ts)
		ec := echo.New()
		e.Register(ec, HTTPConfig{ServeRoot: true})
		srv := httptest.NewServer(ec)
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	tok := govtest.Valid(t, issuerKey, agentKey, "cap-quota", govtest.AllOf("slow-srv")...)
	other := govtest.Valid(t, issuerKey, otherKey, "cap-quota-other", govtest.AllOf("slow-srv")...)
	send := func(url, tok string, n int) map[string]any {
		return rpc(t, url, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m%d","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"slow_task"}}}}`, n, n))
	}
	var ids []string
	for i := range 2 {
		m := send(urls[i], tok, i)
		task, ok := m["result"].(map[string]any)["task"].(map[string]any)
		if !ok {
			t.Fatalf("send %d: %v", i, m)
		}
		ids = append(ids, task["id"].(string))
	}
	t.Cleanup(func() {
		for _, id := range ids {
			rpc(t, urls[0], tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"CancelTask","params":{"id":%q}}`, id))
		}
	})
	// Each replica counts from its own follow of the stream: wait until
	// both have seen both tasks (on a loaded machine that takes a moment).
	id, d := kern.Identify(context.Background(), tok, nil)
	if d != nil {
		t.Fatalf("identify: %+v", d)
	}
	for i, ts := range stores {
		deadline := time.Now().Add(20 * time.Second)
		for !errors.Is(ts.AdmitOwner(context.Background(), taskstore.Owner{Subject: id.Principal}), taskstore.ErrQuotaExceeded) {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d never counted the principal's 2 live tasks", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, url := range urls {
		m := send(url, tok, 3)
		e, _ := m["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if errCode(m) != -31429 || !strings.Contains(msg, "task quota exceeded") || !strings.Contains(msg, "holds 2 live tasks (limit 2)") {
			t.Fatalf("a third live task: %v", m)
		}
	}
	if len(slow.started) > 2 {
		t.Fatalf("%d tools started for 2 admitted tasks", len(slow.started))
	}
	if m := send(urls[1], other, 4); m["result"] == nil {
		t.Fatalf("another principal: %v", m)
	}
	if m := rpc(t, urls[1], tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":5,"method":"CancelTask","params":{"id":%q}}`, ids[0])); m["result"] == nil {
		t.Fatalf("cancel: %v", m)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := send(urls[0], tok, 6)
		if task, ok := m["result"].(map[string]any); ok {
			ids = append(ids, task["task"].(map[string]any)["id"].(string))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a task ended: %v", m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestQuotaCountsOnlyLiveTasks: calls whose tool answers at once end their
// tasks in the first commit, and never count against the quota, however
// many a principal makes. (They once stayed counted, and a caller making
// steady calls was refused every new task after its quota's worth.)
func TestQuotaCountsOnlyLiveTasks(t *testing.T) {
	// As many as the workers: a call running past the edge's early store
	// holds a live task for a moment, so no call is refused unless ended
	// tasks are counted (and those pile up far past the limit).
	const workers, each = 4, 15
	const limit = workers
	ns, _, _ := natstest.Start(t)
	env := govtest.New(t, govtest.On(ns), govtest.WithPolicy(govtest.Policy(t, pub(issuerKey))), govtest.WithEdgeID("edge-quota"),
		govtest.WithServers(hello.New()))
	ts, err := taskstore.Open(context.Background(), env.JS, taskstore.WithMaxLiveTasksPerOwner(limit))
	if err != nil {
		t.Fatal(err)
	}
	e := New(Config{EdgeID: "edge-quota", ClaimLease: 2 * time.Second}, env.Kernel, env.Registry, env.Dispatch, ts)
	ec := echo.New()
	e.Register(ec, HTTPConfig{ServeRoot: true})
	srv := httptest.NewServer(ec)
	t.Cleanup(srv.Close)

	tok := govtest.Valid(t, issuerKey, agentKey, "cap-quota-live", govtest.AllOf("hello-a2a-srv")...)
	var wg sync.WaitGroup
	errs := make(chan string, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				m := rpc(t, srv.URL, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"ql-%d-%d","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`, w, i))
				res, _ := m["result"].(map[string]any)
				task, _ := res["task"].(map[string]any)
				status, _ := task["status"].(map[string]any)
				if status["state"] != "TASK_STATE_COMPLETED" {
					errs <- fmt.Sprintf("worker %d call %d: %v", w, i, m)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestPushConfigQuota: a caller holding its maximum of push configs over
// all its tasks is refused another with ResourceExhausted (-31429), the
// message naming the count and the limit; deleting one makes room.
func TestPushConfigQuota(t *testing.T) {
	cl := startCluster(t, 1, "", func(c *Config, js jetstream.JetStream) {
		withPush(t)(c, js)
		store, err := push.OpenStore(context.Background(), js, push.WithMaxConfigsPerOwner(2))
		if err != nil {
			t.Fatal(err)
		}
		c.Push.Store = store
	})
	tok := token(t, agentKey, "cap-push-quota")
	url := cl.edges[0].URL
	var tasks []string
	for i := range 3 {
		m := rpc(t, url, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"pq%d","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"slow_task"}}}}`, i, i))
		task, ok := m["result"].(map[string]any)["task"].(map[string]any)
		if !ok {
			t.Fatalf("send %d: %v", i, m)
		}
		tasks = append(tasks, task["id"].(string))
	}
	t.Cleanup(func() {
		for _, id := range tasks {
			rpc(t, url, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":9,"method":"CancelTask","params":{"id":%q}}`, id))
		}
	})
	create := func(task string) map[string]any {
		return rpc(t, url, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{"taskId":%q,"url":"http://127.0.0.1:9/hook"}}`, task))
	}
	var first map[string]any
	for i := range 2 {
		m := create(tasks[i])
		if m["result"] == nil {
			t.Fatalf("config %d: %v", i, m)
		}
		if i == 0 {
			first = m["result"].(map[string]any)
		}
	}
	m := create(tasks[2])
	msg, _ := m["error"].(map[string]any)["message"].(string)
	if errCode(m) != -31429 || !strings.Contains(msg, "push config quota exceeded") || !strings.Contains(msg, "holds 2 push configs (limit 2)") {
		t.Fatalf("a third config: %v", m)
	}
	del := rpc(t, url, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"DeleteTaskPushNotificationConfig","params":{"taskId":%q,"id":%q}}`, tasks[0], first["id"]))
	if del["error"] != nil {
		t.Fatalf("delete: %v", del)
	}
	if m := create(tasks[2]); m["result"] == nil {
		t.Fatalf("after a delete: %v", m)
	}
}
