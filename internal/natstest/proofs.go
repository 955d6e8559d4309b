package natstest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// BreakProofState makes the proof replay state refuse every claim while
// the rest of JetStream works: the claims bucket is deleted and a stream
// that refuses every message (a byte budget of one) takes its subjects, so
// a claim fails without the bucket looking gone (which would have it made
// again). What a test of "the replay state cannot answer" needs.
func BreakProofState(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	if err := js.DeleteKeyValue(ctx, schemas.ProofsBucket); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "BROKEN_DPOP_PROOFS", Subjects: []string{"$KV." + schemas.ProofsBucket + ".>"},
		Storage: jetstream.MemoryStorage, MaxBytes: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
}
