package projections

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// workload publishes calls from..from+n-1 of a deterministic mix: per
// call a task (created, working, a streamed artifact in two chunks,
// finished; every fourth canceled instead, followed by a late status that
// must be refused and a receipt link that must not), a decision event
// with a two-level lineage, and a signed governed receipt, every seventh
// republished as a ledger does after a crash.
func (h *harness) workload(from, n int) {
	h.t.Helper()
	for i := from; i < from+n; i++ {
		task := fmt.Sprintf("task-%04d", i)
		ctxID := fmt.Sprintf("ctx-%d", i%3)
		rid := fmt.Sprintf("rcpt-%04d", i)
		capID := fmt.Sprintf("cap-%d", i%5)
		h.commit(task, created(ctxID, i))
		h.commit(task, schemas.TaskEvent{Type: schemas.TaskEventStatus, Time: at(i + 1), State: schemas.TaskWorking},
			schemas.TaskEvent{Type: schemas.TaskEventClaimed, Time: at(i + 1), ReplicaID: "edge-1", LeaseExpires: at(i + 60), Attempt: 1, ExecutionID: rid})
		h.commit(task, schemas.TaskEvent{Type: schemas.TaskEventArtifact, Time: at(i + 2), Artifact: artifact(task+"-result", "part one")})
		h.commit(task, schemas.TaskEvent{Type: schemas.TaskEventArtifact, Time: at(i + 3), Artifact: artifact(task+"-result", "part two"), Append: true, LastChunk: true})
		if i%4 == 0 {
			h.commit(task, schemas.TaskEvent{Type: schemas.TaskEventCanceled, Time: at(i + 4), State: schemas.TaskCanceled})
			h.commit(task, schemas.TaskEvent{Type: schemas.TaskEventStatus, Time: at(i + 5), State: schemas.TaskWorking},
				schemas.TaskEvent{Type: schemas.TaskEventReceipt, Time: at(i + 5), ReceiptID: rid})
		} else {
			h.commit(task, schemas.TaskEvent{Type: schemas.TaskEventReceipt, Time: at(i + 4), ReceiptID: rid},
				schemas.TaskEvent{Type: schemas.TaskEventFinished, Time: at(i + 4), State: schemas.TaskCompleted, Message: message("m1", "ROLE_AGENT", "done")})
		}
		h.decision(rid, chain("root-"+capID, capID)...)
		leaf := receiptLeaf(h.t, kernelPriv, rid, capID, 1760000000+uint64(i), 1, true)
		h.receipt(rid, uint64(i), leaf)
		if i%7 == 0 {
			h.republish(rid, uint64(i), leaf)
		}
	}
}

func TestProjectionEqualsRebuild(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 40)
	// Things the folds must keep without failing: an undecodable commit,
	// a decision event with no lineage, an outcome event, a receipt that
	// does not verify.
	h.publish(schemas.TaskSubject("task-junk"), []byte("{not json"), nil)
	h.decision("rcpt-nolineage")
	h.publish(schemas.SubjectOutcome, []byte(`{"schema":"chio.event.outcome.v1"}`), nil)
	h.receipt("rcpt-forged", 1000, receiptLeaf(t, otherPriv, "rcpt-forged", "cap-x", 1760000000, 0, true))
	h.commit("task-odd", schemas.TaskEvent{Type: "exploded"}, schemas.TaskEvent{Type: schemas.TaskEventCreated, ContextID: "c"})
	h.publish(schemas.TaskSubject("task-null"), []byte(`{"v":1,"events":null}`), nil)
	h.publish(schemas.SubjectDecision, []byte(`[1,2,3]`), nil)
	h.publish(schemas.SubjectDecision, []byte(`{"schema":"chio.event.decision.v1","capability_lineage":[{"capability_id":"x"}]}`), nil)
	h.publish(schemas.ReceiptSubject("shop"), []byte(`{"id":"no-leaf-header"}`), nil)
	h.publish(schemas.ReceiptSubject("shop"), []byte{0xff, 0xfe}, nil)

	for _, batch := range []int{1, 7, DefaultBatch} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			live := h.start(fmt.Sprintf("live-%d", batch), WithBatch(batch), WithName(fmt.Sprintf("live-%d", batch)))
			h.caughtUp(live)
			got, err := live.Digest()
			if err != nil {
				t.Fatal(err)
			}
			pos := live.Positions()
			if err := live.stop(); err != nil {
				t.Fatal(err)
			}
			res := h.rebuild(fmt.Sprintf("rebuilt-%d", batch), WithBatch(max(batch/2, 1)))
			if res.Digest != got || res.Positions != pos {
				t.Fatalf("live digest %s at %+v, rebuild %s at %+v", got, pos, res.Digest, res.Positions)
			}
		})
	}
}

