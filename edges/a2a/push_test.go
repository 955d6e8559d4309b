package a2a

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/a2a/push"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/schemas"
)

// withPush turns push notifications on, with loopback webhooks allowed
// and a short retry backoff.
func withPush(t testing.TB) func(*Config, jetstream.JetStream) {
	return func(c *Config, js jetstream.JetStream) {
		ctx := context.Background()
		store, err := push.OpenStore(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		outbox, err := push.OpenOutbox(ctx, js, push.DefaultPolicy(), push.WithBackoff(50*time.Millisecond, 200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		c.Push = &Push{Store: store, Outbox: outbox, Policy: push.DefaultPolicy()}
	}
}

// receiver is a webhook that records what it gets; it fails its first
// failFirst requests, to prove retries.
type receiver struct {
	mu        sync.Mutex
	got       []delivery
	failFirst int
	changed   chan struct{}
}

type delivery struct {
	auth, token, contentType, id string
	body                         map[string]json.RawMessage
}

func newReceiver(t *testing.T, failFirst int) (*receiver, string) {
	r := &receiver{failFirst: failFirst, changed: make(chan struct{}, 1024)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.failFirst > 0 {
			r.failFirst--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var body map[string]json.RawMessage
		_ = json.Unmarshal(b, &body)
		r.got = append(r.got, delivery{req.Header.Get("Authorization"), req.Header.Get("X-A2A-Notification-Token"), req.Header.Get("Content-Type"), req.Header.Get(push.IDHeader), body})
		r.changed <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL + "/hook"
}

// waitFor waits until n notifications arrived, then a little longer so
// that a duplicate would show.
func (r *receiver) waitFor(t *testing.T, n int) []delivery {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.got)
		r.mu.Unlock()
		if got >= n {
			break
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("%d notifications, want %d", got, n)
		}
	}
	time.Sleep(300 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// A config created on replica B for a task running on replica A: the
// webhook gets each event once, as a StreamResponse, with the config's
// Authorization and token, after the receiver's first failures are retried.
func TestPushNotifications(t *testing.T) {
	cl := startCluster(t, 2, "", withPush(t))
	tok := token(t, agentKey, "cap-push")
	a, b := sdkClient(t, cl.edges[0].URL, tok), sdkClient(t, cl.edges[1].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcv, hook := newReceiver(t, 2)

	res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")),
		Metadata: stepTarget, Config: &a2apb.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2apb.Task).ID
	cfg, err := b.CreateTaskPushConfig(ctx, &a2apb.PushConfig{TaskID: id, ID: "hook-1", URL: hook, Token: "tok-1",
		Auth: &a2apb.PushAuthInfo{Scheme: "Bearer", Credentials: "s3cret"}})
	if err != nil || cfg.ID != "hook-1" || cfg.URL != hook {
		t.Fatalf("create: %+v %v", cfg, err)
	}
	if got, err := a.GetTaskPushConfig(ctx, &a2apb.GetTaskPushConfigRequest{TaskID: id, ID: "hook-1"}); err != nil || got.Token != "tok-1" || got.Auth == nil || got.Auth.Scheme != "Bearer" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if list, err := a.ListTaskPushConfigs(ctx, &a2apb.ListTaskPushConfigRequest{TaskID: id}); err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// Another caller sees no task, hence no configs.
	other := sdkClient(t, cl.edges[1].URL, token(t, otherKey, "cap-push-other"))
	if _, err := other.ListTaskPushConfigs(ctx, &a2apb.ListTaskPushConfigRequest{TaskID: id}); !errors.Is(err, a2apb.ErrTaskNotFound) {
		t.Fatalf("another caller's list: %v", err)
	}

	cl.step.open(stepChunks)
	got := rcv.waitFor(t, stepChunks+1)
	// Each event once: the chunks, the end, and perhaps the working status
	// (the shared follower may reach it after the config exists).
	artifacts, seen := 0, map[string]bool{}
	for _, d := range got {
		if d.auth != "Bearer s3cret" || d.token != "tok-1" || !strings.Contains(d.contentType, "json") {
			t.Fatalf("delivery headers %+v", d)
		}
		if len(d.body) != 1 {
			t.Fatalf("a notification is one StreamResponse: %v", d.body)
		}
		if d.id == "" || seen["id "+d.id] {
			t.Fatalf("notification id %q missing or repeated", d.id)
		}
		seen["id "+d.id] = true
		b, _ := json.Marshal(d.body)
		if seen[string(b)] {
			t.Fatalf("delivered twice: %s", b)
		}
		seen[string(b)] = true
		if _, ok := d.body["artifactUpdate"]; ok {
			artifacts++
		}
	}
	if artifacts != stepChunks {
		t.Fatalf("%d artifact updates, want %d", artifacts, stepChunks)
	}
	ends := 0
	for _, d := range got {
		var end struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
			Metadata map[string]any `json:"metadata"`
		}
		if raw, ok := d.body["statusUpdate"]; ok && json.Unmarshal(raw, &end) == nil && end.Status.State == "TASK_STATE_COMPLETED" {
			ends++
			if chioMetaOf(t, end.Metadata)["receiptId"] == nil {
				t.Fatalf("terminal notification %s", raw)
			}
		}
	}
	if ends != 1 {
		t.Fatalf("%d terminal notifications", ends)
	}
	// A finished task still takes a config (the spec lets a client manage
	// them in any state; nothing more will be sent); delete is idempotent.
	if _, err := b.CreateTaskPushConfig(ctx, &a2apb.PushConfig{TaskID: id, ID: "late", URL: hook}); err != nil {
		t.Fatalf("a config for a finished task: %v", err)
	}
	if got, err := b.GetTaskPushConfig(ctx, &a2apb.GetTaskPushConfigRequest{TaskID: id, ID: "late"}); err != nil || got.URL != hook {
		t.Fatalf("the finished task's config: %+v %v", got, err)
	}
	for range 2 {
		if err := b.DeleteTaskPushConfig(ctx, &a2apb.DeleteTaskPushConfigRequest{TaskID: id, ID: "hook-1"}); err != nil {
			t.Fatalf("delete: %v", err)
		}
	}
}

// A config given inline with the send; and the webhook URLs the SSRF
// policy refuses, whichever way they come.
func TestPushInlineAndRefused(t *testing.T) {
	cl := startCluster(t, 1, "", withPush(t))
	tok := token(t, agentKey, "cap-push-inline")
	a := sdkClient(t, cl.edges[0].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcv, hook := newReceiver(t, 0)
	res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")),
		Metadata: stepTarget, Config: &a2apb.SendMessageConfig{ReturnImmediately: true,
			PushConfig: &a2apb.PushConfig{URL: hook, Auth: &a2apb.PushAuthInfo{Scheme: "Basic", Credentials: "dXNlcjpwdw=="}}}})
	if err != nil {
		t.Fatal(err)
	}
	cl.step.open(stepChunks)
	for _, d := range rcv.waitFor(t, stepChunks+1) {
		if d.auth != "Basic dXNlcjpwdw==" {
			t.Fatalf("inline config's Authorization: %q", d.auth)
		}
	}

	if res.(*a2apb.Task).ID == "" {
		t.Fatal("no task")
	}
	// A task still running, to attach configs to.
	res, err = a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")),
		Metadata: stepTarget, Config: &a2apb.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.(*a2apb.Task).ID
	defer cl.step.open(stepChunks)
	for _, url := range []string{
		"http://example.com/hook",                  // http off loopback
		"https://10.0.0.1/hook",                    // private
		"https://169.254.169.254/latest/meta-data", // cloud metadata
		"https://[::ffff:10.0.0.1]/hook",           // private, mapped
		"https://user:pw@example.com/hook",         // userinfo
		"https://2130706433/hook",                  // 127.0.0.1, obfuscated
		"ftp://example.com/hook",
	} {
		if _, err := a.CreateTaskPushConfig(ctx, &a2apb.PushConfig{TaskID: id, URL: url}); !errors.Is(err, a2apb.ErrInvalidParams) {
			t.Errorf("create %s: %v, want invalid params", url, err)
		}
		_, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")),
			Metadata: stepTarget, Config: &a2apb.SendMessageConfig{ReturnImmediately: true, PushConfig: &a2apb.PushConfig{URL: url}}})
		if !errors.Is(err, a2apb.ErrInvalidParams) {
			t.Errorf("inline %s: %v, want invalid params", url, err)
		}
	}
}

// A caller whose capability the kernel refuses gets 401 and a deny receipt
// for its send (named in the error), no task, and the edge never calls its
// webhook.
func TestPushRefusedWithoutCapability(t *testing.T) {
	cl := startCluster(t, 1, "", withPush(t))
	rogue := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))
	now := time.Now()
	forged, err := schemas.IssueCapability(rogue, schemas.CapabilityBody{ID: "cap-rogue", Issuer: pub(rogue), Subject: pub(agentKey),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "step-srv", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := schemas.EncodeCapabilityHeader(forged)
	rcv, hook := newReceiver(t, 0)
	body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m","parts":[{"text":"x"}]},` +
		`"configuration":{"taskPushNotificationConfig":{"url":"` + hook + `","authentication":{"scheme":"Bearer","credentials":"chosen"}}},"metadata":{"chio":{"targetSkillId":"step_task"}}}}`
	req, _ := http.NewRequest(http.MethodPost, cl.edges[0].URL+"/a2a", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Error struct {
			Code int `json:"code"`
			Data []struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") ||
		m.Error.Code != wire.CodeUnauthenticated || len(m.Error.Data) == 0 {
		t.Fatalf("HTTP %d %q, error %+v", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), m.Error)
	}
	rid := m.Error.Data[0].Metadata["receiptId"]
	d, ok := decisionEvents(t, cl.js)[rid]
	if !ok || d.Decision.Verdict != schemas.VerdictDeny || d.Decision.Guard != "issuer" {
		t.Fatalf("deny receipt %q: %v %+v", rid, ok, d.Decision)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.got) != 0 {
		t.Fatalf("the webhook was called %d times", len(rcv.got))
	}
}

// Without push, every push method is -32003, and the card says so.
func TestPushOff(t *testing.T) {
	cl := startCluster(t, 1, "")
	tok := token(t, agentKey, "cap-push-off")
	body := `{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"t","url":"not even a url"}}`
	if got := errCode(rpc(t, cl.edges[0].URL, tok, "1.0", body)); got != wire.CodePushNotSupported {
		t.Fatalf("code %d", got)
	}
	resp, err := http.Get(cl.edges[0].URL + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var card struct {
		Capabilities struct {
			Streaming         bool `json:"streaming"`
			PushNotifications bool `json:"pushNotifications"`
		} `json:"capabilities"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&card); err != nil || card.Capabilities.PushNotifications || !card.Capabilities.Streaming {
		t.Fatalf("capabilities %v %v", card.Capabilities, err)
	}
}

// The 1.0 push payloads of a task carry its generations, as its stream
// events do: each update once, with the generation, the member and the
// content of the stream event of that generation, contiguous from the
// task's first, working status (the send stores its config before the
// task's first commit) to the task's generation.
func TestPushGenerations(t *testing.T) {
	cl := startCluster(t, 2, "", withPush(t))
	tok := token(t, agentKey, "cap-push-gen")
	a := sdkClient(t, cl.edges[0].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcv, hook := newReceiver(t, 0)
	res := sendStepWithPush(ctx, t, a, hook)
	id := string(res.(*a2apb.Task).ID)
	cl.step.open(stepChunks)
	got := rcv.waitFor(t, stepChunks+2)

	// The task's own events, replayed from its start on the other replica.
	st, _, reply := openSSE(t, cl.edges[1].URL+"/a2a", tok, true, subscribeBody(id), map[string]string{"Last-Event-ID": "1"})
	if st == nil {
		t.Fatalf("replay refused: %v", reply)
	}
	frames := st.all(t)
	shapes := contiguous(t, frames, 2)
	if len(shapes) != stepChunks+2 || shapes[len(shapes)-1] != "statusUpdate:TASK_STATE_COMPLETED" {
		t.Fatalf("the task's events: %v", shapes)
	}
	final := int64(len(frames) + 1)
	m := rpc(t, cl.edges[0].URL, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":%q}}`, id))
	if r, _ := m["result"].(map[string]any); r == nil || generationOf(t, r) != final {
		t.Fatalf("task %v, want generation %d", m, final)
	}
	byGeneration := map[int64]map[string]any{}
	for _, f := range frames {
		g, _, _ := checkFrame(t, f)
		byGeneration[g] = f.data["result"].(map[string]any)
	}

	seen := map[int64]bool{}
	low := final + 1
	for _, d := range got {
		var sr map[string]any
		raw, _ := json.Marshal(d.body)
		if err := json.Unmarshal(raw, &sr); err != nil {
			t.Fatal(err)
		}
		kind, obj := sseEvent{data: sr}.member(t)
		g := generationOf(t, obj)
		if seen[g] {
			t.Fatalf("generation %d pushed twice", g)
		}
		seen[g] = true
		low = min(low, g)
		want, ok := byGeneration[g]
		if !ok {
			t.Fatalf("pushed %s at generation %d, which the task does not have", kind, g)
		}
		gotJSON, _ := json.Marshal(sr) // both re-encoded: keys sorted
		wantJSON, _ := json.Marshal(want)
		if !bytes.Equal(gotJSON, wantJSON) {
			t.Fatalf("generation %d: pushed %s, streamed %s", g, gotJSON, wantJSON)
		}
	}
	if low != 2 || len(seen) != int(final-low+1) {
		t.Fatalf("pushed generations %v, want %d…%d without a gap", seen, low, final)
	}
}

// A send whose inline push config is refused (here: over its owner's
// quota) leaves nothing behind: no task for a sweeper to run later, after
// the caller was told no; and a config that is accepted sees the task's
// first commit, stored after it.
func TestPushInlineRefusedLeavesNoTask(t *testing.T) {
	cl := startCluster(t, 1, "", func(c *Config, js jetstream.JetStream) {
		withPush(t)(c, js)
		store, err := push.OpenStore(context.Background(), js, push.WithMaxConfigsPerOwner(1))
		if err != nil {
			t.Fatal(err)
		}
		c.Push.Store = store
	})
	tok := token(t, agentKey, "cap-push-inline-refused")
	a := sdkClient(t, cl.edges[0].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcv, hook := newReceiver(t, 0)
	res := sendStepWithPush(ctx, t, a, hook)
	defer cl.step.open(stepChunks)
	first := rcv.waitFor(t, 1)[0]
	var update struct {
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if err := json.Unmarshal(first.body["statusUpdate"], &update); err != nil || update.Status.State != "TASK_STATE_WORKING" {
		t.Fatalf("first notification %s, want the first commit's working status", first.body)
	}

	body := `{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"refused-1","parts":[{"text":"go"}]},` +
		`"configuration":{"returnImmediately":true,"taskPushNotificationConfig":{"url":"` + hook + `"}},"metadata":{"chio":{"targetSkillId":"step_task"}}}}`
	if m := rpc(t, cl.edges[0].URL, tok, "1.0", body); errCode(m) != -31429 {
		t.Fatalf("a send whose config is over the owner's quota: %v, want -31429", m)
	}
	list, err := a.ListTasks(ctx, &a2apb.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tasks) != 1 || list.Tasks[0].ID != res.(*a2apb.Task).ID {
		t.Fatalf("tasks after the refused send: %d, want only the first", len(list.Tasks))
	}
}

// The configs of a task that ended expire with the bucket's TTL, not a
// timer of the replica that saw the end: a replica stopping within the
// keep time no longer leaves them behind, counted against their owner.
func TestPushConfigsExpireWhenTheTaskEnds(t *testing.T) {
	var store *push.Store
	cl := startCluster(t, 1, "", func(c *Config, js jetstream.JetStream) {
		withPush(t)(c, js)
		c.Push.ConfigsKept = 3 * time.Second
		store = c.Push.Store
	})
	tok := token(t, agentKey, "cap-push-expire")
	a := sdkClient(t, cl.edges[0].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rcv, hook := newReceiver(t, 0)
	res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("world")),
		Metadata: map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}},
		Config:   &a2apb.SendMessageConfig{PushConfig: &a2apb.PushConfig{URL: hook}}})
	if err != nil {
		t.Fatal(err)
	}
	task := res.(*a2apb.Task)
	if task.Status.State != a2apb.TaskStateCompleted {
		t.Fatalf("task %s", task.Status.State)
	}
	if cfgs, err := store.ForTask(ctx, string(task.ID)); err != nil || len(cfgs) != 1 {
		t.Fatalf("the ended task's config right after its end: %d, %v; want it kept a while", len(cfgs), err)
	}
	rcv.waitFor(t, 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		cfgs, err := store.ForTask(ctx, string(task.ID))
		if err == nil && len(cfgs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ended task's configs: %d, %v; want none after the keep time", len(cfgs), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sendStepWithPush starts a step task that answers at once, with an inline
// push config to hook.
func sendStepWithPush(ctx context.Context, t *testing.T, a *a2aclient.Client, hook string) a2apb.SendMessageResult {
	t.Helper()
	res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("go")),
		Metadata: stepTarget, Config: &a2apb.SendMessageConfig{ReturnImmediately: true, PushConfig: &a2apb.PushConfig{URL: hook}}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
