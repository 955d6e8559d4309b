package ledger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// The events stream deleted and created again (a lost data directory, an
// operator's mistake, an attacker with the right): the ledger folds
// nothing of the new stream, says why, and the edges' check refuses it,
// until the operator accepts exactly that stream; then the log records
// the break in a receipt and folds the new stream from its start, so no
// event written to it is skipped.
func TestStreamResetStopsTheLog(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	store := h.openStore("log")
	defer store.Close()

	start := func(opts ...Option) (*Ledger, *running) {
		t.Helper()
		l, err := New(h.js, store, h.keys, append([]Option{WithLogger(quiet()), WithBatch(64, time.Millisecond)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctx)
		r := &running{cancel: cancel, done: make(chan error, 1)}
		go func() { r.done <- l.Run(ctx) }()
		t.Cleanup(cancel)
		return l, r
	}
	streamInfo := func() *jetstream.StreamInfo {
		t.Helper()
		s, err := h.js.Stream(ctx, schemas.EventsStream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo()
	}

	_, run := start()
	h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}, 1760000000)
	waitSize(t, store, 2)
	first := streamInfo()
	waitFor(t, "the edges' record", func() bool {
		return schemas.CheckEventsStream(ctx, h.js, first) == nil && store.State().EventsStream != ""
	})
	if got := store.State().EventsStream; got != schemas.StreamIdentity(first) {
		t.Fatalf("log records stream %q, want %q", got, schemas.StreamIdentity(first))
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	// The stream goes, and comes back empty; calls are written to it.
	if err := h.js.DeleteStream(ctx, schemas.EventsStream); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, h.js, 1); err != nil {
		t.Fatal(err)
	}
	late := []call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}
	h.publishCalls(late, 1760000100)
	second := streamInfo()
	if err := schemas.CheckEventsStream(ctx, h.js, second); !errors.Is(err, schemas.ErrStreamReset) {
		t.Fatalf("edges' check of the new stream: %v", err)
	}

	for _, opts := range [][]Option{nil, {WithAcceptEventsStream(schemas.StreamIdentity(first))}} {
		l, run := start(opts...)
		waitFor(t, "the ledger to refuse the stream", func() bool { return l.StreamErr() != nil })
		var reset *StreamResetError
		if err := l.StreamErr(); !errors.As(err, &reset) || reset.Found != schemas.StreamIdentity(second) || reset.StreamSeq != 2 {
			t.Fatalf("StreamErr = %v", err)
		}
		// Refused before anything was folded: the log is as it was.
		if size := store.State().Size; size != 2 {
			t.Fatalf("log size %d after the reset, want 2", size)
		}
		if err := run.stop(t); err != nil {
			t.Fatal(err)
		}
	}

	// The operator accepts the new stream, naming it.
	l, run := start(WithAcceptEventsStream(schemas.StreamIdentity(second)))
	waitFor(t, "the new stream folded", func() bool {
		select {
		case err := <-run.done:
			t.Fatalf("Run returned %v", err)
		default:
		}
		return store.State().Size >= 2+1+uint64(len(late))
	})
	if l.StreamErr() != nil {
		t.Fatalf("StreamErr after the accept: %v", l.StreamErr())
	}
	r, idx, _ := h.receipt(store, AcceptReceiptID(schemas.StreamIdentity(first), schemas.StreamIdentity(second)))
	if idx != 2 || r.ToolServer != AcceptToolServer || r.ToolName != AcceptTool || r.Decision.Verdict != schemas.VerdictAllow {
		t.Fatalf("the break's receipt at %d: %+v", idx, r)
	}
	for _, c := range late {
		if _, _, leaf := h.receipt(store, c.id); leaf == nil {
			t.Fatalf("call %s written to the new stream has no receipt", c.id)
		}
	}
	waitFor(t, "the edges' record of the new stream", func() bool { return schemas.CheckEventsStream(ctx, h.js, second) == nil })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}

	// The flag left in place: the next start records no second break.
	_, run = start(WithAcceptEventsStream(schemas.StreamIdentity(second)))
	h.publishCalls([]call{newCall(schemas.VerdictDeny, "")}, 1760000200)
	waitSize(t, store, 2+1+uint64(len(late))+1)
	if size := store.State().Size; size != 7 {
		t.Fatalf("log size %d, want 7", size)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A standby folds what the writer folds: a stream deleted and made again
// under it is refused too (its ordered consumer would otherwise follow
// the new stream from the old position), and nothing of it is folded.
func TestStandbyRefusesAResetStream(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	store := h.openStore("standby")
	defer store.Close()
	l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithBatch(64, time.Millisecond), func(c *config) { c.streamEvery = 20 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Follow(fctx) }()
	defer func() { cancel(); <-done }()
	h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}, 1760000000)
	waitSize(t, store, 2)
	if err := h.js.DeleteStream(ctx, schemas.EventsStream); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, h.js, 1); err != nil {
		t.Fatal(err)
	}
	h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}, 1760000100)
	waitFor(t, "the standby to refuse the stream", func() bool { return errors.Is(l.StreamErr(), schemas.ErrStreamReset) })
	if size := store.State().Size; size != 2 {
		t.Fatalf("standby log size %d after the reset, want 2", size)
	}
}
