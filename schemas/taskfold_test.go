package schemas

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// step is one event of a fold case and how Apply must answer it: err nil
// for applied, else the sentinel the refusal wraps.
type step struct {
	e   TaskEvent
	err error
}

func applied(e TaskEvent) step              { return step{e: e} }
func refusedBy(err error, e TaskEvent) step { return step{e: e, err: err} }

// clone copies h deeply enough that Apply on the original cannot change it.
func clone(h TaskHead) TaskHead {
	h.ReceiptIDs = slices.Clone(h.ReceiptIDs)
	return h
}

// servedPart is what a reader serves of a head (see TaskEffect.Served).
func servedPart(h TaskHead) TaskHead {
	h.Request, h.ClaimedBy, h.ClaimExpires, h.Attempt, h.ExecutionID = nil, "", time.Time{}, 0, ""
	return h
}

func TestTaskHeadApply(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 5, 1, 12, 0, s, 0, time.UTC) }
	owner := TaskOwner{Subject: "subject", Tenant: "t"}
	created := func(mods ...func(*TaskEvent)) TaskEvent {
		e := TaskEvent{Type: TaskEventCreated, Time: at(0), Owner: &owner, ContextID: "ctx",
			Message: json.RawMessage(`{"m":0}`), Request: json.RawMessage(`{"r":1}`), Metadata: json.RawMessage(`{"x":1}`)}
		for _, m := range mods {
			m(&e)
		}
		return e
	}
	status := func(s TaskState) TaskEvent { return TaskEvent{Type: TaskEventStatus, Time: at(1), State: s} }
	finish := func(s TaskState) TaskEvent { return TaskEvent{Type: TaskEventFinished, Time: at(2), State: s} }
	cancel := TaskEvent{Type: TaskEventCanceled, Time: at(3), State: TaskCanceled}
	message := TaskEvent{Type: TaskEventMessage, Message: json.RawMessage(`{"m":1}`)}
	artifact := func(data string, appends bool) TaskEvent {
		return TaskEvent{Type: TaskEventArtifact, Artifact: json.RawMessage(data), Append: appends}
	}
	receipt := func(id string) TaskEvent { return TaskEvent{Type: TaskEventReceipt, ReceiptID: id} }
	claim := func(replica string, attempt int, exec string) TaskEvent {
		return TaskEvent{Type: TaskEventClaimed, ReplicaID: replica, LeaseExpires: at(30), Attempt: attempt, ExecutionID: exec}
	}
	release := func(replica string) TaskEvent { return TaskEvent{Type: TaskEventReleased, ReplicaID: replica} }
	long := strings.Repeat("x", MaxTaskOwnerField+1)

	cases := []struct {
		name  string
		steps []step
		// the head after the steps
		state              TaskState
		history, artifacts int
		receipts           []string
		claimedBy, exec    string
		attempt            int
	}{
		{name: "created", steps: []step{applied(created())}, state: TaskSubmitted, history: 1},
		{name: "created without a first message", steps: []step{applied(created(func(e *TaskEvent) { e.Message = nil }))},
			state: TaskSubmitted},
		{name: "nothing before created", steps: []step{
			refusedBy(ErrTaskEvent, message), refusedBy(ErrTaskEvent, status(TaskWorking)), refusedBy(ErrTaskEvent, receipt("r")),
			refusedBy(ErrTaskEvent, cancel), applied(created()),
		}, state: TaskSubmitted, history: 1},
		{name: "created only once", steps: []step{applied(created()), applied(status(TaskWorking)), refusedBy(ErrTaskEvent, created())},
			state: TaskWorking, history: 1},
		{name: "created needs an owner and a bounded context id", steps: []step{
			refusedBy(ErrTaskEvent, created(func(e *TaskEvent) { e.Owner = nil })),
			refusedBy(ErrTaskEvent, created(func(e *TaskEvent) { e.Owner = &TaskOwner{Tenant: "t"} })),
			refusedBy(ErrTaskEvent, created(func(e *TaskEvent) { e.Owner = &TaskOwner{Subject: long} })),
			refusedBy(ErrTaskEvent, created(func(e *TaskEvent) { e.Owner = &TaskOwner{Subject: "s", Tenant: long} })),
			refusedBy(ErrTaskEvent, created(func(e *TaskEvent) { e.ContextID = "" })),
			refusedBy(ErrTaskEvent, created(func(e *TaskEvent) { e.ContextID = strings.Repeat("c", MaxTaskContextID+1) })),
			refusedBy(ErrTaskEvent, created(func(e *TaskEvent) { e.Metadata = json.RawMessage(`{"x":`) })),
		}},
		{name: "status moves between non-terminal states only", steps: []step{
			applied(created()), applied(status(TaskWorking)), applied(status(TaskInputRequired)), applied(status(TaskAuthRequired)),
			refusedBy(ErrTaskEvent, status(TaskCompleted)), refusedBy(ErrTaskEvent, status("paused")),
			refusedBy(ErrTaskEvent, finish(TaskWorking)), refusedBy(ErrTaskEvent, finish(TaskCanceled)), applied(status(TaskWorking)),
		}, state: TaskWorking, history: 1},
		{name: "cancel wins over a late completion", steps: []step{
			applied(created()), applied(status(TaskWorking)), applied(cancel),
			refusedBy(ErrTaskTerminal, finish(TaskCompleted)), refusedBy(ErrTaskTerminal, status(TaskWorking)),
			refusedBy(ErrTaskTerminal, message), refusedBy(ErrTaskTerminal, artifact(`{"artifactId":"a"}`, false)),
			refusedBy(ErrTaskTerminal, TaskEvent{Type: TaskEventMetadata}), refusedBy(ErrTaskTerminal, cancel),
			refusedBy(ErrTaskTerminal, TaskEvent{Type: "teleported"}),
			applied(receipt("r1")),
		}, state: TaskCanceled, history: 1, receipts: []string{"r1"}},
		{name: "a completion wins over a late cancel", steps: []step{
			applied(created()), applied(finish(TaskCompleted)), refusedBy(ErrTaskTerminal, cancel), refusedBy(ErrTaskTerminal, finish(TaskFailed)),
		}, state: TaskCompleted, history: 1},
		{name: "failed and rejected are terminal", steps: []step{
			applied(created()), applied(finish(TaskRejected)), refusedBy(ErrTaskTerminal, finish(TaskFailed)),
		}, state: TaskRejected, history: 1},
		{name: "receipts link once, after terminal too", steps: []step{
			applied(created()), applied(receipt("r1")), applied(receipt("r1")), refusedBy(ErrTaskEvent, receipt("")),
			applied(finish(TaskFailed)), applied(receipt("r2")), applied(receipt("r1")), refusedBy(ErrTaskEvent, receipt("")),
		}, state: TaskFailed, history: 1, receipts: []string{"r1", "r2"}},
		{name: "a malformed payload is invalid even after terminal", steps: []step{
			applied(created()), applied(cancel), refusedBy(ErrTaskEvent, TaskEvent{Type: TaskEventReceipt, ReceiptID: "r", Message: json.RawMessage(`{`)}),
		}, state: TaskCanceled, history: 1},
		{name: "messages and artifacts append", steps: []step{
			applied(created()), applied(message), refusedBy(ErrTaskEvent, TaskEvent{Type: TaskEventMessage}),
			refusedBy(ErrTaskEvent, TaskEvent{Type: TaskEventMessage, Message: json.RawMessage(`{"a":`)}),
			applied(artifact(`{"artifactId":"a"}`, false)), applied(artifact(`{"artifactId":"a"}`, true)),
			applied(artifact(`"any JSON"`, false)), refusedBy(ErrTaskEvent, artifact(``, false)), refusedBy(ErrTaskEvent, artifact(`[`, false)),
		}, state: TaskSubmitted, history: 2, artifacts: 3},
		{name: "unknown events are invalid", steps: []step{applied(created()), refusedBy(ErrTaskEvent, TaskEvent{Type: "teleported"})},
			state: TaskSubmitted, history: 1},
		{name: "claims: take over, renew, release, reset by a request", steps: []step{
			applied(created()),
			refusedBy(ErrTaskEvent, claim("", 1, "e1")), refusedBy(ErrTaskEvent, claim("a", 0, "e1")), refusedBy(ErrTaskEvent, claim("a", 1, "")),
			refusedBy(ErrTaskEvent, TaskEvent{Type: TaskEventClaimed, ReplicaID: "a", Attempt: 1, ExecutionID: "e1"}),
			applied(claim("a", 1, "e1")), applied(claim("a", 1, "e1")), refusedBy(ErrTaskEvent, claim("b", 2, "e2")),
			applied(claim("b", 2, "e1")), refusedBy(ErrTaskEvent, release("a")), refusedBy(ErrTaskEvent, release("")),
			applied(release("b")), refusedBy(ErrTaskEvent, release("b")),
			applied(claim("c", 3, "e1")), applied(TaskEvent{Type: TaskEventRequest, Request: json.RawMessage(`{"r":2}`)}),
			applied(claim("d", 1, "e2")),
		}, state: TaskSubmitted, history: 1, claimedBy: "d", attempt: 1, exec: "e2"},
		{name: "the end of a task ends its lease", steps: []step{
			applied(created()), applied(claim("a", 1, "e1")), applied(finish(TaskCompleted)), refusedBy(ErrTaskTerminal, release("a")),
		}, state: TaskCompleted, history: 1, attempt: 1, exec: "e1"},
		{name: "cancel ends the lease", steps: []step{applied(created()), applied(claim("a", 1, "e1")), applied(cancel)},
			state: TaskCanceled, history: 1, attempt: 1, exec: "e1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h TaskHead
			for i, s := range c.steps {
				before := clone(h)
				eff, err := h.Apply(&s.e)
				switch {
				case s.err == nil && err != nil:
					t.Fatalf("step %d (%s): refused: %v", i, s.e.Type, err)
				case s.err != nil && !errors.Is(err, s.err):
					t.Fatalf("step %d (%s): %v, want %v", i, s.e.Type, err, s.err)
				case err != nil:
					if !reflect.DeepEqual(h, before) || !reflect.DeepEqual(eff, TaskEffect{}) {
						t.Fatalf("step %d (%s): a refused event changed the head: %+v, was %+v; effect %+v", i, s.e.Type, h, before, eff)
					}
					continue
				}
				if !eff.Served && !reflect.DeepEqual(servedPart(h), servedPart(before)) {
					t.Fatalf("step %d (%s): not served, but the served head changed: %+v, was %+v", i, s.e.Type, h, before)
				}
				if (eff.Message != nil) != (h.History == before.History+1) || (eff.Artifact != nil) != (h.Artifacts == before.Artifacts+1) {
					t.Fatalf("step %d (%s): effect %+v, counts %d/%d, were %d/%d", i, s.e.Type, eff, h.History, h.Artifacts, before.History, before.Artifacts)
				}
			}
			if h.State != c.state || h.History != c.history || h.Artifacts != c.artifacts || !slices.Equal(h.ReceiptIDs, c.receipts) ||
				h.ClaimedBy != c.claimedBy || h.Attempt != c.attempt || h.ExecutionID != c.exec {
				t.Errorf("head %+v\nwant state %q, history %d, artifacts %d, receipts %v, claimed by %q (attempt %d, execution %q)",
					h, c.state, c.history, c.artifacts, c.receipts, c.claimedBy, c.attempt, c.exec)
			}
		})
	}
}