func TestRebuildRefusesNonEmptyStore(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 2)
	h.rebuild("once")
	_, err := Rebuild(h.ctx, h.js, filepath.Join(h.dir, "once"), WithLogger(quiet()), WithKernelKey(kernelPriv.Public().(ed25519.PublicKey)))
	if !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("second rebuild into the same store: %v, want ErrNotEmpty", err)
	}
}

func TestKernelKeyIsPinned(t *testing.T) {
	h := newHarness(t)
	r := h.start("store")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(filepath.Join(h.dir, "store"), WithLogger(quiet()), WithKernelKey(otherPriv.Public().(ed25519.PublicKey)))
	if !errors.Is(err, ErrKernelKeyChanged) {
		t.Fatalf("open with another kernel key: %v, want ErrKernelKeyChanged", err)
	}
}

// waitPosition waits until every stream's position reaches at least n.
func waitPosition(t *testing.T, r *running, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p := r.Positions(); min(p.Tasks, p.Events, p.Receipts) < n; p = r.Positions() {
		if time.Now().After(deadline) {
			t.Fatalf("positions stuck at %+v, want %d", p, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRestartResumesWithoutLossOrDoubleCount(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 60)
	// A small batch, crashing part way through the task backlog, after a
	// commit and before its ack.
	errCrash := errors.New("crash")
	first := h.start("live", WithBatch(5), func(c *config) {
		c.afterCommit = func(stream string, pos uint64) error {
			if stream == schemas.TasksStream && pos >= 100 {
				return errCrash
			}
			return nil
		}
	})
	if err := first.crashed(t); !errors.Is(err, errCrash) {
		t.Fatalf("first run: %v, want the crash", err)
	}
	partial := first.Positions()
	if end, err := lastSeq(h.ctx, h.js, schemas.TasksStream); err != nil || partial.Tasks >= end || partial.Tasks < 100 {
		t.Fatalf("the first run stopped at %+v (%v); the test needs it part way through the tasks", partial, err)
	}
	h.workload(60, 20)
	second := h.start("live", WithBatch(5))
	h.caughtUp(second)
	got, err := second.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if res := h.rebuild("rebuilt"); res.Digest != got {
		t.Fatalf("after a restart the projection (%s) differs from a rebuild (%s)", got, res.Digest)
	}
	// Each receipt once, each task's receipt once.
	srv := server(t, second.Service)
	status, body, _ := get(t, srv.URL, "/v1/tasks/task-0007", opToken)
	if status != http.StatusOK || !reflect.DeepEqual(body["receiptIds"], []any{"rcpt-0007"}) {
		t.Fatalf("task-0007: %d %v", status, body)
	}
	n := 0
	if err := scan(second.store.db, []byte{prefixReceiptID}, func(_, _ []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 80 {
		t.Fatalf("%d receipts indexed, want 80", n)
	}
}

func TestStoreLostRefoldsEverything(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 15)
	first := h.start("lost")
	h.caughtUp(first)
	want, _ := first.Digest()
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// Same instance name (the durables exist and sit at the end of the
	// streams), empty store: the consumers must be recreated from the start.
	second := h.start("replacement")
	h.caughtUp(second)
	got, _ := second.Digest()
	if got != want {
		t.Fatalf("a store refolded after loss has digest %s, want %s", got, want)
	}
}

func TestPendingRedeliveriesFromAKilledRun(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 20)
	first := h.start("killed", WithBatch(4))
	waitPosition(t, first, 8)
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// The killed run had pulled more than it committed: deliveries past
	// the stored position, never acked.
	h.workload(20, 5)
	for _, str := range streams() {
		cons, err := h.js.Consumer(h.ctx, str.name, DefaultName+"-"+str.suffix)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(7, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range batch.Messages() {
		}
		info, err := cons.Info(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 {
			t.Fatalf("%s: no deliveries pending", str.name)
		}
	}
	second := h.start("killed", WithBatch(4))
	h.caughtUp(second)
	got, _ := second.Digest()
	if res := h.rebuild("rebuilt"); res.Digest != got {
		t.Fatalf("after pending redeliveries the projection (%s) differs from a rebuild (%s)", got, res.Digest)
	}
}

func TestCleanRestartReusesTheDurable(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 5)
	first := h.start("reuse")
	h.caughtUp(first)
	created := map[string]time.Time{}
	// Acks are asynchronous: wait until the server has them all.
	for _, str := range streams() {
		cons, err := h.js.Consumer(h.ctx, str.name, DefaultName+"-"+str.suffix)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			info, err := cons.Info(h.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending == 0 && info.AckFloor.Stream == first.position(str.name) {
				created[str.name] = info.Created
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: ack floor %d, pending %d", str.name, info.AckFloor.Stream, info.NumAckPending)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	// New work comes after the restart: published while the service is
	// down, it could be delivered to the stopped instance's pull requests
	// (the server keeps them until they expire), leaving the durable with
	// acks pending, which is the case where it is rightly recreated.
	second := h.start("reuse")
	h.workload(5, 2)
	h.caughtUp(second)
	for _, str := range streams() {
		cons, err := h.js.Consumer(h.ctx, str.name, DefaultName+"-"+str.suffix)
		if err != nil {
			t.Fatal(err)
		}
		if c := cons.CachedInfo().Created; !c.Equal(created[str.name]) {
			t.Errorf("%s: durable recreated (%s, was %s) although it agreed with the store", str.name, c, created[str.name])
		}
	}
	got, _ := second.Digest()
	if res := h.rebuild("rebuilt"); res.Digest != got {
		t.Fatalf("projection %s, rebuild %s", got, res.Digest)
	}
	// A durable created at the stored position that has delivered nothing
	// yet also agrees with the store: recreate it, then restart idle.
	if err := second.stop(); err != nil {
		t.Fatal(err)
	}
	if err := h.js.DeleteConsumer(h.ctx, schemas.ReceiptsStream, DefaultName+"-receipts"); err != nil {
		t.Fatal(err)
	}
	third := h.start("reuse")
	var recreated time.Time
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cons, err := h.js.Consumer(h.ctx, schemas.ReceiptsStream, DefaultName+"-receipts")
		if err == nil {
			recreated = cons.CachedInfo().Created
			break
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if err := third.stop(); err != nil {
		t.Fatal(err)
	}
	fourth := h.start("reuse")
	h.workload(7, 1) // caught up past it means the consumer is running
	h.caughtUp(fourth)
	cons, err := h.js.Consumer(h.ctx, schemas.ReceiptsStream, DefaultName+"-receipts")
	if err != nil {
		t.Fatal(err)
	}
	if c := cons.CachedInfo().Created; !c.Equal(recreated) {
		t.Errorf("an idle durable at the stored position was recreated (%s, was %s)", c, recreated)
	}
}

func TestStreamResetIsFatal(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 3)
	first := h.start("reset")
	h.caughtUp(first)
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	if err := h.js.DeleteStream(h.ctx, schemas.ReceiptsStream); err != nil {
		t.Fatal(err)
	}
	svc, err := Open(filepath.Join(h.dir, "reset"), WithLogger(quiet()), WithKernelKey(kernelPriv.Public().(ed25519.PublicKey)))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ctx, cancel := context.WithTimeout(h.ctx, 20*time.Second)
	defer cancel()
	if err := svc.Run(ctx, h.js); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("Run over a reset stream: %v, want ErrStreamReset", err)
	}
}

// TestFoldRules checks the task fold against the edge's rules, one task
// per case, through the HTTP API.
func TestFoldRules(t *testing.T) {
	status := func(n int, s schemas.TaskState, msg json.RawMessage) schemas.TaskEvent {
		return schemas.TaskEvent{Type: schemas.TaskEventStatus, Time: at(n), State: s, Message: msg}
	}
	finished := func(n int, s schemas.TaskState) schemas.TaskEvent {
		return schemas.TaskEvent{Type: schemas.TaskEventFinished, Time: at(n), State: s, Message: message("fin", "ROLE_AGENT", "bye")}
	}
	art := func(n int, a json.RawMessage, appends bool) schemas.TaskEvent {
		return schemas.TaskEvent{Type: schemas.TaskEventArtifact, Time: at(n), Artifact: a, Append: appends}
	}
	rcpt := func(n int, id string) schemas.TaskEvent {
		return schemas.TaskEvent{Type: schemas.TaskEventReceipt, Time: at(n), ReceiptID: id}
	}
	msg := func(n int, id string) schemas.TaskEvent {
		return schemas.TaskEvent{Type: schemas.TaskEventMessage, Time: at(n), Message: message(id, "ROLE_USER", id)}
	}
	cases := []struct {
		name    string
		commits [][]schemas.TaskEvent
		// want: state, timestamp second, status message id, history ids,
		// artifacts (id → parts), receipt ids, metadata
		state     string
		ts        int
		statusMsg string
		history   []string
		artifacts map[string][]string
		receipts  []string
		metadata  string
	}{
		{name: "created only", commits: [][]schemas.TaskEvent{{created("c", 0)}},
			state: "TASK_STATE_SUBMITTED", ts: 0, history: []string{"m0"}, receipts: []string{},
			metadata: `{"chio":{"receiptId":null,"receiptIds":[]}}`},
		{name: "events before created are refused", commits: [][]schemas.TaskEvent{{msg(0, "early")}, {created("c", 1)}},
			state: "TASK_STATE_SUBMITTED", ts: 1, history: []string{"m0"}, receipts: []string{},
			metadata: `{"chio":{"receiptId":null,"receiptIds":[]}}`},
		{name: "a second created is refused", commits: [][]schemas.TaskEvent{{created("c", 0)}, {status(1, schemas.TaskWorking, nil)}, {created("d", 2)}},
			state: "TASK_STATE_WORKING", ts: 1, history: []string{"m0"}, receipts: []string{},
			metadata: `{"chio":{"receiptId":null,"receiptIds":[]}}`},
		{name: "terminal refuses all but receipt links", commits: [][]schemas.TaskEvent{
			{created("c", 0), status(1, schemas.TaskWorking, nil)},
			{finished(2, schemas.TaskCompleted)},
			{status(3, schemas.TaskWorking, nil), msg(3, "late"), art(3, artifact("x", "late"), false), rcpt(3, "r1"),
				{Type: schemas.TaskEventMetadata, Time: at(3), Metadata: json.RawMessage(`{"late":true}`)},
				{Type: schemas.TaskEventCanceled, Time: at(3)}, rcpt(4, "r1"), rcpt(4, "r2")},
		}, state: "TASK_STATE_COMPLETED", ts: 2, statusMsg: "fin", history: []string{"m0"}, receipts: []string{"r1", "r2"},
			metadata: `{"chio":{"receiptId":null,"receiptIds":["r1","r2"]}}`},
		{name: "canceled is terminal", commits: [][]schemas.TaskEvent{
			{created("c", 0)}, {{Type: schemas.TaskEventCanceled, Time: at(5)}}, {finished(6, schemas.TaskCompleted)},
		}, state: "TASK_STATE_CANCELED", ts: 5, history: []string{"m0"}, receipts: []string{},
			metadata: `{"chio":{"receiptId":null,"receiptIds":[]}}`},
		{name: "status refuses terminal states and finished refuses others", commits: [][]schemas.TaskEvent{
			{created("c", 0), status(1, schemas.TaskCompleted, nil), finished(2, schemas.TaskWorking), status(3, "bogus", nil),
				status(4, schemas.TaskInputRequired, message("ask", "ROLE_AGENT", "more?"))},
		}, state: "TASK_STATE_INPUT_REQUIRED", ts: 4, statusMsg: "ask", history: []string{"m0"}, receipts: []string{},
			metadata: `{"chio":{"receiptId":null,"receiptIds":[]}}`},
		{name: "artifact append merges, replace replaces", commits: [][]schemas.TaskEvent{
			{created("c", 0)},
			{art(1, artifact("a", "1"), false)}, {art(2, artifact("a", "2"), true)}, {art(3, artifact("b", "x"), true)},
			{art(4, artifact("a", "3"), true)}, {art(5, artifact("b", "y"), false)}, {art(6, json.RawMessage(`{"parts":[]}`), false)},
			{art(7, json.RawMessage(`"not an artifact"`), false)},
		}, state: "TASK_STATE_SUBMITTED", ts: 0, history: []string{"m0"}, receipts: []string{},
			artifacts: map[string][]string{"a": {"1", "2", "3"}, "b": {"y"}},
			metadata:  `{"chio":{"receiptId":null,"receiptIds":[]}}`},
		{name: "metadata replaces, receipts dedup, request and claims are not served", commits: [][]schemas.TaskEvent{
			{created("c", 0), msg(1, "m1"), rcpt(1, "r1"), rcpt(2, "r1"), {Type: schemas.TaskEventMetadata, Time: at(2), Metadata: json.RawMessage(`{"x":1}`)}},
			{{Type: schemas.TaskEventRequest, Time: at(3), Request: json.RawMessage(`{"capability":"secret"}`)},
				{Type: schemas.TaskEventReleased, Time: at(3), ReplicaID: "nobody"}, rcpt(3, "")},
		}, state: "TASK_STATE_SUBMITTED", ts: 0, history: []string{"m0", "m1"}, receipts: []string{"r1"},
			metadata: `{"chio":{"receiptIds":["r1"]},"x":1}`},
	}
	h := newHarness(t)
	for i, c := range cases {
		for _, events := range c.commits {
			h.commit(fmt.Sprintf("rule-%d", i), events...)
		}
	}
	r := h.start("rules")
	h.caughtUp(r)
	srv := server(t, r.Service)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, raw := get(t, srv.URL, fmt.Sprintf("/v1/tasks/rule-%d", i), opToken)
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, raw)
			}
			if strings.Contains(string(raw), "secret") {
				t.Errorf("the deferred request leaked: %s", raw)
			}
			var got Task
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.State != c.state || got.Status.Timestamp != at(c.ts).Format(time.RFC3339Nano) {
				t.Errorf("status %s at %s, want %s at %s", got.Status.State, got.Status.Timestamp, c.state, at(c.ts).Format(time.RFC3339Nano))
			}
			var sm struct {
				MessageID string `json:"messageId"`
			}
			_ = json.Unmarshal(got.Status.Message, &sm)
			if sm.MessageID != c.statusMsg {
				t.Errorf("status message %q, want %q", sm.MessageID, c.statusMsg)
			}
			var hist []string
			for _, m := range got.History {
				var mm struct {
					MessageID string `json:"messageId"`
				}
				_ = json.Unmarshal(m, &mm)
				hist = append(hist, mm.MessageID)
			}
			if !reflect.DeepEqual(hist, c.history) {
				t.Errorf("history %v, want %v", hist, c.history)
			}
			arts := map[string][]string{}
			for _, a := range got.Artifacts {
				var aa struct {
					ArtifactID string              `json:"artifactId"`
					Parts      []map[string]string `json:"parts"`
				}
				if err := json.Unmarshal(a, &aa); err != nil {
					t.Fatal(err)
				}
				for _, p := range aa.Parts {
					arts[aa.ArtifactID] = append(arts[aa.ArtifactID], p["text"])
				}
			}
			if len(c.artifacts) == 0 && len(arts) == 0 {
				arts = nil
			}
			if !reflect.DeepEqual(arts, c.artifacts) && !(len(arts) == 0 && len(c.artifacts) == 0) {
				t.Errorf("artifacts %v, want %v", arts, c.artifacts)
			}
			if !reflect.DeepEqual(got.ReceiptIDs, c.receipts) {
				t.Errorf("receipt ids %v, want %v", got.ReceiptIDs, c.receipts)
			}
			if string(got.Metadata) != c.metadata {
				t.Errorf("metadata %s, want %s", got.Metadata, c.metadata)
			}
		})
	}
}

func TestTaskList(t *testing.T) {
	h := newHarness(t)
	// Seven tasks in three contexts; every third completes.
	for i := range 7 {
		id := fmt.Sprintf("list-%d", i)
		h.commit(id, created(fmt.Sprintf("ctx-%d", i%3), i))
		if i%3 == 0 {
			h.commit(id, schemas.TaskEvent{Type: schemas.TaskEventFinished, Time: at(10 + i), State: schemas.TaskCompleted})
		}
	}
	r := h.start("list")
	h.caughtUp(r)
	srv := server(t, r.Service)
	ids := func(body map[string]any) []string {
		var out []string
		for _, t := range body["tasks"].([]any) {
			out = append(out, t.(map[string]any)["id"].(string))
		}
		return out
	}
	cases := []struct {
		query string
		pages [][]string
	}{
		{"limit=3", [][]string{{"list-0", "list-1", "list-2"}, {"list-3", "list-4", "list-5"}, {"list-6"}}},
		{"limit=200", [][]string{{"list-0", "list-1", "list-2", "list-3", "list-4", "list-5", "list-6"}}},
		{"contextId=ctx-1&limit=1", [][]string{{"list-1"}, {"list-4"}}},
		{"state=completed&limit=2", [][]string{{"list-0", "list-3"}, {"list-6"}}},
		{"state=TASK_STATE_SUBMITTED&contextId=ctx-0", [][]string{{}}},
		{"state=TASK_STATE_SUBMITTED&contextId=ctx-2", [][]string{{"list-2", "list-5"}}},
		{"contextId=nobody", [][]string{{}}},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			cursor := ""
			for i, want := range c.pages {
				q := c.query
				if cursor != "" {
					q += "&cursor=" + cursor
				}
				code, body, raw := get(t, srv.URL, "/v1/tasks?"+q, opToken)
				if code != http.StatusOK {
					t.Fatalf("%d %s", code, raw)
				}
				if got := ids(body); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("page %d: %v, want %v", i, got, want)
				}
				next, _ := body["nextCursor"].(string)
				if (next != "") != (i < len(c.pages)-1) {
					t.Fatalf("page %d: nextCursor %v with %d pages", i, body["nextCursor"], len(c.pages))
				}
				cursor = next
			}
		})
	}
}

