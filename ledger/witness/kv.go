package witness

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the JetStream key-value bucket that holds the latest
// checkpoint cosigned to the quorum, for every replica of the log's API.
const Bucket = "CHIO_WITNESS"

const cosignedKey = "checkpoint"

// KV is a Store in a JetStream key-value bucket. It only moves forward: a
// checkpoint no larger than the one held (a slower replica's round) is
// not stored over it.
type KV struct {
	kv jetstream.KeyValue
}

// OpenKV opens (creating it if needed) the bucket, on file storage with
// replicas copies.
func OpenKV(ctx context.Context, js jetstream.JetStream, replicas int) (*KV, error) {
	if replicas < 1 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: Bucket, History: 1,
		Storage: jetstream.FileStorage, Replicas: replicas,
		Description: "The log's latest checkpoint cosigned by its witness quorum."})
	if err != nil {
		return nil, fmt.Errorf("witness: open bucket %s: %w", Bucket, err)
	}
	return &KV{kv: kv}, nil
}

// Get returns the cosigned checkpoint held, or nil when there is none.
func (k *KV) Get(ctx context.Context) ([]byte, error) {
	e, err := k.kv.Get(ctx, cosignedKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("witness: read the cosigned checkpoint: %w", err)
	}
	return e.Value(), nil
}

// Put stores signedNote unless the bucket holds a checkpoint of the same
// size or larger.
func (k *KV) Put(ctx context.Context, signedNote []byte) error {
	size, err := noteSize(signedNote)
	if err != nil {
		return err
	}
	for {
		e, err := k.kv.Get(ctx, cosignedKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := k.kv.Create(ctx, cosignedKey, signedNote); errors.Is(err, jetstream.ErrKeyExists) {
				continue
			} else if err != nil {
				return fmt.Errorf("witness: store the cosigned checkpoint: %w", err)
			}
			return nil
		case err != nil:
			return fmt.Errorf("witness: read the cosigned checkpoint: %w", err)
		}
		if held, err := noteSize(e.Value()); err == nil && held >= size {
			return nil
		}
		if _, err := k.kv.Update(ctx, cosignedKey, signedNote, e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another replica wrote first: compare again
			}
			return fmt.Errorf("witness: store the cosigned checkpoint: %w", err)
		}
		return nil
	}
}

// noteSize is the tree size of a signed checkpoint note.
func noteSize(signed []byte) (uint64, error) {
	text, _, err := splitNote(signed)
	if err != nil {
		return 0, fmt.Errorf("witness: checkpoint: %w", err)
	}
	c, err := parseCheckpoint(string(text))
	if err != nil {
		return 0, fmt.Errorf("witness: checkpoint: %w", err)
	}
	return c.size, nil
}
