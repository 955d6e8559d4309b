// Package readfloor finds how far a stream's durable readers have read, so
// that retention purges only what every one of them has acknowledged.
package readfloor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrReaderMissing is a floor not found because a durable reader that
// must exist does not (yet): purging then could drop what it has not read.
var ErrReaderMissing = errors.New("a durable reader of the stream is missing")

// Read returns the highest stream sequence, at most last, that every
// durable consumer of stream has read: acknowledged, or for a consumer
// that acknowledges nothing, delivered. A durable that has read all it
// wants (nothing pending, nothing awaiting its ack) does not hold the
// floor down. Every name in required must be among the durables, or Read
// fails with ErrReaderMissing naming the absent ones. Ephemeral consumers
// (ordered consumers included) are not counted: a reader that must be
// waited for keeps a durable, or reports its position some other way.
func Read(ctx context.Context, stream jetstream.Stream, last uint64, required ...string) (uint64, error) {
	floor, _, err := Holder(ctx, stream, last, required...)
	return floor, err
}

// Holder is Read that also names the durable whose floor it is ("" when
// none is below last).
func Holder(ctx context.Context, stream jetstream.Stream, last uint64, required ...string) (uint64, string, error) {
	floor, holder := last, ""
	missing := slices.Clone(required)
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		missing = slices.DeleteFunc(missing, func(n string) bool { return n == ci.Config.Durable })
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			continue
		}
		at := ci.AckFloor.Stream
		if ci.Config.AckPolicy == jetstream.AckNonePolicy {
			at = ci.Delivered.Stream
		}
		if at < floor {
			floor, holder = at, ci.Config.Durable
		}
	}
	if err := lister.Err(); err != nil {
		return 0, "", fmt.Errorf("list the consumers of %s: %w", stream.CachedInfo().Config.Name, err)
	}
	if len(missing) > 0 {
		return 0, "", fmt.Errorf("%w: %s", ErrReaderMissing, strings.Join(missing, ", "))
	}
	return floor, holder, nil
}
