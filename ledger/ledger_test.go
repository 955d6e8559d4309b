package ledger

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

const testOrigin = "ledger.test/chio"

type harness struct {
	t    testing.TB
	ns   *natsembed.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	keys Keys
	dir  string
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	dir := t.TempDir()
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(dir, "nats"), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, testOrigin)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	h := &harness{t: t, ns: ns, nc: nc, js: js, dir: dir, keys: Keys{Kernel: kernel, Checkpoint: signer, CheckpointVerifier: verifier}}
	if err := EnsureStreams(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) openStore(name string) *logstore.Store {
	h.t.Helper()
	s, err := logstore.Open(filepath.Join(h.dir, name), logstore.WithLogger(quiet()),
		logstore.WithCheckpointVerifier(CheckpointVerifier(testOrigin, h.keys.CheckpointVerifier)))
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// offlineLedger opens a store in dir and a ledger over it with no
// JetStream, for tests that fold events directly. The caller closes the
// store.
func offlineLedger(t testing.TB, dir string, keys Keys, opts ...Option) (*logstore.Store, *Ledger) {
	t.Helper()
	store, err := logstore.Open(dir, logstore.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(nil, store, keys, append([]Option{WithLogger(quiet())}, opts...)...)
	if err != nil {
		_ = store.Close()
		t.Fatal(err)
	}
	return store, l
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("ledger did not stop")
		return nil
	}
}

func (h *harness) start(store *logstore.Store, opts ...Option) *running {
	h.t.Helper()
	// The tests' calls carry fixed, long past timestamps: with the default
	// incomplete timeout every allow would be overdue on arrival, and its
	// timeout event could land before the outcome the test publishes right
	// after it. Tests of timeouts set their own.
	l, err := New(h.js, store, h.keys, append([]Option{WithLogger(quiet()), WithBatch(64, time.Millisecond),
		WithIncompleteAfter(100 * 365 * 24 * time.Hour)}, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- l.Run(ctx) }()
	h.t.Cleanup(func() { cancel() })
	return r
}

// call is one tool call as an edge reports it.
type call struct {
	id      string
	verdict schemas.Verdict // allow or deny
	outcome schemas.Outcome // for allow; "" leaves it open
	params  json.RawMessage
}

func newCall(v schemas.Verdict, o schemas.Outcome) call {
	return call{id: uuid.Must(uuid.NewV7()).String(), verdict: v, outcome: o, params: json.RawMessage(`{"path":"docs/a.txt"}`)}
}

func decisionEvent(c call, ts uint64) schemas.DecisionEvent {
	d := schemas.Decision{Verdict: c.verdict}
	if c.verdict == schemas.VerdictDeny {
		d.Reason, d.Guard = "path outside grant", "ForbiddenPathGuard"
	}
	return schemas.DecisionEvent{
		Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(c.id), ReceiptID: c.id, Timestamp: ts,
		CapabilityID: "cap-1", ToolServer: "fs", ToolName: "read_file", Parameters: c.params, Decision: d,
		PolicyHash: schemas.SHA256Hex([]byte("policy")), Metadata: json.RawMessage(`{"edge":"a2a"}`),
		Evidence: []schemas.GuardEvidence{{GuardName: "ForbiddenPathGuard", Verdict: c.verdict == schemas.VerdictAllow}},
	}
}

func outcomeEvent(c call, ts uint64) schemas.OutcomeEvent {
	o := schemas.OutcomeEvent{Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(c.id), ReceiptID: c.id,
		Timestamp: ts, Outcome: c.outcome, ContentHash: schemas.SHA256Hex([]byte(`"hello"`)), Metadata: json.RawMessage(`{"edge":"other","bytes":5}`)}
	if c.outcome != schemas.OutcomeCompleted {
		o.Reason = "tool said no"
	}
	if c.outcome == schemas.OutcomeRefused {
		// Refused after its decision was written: nothing ran.
		o.Reason, o.Guard, o.ContentHash = "dpop replayed: this proof was used before", "dpop", schemas.EmptyContentHash
	}
	if c.outcome == schemas.OutcomeNotObserved {
		// A gateway carried it out; the edge never saw the result. An
		// outcome key the edge sets loses to the ledger's.
		o.ContentHash, o.Metadata = schemas.EmptyContentHash, json.RawMessage(`{"outcome":"completed"}`)
	}
	return o
}

func (h *harness) publish(subject string, v any, msgID string) {
	h.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	opts := []jetstream.PublishOpt{}
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if _, err := h.js.Publish(context.Background(), subject, data, opts...); err != nil {
		h.t.Fatal(err)
	}
}

// publishCalls publishes every decision (and outcome) the way an edge does.
func (h *harness) publishCalls(calls []call, ts uint64) {
	for _, c := range calls {
		d := decisionEvent(c, ts)
		h.publish(schemas.SubjectDecision, d, d.EventID)
		if c.verdict == schemas.VerdictAllow && c.outcome != "" {
			o := outcomeEvent(c, ts+1)
			h.publish(schemas.SubjectOutcome, o, o.EventID)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitSize(t *testing.T, s *logstore.Store, n uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("log size %d", n), func() bool { return s.State().Size >= n })
}

func waitStreamSeq(t *testing.T, s *logstore.Store, js jetstream.JetStream) {
	t.Helper()
	st, err := js.Stream(context.Background(), schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ledger to fold the whole stream", func() bool { return s.State().StreamSeq >= info.State.LastSeq })
}

func (h *harness) receipt(s *logstore.Store, id string) (*schemas.Receipt, uint64, []byte) {
	h.t.Helper()
	idx, err := s.LeafIndex(id)
	if err != nil {
		h.t.Fatalf("receipt %s: %v", id, err)
	}
	leaf, err := s.Entry(idx)
	if err != nil {
		h.t.Fatal(err)
	}
	r, err := schemas.ParseReceipt(leaf)
	if err != nil {
		h.t.Fatal(err)
	}
	return r, idx, leaf
}

func TestEventsBecomeVerifiableReceipts(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store)

	var calls []call
	for i := 0; i < 40; i++ {
		calls = append(calls,
			newCall(schemas.VerdictDeny, ""),
			newCall(schemas.VerdictAllow, schemas.OutcomeCompleted),
			newCall(schemas.VerdictAllow, schemas.OutcomeFailed),
			newCall(schemas.VerdictAllow, schemas.OutcomeCancelled),
			newCall(schemas.VerdictAllow, schemas.OutcomeRefused),
			newCall(schemas.VerdictAllow, schemas.OutcomeNotObserved))
	}
	h.publishCalls(calls, 1760000000)
	waitSize(t, store, uint64(len(calls)))
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	st := store.State()
	if st.Size != uint64(len(calls)) {
		t.Fatalf("log size %d, want %d", st.Size, len(calls))
	}
	cp, _, _, err := tlog.ParseCheckpoint(store.LatestCheckpoint(), testOrigin, h.keys.CheckpointVerifier)
	if err != nil {
		t.Fatalf("latest checkpoint does not verify: %v", err)
	}
	if cp.Size != st.Size || !bytes.Equal(cp.Hash, st.Root) {
		t.Fatalf("checkpoint (%d, %x) is not the log head (%d, %x)", cp.Size, cp.Hash, st.Size, st.Root)
	}
	kernelKey := schemas.EncodePublicKey(h.keys.Kernel.Public().(ed25519.PublicKey))
	want := map[schemas.Outcome]schemas.Verdict{"": schemas.VerdictDeny, schemas.OutcomeCompleted: schemas.VerdictAllow,
		schemas.OutcomeFailed: schemas.VerdictDeny, schemas.OutcomeCancelled: schemas.VerdictCancelled,
		schemas.OutcomeRefused: schemas.VerdictDeny, schemas.OutcomeNotObserved: schemas.VerdictAllow}
	for _, c := range calls {
		r, idx, leaf := h.receipt(store, c.id)
		if err := r.Verify(); err != nil {
			t.Fatalf("receipt %s: %v", c.id, err)
		}
		if r.KernelKey != kernelKey {
			t.Fatal("receipt not signed by the kernel key")
		}
		if r.Decision.Verdict != want[c.outcome] {
			t.Fatalf("call %v: verdict %s", c, r.Decision.Verdict)
		}
		switch {
		case c.verdict == schemas.VerdictDeny && (r.Decision.Guard != "ForbiddenPathGuard" || r.ContentHash != schemas.EmptyContentHash || r.Timestamp != 1760000000):
			t.Fatalf("deny receipt %+v", r)
		case c.outcome == schemas.OutcomeCompleted && (r.Timestamp != 1760000001 || string(r.Metadata) != `{"bytes":5,"edge":"a2a"}`):
			t.Fatalf("allow receipt: timestamp %d metadata %s", r.Timestamp, r.Metadata)
		case c.outcome == schemas.OutcomeFailed && r.Decision.Guard != "tool_server":
			t.Fatalf("failed call: %+v", r.Decision)
		case c.outcome == schemas.OutcomeRefused && (r.Decision.Guard != "dpop" || r.Decision.Reason != "dpop replayed: this proof was used before" ||
			r.ContentHash != schemas.EmptyContentHash):
			t.Fatalf("refused call: %+v", r)
		case c.outcome == schemas.OutcomeNotObserved && (r.ContentHash != schemas.EmptyContentHash || r.Timestamp != 1760000001 ||
			string(r.Metadata) != `{"edge":"a2a","outcome":"not_observed"}`):
			t.Fatalf("not observed call: content %s timestamp %d metadata %s", r.ContentHash, r.Timestamp, r.Metadata)
		}
		// The exact dedup index points each event at its receipt's leaf.
		for _, ev := range []string{schemas.DecisionEventID(c.id), schemas.OutcomeEventID(c.id)} {
			leafIdx, ok, err := store.EventLeaf(ev)
			if c.verdict == schemas.VerdictDeny && ev == schemas.OutcomeEventID(c.id) {
				if ok || !errors.Is(err, logstore.ErrNotFound) {
					t.Fatalf("a deny has no outcome event, yet %s is indexed", ev)
				}
				continue
			}
			if err != nil || !ok || leafIdx != idx {
				t.Fatalf("event %s → leaf %d (%v, %v), want %d", ev, leafIdx, ok, err, idx)
			}
		}
		_, p, err := store.InclusionProof(idx, cp.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, cp.Size, rfc6962.DefaultHasher.HashLeaf(leaf), p, cp.Hash); err != nil {
			t.Fatalf("inclusion proof of %s: %v", c.id, err)
		}
	}
	// Every receipt reached CHIO_RECEIPTS, in log order, with its leaf index.
	h.checkPublished(t, calls)
}

func (h *harness) checkPublished(t *testing.T, calls []call) {
	t.Helper()
	ctx := context.Background()
	stream, err := h.js.Stream(ctx, schemas.ReceiptsStream)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for next := 0; next < len(calls); next++ {
		// Read by sequence, waiting for the publisher (slow under -race)
		// rather than trusting one consumer's heartbeats.
		var m *jetstream.RawStreamMsg
		deadline := time.Now().Add(time.Minute)
		for {
			m, err = stream.GetMsg(ctx, uint64(next+1))
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("receipt %d on %s: %v", next, schemas.ReceiptsStream, err)
		}
		if m.Header.Get(HeaderLeafIndex) != fmt.Sprint(next) || m.Subject != "chio.receipts.fs" {
			t.Fatalf("published receipt %d: subject %s leaf header %q", next, m.Subject, m.Header.Get(HeaderLeafIndex))
		}
		r, err := schemas.ParseReceipt(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		seen[r.ID] = true
	}
	if len(seen) != len(calls) {
		t.Fatalf("%d distinct receipts published, want %d", len(seen), len(calls))
	}
}

func TestDuplicatesMakeOneReceipt(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store)
	deny, allow := newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
	for i := 0; i < 3; i++ {
		// The same Nats-Msg-Id inside the window (dropped by the stream), and
		// with no Msg-Id at all, as after the window (caught by the ledger).
		for _, id := range []string{"use-event-id", ""} {
			for _, c := range []call{deny, allow} {
				d := decisionEvent(c, 1760000000)
				o := outcomeEvent(c, 1760000001)
				if id != "" {
					h.publish(schemas.SubjectDecision, d, d.EventID)
				} else {
					h.publish(schemas.SubjectDecision, d, "")
				}
				if c.verdict == schemas.VerdictAllow {
					h.publish(schemas.SubjectOutcome, o, "")
				}
			}
		}
	}
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := store.State().Size; got != 2 {
		t.Fatalf("log size %d, want 2", got)
	}
}

// A ledger stopped between commit and ack, or in the middle of a batch
// (folded, not committed), restarts with nothing lost and nothing doubled.
func TestCrashBetweenCommitAndAckAndMidBatch(t *testing.T) {
	for _, stage := range []string{"after-commit", "before-commit"} {
		t.Run(stage, func(t *testing.T) {
			h := newHarness(t)
			var calls []call
			for i := 0; i < 300; i++ {
				calls = append(calls, newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""))
			}
			h.publishCalls(calls, 1760000000)

			crash := errors.New("simulated crash")
			for round := 0; round < 3; round++ {
				store := h.openStore("log")
				run := h.start(store, WithBatch(50, time.Millisecond), func(c *config) {
					c.fault = func(s string, n int) error {
						if s == stage && n == 2 {
							return crash
						}
						return nil
					}
				})
				select {
				case err := <-run.done:
					if !errors.Is(err, crash) {
						t.Fatalf("round %d: Run returned %v", round, err)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("round %d: the fault never fired (size %d, seq %d)", round, store.State().Size, store.State().StreamSeq)
				}
				if err := store.Close(); err != nil {
					t.Fatal(err)
				}
			}
			store := h.openStore("log")
			defer store.Close()
			run := h.start(store)
			waitSize(t, store, uint64(len(calls)))
			waitStreamSeq(t, store, h.js)
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := store.State().Size; got != uint64(len(calls)) {
				t.Fatalf("log size %d, want %d", got, len(calls))
			}
			for _, c := range calls {
				h.receipt(store, c.id)
			}
		})
	}
}

// Redelivered events (a consumer behind the log) are skipped, and events the
// consumer never delivers (a consumer ahead of the log) are read from the
// stream directly: either way every call has exactly one receipt.
func TestRedeliveryAndGapsKeepOneReceiptPerCall(t *testing.T) {
	h := newHarness(t)
	var calls []call
	for i := 0; i < 100; i++ {
		calls = append(calls, newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""))
	}
	h.publishCalls(calls, 1760000000)

	// A fresh log whose consumer starts at sequence 40: 1–39 are a gap.
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store, func(c *config) { c.startSeq = 40 })
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := store.State().Size; got != uint64(len(calls)) {
		t.Fatalf("after a gap: log size %d, want %d", got, len(calls))
	}
	root := store.State().Root

	// The same log with its consumer rewound to sequence 1: all redelivered.
	run = h.start(store, func(c *config) { c.startSeq = 1 })
	more := []call{newCall(schemas.VerdictDeny, "")}
	h.publishCalls(more, 1760000000)
	waitSize(t, store, uint64(len(calls)+1))
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := store.State().Size; got != uint64(len(calls)+1) {
		t.Fatalf("after redelivery: log size %d, want %d", got, len(calls)+1)
	}
	for _, c := range append(calls, more...) {
		h.receipt(store, c.id)
	}
	// The log grew from the earlier head: the new root extends the old one.
	p, err := store.ConsistencyProof(uint64(len(calls)), uint64(len(calls)+1))
	if err != nil {
		t.Fatal(err)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, uint64(len(calls)), uint64(len(calls)+1), p, root, store.State().Root); err != nil {
		t.Fatalf("consistency with the earlier head: %v", err)
	}
}

// A ledger whose consumer is deleted under it makes it again, at its own
// position, and goes on: nothing is skipped, nothing doubled.
func TestLostConsumerIsMadeAgain(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store)
	h.publishCalls([]call{newCall(schemas.VerdictDeny, "")}, 1760000000)
	waitSize(t, store, 1)
	if err := h.js.DeleteConsumer(context.Background(), schemas.EventsStream, "chio-ledger"); err != nil {
		t.Fatal(err)
	}
	h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}, 1760000001)
	waitSize(t, store, 3)
	select {
	case err := <-run.done:
		t.Fatalf("Run returned %v", err)
	default:
	}
}

