package schemas_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// A stream made before compression was configured is updated in place by
// the CreateOrUpdateStream every component runs at start, keeping its
// messages; and a compressed stream serves them back unchanged.
func TestStreamsCompressInPlace(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		schemas.EventsStreamConfig(1),
		schemas.ReceiptsStreamConfig(1),
		schemas.TasksStreamConfig(1, 1<<20, 2*time.Minute),
	} {
		t.Run(cfg.Name, func(t *testing.T) {
			old := cfg
			old.Compression = jetstream.NoCompression
			if _, err := js.CreateStream(ctx, old); err != nil {
				t.Fatal(err)
			}
			subject := cfg.Subjects[0]
			if last := subject[len(subject)-1]; last == '>' || last == '*' {
				subject = subject[:len(subject)-1] + "x"
			}
			body := []byte(`{"id":"r-1","padding":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`)
			if _, err := js.Publish(ctx, subject, body); err != nil {
				t.Fatal(err)
			}
			st, err := js.CreateOrUpdateStream(ctx, cfg)
			if err != nil {
				t.Fatalf("update to %v: %v", cfg.Compression, err)
			}
			if info := st.CachedInfo(); info.Config.Compression != jetstream.S2Compression || info.State.Msgs != 1 {
				t.Fatalf("after the update: compression %v, %d messages", info.Config.Compression, info.State.Msgs)
			}
			if _, err := js.Publish(ctx, subject, body); err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= 2; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil || string(m.Data) != string(body) {
					t.Fatalf("message %d: %q, %v", seq, m.Data, err)
				}
			}
		})
	}
}
