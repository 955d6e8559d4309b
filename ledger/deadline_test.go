package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// TestOutcomeDeadlineOutlivesIncompleteAfter: a decision carrying its own
// outcome_deadline later than incomplete-after is not ended incomplete at
// incomplete-after; it is ended at its deadline when no outcome comes,
// and an outcome within the deadline completes it. A decision without
// one still times out at incomplete-after.
func TestOutcomeDeadlineOutlivesIncompleteAfter(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	const after = time.Minute
	run := h.start(store, WithIncompleteAfter(after))

	now := uint64(time.Now().Unix())
	ts := now - 120 // incomplete-after passed a minute ago for every call below
	deadline := now + 4
	plain := newCall(schemas.VerdictAllow, "")
	waiting := newCall(schemas.VerdictAllow, "")
	answered := newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
	h.publishCalls([]call{plain}, ts)
	for _, c := range []call{waiting, answered} {
		d := decisionEvent(c, ts)
		d.OutcomeDeadline = deadline
		if err := d.Validate(); err != nil {
			t.Fatal(err)
		}
		h.publish(schemas.SubjectDecision, d, d.EventID)
	}
	waitSize(t, store, 1)
	r, _, _ := h.receipt(store, plain.id)
	if r.Decision.Verdict != schemas.VerdictIncomplete || r.Timestamp != ts+60 {
		t.Fatalf("call without a deadline: %+v at %d, want incomplete at %d", r.Decision, r.Timestamp, ts+60)
	}
	// Past incomplete-after, within their own deadline: both still open.
	waitStreamSeq(t, store, h.js)
	for _, c := range []call{waiting, answered} {
		if _, err := store.Pending(c.id); err != nil {
			t.Fatalf("call %s within its deadline is not pending: %v", c.id, err)
		}
	}
	if uint64(time.Now().Unix()) >= deadline {
		t.Fatal("the machine was too slow to check the calls before their deadline")
	}
	o := outcomeEvent(answered, now)
	h.publish(schemas.SubjectOutcome, o, o.EventID)
	waitSize(t, store, 3)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := h.receipt(store, answered.id); r.Decision.Verdict != schemas.VerdictAllow {
		t.Fatalf("call answered within its deadline: %+v", r.Decision)
	}
	r, _, _ = h.receipt(store, waiting.id)
	if r.Decision.Verdict != schemas.VerdictIncomplete || r.Timestamp != deadline {
		t.Fatalf("call past its deadline: %+v at %d, want incomplete at %d", r.Decision, r.Timestamp, deadline)
	}
	if !strings.Contains(r.Decision.Reason, "outcome_deadline") {
		t.Fatalf("reason %q does not name the deadline", r.Decision.Reason)
	}
	if _, err := store.Pending(waiting.id); !errors.Is(err, logstore.ErrNotFound) {
		t.Fatal("the timed-out call is still pending")
	}
}