func TestAllowWithoutOutcomeBecomesIncomplete(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store, WithIncompleteAfter(time.Second))

	now := uint64(time.Now().Unix())
	orphan := newCall(schemas.VerdictAllow, "")
	onTime := newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
	h.publishCalls([]call{orphan}, now-60) // long overdue
	h.publishCalls([]call{onTime}, now)
	waitSize(t, store, 2)

	r, _, _ := h.receipt(store, orphan.id)
	if r.Decision.Verdict != schemas.VerdictIncomplete || r.Timestamp != now-60+1 || r.ContentHash != schemas.EmptyContentHash {
		t.Fatalf("orphan receipt: %+v at %d", r.Decision, r.Timestamp)
	}
	// The outcome that finally arrives changes nothing, and a timeout event
	// for the call that completed in time (as a standby ledger might
	// publish) does not cut it.
	late := outcomeEvent(call{id: orphan.id, outcome: schemas.OutcomeCompleted}, now)
	h.publish(schemas.SubjectOutcome, late, late.EventID)
	racing := schemas.TimeoutEvent{Schema: schemas.TimeoutEventSchema, EventID: schemas.TimeoutEventID(onTime.id), ReceiptID: onTime.id,
		Timestamp: now + 1, Reason: "no outcome within 1s"}
	h.publish(schemas.SubjectTimeout, racing, racing.EventID)
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := store.State().Size; got != 2 {
		t.Fatalf("log size %d, want 2", got)
	}
	if r, _, _ := h.receipt(store, onTime.id); r.Decision.Verdict != schemas.VerdictAllow {
		t.Fatalf("completed call: %+v", r.Decision)
	}
	if _, err := store.Pending(orphan.id); !errors.Is(err, logstore.ErrNotFound) {
		t.Fatal("the incomplete call is still pending")
	}
}

