package schemas

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Each stream and bucket has one owner, the role that configures it (the
// ledger owns CHIO_EVENTS and CHIO_RECEIPTS, the operator
// CHIO_REVOCATIONS); on an authorized NATS only the owner may change a
// stream's configuration. The other parts open it with OpenStream and
// OpenKeyValue: as it is, creating it with the shared configuration only
// when it does not exist yet, so that a part starting before the owner
// still comes up, and a part that is not the owner can never shrink or
// age out what the owner keeps.

// OpenStream returns the stream cfg names, creating it with cfg when it
// does not exist.
func OpenStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, cfg.Name)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("open stream %s: %w", cfg.Name, err)
	}
	st, err = js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = js.Stream(ctx, cfg.Name) // another part created it meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	return st, nil
}

// OpenKeyValue returns the bucket cfg names, creating it with cfg when it
// does not exist.
func OpenKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open bucket %s: %w", cfg.Bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("create bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}
