package ledger

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// A leaf signed before edges read input strictly may nest deeper than
// encoding/json reads. Publishing it again (after a crash between commit
// and publish) reads only its head, so it stops neither the publisher nor
// the leaves after it.
func TestRepublishPassesALeafTooDeepToDecode(t *testing.T) {
	h := newHarness(t)
	deep := newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
	deep.params = json.RawMessage(`{"x":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`)
	calls := []call{newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), deep, newCall(schemas.VerdictDeny, "")}
	h.publishCalls(calls, 1760000000)

	ctx := context.Background()
	stream, err := h.js.Stream(ctx, schemas.ReceiptsStream)
	if err != nil {
		t.Fatal(err)
	}
	published := func(n uint64) func() bool {
		return func() bool {
			info, err := stream.Info(ctx)
			return err == nil && info.State.Msgs == n
		}
	}
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store)
	waitSize(t, store, uint64(len(calls)))
	waitFor(t, "every receipt published", published(uint64(len(calls))))
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	// As after a crash between the commit and the publish: the receipts
	// are in the log and not on the stream, so they are read back.
	// (The stream goes with its duplicate window, which would drop them.)
	if err := h.js.DeleteStream(ctx, schemas.ReceiptsStream); err != nil {
		t.Fatal(err)
	}
	run = h.start(store)
	waitFor(t, "the stream made again", func() bool {
		stream, err = h.js.Stream(ctx, schemas.ReceiptsStream)
		return err == nil
	})
	waitFor(t, "every receipt published again", published(uint64(len(calls))))
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
}