func TestLineageChain(t *testing.T) {
	h := newHarness(t)
	h.decision("r1", chain("root", "mid", "leaf")...)
	// A later event with a different record for "mid" does not replace it:
	// the first record of a capability stands.
	other := chain("root", "mid")
	other[1].ScopeHash = schemas.SHA256Hex([]byte("other"))
	h.decision("r2", other...)
	// A record first seen without its grants (a long chain's event left
	// them out) gains them from a later event of the same scope.
	bare := chain("root", "mid", "leaf")
	for i := range bare {
		bare[i].CapabilityID, bare[i].Grants, bare[i].GrantsOmitted = "bare-"+bare[i].CapabilityID, nil, true
		if i > 0 {
			bare[i].ParentCapabilityID = bare[i-1].CapabilityID
		}
	}
	full := chain("root", "mid", "leaf")
	for i := range full {
		full[i].CapabilityID, full[i].ScopeHash = bare[i].CapabilityID, bare[i].ScopeHash
		full[i].ParentCapabilityID = bare[i].ParentCapabilityID
	}
	// r3 and r4 arrive in one envelope, as an edge under load writes
	// them, with an outcome between: folded in order, as if alone.
	h.envelope(decisionEvent("r3", bare...), &schemas.OutcomeEvent{Schema: schemas.OutcomeEventSchema,
		EventID: schemas.OutcomeEventID("r1"), ReceiptID: "r1", Timestamp: 1760000001, Outcome: schemas.OutcomeCompleted,
		ContentHash: schemas.EmptyContentHash}, decisionEvent("r4", full[:2]...))
	r := h.start("lineage")
	h.caughtUp(r)
	// Lost state: a record whose parent the projection does not hold.
	orphan, _ := json.Marshal(chain("gone", "orphan")[1])
	if err := r.store.db.Set(append([]byte{prefixLineage}, "orphan"...), orphan, nil); err != nil {
		t.Fatal(err)
	}
	srv := server(t, r.Service)

	code, body, _ := get(t, srv.URL, "/v1/lineage/mid", opToken)
	if code != http.StatusOK || body["scope_hash"] != schemas.SHA256Hex([]byte("mid")) || body["parent_capability_id"] != "root" {
		t.Fatalf("lineage of mid: %d %v", code, body)
	}
	for id, want := range map[string]bool{"bare-mid": true, "bare-leaf": false} {
		code, body, _ = get(t, srv.URL, "/v1/lineage/"+id, opToken)
		if code != http.StatusOK || (body["grants"] != nil) != want || (body["grants_omitted"] == true) == want {
			t.Fatalf("lineage of %s (grants expected: %v): %d %v", id, want, code, body)
		}
	}
	code, body, _ = get(t, srv.URL, "/v1/lineage/leaf/chain", opToken)
	if code != http.StatusOK || body["capabilityId"] != "leaf" {
		t.Fatalf("chain of leaf: %d %v", code, body)
	}
	var got []string
	for _, rec := range body["chain"].([]any) {
		got = append(got, rec.(map[string]any)["capability_id"].(string))
	}
	if !reflect.DeepEqual(got, []string{"root", "mid", "leaf"}) {
		t.Fatalf("chain %v, want root first", got)
	}
	code, body, _ = get(t, srv.URL, "/v1/lineage/root/chain", opToken)
	if code != http.StatusOK || len(body["chain"].([]any)) != 1 {
		t.Fatalf("chain of the root: %d %v", code, body)
	}
	code, body, _ = get(t, srv.URL, "/v1/lineage/orphan/chain", opToken)
	if code != http.StatusInternalServerError || body["code"] != CodeLineageBroken || body["capabilityId"] != "gone" ||
		!strings.Contains(body["error"].(string), "gone") {
		t.Fatalf("chain with a missing parent: %d %v", code, body)
	}
	for _, path := range []string{"/v1/lineage/unknown", "/v1/lineage/unknown/chain"} {
		if code, body, _ := get(t, srv.URL, path, opToken); code != http.StatusNotFound || body["code"] != CodeLineageNotFound {
			t.Fatalf("%s: %d %v", path, code, body)
		}
	}
}

