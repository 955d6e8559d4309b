package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/readfloor"
	"github.com/chio-ledger/chio/ledger/lease"
	"github.com/chio-ledger/chio/schemas"
)

// eventsInfo is CHIO_EVENTS's state now.
func (h *harness) eventsInfo() (jetstream.Stream, *jetstream.StreamInfo) {
	h.t.Helper()
	s, err := h.js.Stream(context.Background(), schemas.EventsStream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return s, info
}

// readTo makes durable name read (and acknowledge) the stream up to seq.
func (h *harness) readTo(name string, seq uint64) {
	h.t.Helper()
	ctx := context.Background()
	c, err := h.js.CreateOrUpdateConsumer(ctx, schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata: schemas.ReaderMetadata(),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	for {
		if ci, err := c.Info(ctx); err != nil {
			h.t.Fatal(err)
		} else if ci.AckFloor.Stream >= seq {
			return
		}
		batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			h.t.Fatal(err)
		}
		for m := range batch.Messages() {
			meta, _ := m.Metadata()
			if meta.Sequence.Stream <= seq {
				if err := m.DoubleAck(ctx); err != nil {
					h.t.Fatal(err)
				}
			}
		}
	}
}

// TestEventRetention: the writer purges the events stream only below what
// the log has folded, what every durable reader has acknowledged, what
// every standby reported within the retention, and what is older than
// the retention; a store that has not folded what is gone refuses to fold
// (writer, standby and rebuild alike) instead of skipping it.
func TestEventRetention(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	var calls []call
	for range 30 {
		calls = append(calls, newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, ""))
	}
	h.publishCalls(calls, uint64(time.Now().Unix()))
	stream, info := h.eventsInfo()
	last := info.State.LastSeq // 90: 30 × (decision, outcome) + 30 denies

	kv, err := lease.Bucket(ctx, h.js, lease.DefaultBucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store)
	defer run.cancel()
	waitStreamSeq(t, store, h.js)
	// The passes are run by hand, by a ledger over the writer's store whose
	// clock is ahead of the server's by skew.
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithEventRetention(time.Hour, "projections"),
		WithPositions(kv, "writer"), func(c *config) { c.now = now })
	if err != nil {
		t.Fatal(err)
	}

	first := func() uint64 { _, info := h.eventsInfo(); return info.State.FirstSeq }
	pass := func(wantFirst uint64, wantHeld string, wantErr error) {
		t.Helper()
		res, err := l.retain(ctx, stream)
		if !errors.Is(err, wantErr) || (wantErr == nil && err != nil) {
			t.Fatalf("retention pass: %v, want %v", err, wantErr)
		}
		if got := first(); got != wantFirst || res.HeldBy != wantHeld && wantErr == nil {
			t.Fatalf("after the pass: first sequence %d held by %q, want %d held by %q", got, res.HeldBy, wantFirst, wantHeld)
		}
	}

	// Two hours on, by the ledger's clock, every event is past a retention
	// of an hour; but the named reader does not exist yet: nothing goes.
	skew.Store(int64(2 * time.Hour))
	pass(1, "", readfloor.ErrReaderMissing)
	// It has read 40: 41 on stay.
	h.readTo("projections", 40)
	pass(41, "projections", nil)
	h.readTo("projections", last)
	// Within a retention of four hours, every event stays.
	l.cfg.retention = 4 * time.Hour
	pass(41, "retention", nil)
	// A standby reports 55, four seconds after the last event was stored:
	// with a retention between the two ages (two seconds from each), its
	// report holds, the events do not.
	time.Sleep(4 * time.Second)
	raw, _ := json.Marshal(position{Instance: "standby-b", EventsStream: store.State().EventsStream, StreamSeq: 55})
	if _, err := kv.Put(ctx, positionKey("standby-b"), raw); err != nil {
		t.Fatal(err)
	}
	l.cfg.retention = 2*time.Hour + 2*time.Second
	pass(56, "standby standby-b", nil)
	// Its report ages past the retention: it holds nothing, and the writer
	// deletes it.
	l.cfg.retention = time.Hour
	pass(last+1, "log", nil)
	if _, err := kv.Get(ctx, positionKey("standby-b")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a stale standby position was kept: %v", err)
	}

	// The log goes on over the purged stream, every call once.
	more := []call{newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictDeny, "")}
	h.publishCalls(more, uint64(time.Now().Unix()))
	waitSize(t, store, uint64(len(calls)+len(more)))
	waitStreamSeq(t, store, h.js)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := store.State().Size; got != uint64(len(calls)+len(more)) {
		t.Fatalf("log size %d, want %d", got, len(calls)+len(more))
	}
	// Restarted on its own store, the writer resumes where it was.
	rerun := h.start(store)
	h.publishCalls([]call{newCall(schemas.VerdictDeny, "")}, uint64(time.Now().Unix()))
	waitSize(t, store, uint64(len(calls)+len(more)+1))
	if err := rerun.stop(t); err != nil {
		t.Fatal(err)
	}

	// A store that has not folded what is gone refuses, whichever role.
	var purged *PurgedError
	fresh := h.openStore("fresh")
	defer fresh.Close()
	select {
	case err := <-h.start(fresh).done:
		if !errors.As(err, &purged) || purged.Next != 1 || purged.First < last+1 {
			t.Fatalf("a writer over a purged stream: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a writer over a purged stream kept running")
	}
	if fresh.State().Size != 0 {
		t.Fatalf("a refusing writer appended %d leaves", fresh.State().Size)
	}
	f, err := New(h.js, fresh, h.keys, WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := f.Follow(fctx); !errors.As(err, &purged) {
		t.Fatalf("a standby over a purged stream: %v", err)
	}
	if _, err := f.Rebuild(ctx); !errors.Is(err, ErrEventsPurged) {
		t.Fatalf("a rebuild of a purged stream: %v", err)
	}
}

// TestStandbyReportsItsPosition: a following ledger puts its position in
// the positions bucket, and keeps it current as it folds.
func TestStandbyReportsItsPosition(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	kv, err := lease.Bucket(ctx, h.js, lease.DefaultBucket, 1)
	if err != nil {
		t.Fatal(err)
	}
	writer := h.openStore("writer")
	defer writer.Close()
	run := h.start(writer)
	defer run.stop(t)
	store := h.openStore("standby")
	defer store.Close()
	l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithPositions(kv, "standby host/1"))
	if err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() { followed <- l.Follow(fctx) }()
	reported := func() position {
		e, err := kv.Get(ctx, positionKey("standby host/1"))
		if err != nil {
			return position{}
		}
		var p position
		_ = json.Unmarshal(e.Value(), &p)
		return p
	}
	for round := range 2 {
		h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)}, uint64(time.Now().Unix()))
		_, info := h.eventsInfo()
		waitFor(t, "the standby's report", func() bool { return reported().StreamSeq == info.State.LastSeq })
		if p := reported(); p.Instance != "standby host/1" || p.EventsStream != store.State().EventsStream {
			t.Fatalf("round %d: reported %+v", round, p)
		}
	}
	stop()
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
}
