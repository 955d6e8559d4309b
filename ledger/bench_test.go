package ledger

import (
	"encoding/json"
	"path/filepath"
	"syscall"
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

// BenchmarkApplyBatches measures the ledger's own work per receipt without
// JetStream: events pre-encoded as the stream holds them, folded, signed,
// appended and committed (Pebble Sync) in batches of 1024 events, as
// apply runs them. cpu-µs/receipt is the process's user+system time over
// the receipts, which compares across runs on a shared machine where ns/op
// does not.
func BenchmarkApplyBatches(b *testing.B) {
	h := newHarness(b)
	const batch = 1024
	ts := uint64(time.Now().Unix())
	var msgs []event
	receipts := 0
	for i := 0; receipts < b.N; i++ {
		c := newCall(schemas.VerdictDeny, "")
		if i%2 == 0 {
			c = newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
		}
		d, _ := json.Marshal(decisionEvent(c, ts))
		msgs = append(msgs, event{seq: uint64(len(msgs) + 1), subject: schemas.SubjectDecision, data: d})
		if c.verdict == schemas.VerdictAllow {
			o, _ := json.Marshal(outcomeEvent(c, ts+1))
			msgs = append(msgs, event{seq: uint64(len(msgs) + 1), subject: schemas.SubjectOutcome, data: o})
		}
		receipts++
	}
	store, l := offlineLedger(b, filepath.Join(b.TempDir(), "log"), h.keys)
	defer store.Close()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ResetTimer()
	start := cpu()
	for lo := 0; lo < len(msgs); lo += batch {
		if _, _, _, err := l.apply(msgs[lo:min(lo+batch, len(msgs))], nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if got := store.State().Size; got != uint64(b.N) {
		b.Fatalf("log size %d, want %d", got, b.N)
	}
	b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-µs/receipt")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "receipts/s")
}
