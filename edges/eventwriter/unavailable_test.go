package eventwriter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// TestFullStreamFailsAtOnce fills CHIO_EVENTS (a message limit, with the
// stream's discard-new policy: JetStream refuses what does not fit, as it
// does a store out of space): a lone write and a group of concurrent ones
// then fail with ErrUnavailable saying the store refused them, without the
// retries meant for a JetStream that does not answer, and each event is
// counted once under reason "storage".
func TestFullStreamFailsAtOnce(t *testing.T) {
	_, _, js := natstest.Start(t)
	cfg := schemas.EventsStreamConfig(1)
	cfg.MaxMsgs = 1
	if _, err := js.CreateOrUpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	natstest.EnvelopeReader(t, js)
	reg := prometheus.NewRegistry()
	w := New(js, WithMetrics(reg))
	if err := w.Look(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Write(ctx, "first", event("first", 10)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d at once", n), func(t *testing.T) {
			errs := make([]error, n)
			var wg sync.WaitGroup
			started := time.Now()
			for i := range n {
				wg.Go(func() {
					id := fmt.Sprintf("e%d-%d", n, i)
					errs[i] = w.Write(ctx, id, event(id, 10))
				})
			}
			wg.Wait()
			t.Logf("%d writes refused in %v: %v", n, time.Since(started), errs[0])
			for _, err := range errs {
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("write to a full stream: %v, want ErrUnavailable", err)
				}
			}
		})
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "chio_edge_event_writes_failed_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "reason" {
					failed[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(failed) != 1 || failed[reasonStorage] != 9 {
		t.Fatalf("failed writes by reason %v, want 9 under %q", failed, reasonStorage)
	}
}