func TestMergeTaskArtifacts(t *testing.T) {
	a := func(data string, appends bool) TaskArtifact {
		return TaskArtifact{Data: json.RawMessage(data), Append: appends}
	}
	cases := []struct {
		name   string
		events []TaskArtifact
		want   []string
	}{
		{name: "none", want: []string{}},
		{name: "a new id adds one, in first-event order", events: []TaskArtifact{
			a(`{"artifactId":"b","parts":[1]}`, false), a(`{"artifactId":"a","parts":[2]}`, false),
		}, want: []string{`{"artifactId":"b","parts":[1]}`, `{"artifactId":"a","parts":[2]}`}},
		{name: "an append chunk extends the artifact of its id", events: []TaskArtifact{
			a(`{"artifactId":"a","name":"n","parts":[1]}`, false), a(`{"artifactId":"b","parts":[9]}`, false),
			a(`{"artifactId":"a","parts":[2,3]}`, true), a(`{"artifactId":"a","name":"ignored"}`, true),
		}, want: []string{`{"artifactId":"a","name":"n","parts":[1,2,3]}`, `{"artifactId":"b","parts":[9]}`}},
		{name: "another one with the same id replaces it", events: []TaskArtifact{
			a(`{"artifactId":"a","parts":[1]}`, false), a(`{"artifactId":"a","parts":[2]}`, true), a(`{"artifactId":"a","parts":[3]}`, false),
		}, want: []string{`{"artifactId":"a","parts":[3]}`}},
		{name: "an append chunk of a new id adds one", events: []TaskArtifact{a(`{"artifactId":"a","parts":[1]}`, true)},
			want: []string{`{"artifactId":"a","parts":[1]}`}},
		{name: "no parts or null parts", events: []TaskArtifact{
			a(`{"artifactId":"a"}`, false), a(`{"artifactId":"a","parts":[1]}`, true), a(`{"artifactId":"b","parts":null}`, false),
		}, want: []string{`{"artifactId":"a","parts":[1]}`, `{"artifactId":"b","parts":null}`}},
		{name: "what is no A2A artifact is left out", events: []TaskArtifact{
			a(`"text"`, false), a(`{}`, false), a(`{"artifactId":null}`, false), a(`{"artifactId":7}`, false),
			a(`{"artifactId":"a","parts":{}}`, false), a(`null`, false), a(`[]`, false), a(`{"artifactId":"ok", "parts" : [ 1 ] }`, false),
		}, want: []string{`{"artifactId":"ok","parts":[1]}`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := MergeTaskArtifacts(c.events)
			if err != nil {
				t.Fatal(err)
			}
			strs := []string{}
			for _, g := range got {
				strs = append(strs, string(g))
			}
			if !slices.Equal(strs, c.want) {
				t.Errorf("got %s\nwant %s", strs, c.want)
			}
		})
	}
}

