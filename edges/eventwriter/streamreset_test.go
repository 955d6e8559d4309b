package eventwriter

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// While the ledger's record names another events stream than the one
// there is (it was deleted and created again), every decision write fails
// closed, and no decision reaches the stream; once the record names it again (the
// operator accepted it), writes go through.
func TestWriterRefusesAResetStream(t *testing.T) {
	js, w := setup(t)
	ctx := context.Background()
	kv, err := schemas.OpenLogBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	record := func(id string) {
		t.Helper()
		raw, _ := json.Marshal(schemas.EventsStreamRecord{Stream: id, Origin: "test/log"})
		if _, err := kv.Put(ctx, schemas.LogKeyEventsStream, raw); err != nil {
			t.Fatal(err)
		}
		if err := w.Look(ctx); err != nil {
			t.Fatal(err)
		}
	}

	record(schemas.EventsStream + "@2020-01-01T00:00:00Z") // another life of the stream
	for _, id := range []string{"a", "b"} {
		err := w.Write(ctx, id, event(id, 0))
		if !errors.Is(err, schemas.ErrStreamReset) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("write to a reset stream: %v", err)
		}
	}
	if _, ids := stored(t, js); len(ids) != 0 {
		t.Fatalf("a reset stream got %d events", len(ids))
	}
	// The outcome of a call decided before the reset is still written.
	outcome := schemas.StreamEvent{Subject: schemas.SubjectOutcome, Data: []byte(`{"event_id":"o"}`)}
	if err := w.Write(ctx, "o", outcome); err != nil {
		t.Fatalf("outcome write to a reset stream: %v", err)
	}

	record(schemas.StreamIdentity(stream.CachedInfo()))
	if err := w.Write(ctx, "c", event("c", 0)); err != nil {
		t.Fatalf("write once the stream is the log's: %v", err)
	}
	if _, ids := stored(t, js); len(ids) != 2 {
		t.Fatalf("stored %d events, want 2 (the outcome and the decision after)", len(ids))
	}
}
