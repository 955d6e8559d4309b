package ledger

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/tmpfs"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// TestLogStoreFullPausesAndResumes fills the log store's filesystem (a
// tmpfs; JetStream's store is elsewhere) while events keep coming. Guarded,
// the store refuses the batch before Pebble sees it; unguarded (no
// reserve), Pebble meets ENOSPC in its WAL, which it treats as fatal, and
// the store is reopened in-process. Either way the ledger acks nothing it
// could not make durable, says so (Err, the storage gauge), and once
// space is back folds the backlog by itself, to the root a rebuild from
// the stream computes; the store then reopens with its integrity checks.
func TestLogStoreFullPausesAndResumes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve uint64
	}{
		{"guarded", 8 << 20},
		{"unguarded", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			dir := filepath.Join(tmpfs.Mount(t, 32), "log")
			opts := []logstore.Option{logstore.WithLogger(quiet()), logstore.WithMemory(1<<20, 1<<20), logstore.WithReserve(tc.reserve),
				logstore.WithCheckpointVerifier(CheckpointVerifier(testOrigin, h.keys.CheckpointVerifier))}
			store, err := logstore.Open(dir, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = store.Close() }()
			reg := prometheus.NewRegistry()
			r := h.start(store, WithMetrics(reg))

			var calls []call
			publish := func(n int) {
				batch := make([]call, n)
				for i := range batch {
					batch[i] = newCall(schemas.VerdictAllow, schemas.OutcomeCompleted)
				}
				h.publishCalls(batch, uint64(time.Now().Unix()))
				calls = append(calls, batch...)
			}
			publish(20)
			waitSize(t, store, uint64(len(calls)))

			filler := tmpfs.Fill(t, filepath.Dir(dir))
			full := time.Now()
			// Keep publishing until the store has refused a batch: at once
			// with a reserve, once Pebble's preallocated WAL is used up
			// without one.
			for gauge(t, reg, "chio_ledger_storage_unavailable") != 1 {
				if time.Since(full) > 30*time.Second {
					t.Fatalf("no batch refused 30s after the fill (size %d)", store.State().Size)
				}
				publish(50)
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("integration paused %v after the fill at size %d: %v", time.Since(full), store.State().Size, store.Err())
			if store.Err() == nil {
				t.Fatal("store.Err is nil while integration is paused")
			}
			publish(20) // recorded in the stream while the log cannot take them
			paused := store.State()
			if st := streamLast(t, h); paused.StreamSeq >= st {
				t.Fatalf("the log is at stream sequence %d with the stream at %d: nothing left to catch up", paused.StreamSeq, st)
			}

			filler.Remove(t)
			back := time.Now()
			waitStreamSeq(t, store, h.js)
			waitSize(t, store, uint64(len(calls)))
			t.Logf("caught up %v after space came back: size %d", time.Since(back), store.State().Size)
			if g := gauge(t, reg, "chio_ledger_storage_unavailable"); g != 0 {
				t.Fatalf("storage gauge %v after recovery", g)
			}
			if err := store.Err(); err != nil {
				t.Fatalf("store.Err after recovery: %v", err)
			}
			if err := r.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			live := store.State()

			rebuilt := h.openStore("rebuilt")
			defer rebuilt.Close()
			l, err := New(h.js, rebuilt, h.keys, WithLogger(quiet()))
			if err != nil {
				t.Fatal(err)
			}
			want, err := l.Rebuild(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if want.Size != live.Size || !bytes.Equal(want.Root, live.Root) {
				t.Fatalf("live log size %d root %x, rebuild %d %x", live.Size, live.Root, want.Size, want.Root)
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}
			reopened, err := logstore.Open(dir, opts...)
			if err != nil {
				t.Fatalf("reopen with integrity checks: %v", err)
			}
			defer reopened.Close()
			if st := reopened.State(); st.Size != live.Size || !bytes.Equal(st.Root, live.Root) {
				t.Fatalf("reopened at size %d root %x, want %d %x", st.Size, st.Root, live.Size, live.Root)
			}
		})
	}
}

// streamLast is CHIO_EVENTS' last sequence.
func streamLast(t *testing.T, h *harness) uint64 {
	t.Helper()
	st, err := h.js.Stream(context.Background(), schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}
