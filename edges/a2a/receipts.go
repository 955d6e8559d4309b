package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// signedReceipt is a receipt as the ledger published it after commit.
type signedReceipt struct {
	Receipt   json.RawMessage
	LeafIndex uint64
}

// awaitReceipt waits until the ledger has integrated receipt id (it
// publishes each receipt on CHIO_RECEIPTS after its commit) and returns
// it. It reads the tool server's receipt subject from since, when the call
// started, so it cannot miss a receipt published before it looked.
func (e *Edge) awaitReceipt(ctx context.Context, js jetstream.JetStream, server, id string, since time.Time) (*signedReceipt, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.AwaitReceipt)
	defer cancel()
	var last error
	// A consumer that fails (the stream not created yet by a ledger still
	// starting, a reset under load) is made again until the deadline.
	for ctx.Err() == nil {
		sr, err := e.findReceipt(ctx, js, server, id, since)
		if err == nil {
			return sr, nil
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("await receipt %s: not integrated within %s: %w", id, e.cfg.AwaitReceipt, last)
}

// findReceipt reads the server's receipts from since until id's or an
// error.
func (e *Edge) findReceipt(ctx context.Context, js jetstream.JetStream, server, id string, since time.Time) (*signedReceipt, error) {
	cons, err := js.OrderedConsumer(ctx, schemas.ReceiptsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{schemas.ReceiptSubject(server)},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &since,
	})
	if err != nil {
		return nil, err
	}
	for {
		batch, err := cons.Fetch(64, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			var r struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m.Data(), &r) != nil || r.ID != id {
				continue
			}
			idx, err := strconv.ParseUint(m.Headers().Get(schemas.HeaderLeafIndex), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("leaf index header: %w", err)
			}
			return &signedReceipt{Receipt: append(json.RawMessage(nil), m.Data()...), LeafIndex: idx}, nil
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}