func TestAuthorizationContextReport(t *testing.T) {
	h := newHarness(t)
	h.decision("d1", chain("root-a", "cap-a")...)
	h.decision("d2", chain("root-b", "cap-b")...)
	leaf := uint64(0)
	pub := func(id, capID string, ts uint64, key ed25519.PrivateKey, governed bool) {
		h.receipt(id, leaf, receiptLeaf(t, key, id, capID, ts, 1, governed))
		leaf++
	}
	for i := range 5 {
		pub(fmt.Sprintf("a-%d", i), "cap-a", 1000+uint64(i), kernelPriv, true)
		pub(fmt.Sprintf("b-%d", i), "cap-b", 2000+uint64(i), kernelPriv, i%2 == 0)
	}
	r := h.start("report", WithServiceToken("s3cret"))
	h.caughtUp(r)
	srv := server(t, r.Service)
	rows := func(body map[string]any) []string {
		var out []string
		for _, row := range body["receipts"].([]any) {
			out = append(out, row.(map[string]any)["receiptId"].(string))
		}
		return out
	}
	cases := []struct {
		query    string
		rows     []string
		matching float64
	}{
		{"capabilityId=cap-a", []string{"a-0", "a-1", "a-2", "a-3", "a-4"}, 5},
		{"capabilityId=cap-a&authorizationLimit=2", []string{"a-0", "a-1"}, 5},
		{"capabilityId=cap-b", []string{"b-0", "b-2", "b-4"}, 3},
		{"", []string{"a-0", "b-0", "a-1", "a-2", "b-2", "a-3", "a-4", "b-4"}, 8},
		{"since=1002&until=2002", []string{"b-0", "a-2", "b-2", "a-3", "a-4"}, 5}, // log order
		{"toolServer=shop&toolName=buy&capabilityId=cap-b&since=2001", []string{"b-2", "b-4"}, 2},
		{"toolName=sell", nil, 0},
		{"capabilityId=cap-none", nil, 0},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			code, body, raw := get(t, srv.URL, "/v1/reports/authorization-context?"+c.query, "s3cret")
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, raw)
			}
			if body["schema"] != schemas.AuthorizationContextReportSchema {
				t.Fatalf("schema %v", body["schema"])
			}
			if got := rows(body); !reflect.DeepEqual(got, c.rows) {
				t.Errorf("rows %v, want %v", got, c.rows)
			}
			if m := body["summary"].(map[string]any)["matchingReceipts"]; m != c.matching {
				t.Errorf("matchingReceipts %v, want %v", m, c.matching)
			}
		})
	}

	// A governed receipt not signed by the trusted kernel fails the
	// reports that reach it, naming it; the other capability's does not.
	h.receipt("forged", leaf, receiptLeaf(t, otherPriv, "forged", "cap-a", 1500, 1, true))
	leaf++
	// Bytes that are not a receipt at all fail every capability's report:
	// nobody can tell whose they are.
	h.receipt("garbage", leaf, []byte(`not json`))
	h.caughtUp(r)
	for _, c := range []struct {
		query, receipt string
	}{{"capabilityId=cap-a", "forged"}, {"", "forged"}, {"capabilityId=cap-b", "garbage"}} {
		code, body, raw := get(t, srv.URL, "/v1/reports/authorization-context?"+c.query, "s3cret")
		if code != http.StatusUnprocessableEntity || body["code"] != CodeUnprojectable || body["receiptId"] != c.receipt {
			t.Errorf("%q: %d %s, want 422 naming %s", c.query, code, raw, c.receipt)
		}
	}
}

