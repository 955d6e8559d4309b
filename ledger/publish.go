package ledger

import (
	"bytes"
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
// order, after it is durable in the log. The stream itself records how far
// publishing got: on start the publisher resumes after the last leaf the
// stream holds, so a tail lost in a crash is published again, and a receipt
// id as Nats-Msg-Id (plus the leaf index header) lets consumers drop the
// repeats a crash between publish and ack can cause.
func (l *Ledger) runPublisher(ctx context.Context) {
	published, err := l.publishedSoFar(ctx)
	for err != nil {
		l.log.Warn("find the receipts already published; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		published, err = l.publishedSoFar(ctx)
	}
	for {
		for size := l.store.State().Size; published < size; {
			to := min(size, published+publishChunk)
			if err := l.publishRange(ctx, published, to); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.log.Warn("publish receipts; retrying", "from", published, "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				continue
			}
			published = to
		}
		select {
		case <-ctx.Done():
			return
		case <-l.publish:
		}
	}
}

// publishedSoFar returns the number of leaves CHIO_RECEIPTS holds: one past
// the leaf index of its last message, if that message is this log's leaf.
func (l *Ledger) publishedSoFar(ctx context.Context) (uint64, error) {
	stream, err := l.js.Stream(ctx, schemas.ReceiptsStream)
	if err != nil {
		return 0, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.State.Msgs == 0 {
		return 0, nil
	}
	last, err := stream.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		return 0, err
	}
	idx, err := strconv.ParseUint(last.Header.Get(HeaderLeafIndex), 10, 64)
	if err == nil {
		leaf, lerr := l.store.Entry(idx)
		if lerr == nil && bytes.Equal(leaf, last.Data) {
			return idx + 1, nil
		}
	}
	l.log.Warn("CHIO_RECEIPTS ends with a receipt this log does not hold at that index; publishing the whole log again", "stream_seq", info.State.LastSeq)
	return 0, nil
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
