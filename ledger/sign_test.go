package ledger

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// TestParallelSigningKeepsFoldOrder runs the ledger over real JetStream and
// Pebble with the signer pool at several widths and batch sizes, calls
// completing out of their publish order (allows close after later denies),
// and checks that leaf i is the i-th receipt the fold produced: the
// completing events' stream order. Under -race it also checks the pool
// shares nothing unsynchronised.
func TestParallelSigningKeepsFoldOrder(t *testing.T) {
	for _, tc := range []struct {
		procs, batch int
	}{
		{procs: 1, batch: 64},
		{procs: 2, batch: 7},
		{procs: 4, batch: 1024},
		{procs: 16, batch: 33},
	} {
		t.Run(fmt.Sprintf("procs%d_batch%d", tc.procs, tc.batch), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(tc.procs))
			h := newHarness(t)
			store := h.openStore("log")
			defer store.Close()

			// Each allow's outcome is published only after the next
			// calls' decisions, so receipts complete in an order that
			// differs from the decisions' order.
			const n = 300
			ts := uint64(time.Now().Unix())
			var want []string // receipt ids in the order their completing event is in the stream
			var open []call
			for i := range n {
				c := newCall(schemas.VerdictDeny, "")
				if i%3 != 0 {
					c = newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
				}
				d := decisionEvent(c, ts)
				h.publish(schemas.SubjectDecision, d, d.EventID)
				if c.verdict == schemas.VerdictDeny {
					want = append(want, c.id)
				} else {
					open = append(open, c)
				}
				if len(open) == 4 || i == n-1 {
					for j := len(open) - 1; j >= 0; j-- { // outcomes in reverse
						o := outcomeEvent(open[j], ts+1)
						h.publish(schemas.SubjectOutcome, o, o.EventID)
						want = append(want, open[j].id)
					}
					open = open[:0]
				}
			}

			var mu sync.Mutex
			var sizes []uint64
			var signed [][32]byte // WithSignedLeaves, in the order reported
			r := h.start(store, WithBatch(tc.batch, time.Millisecond), WithOnCommit(func(c Commit) {
				mu.Lock()
				sizes = append(sizes, c.TreeSize)
				mu.Unlock()
			}), WithSignedLeaves(func(hashes [][32]byte) {
				mu.Lock()
				signed = append(signed, hashes...)
				mu.Unlock()
			}))
			waitSize(t, store, uint64(len(want)))
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			if got := store.State().Size; got != uint64(len(want)) {
				t.Fatalf("log size %d, want %d", got, len(want))
			}
			err := store.Entries(0, uint64(len(want)), func(i uint64, leaf []byte) error {
				rc, err := schemas.ParseReceipt(leaf)
				if err != nil {
					return err
				}
				if rc.ID != want[i] {
					return fmt.Errorf("leaf %d is receipt %s, the fold produced %s there", i, rc.ID, want[i])
				}
				if idx, err := store.LeafIndex(rc.ID); err != nil || idx != i {
					return fmt.Errorf("receipt index of %s: %d, %v; want %d", rc.ID, idx, err, i)
				}
				// The stored leaf hash (tile level 0) is this leaf's.
				lh, _, err := store.InclusionProof(i, store.State().Size)
				if err != nil {
					return err
				}
				want := rfc6962.DefaultHasher.HashLeaf(leaf)
				if string(lh) != string(want) {
					return fmt.Errorf("leaf %d: stored hash %x, leaf hashes to %x", i, lh, want)
				}
				mu.Lock()
				defer mu.Unlock()
				if i >= uint64(len(signed)) || string(signed[i][:]) != string(want) {
					return fmt.Errorf("leaf %d: WithSignedLeaves did not report its hash in log order", i)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i < len(sizes); i++ {
				if sizes[i] < sizes[i-1] {
					t.Fatalf("tree sizes of commits went back: %v", sizes)
				}
			}
		})
	}
}

// TestSignAllSlotsMatchBodies drives the signer pool directly with many
// more receipts than workers, each distinguishable, and checks slot i holds
// body i's leaf, prepared for the log.
func TestSignAllSlotsMatchBodies(t *testing.T) {
	h := newHarness(t)
	for _, n := range []int{0, 1, 15, 16, 17, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			bodies := make([]*schemas.ReceiptBody, n)
			for i := range bodies {
				c := newCall(schemas.VerdictDeny, "")
				bodies[i] = bodyFromDecision(ptr(decisionEvent(c, uint64(i))), schemas.EvidenceAsserted, schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "no", Guard: "g"}, uint64(i), schemas.EmptyContentHash)
			}
			sums := make([]logstore.Summary, n)
			for i, b := range bodies {
				sums[i] = logstore.Summary{ReceiptID: b.ID}
			}
			leaves, err := signAll(h.keys.Kernel, bodies, sums, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range leaves {
				rc, err := schemas.ParseReceipt(l.Data)
				if err != nil {
					t.Fatal(err)
				}
				if rc.ID != bodies[i].ID || l.Summary.ReceiptID != bodies[i].ID || string(l.Hash) != string(rfc6962.DefaultHasher.HashLeaf(l.Data)) {
					t.Fatalf("slot %d holds receipt %s (summary %s), want %s", i, rc.ID, l.Summary.ReceiptID, bodies[i].ID)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
