package ledger

import (
	"testing"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// BenchmarkLedgerIngest measures receipts/s end to end with durability on:
// b.N receipts' worth of events (half deny, half allow plus a completed
// outcome) are published to an embedded JetStream (SyncAlways) first; the
// timer covers the ledger folding, signing, committing (Pebble Sync) and
// acking all of them. scripts/ledgerbench adds latency under a steady load.
func BenchmarkLedgerIngest(b *testing.B) {
	h := newHarness(b)
	calls := make([]call, b.N)
	for i := range calls {
		if i%2 == 0 {
			calls[i] = newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
		} else {
			calls[i] = newCall(schemas.VerdictDeny, "")
		}
	}
	h.publishCalls(calls, uint64(time.Now().Unix()))
	store := h.openStore("log")
	defer store.Close()
	b.ResetTimer()
	run := h.start(store, WithBatch(1024, 2*time.Millisecond))
	for store.State().Size < uint64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	if err := run.stop(b); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "receipts/s")
}
