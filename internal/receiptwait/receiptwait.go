// Package receiptwait waits for a call's signed receipt: the ledger
// publishes each receipt on CHIO_RECEIPTS (one subject per tool server,
// with its leaf index in a header) once its commit is durable, and an
// edge asked to answer with the signed receipt reads it from there.
package receiptwait

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/schemas"
)

// Signed is a receipt as the ledger published it after its commit.
type Signed struct {
	Receipt   json.RawMessage
	LeafIndex uint64
}

// retry is the pause before a consumer that failed (the stream not
// created yet by a ledger still starting, a reset under load) is made
// again.
const retry = 50 * time.Millisecond

// Await waits at most max until receipt id of server is published and
// returns it. It reads the server's receipts from since, when the call
// started, so it cannot miss one published before it looked.
func Await(ctx context.Context, js jetstream.JetStream, server, id string, since time.Time, max time.Duration) (*Signed, error) {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		s, err := find(ctx, js, server, id, since)
		if err == nil {
			return s, nil
		}
		last = err
		_ = backoff.Sleep(ctx, retry)
	}
	return nil, fmt.Errorf("await receipt %s: not integrated within %s: %w", id, max, last)
}

// find reads the server's receipts from since until id's, or an error.
func find(ctx context.Context, js jetstream.JetStream, server, id string, since time.Time) (*Signed, error) {
	cons, err := js.OrderedConsumer(ctx, schemas.ReceiptsStream, jetstream.OrderedConsumerConfig{
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
			if json.Unmarshal(m.Data(), &r) != nil || r.ID != id {
				continue
			}
			idx, err := strconv.ParseUint(m.Headers().Get(schemas.HeaderLeafIndex), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("leaf index header: %w", err)
			}
			return &Signed{Receipt: append(json.RawMessage(nil), m.Data()...), LeafIndex: idx}, nil
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("fetch receipts: %w", err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}