func TestLinkTaskReceipts(t *testing.T) {
	cases := []struct {
		name, meta string
		receipts   []string
		want       string
	}{
		{name: "no metadata, no receipts", want: `{"chio":{"receiptIds":[]}}`},
		{name: "null metadata", meta: `null`, receipts: []string{"r1"}, want: `{"chio":{"receiptIds":["r1"]}}`},
		{name: "metadata without chio", meta: `{"x":1}`, receipts: []string{"r1"}, want: `{"chio":{"receiptIds":["r1"]},"x":1}`},
		{name: "null chio", meta: `{"chio":null}`, want: `{"chio":{"receiptIds":[]}}`},
		{name: "receipt named already", meta: `{"chio":{"receiptId":"r1","receiptPending":false}}`, receipts: []string{"r1"},
			want: `{"chio":{"receiptId":"r1","receiptIds":["r1"],"receiptPending":false}}`},
		{name: "not pending, no receipt named", meta: `{"chio":{"receiptId":null}}`, receipts: []string{"r1", "r2"},
			want: `{"chio":{"receiptId":null,"receiptIds":["r1","r2"]}}`},
		{name: "pending without receipts stays pending", meta: `{"chio":{"receiptId":null,"receiptPending":true}}`,
			want: `{"chio":{"receiptId":null,"receiptIds":[],"receiptPending":true}}`},
		{name: "pending is resolved by the last receipt", meta: `{"chio":{"receiptId":null,"receiptPending":true,"receiptBearing":false,"k":{"b":1, "a":2}}}`,
			receipts: []string{"r1", "r2"},
			want:     `{"chio":{"k":{"b":1,"a":2},"receiptBearing":true,"receiptId":"r2","receiptIds":["r1","r2"],"receiptPending":false}}`},
		{name: "pending with no receiptId key", meta: `{"chio":{"receiptPending":true}}`, receipts: []string{"r1"},
			want: `{"chio":{"receiptBearing":true,"receiptId":"r1","receiptIds":["r1"],"receiptPending":false}}`},
		{name: "pending but a receipt named", meta: `{"chio":{"receiptId":"r0","receiptPending":true}}`, receipts: []string{"r1"},
			want: `{"chio":{"receiptId":"r0","receiptIds":["r1"],"receiptPending":true}}`},
		{name: "metadata not an object is served as it is", meta: `[1, 2]`, receipts: []string{"r1"}, want: `[1, 2]`},
		{name: "chio not an object is served as it is", meta: `{"chio": "x"}`, receipts: []string{"r1"}, want: `{"chio": "x"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var meta json.RawMessage
			if c.meta != "" {
				meta = json.RawMessage(c.meta)
			}
			got, err := LinkTaskReceipts(meta, c.receipts)
			if err != nil || string(got) != c.want {
				t.Errorf("got %s, %v\nwant %s", got, err, c.want)
			}
		})
	}
}

// foldFixture folds commits as a reader does (refused events skipped),
// wiping the lease and request before every event when forget is set,
// as a reader that does not keep them sees it between batches.
func foldFixture(t *testing.T, commits []TaskCommit, forget bool) (TaskHead, TaskView) {
	t.Helper()
	var (
		h    TaskHead
		hist []json.RawMessage
		arts []TaskArtifact
	)
	for _, c := range commits {
		for i := range c.Events {
			if forget {
				h = servedPart(h)
			}
			eff, err := h.Apply(&c.Events[i])
			if err != nil {
				continue
			}
			if eff.Message != nil {
				hist = append(hist, eff.Message)
			}
			if eff.Artifact != nil {
				arts = append(arts, *eff.Artifact)
			}
		}
	}
	v, err := h.View(hist, arts)
	if err != nil {
		t.Fatal(err)
	}
	return h, v
}

// TestTaskFoldFixture checks the shared fixture's expectations against the
// fold, as the stream carries the commits (JSON), with and without the
// lease kept.
func TestTaskFoldFixture(t *testing.T) {
	f := TaskFoldFixture()
	var commits []TaskCommit
	for _, c := range f.Commits {
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back TaskCommit
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		commits = append(commits, back)
	}
	want := viewJSON(t, f.Want)
	h, v := foldFixture(t, commits, false)
	if got := viewJSON(t, v); got != want {
		t.Errorf("view\n%s\nwant\n%s", got, want)
	}
	if h.ClaimedBy != f.WantClaimedBy || h.Attempt != f.WantAttempt || h.ExecutionID != f.WantExecutionID || h.Owner != f.Owner {
		t.Errorf("head %+v, want lease %q/%d/%q, owner %+v", h, f.WantClaimedBy, f.WantAttempt, f.WantExecutionID, f.Owner)
	}
	if _, v := foldFixture(t, commits, true); viewJSON(t, v) != want {
		t.Errorf("without the lease, view\n%s\nwant\n%s", viewJSON(t, v), want)
	}
}

func viewJSON(t testing.TB, v TaskView) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}