// TestBadInput: every 400 is JSON naming the parameter.
func TestBadInput(t *testing.T) {
	h := newHarness(t)
	r := h.start("bad")
	srv := server(t, r.Service)
	long := strings.Repeat("x", 257)
	cases := []struct{ path, param string }{
		{"/v1/tasks?limit=abc", "limit"},
		{"/v1/tasks?limit=0", "limit"},
		{"/v1/tasks?limit=201", "limit"},
		{"/v1/tasks?limit=-1", "limit"},
		{"/v1/tasks?limit=1&limit=2", "limit"},
		{"/v1/tasks?cursor=%%%", "cursor"},
		{"/v1/tasks?cursor=AAAA", "cursor"},
		{"/v1/tasks?state=done", "state"},
		{"/v1/tasks?state=", "state"},
		{"/v1/tasks?contextId=", "contextId"},
		{"/v1/tasks?contextId=" + long, "contextId"},
		{"/v1/tasks?contextId=a%00b", "contextId"},
		{"/v1/tasks?page=2", "page"},
		{"/v1/tasks/" + long, "id"},
		{"/v1/tasks/a%01b", "id"},
		{"/v1/tasks/x?historyLength=1", "historyLength"},
		{"/v1/lineage/" + long, "capability_id"},
		{"/v1/lineage/a%0Ab/chain", "capability_id"},
		{"/v1/lineage/x?y=1", "y"},
		{"/v1/reports/authorization-context?since=yesterday", "since"},
		{"/v1/reports/authorization-context?until=-5", "until"},
		{"/v1/reports/authorization-context?since=10&until=5", "since"},
		{"/v1/reports/authorization-context?authorizationLimit=0", "authorizationLimit"},
		{"/v1/reports/authorization-context?authorizationLimit=201", "authorizationLimit"},
		{"/v1/reports/authorization-context?authorizationLimit=many", "authorizationLimit"},
		{"/v1/reports/authorization-context?capabilityId=", "capabilityId"},
		{"/v1/reports/authorization-context?toolServer=" + long, "toolServer"},
		{"/v1/reports/authorization-context?toolName=a%7Fb", "toolName"},
		{"/v1/reports/authorization-context?limit=5", "limit"},
		{"/v1/reports/authorization-context?capabilityId=a&capabilityId=b", "capabilityId"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			code, body, raw := get(t, srv.URL, c.path, opToken)
			if code != http.StatusBadRequest || body["code"] != CodeInvalidParameter || body["param"] != c.param || body["error"] == "" {
				t.Fatalf("%d %s, want 400 invalid_parameter naming %s", code, raw, c.param)
			}
		})
	}
	// And the good forms of the same parameters pass.
	for _, p := range []string{"/v1/tasks?limit=1&state=TASK_STATE_WORKING&contextId=c", "/v1/tasks?state=input-required",
		"/v1/reports/authorization-context?since=5&until=5&authorizationLimit=200"} {
		if code, _, raw := get(t, srv.URL, p, opToken); code != http.StatusOK {
			t.Errorf("%s: %d %s", p, code, raw)
		}
	}
	if code, body, _ := get(t, srv.URL, "/v1/tasks/nope", opToken); code != http.StatusNotFound || body["code"] != CodeTaskNotFound {
		t.Errorf("unknown task: %d %v", code, body)
	}
}

