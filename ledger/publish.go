package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// HeaderLeafIndex carries a published receipt's leaf index.
const HeaderLeafIndex = "Chio-Leaf-Index"

// publishChunk bounds the receipts in flight per round.
const publishChunk = 1024

// runPublisher publishes every committed receipt to CHIO_RECEIPTS, in log
// order, after it is durable in the log. Its position is a hint stored with
// the log: after a crash it republishes from there, and the receipt id as
// Nats-Msg-Id (plus the leaf index header) lets consumers drop repeats.
func (l *Ledger) runPublisher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.publish:
		}
		for {
			st := l.store.State()
			if st.Published >= st.Size {
				break
			}
			to := min(st.Size, st.Published+publishChunk)
			if err := l.publishRange(ctx, st.Published, to); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.log.Warn("publish receipts; retrying", "from", st.Published, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			}
			if err := l.store.SetPublished(to); err != nil {
				l.log.Warn("record publish position", "err", err)
			}
		}
	}
}

func (l *Ledger) publishRange(ctx context.Context, from, to uint64) error {
	var futures []jetstream.PubAckFuture
	err := l.store.Entries(from, to, func(idx uint64, leaf []byte) error {
		var head struct {
			ID         string `json:"id"`
			ToolServer string `json:"tool_server"`
		}
		if err := json.Unmarshal(leaf, &head); err != nil {
			return fmt.Errorf("leaf %d: %w", idx, err)
		}
		msg := &nats.Msg{Subject: schemas.ReceiptSubject(head.ToolServer), Data: leaf, Header: nats.Header{}}
		msg.Header.Set(HeaderLeafIndex, strconv.FormatUint(idx, 10))
		f, err := l.js.PublishMsgAsync(msg, jetstream.WithMsgID(head.ID))
		if err != nil {
			return fmt.Errorf("publish leaf %d: %w", idx, err)
		}
		futures = append(futures, f)
		return nil
	})
	for _, f := range futures {
		select {
		case <-f.Ok():
		case e := <-f.Err():
			if err == nil {
				err = e
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}
