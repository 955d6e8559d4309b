package ledger

import (
	"bytes"
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// publishEnvelope publishes events as one envelope, as an edge's
// coalescing writer does under load.
func (h *harness) publishEnvelope(events []schemas.StreamEvent, msgID string) {
	h.t.Helper()
	body, err := schemas.PackEvents(events)
	if err != nil {
		h.t.Fatal(err)
	}
	msg := &nats.Msg{Subject: schemas.SubjectEnvelope, Data: body, Header: nats.Header{}}
	msg.Header.Set(schemas.HeaderEventKinds, schemas.EnvelopeKinds(events))
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if _, err := h.js.PublishMsg(context.Background(), msg, opts...); err != nil {
		h.t.Fatal(err)
	}
}

// The same calls written one event per message, or grouped into envelopes
// with duplicates across both layouts, fold to the same log: same size,
// same root, one receipt per call; and a rebuild of the enveloped stream
// gives it again.
func TestEnvelopesFoldLikeSingleEvents(t *testing.T) {
	var calls []call
	for i := 0; i < 120; i++ {
		calls = append(calls, newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""),
			newCall(schemas.VerdictAllow, schemas.OutcomeFailed))
	}
	const ts = 1760000000
	var events []schemas.StreamEvent
	for _, c := range calls {
		events = append(events, schemas.StreamEvent{Subject: schemas.SubjectDecision, Data: mustJSON(decisionEvent(c, ts))})
	}
	for _, c := range calls {
		if c.verdict == schemas.VerdictAllow {
			events = append(events, schemas.StreamEvent{Subject: schemas.SubjectOutcome, Data: mustJSON(outcomeEvent(c, ts+1))})
		}
	}

	single := newHarness(t)
	for _, e := range events {
		single.js.Publish(context.Background(), e.Subject, e.Data)
	}
	singleStore := single.openStore("log")
	defer singleStore.Close()
	run := single.start(singleStore)
	waitSize(t, singleStore, uint64(len(calls)))
	waitStreamSeq(t, singleStore, single.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	env := newHarness(t)
	env.keys = single.keys // the same signer: the same leaves
	for i := 0; i < len(events); {
		n := min(1+i%17, len(events)-i) // envelopes of 1..17 events
		group := events[i : i+n]
		if n == 1 {
			env.js.Publish(context.Background(), group[0].Subject, group[0].Data)
		} else {
			body, _ := schemas.PackEvents(group)
			env.publishEnvelope(group, schemas.EnvelopeMsgID(body))
			env.publishEnvelope(group, schemas.EnvelopeMsgID(body)) // a retried write: dropped by the stream
			if i%3 == 0 {
				env.publishEnvelope(group[:2], "") // events written twice, in two envelopes
				env.js.Publish(context.Background(), group[0].Subject, group[0].Data)
			}
		}
		i += n
	}
	// A malformed envelope is skipped, never fatal.
	env.js.Publish(context.Background(), schemas.SubjectEnvelope, []byte("chio.events.decision {\"x\":1}\nno-newline"))
	envStore := env.openStore("log")
	defer envStore.Close()
	run = env.start(envStore)
	waitSize(t, envStore, uint64(len(calls)))
	waitStreamSeq(t, envStore, env.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	a, b := singleStore.State(), envStore.State()
	if a.Size != uint64(len(calls)) || b.Size != a.Size || !bytes.Equal(a.Root, b.Root) {
		t.Fatalf("single events: size %d root %x; envelopes: size %d root %x; want %d receipts", a.Size, a.Root, b.Size, b.Root, len(calls))
	}

	rebuilt := env.openStore("rebuilt")
	defer rebuilt.Close()
	l, err := New(env.js, rebuilt, env.keys, WithLogger(quiet()), WithBatch(7, 0))
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Rebuild(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Size != b.Size || !bytes.Equal(st.Root, b.Root) {
		t.Fatalf("rebuild: size %d root %x, live %d %x", st.Size, st.Root, b.Size, b.Root)
	}
}
