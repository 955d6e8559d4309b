package ledger

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/edgetest"
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
	// Signed: each message signed by a certified edge, and checked (screen)
	// before the fold: the cost of edge trust. One event a message is its
	// worst case (an edge with no concurrent calls, or envelopes off);
	// under load an edge's writer packs the events of concurrent calls
	// into one envelope, signed once (8 a message is the figure the
	// side-by-side harness sees at 16 clients).
	for _, perMessage := range []int{1, 8, 32} {
		for _, signed := range []bool{false, true} {
			name := map[bool]string{false: "unsigned", true: "edge-signed"}[signed]
			b.Run(fmt.Sprintf("%s/events-per-message=%d", name, perMessage), func(b *testing.B) { benchApply(b, signed, perMessage) })
		}
	}
}

func benchApply(b *testing.B, signed bool, perMessage int) {
	h := newHarness(b)
	const batch = 1024
	ts := uint64(time.Now().Unix())
	var signer *schemas.EdgeSigner
	var opts []Option
	if signed {
		_, issuer, _ := ed25519.GenerateKey(rand.Reader)
		signer = edgetest.CertifiedFor(b, issuer, "bench", ts-60, ts+3600)
		opts = append(opts, WithEdgeTrust(EdgeTrust{Issuers: []string{signer.Credential().Issuer}}))
	}
	var msgs []event
	var pend []schemas.StreamEvent
	flush := func() {
		subject, raw := pend[0].Subject, pend[0].Data
		if perMessage > 1 {
			var err error
			if raw, err = schemas.PackEvents(pend); err != nil {
				b.Fatal(err)
			}
			subject = schemas.SubjectEnvelope
		}
		e := event{seq: uint64(len(msgs) + 1), subject: subject, data: raw, stored: time.Unix(int64(ts), 0)}
		if signer != nil {
			e.edgeCred, e.edgeSig = signer.Sign(subject, raw)
		}
		msgs, pend = append(msgs, e), pend[:0]
	}
	add := func(subject string, v any) {
		raw, _ := json.Marshal(v)
		if pend = append(pend, schemas.StreamEvent{Subject: subject, Data: raw}); len(pend) == perMessage {
			flush()
		}
	}
	receipts := 0
	for i := 0; receipts < b.N; i++ {
		c := newCall(schemas.VerdictDeny, "")
		if i%2 == 0 {
			c = newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
		}
		d := decisionEvent(c, ts)
		if signer != nil {
			cr := signer.Credential()
			d.EdgeID, d.EdgeKey, d.EdgeCredentialID = cr.EdgeID, cr.PublicKey, cr.ID
		}
		add(schemas.SubjectDecision, d)
		if c.verdict == schemas.VerdictAllow {
			add(schemas.SubjectOutcome, outcomeEvent(c, ts+1))
		}
		receipts++
	}
	if len(pend) > 0 {
		flush()
	}
	store, l := offlineLedger(b, filepath.Join(b.TempDir(), "log"), h.keys, opts...)
	defer store.Close()
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ResetTimer()
	start := cpu()
	for lo := 0; lo < len(msgs); lo += batch {
		part := msgs[lo:min(lo+batch, len(msgs))]
		if refused := l.screen(part); len(refused) > 0 {
			b.Fatalf("refused %v", refused[0].why)
		}
		if _, _, _, err := l.apply(part, nil); err != nil {
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
