package schemas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The events stream's identity. The log is a fold of one stream: its
// position (the last stream sequence folded) means nothing on another. A
// stream deleted and created again, or a new server's empty one, starts
// its sequences over, and a ledger that resumed at its stored position
// would skip every event below it. So the ledger records which stream it
// folds, in the same batch as the position, and refuses any other until
// an operator says what to do; and it mirrors the record in LogBucket, so
// that every edge refuses calls meanwhile rather than answer with receipt
// ids that may never be signed.
const (
	// LogBucket is the KV bucket of what the ledger tells the other parts
	// about its log. Only the ledger role writes it; edges read it.
	LogBucket = "CHIO_LOG"
	// LogKeyEventsStream holds the EventsStreamRecord of the stream the
	// log folds.
	LogKeyEventsStream = "events-stream"
)

// ErrStreamReset is the error of a write or a fold on an events stream
// that is not the one the log was built from.
var ErrStreamReset = errors.New("event store reset")

// StreamIdentity names one life of a stream: its name and the time
// JetStream created it, which every replica of a clustered stream shares
// and a stream created again does not.
func StreamIdentity(info *jetstream.StreamInfo) string {
	return info.Config.Name + "@" + info.Created.UTC().Format(time.RFC3339Nano)
}

// EventsStreamRecord is LogKeyEventsStream's value.
type EventsStreamRecord struct {
	// Stream is the StreamIdentity of the events stream the log folds.
	Stream string `json:"stream"`
	// Origin is the log's checkpoint origin.
	Origin string `json:"origin"`
}

// OpenLogBucket opens LogBucket, creating it when it does not exist yet
// (the ledger's role may).
func OpenLogBucket(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: LogBucket, Description: "Chio: what the ledger tells the other parts about its log (the events stream it folds)",
		History: 1, Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", LogBucket, err)
	}
	return kv, nil
}

// CheckEventsStream reports, for a writer of events, whether the events
// stream is the one the ledger's log folds: nil when it is or when no
// ledger has said yet (no bucket, no record), an error wrapping
// ErrStreamReset when it is not.
func CheckEventsStream(ctx context.Context, js jetstream.JetStream, info *jetstream.StreamInfo) error {
	kv, err := js.KeyValue(ctx, LogBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", LogBucket, err)
	}
	e, err := kv.Get(ctx, LogKeyEventsStream)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s/%s: %w", LogBucket, LogKeyEventsStream, err)
	}
	var rec EventsStreamRecord
	if err := strictjson.UnmarshalExactKnown(e.Value(), &rec); err != nil {
		return fmt.Errorf("read %s/%s: %w", LogBucket, LogKeyEventsStream, err)
	}
	if got := StreamIdentity(info); got != rec.Stream {
		return fmt.Errorf("%w: the events stream is %s, but the log %s folds %s; refusing calls until an operator accepts the new stream or rebuilds the log",
			ErrStreamReset, got, rec.Origin, rec.Stream)
	}
	return nil
}
