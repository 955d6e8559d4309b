package push

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// putConfig stores a config of alice for task, to url, and returns it.
func (e *env) putConfig(t *testing.T, task, url string) Config {
	t.Helper()
	c, err := e.store.Put(t.Context(), Config{TaskID: task, Owner: alice, URL: url, Token: "tok-123",
		AuthScheme: "Bearer", AuthCredentials: "s3cr3t", Version: "1.0"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) outbox(t *testing.T, p Policy, opts ...OutboxOption) *Outbox {
	t.Helper()
	o, err := OpenOutbox(t.Context(), e.js, p, fast(t, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestDeliverHeadersAndPayload(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	task := newTaskID()
	cfg := e.putConfig(t, task, rc.URL+"/hook?x=1")
	o := e.outbox(t, DefaultPolicy())
	payload := `{"statusUpdate":{"taskId":"` + task + `","status":{"state":"TASK_STATE_WORKING"}}}` + "\n"
	if err := o.Enqueue(t.Context(), cfg, "1/0", []byte(payload)); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "delivery", func() bool { return rc.count() == 1 })
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })

	h := rc.got()[0]
	if h.body != payload {
		t.Errorf("body %q, want %q", h.body, payload)
	}
	for name, want := range map[string]string{
		"Authorization":            "Bearer s3cr3t",
		"X-A2A-Notification-Token": "tok-123",
		"Content-Type":             "application/a2a+json",
	} {
		if got := h.header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %q, want exactly %q", name, got, want)
		}
	}
}

func TestDeliverNoAuth(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	task := newTaskID()
	cfg, err := e.store.Put(t.Context(), Config{TaskID: task, Owner: alice, URL: rc.URL})
	if err != nil {
		t.Fatal(err)
	}
	o := e.outbox(t, DefaultPolicy())
	if err := o.Enqueue(t.Context(), cfg, "k", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "delivery", func() bool { return rc.count() == 1 })
	h := rc.got()[0]
	// Values canonicalises the name: X-A2A-… is stored as X-A2a-….
	if v := h.header.Values("Authorization"); len(v) != 0 {
		t.Errorf("Authorization %q sent for a config without authentication", v)
	}
	if v := h.header.Values(TokenHeader); len(v) != 0 {
		t.Errorf("token header %q sent for a config without a token", v)
	}
}

func TestDeliverRetriesThenSucceeds(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, func(n int, _ http.ResponseWriter) int {
		if n <= 2 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	cfg := e.putConfig(t, newTaskID(), rc.URL)
	o := e.outbox(t, DefaultPolicy())
	if err := o.Enqueue(t.Context(), cfg, "k", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	if n := rc.count(); n != 3 {
		t.Fatalf("%d attempts, want 3 (two failures, then success)", n)
	}
	for _, h := range rc.got() {
		if h.body != `{"n":1}` {
			t.Fatalf("attempt body %q", h.body)
		}
	}
}

func TestDeliverGivesUpAfterMaxDeliver(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, func(int, http.ResponseWriter) int { return http.StatusInternalServerError })
	cfg := e.putConfig(t, newTaskID(), rc.URL)
	o := e.outbox(t, DefaultPolicy(), WithMaxDeliver(3))
	if err := o.Enqueue(t.Context(), cfg, "k", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	if n := rc.count(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

func TestDeliverStatusClasses(t *testing.T) {
	for _, tc := range []struct {
		status   int
		attempts int
	}{
		{http.StatusBadRequest, 1}, // permanent
		{http.StatusUnauthorized, 1},
		{http.StatusNotFound, 1},
		{http.StatusRequestTimeout, 3}, // retried
		{http.StatusTooManyRequests, 3},
		{http.StatusFound, 3}, // redirect: a failed attempt, not followed
		{http.StatusBadGateway, 3},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			e := newEnv(t)
			target := newReceiver(t, nil)
			rc := newReceiver(t, func(_ int, w http.ResponseWriter) int {
				w.Header().Set("Location", target.URL)
				return tc.status
			})
			cfg := e.putConfig(t, newTaskID(), rc.URL)
			o := e.outbox(t, DefaultPolicy(), WithMaxDeliver(3))
			if err := o.Enqueue(t.Context(), cfg, "k", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			run(t, o)
			waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
			if n := rc.count(); n != tc.attempts {
				t.Fatalf("%d attempts, want %d", n, tc.attempts)
			}
			if n := target.count(); n != 0 {
				t.Fatalf("redirect followed: target got %d requests", n)
			}
		})
	}
}

func TestTwoReplicasDeliverEachOnce(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	task := newTaskID()
	cfg := e.putConfig(t, task, rc.URL)

	// Two replicas: separate connections, same durable. Both open before
	// either runs: nats-server 2.15.2 races (under -race) between a stream
	// update (OpenOutbox's CreateOrUpdateStream) and a consumer create on
	// the same stream, inside the server.
	var outboxes []*Outbox
	for range 2 {
		o, err := OpenOutbox(t.Context(), e.start(), DefaultPolicy(), fast(t, WithConcurrency(4))...)
		if err != nil {
			t.Fatal(err)
		}
		outboxes = append(outboxes, o)
	}
	for _, o := range outboxes {
		run(t, o)
	}
	const n = 60
	for i := range n {
		if err := outboxes[i%2].Enqueue(t.Context(), cfg, fmt.Sprintf("seq/%d", i), fmt.Appendf(nil, `{"i":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every notification", func() bool { return len(rc.bodies()) == n })
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	s, err := e.js.Stream(t.Context(), OutboxStream)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Consumer(t.Context(), DefaultDurable)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no pending acks", func() bool {
		info, err := c.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0
	})
	seen := rc.bodies()
	for i := range n {
		if got := seen[fmt.Sprintf(`{"i":%d}`, i)]; got != 1 {
			t.Errorf("notification %d delivered %d times", i, got)
		}
	}
}

func TestEnqueueDuplicateDeliveredOnce(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	cfg := e.putConfig(t, newTaskID(), rc.URL)
	o := e.outbox(t, DefaultPolicy())
	for range 3 {
		if err := o.Enqueue(t.Context(), cfg, "7/0", []byte(`"dup"`)); err != nil {
			t.Fatal(err)
		}
	}
	// Same key, another config: a different notification.
	other := e.putConfig(t, cfg.TaskID, rc.URL+"/other")
	if err := o.Enqueue(t.Context(), other, "7/0", []byte(`"other"`)); err != nil {
		t.Fatal(err)
	}
	if err := o.Enqueue(t.Context(), cfg, "7/1", []byte(`"next"`)); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "deliveries", func() bool { return len(rc.bodies()) == 3 })
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	if seen := rc.bodies(); seen[`"dup"`] != 1 || seen[`"other"`] != 1 || seen[`"next"`] != 1 {
		t.Fatalf("deliveries %v, want each once", seen)
	}
}

func TestForbiddenReceiverNeverCalled(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	cfg := e.putConfig(t, newTaskID(), rc.URL)    // http://127.0.0.1:port
	o := e.outbox(t, Policy{}, WithMaxDeliver(3)) // no loopback allowance
	if err := o.Enqueue(t.Context(), cfg, "k", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	if n := rc.conns.Load(); n != 0 {
		t.Fatalf("forbidden receiver got %d connections", n)
	}
}

func TestDialTimeCheckDefeatsRebinding(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	port := rc.URL[strings.LastIndexByte(rc.URL, ':')+1:]
	dns := newFakeDNS()
	dns.set("rebind.example.com", "93.184.215.14")
	p := DefaultPolicy() // loopback allowed, but only as written
	p.Resolver = dns.resolver()
	url := "https://rebind.example.com:" + port + "/hook"
	if err := p.CheckURL(t.Context(), url); err != nil {
		t.Fatalf("CheckURL while the name is public: %v", err)
	}
	cfg := e.putConfig(t, newTaskID(), url)
	dns.set("rebind.example.com", "127.0.0.1") // the rebinding

	var logs strings.Builder
	var logMu sync.Mutex
	o := e.outbox(t, p, WithMaxDeliver(2), WithOutboxLogger(slogTo(&logMu, &logs)))
	if err := o.Enqueue(t.Context(), cfg, "k", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	if n := rc.conns.Load(); n != 0 {
		t.Fatalf("receiver behind a rebound name got %d connections", n)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), "connection to a loopback address") {
		t.Fatalf("no dial-time refusal logged:\n%s", logs.String())
	}
}

func TestDeletedConfigNotDelivered(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	task := newTaskID()
	gone := e.putConfig(t, task, rc.URL+"/gone")
	kept := e.putConfig(t, task, rc.URL+"/kept")
	o := e.outbox(t, DefaultPolicy())
	for _, c := range []Config{gone, kept} {
		if err := o.Enqueue(t.Context(), c, "1/0", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.Delete(t.Context(), alice, task, gone.ID); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	hits := rc.got()
	if len(hits) != 1 {
		t.Fatalf("%d deliveries, want 1 (the deleted config's dropped)", len(hits))
	}
}

func TestDeleteTaskKeepsQueuedNotifications(t *testing.T) {
	e := newEnv(t)
	rc := newReceiver(t, nil)
	task := newTaskID()
	cfg := e.putConfig(t, task, rc.URL)
	o := e.outbox(t, DefaultPolicy())
	if err := o.Enqueue(t.Context(), cfg, "final", []byte(`{"final":true}`)); err != nil {
		t.Fatal(err)
	}
	// The task is terminal and its last notification enqueued: drop its
	// configs at once.
	if err := e.store.DeleteTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "delivery", func() bool { return rc.count() == 1 })
	h := rc.got()[0]
	if h.header.Get("Authorization") != "Bearer s3cr3t" || h.header.Get(TokenHeader) != "tok-123" {
		t.Fatalf("delivery from the message's fields lost headers: %v", h.header)
	}
}

func TestReplacedConfigUsesCurrentFields(t *testing.T) {
	e := newEnv(t)
	oldRC := newReceiver(t, nil)
	newRC := newReceiver(t, nil)
	cfg := e.putConfig(t, newTaskID(), oldRC.URL)
	o := e.outbox(t, DefaultPolicy())
	if err := o.Enqueue(t.Context(), cfg, "k", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	cfg.URL, cfg.AuthCredentials = newRC.URL, "rotated"
	if _, err := e.store.Put(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	run(t, o)
	waitFor(t, "delivery", func() bool { return newRC.count() == 1 })
	if got := newRC.got()[0].header.Get("Authorization"); got != "Bearer rotated" {
		t.Fatalf("Authorization %q, want the replaced config's", got)
	}
	if oldRC.count() != 0 {
		t.Fatal("delivered to the replaced URL")
	}
}

func TestEnqueueInvalid(t *testing.T) {
	e := newEnv(t)
	o := e.outbox(t, DefaultPolicy())
	cfg := Config{ID: "c", TaskID: newTaskID(), Owner: alice, URL: "https://h.example.com/"}
	if err := o.Enqueue(t.Context(), cfg, "", []byte(`{}`)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty key: %v", err)
	}
	bad := cfg
	bad.ID = ""
	if err := o.Enqueue(t.Context(), bad, "k", []byte(`{}`)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("no config id: %v", err)
	}
	if err := o.Enqueue(t.Context(), cfg, "k", nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("empty payload: %v", err)
	}
	big := make([]byte, 2<<20)
	if err := o.Enqueue(t.Context(), cfg, "k", big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("2MiB payload: %v", err)
	}
}

func TestOutboxSettings(t *testing.T) {
	e := newEnv(t)
	o := e.outbox(t, DefaultPolicy(), WithTimeout(7*time.Second), WithDurable("push-test"))
	run(t, o)
	s, err := e.js.Stream(t.Context(), OutboxStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Storage != jetstream.FileStorage || info.Config.Duplicates <= 0 {
		t.Fatalf("stream config %+v", info.Config)
	}
	var ci *jetstream.ConsumerInfo
	waitFor(t, "the consumer", func() bool {
		c, err := s.Consumer(t.Context(), "push-test")
		if err != nil {
			return false
		}
		ci, err = c.Info(t.Context())
		return err == nil
	})
	if ci.Config.AckWait <= 7*time.Second {
		t.Fatalf("AckWait %s does not exceed the 7s timeout", ci.Config.AckWait)
	}
	if _, err := OpenOutbox(t.Context(), e.js, DefaultPolicy(), WithBackoff(time.Second, time.Millisecond)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("cap below base: %v", err)
	}
}

func TestStoppedReplicaHandsOver(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	rc := newReceiver(t, func(n int, _ http.ResponseWriter) int {
		if n == 1 {
			<-release // hang until the first replica has given up on it
		}
		return http.StatusOK
	})
	cfg := e.putConfig(t, newTaskID(), rc.URL)
	a := e.outbox(t, DefaultPolicy(), WithTimeout(time.Minute))
	if err := a.Enqueue(t.Context(), cfg, "k", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFor(t, "the first attempt", func() bool { return rc.count() == 1 })
	cancel() // replica a stops mid-attempt
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	close(release)

	b, err := OpenOutbox(t.Context(), e.start(), DefaultPolicy(), fast(t, WithTimeout(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b)
	// Handed over by the negative ack, usually at once; but the stopped
	// replica's last pull request may still be open on the server and take
	// the redelivery into the void, and then the ack wait (90s) decides.
	waitForWithin(t, "the second replica's delivery", 2*time.Minute, func() bool { return rc.count() == 2 })
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
}

func TestClosedTaskMarkExpires(t *testing.T) {
	e := newEnv(t, WithClosedTaskTTL(time.Second))
	rc := newReceiver(t, nil)
	task := newTaskID()
	cfg := e.putConfig(t, task, rc.URL)
	o := e.outbox(t, DefaultPolicy())
	if err := o.Enqueue(t.Context(), cfg, "late", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DeleteTask(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	// Wait for the mark to expire: a notification still queued after it
	// is dropped like one for a deleted config.
	waitFor(t, "the closed mark to expire", func() bool {
		_, closed, err := o.configs.last(t.Context(), encodeID(task))
		return err == nil && !closed
	})
	run(t, o)
	waitFor(t, "the outbox to drain", func() bool { return outboxEmpty(t, e.js) })
	if n := rc.count(); n != 0 {
		t.Fatalf("%d deliveries after the closed mark expired, want 0", n)
	}
}