func TestServiceToken(t *testing.T) {
	h := newHarness(t)
	h.commit("t1", created("c", 0))
	h.decision("r1", chain("root")...)
	guarded := h.start("guarded", WithServiceToken("right-token"), WithName("guarded"))
	h.caughtUp(guarded)
	srv := server(t, guarded.Service)
	paths := []string{"/v1/tasks/t1", "/v1/tasks", "/v1/lineage/root", "/v1/lineage/root/chain", "/v1/reports/authorization-context"}
	for _, p := range paths {
		for _, c := range []struct {
			token string
			want  int
		}{{"", http.StatusUnauthorized}, {"wrong-token", http.StatusUnauthorized}, {"right-token ", http.StatusUnauthorized}, {"right-token", http.StatusOK}} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+p, nil)
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body Error
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			// A trailing space is trimmed; it is the same token.
			want := c.want
			if c.token == "right-token " {
				want = http.StatusOK
			}
			if resp.StatusCode != want || (want == http.StatusUnauthorized && (body.Code != CodeUnauthorized || resp.Header.Get("WWW-Authenticate") != `Bearer realm="chio"`)) {
				t.Errorf("%s with token %q: %d %+v, want %d", p, c.token, resp.StatusCode, body, want)
			}
		}
	}
	// Auth comes before input checks: a bad request without a token is 401.
	if code, _, _ := get(t, srv.URL, "/v1/tasks?limit=abc", ""); code != http.StatusUnauthorized {
		t.Errorf("bad input without a token: %d, want 401", code)
	}
	// Without a token or an authenticator there is no open mode: every
	// route refuses every request.
	closed := h.start("closed", WithName("closed"), WithServiceToken(""))
	h.caughtUp(closed)
	closedURL := server(t, closed.Service).URL
	for _, p := range paths {
		for _, tok := range []string{"", "right-token", opToken} {
			if code, body, raw := get(t, closedURL, p, tok); code != http.StatusUnauthorized || body["code"] != CodeUnauthorized {
				t.Errorf("%s with token %q on a service without credentials: %d %s, want 401", p, tok, code, raw)
			}
		}
	}
}

func TestLagAndOptions(t *testing.T) {
	h := newHarness(t)
	h.workload(0, 3)
	r := h.start("lag")
	h.caughtUp(r)
	lags, err := r.Lag(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(lags) != 3 {
		t.Fatalf("lag %+v", lags)
	}
	for _, l := range lags {
		if l.Behind != 0 || l.Position != l.LastSeq || l.Position == 0 || !strings.HasPrefix(l.Consumer, DefaultName+"-") {
			t.Errorf("lag %+v", l)
		}
	}
	key := WithKernelKey(kernelPriv.Public().(ed25519.PublicKey))
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"no kernel key", nil},
		{"bad name", []Option{key, WithName("a.b")}},
		{"empty name", []Option{key, WithName("")}},
		{"replicas", []Option{key, WithReplicas(0)}},
		{"batch", []Option{key, WithBatch(0)}},
	} {
		if _, err := Open(filepath.Join(h.dir, "opts"), c.opts...); err == nil {
			t.Errorf("%s: Open accepted it", c.name)
		}
	}
}
