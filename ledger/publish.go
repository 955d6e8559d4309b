package ledger

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/schemas"
)

// HeaderLeafIndex carries a published receipt's leaf index.
const HeaderLeafIndex = schemas.HeaderLeafIndex

// publishChunk bounds the receipts read back from the store per round.
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
		if !sleep(ctx, time.Second) {
			return
		}
		published, err = l.publishedSoFar(ctx)
	}
	var next []pubLeaf // a committed batch handed over in memory
	for {
		for size := l.store.State().Size; published < size; {
			if next == nil {
				select {
				case next = <-l.fresh:
				default:
				}
			}
			if next != nil && next[0].index < published {
				// Part of it was read back from the store already: keep the rest.
				if next[len(next)-1].index < published {
					next = nil
					continue
				}
				next = next[published-next[0].index:]
			}
			var leaves []pubLeaf
			switch {
			case next != nil && next[0].index == published:
				leaves, next = next, nil
			default: // a batch was dropped, or publishing resumes after a restart
				to := min(size, published+publishChunk)
				if next != nil {
					to = min(to, next[0].index)
				}
				if leaves, err = l.readLeaves(published, to); err != nil || len(leaves) == 0 {
					l.log.Error("read committed receipts to publish", "from", published, "err", err)
					if !sleep(ctx, time.Second) {
						return
					}
					continue
				}
			}
			for err := l.publishLeaves(ctx, leaves); err != nil; err = l.publishLeaves(ctx, leaves) {
				l.log.Warn("publish receipts; retrying", "from", leaves[0].index, "err", err)
				if !sleep(ctx, time.Second) {
					return
				}
			}
			published = leaves[len(leaves)-1].index + 1
			l.metrics.published.Add(float64(len(leaves)))
		}
		select {
		case <-ctx.Done():
			return
		case <-l.publish:
		}
	}
}

// pubLeaf is a committed receipt to publish.
type pubLeaf struct {
	index      uint64
	id         string
	toolServer string
	verdict    string // for metrics; empty when read back from the store
	leaf       []byte
	// hash is leaf's RFC 6962 leaf hash as the signer pool computed it for
	// the log; nil when read back from the store.
	hash []byte
	// traceparent is the trace context of the receipt's append, carried
	// on to its message; "" when untraced or read back from the store.
	traceparent string
}

// handOver gives a committed batch to the publisher without blocking; if
// the publisher is behind, the batch is dropped and read back from the store.
func (l *Ledger) handOver(leaves []pubLeaf) {
	if len(leaves) > 0 {
		select {
		case l.fresh <- leaves:
		default:
		}
	}
	l.kickPublisher()
}

// sleep pauses for d; false means ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) == nil }

func (l *Ledger) readLeaves(from, to uint64) ([]pubLeaf, error) {
	if from >= to {
		return nil, fmt.Errorf("read leaves [%d, %d): empty range", from, to)
	}
	var out []pubLeaf
	err := l.store.Entries(from, to, func(idx uint64, leaf []byte) error {
		// The head only: a leaf nested too deep for encoding/json (signed
		// before edges read input strictly) must not stop republishing.
		head, err := schemas.ReadReceiptHead(leaf)
		if err != nil {
			return fmt.Errorf("leaf %d: %w", idx, err)
		}
		out = append(out, pubLeaf{index: idx, id: head.ID, toolServer: head.ToolServer, leaf: bytes.Clone(leaf)})
		return nil
	})
	return out, err
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
	if err == nil && idx >= l.store.State().Size {
		// Another instance of this log (the writer before a failover)
		// published further than this store has folded yet: wait for the
		// fold to catch up rather than publish everything again.
		return 0, fmt.Errorf("CHIO_RECEIPTS holds leaf %d, beyond this log's size %d: waiting for the fold", idx, l.store.State().Size)
	}
	if err == nil {
		leaf, lerr := l.store.Entry(idx)
		if lerr == nil && bytes.Equal(leaf, last.Data) {
			return idx + 1, nil
		}
	}
	l.log.Warn("CHIO_RECEIPTS ends with a receipt this log does not hold at that index; publishing the whole log again", "stream_seq", info.State.LastSeq)
	return 0, nil
}

func (l *Ledger) publishLeaves(ctx context.Context, leaves []pubLeaf) error {
	futures := make([]jetstream.PubAckFuture, 0, len(leaves))
	var spans []trace.Span // of traced receipts
	for _, p := range leaves {
		msg := &nats.Msg{Subject: schemas.ReceiptSubject(p.toolServer), Data: p.leaf, Header: nats.Header{}}
		msg.Header.Set(HeaderLeafIndex, strconv.FormatUint(p.index, 10))
		span := l.startSendReceipt(ctx, p, msg.Header)
		if span != nil {
			spans = append(spans, span)
		}
		f, err := l.js.PublishMsgAsync(msg, jetstream.WithMsgID(p.id))
		if err != nil {
			endSpans(spans, err)
			return fmt.Errorf("publish leaf %d: %w", p.index, err)
		}
		futures = append(futures, f)
	}
	var err error
	for _, f := range futures {
		select {
		case <-f.Ok():
		case e := <-f.Err():
			err = cmp.Or(err, e)
		case <-ctx.Done():
			endSpans(spans, ctx.Err())
			return ctx.Err()
		}
	}
	endSpans(spans, err)
	return err
}