// A pending decision survives a restart and still times out.
func TestPendingSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	run := h.start(store, WithIncompleteAfter(time.Hour))
	c := newCall(schemas.VerdictAllow, "")
	h.publishCalls([]call{c}, uint64(time.Now().Unix())-2)
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if store.State().Size != 0 {
		t.Fatal("an open call produced a receipt")
	}
	_ = store.Close()
	store = h.openStore("log")
	defer store.Close()
	run = h.start(store, WithIncompleteAfter(time.Second))
	waitSize(t, store, 1)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := h.receipt(store, c.id); r.Decision.Verdict != schemas.VerdictIncomplete {
		t.Fatalf("got %+v", r.Decision)
	}
}

func TestMalformedEventsAreSkipped(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store)
	good := newCall(schemas.VerdictDeny, "")
	bad := decisionEvent(newCall(schemas.VerdictDeny, ""), 1)
	bad.Decision.Guard = ""
	for _, raw := range [][]byte{[]byte("not json"), []byte(`{"schema":"chio.event.decision.v1"}`), mustJSON(bad), []byte(`[]`)} {
		if _, err := h.js.Publish(context.Background(), schemas.SubjectDecision, raw); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.js.Publish(context.Background(), "chio.events.unknown", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	h.publishCalls([]call{good}, 1760000000)
	waitSize(t, store, 1)
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if store.State().Size != 1 {
		t.Fatalf("size %d", store.State().Size)
	}
	h.receipt(store, good.id)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestRebuildIsByteIdentical(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store, WithIncompleteAfter(time.Second), WithBatch(37, time.Millisecond))
	var calls []call
	for i := 0; i < 200; i++ {
		calls = append(calls, newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""))
	}
	calls = append(calls, newCall(schemas.VerdictAllow, "")) // ends incomplete via a timeout event
	h.publishCalls(calls, uint64(time.Now().Unix())-10)
	waitSize(t, store, uint64(len(calls)))
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	rebuilt := h.openStore("rebuilt")
	defer rebuilt.Close()
	l, err := New(h.js, rebuilt, h.keys, WithLogger(quiet()), WithBatch(101, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Rebuild(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	orig := store.State()
	if st.Size != orig.Size || !bytes.Equal(st.Root, orig.Root) {
		t.Fatalf("rebuild: size %d root %x, live: size %d root %x", st.Size, st.Root, orig.Size, orig.Root)
	}
	var mu sync.Mutex
	n := 0
	err = store.Entries(0, orig.Size, func(i uint64, leaf []byte) error {
		other, err := rebuilt.Entry(i)
		if err != nil {
			return err
		}
		if !bytes.Equal(leaf, other) {
			return fmt.Errorf("leaf %d differs", i)
		}
		mu.Lock()
		n++
		mu.Unlock()
		return nil
	})
	if err != nil || n != len(calls) {
		t.Fatalf("compared %d leaves: %v", n, err)
	}
	// Rebuilding into a store that already has a log is refused.
	if _, err := l.Rebuild(context.Background()); err == nil {
		t.Fatal("rebuild into a non-empty store")
	}
}
