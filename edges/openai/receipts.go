package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// awaitConfig is the optional wait for each call's signed receipt.
type awaitConfig struct {
	js  jetstream.JetStream
	max time.Duration
}

// WithAwaitReceipt makes each call that has a receipt wait (at most max)
// until the ledger has integrated it, and embeds the signed receipt under
// chio.receipt; js reads CHIO_RECEIPTS. A receipt not integrated in time
// is left out: the call's receipt_ref still names it.
func WithAwaitReceipt(js jetstream.JetStream, max time.Duration) Option {
	return func(a *Adapter) { a.await = awaitConfig{js: js, max: max} }
}

// awaitReceipt waits until the ledger has published receipt id of server
// (it publishes each receipt on CHIO_RECEIPTS after its commit). It reads
// from since, when the call started, so it cannot miss it.
func (c awaitConfig) awaitReceipt(ctx context.Context, server, id string, since time.Time) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, c.max)
	defer cancel()
	var last error
	// A consumer that fails (the stream not created yet by a ledger still
	// starting) is made again until the deadline.
	for ctx.Err() == nil {
		r, err := c.findReceipt(ctx, server, id, since)
		if err == nil {
			return r, nil
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("await receipt %s: not integrated within %s: %w", id, c.max, last)
}

// findReceipt reads the server's receipts from since until id's.
func (c awaitConfig) findReceipt(ctx context.Context, server, id string, since time.Time) (json.RawMessage, error) {
	cons, err := c.js.OrderedConsumer(ctx, schemas.ReceiptsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schemas.ReceiptSubject(server)},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return nil, fmt.Errorf("receipts consumer: %w", err)
	}
	for {
		batch, err := cons.Fetch(64, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("fetch receipts: %w", err)
		}
		for m := range batch.Messages() {
			var r struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m.Data(), &r) == nil && r.ID == id {
				return append(json.RawMessage(nil), m.Data()...), nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("fetch receipts: %w", err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}
