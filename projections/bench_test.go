package projections

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/leafset"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/schemas"
)

// reportReceipts is the number of receipts BenchmarkReport stores; CI can
// run it small.
var reportReceipts = flag.Int("projections.receipts", 100_000, "receipts stored for BenchmarkReport")

// benchHarness is a harness on a server that fsyncs in the background: the
// benchmarks measure the projection, not the publishing of their backlog.
func benchHarness(b *testing.B) *harness {
	b.Helper()
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(b.TempDir(), "nats"), DontListen: true, SyncInterval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	h := &harness{t: b, ns: ns, nc: nc, js: js, dir: b.TempDir(), ctx: context.Background(), log: quiet()}
	for _, cfg := range []jetstream.StreamConfig{schemas.EventsStreamConfig(1), schemas.ReceiptsStreamConfig(1), tasksStreamConfig(1, nc.MaxPayload())} {
		if _, err := js.CreateOrUpdateStream(h.ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	return h
}

// publishAll publishes n messages made by msg, asynchronously.
func (h *harness) publishAll(n int, msg func(i int) *nats.Msg) {
	h.t.Helper()
	for i := range n {
		if _, err := h.js.PublishMsgAsync(msg(i)); err != nil {
			h.t.Fatal(err)
		}
	}
	select {
	case <-h.js.PublishAsyncComplete():
	case <-time.After(10 * time.Minute):
		h.t.Fatal("publishing the backlog timed out")
	}
}

// signLeaves signs n governed receipts (capability i%caps) on every core.
func signLeaves(b *testing.B, n, caps int) [][]byte {
	leaves := make([][]byte, n)
	parallel(n, func(i int) {
		leaves[i] = receiptLeaf(b, kernelPriv, benchReceiptID(i), benchCap(i%caps), 1760000000+uint64(i), 1, true)
	})
	return leaves
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchReceiptID(i int) string { return fmt.Sprintf("rcpt-%08d", i) }
func benchCap(i int) string       { return fmt.Sprintf("cap-%04d", i) }

func receiptMsg(leaves [][]byte) func(i int) *nats.Msg {
	return func(i int) *nats.Msg {
		m := &nats.Msg{Subject: schemas.ReceiptSubject("shop"), Data: leaves[i], Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, benchReceiptID(i))
		m.Header.Set(schemas.HeaderLeafIndex, strconv.Itoa(i))
		return m
	}
}

// BenchmarkCatchUp folds a backlog of b.N messages of one stream from a
// cold start: ns/op is per message, events/s the catch-up rate. Run it
// with -benchtime=1000000x for a backlog of a million.
func BenchmarkCatchUp(b *testing.B) {
	kinds := []struct {
		name string
		// backlog publishes n messages and returns the options of the
		// service that folds them.
		backlog func(b *testing.B, h *harness, n int) []Option
	}{
		{"tasks", func(b *testing.B, h *harness, n int) []Option {
			// Tasks of four commits each: created, working, an artifact,
			// finished with a receipt link.
			commits := make([][]byte, 4)
			for k := range commits {
				var evs []schemas.TaskEvent
				switch k {
				case 0:
					evs = []schemas.TaskEvent{created("ctx", 0)}
				case 1:
					evs = []schemas.TaskEvent{{Type: schemas.TaskEventStatus, Time: at(1), State: schemas.TaskWorking}}
				case 2:
					evs = []schemas.TaskEvent{{Type: schemas.TaskEventArtifact, Time: at(2), Artifact: artifact("result", "some output")}}
				default:
					evs = []schemas.TaskEvent{{Type: schemas.TaskEventReceipt, Time: at(3), ReceiptID: "r"},
						{Type: schemas.TaskEventFinished, Time: at(3), State: schemas.TaskCompleted, Message: message("m", "ROLE_AGENT", "done")}}
				}
				commits[k], _ = json.Marshal(schemas.TaskCommit{V: 1, Events: evs})
			}
			h.publishAll(n, func(i int) *nats.Msg {
				return &nats.Msg{Subject: schemas.TaskSubject(fmt.Sprintf("task-%08d", i/4)), Data: commits[i%4]}
			})
			return nil
		}},
		{"events", func(b *testing.B, h *harness, n int) []Option {
			// Decision events with a two-level lineage over 1000 capabilities.
			h.publishAll(n, func(i int) *nats.Msg {
				d := decisionEvent(benchReceiptID(i), chain("root-"+benchCap(i%1000), benchCap(i%1000))...)
				raw, _ := json.Marshal(d)
				return &nats.Msg{Subject: schemas.SubjectDecision, Data: raw}
			})
			return nil
		}},
		{"receipts", func(b *testing.B, h *harness, n int) []Option {
			h.publishAll(n, receiptMsg(signLeaves(b, n, 1000)))
			return nil
		}},
		// As chio up folds them: every leaf signed by the process's own
		// ledger, so no signature is checked again (WithTrustedLeaves).
		{"receipts-signed-here", func(b *testing.B, h *harness, n int) []Option {
			leaves := signLeaves(b, n, 1000)
			set, err := leafset.New(n)
			if err != nil {
				b.Fatal(err)
			}
			for _, l := range leaves {
				set.Add([][32]byte{leafset.LeafHash(l)})
			}
			h.publishAll(n, receiptMsg(leaves))
			return []Option{WithTrustedLeaves(set.Contains)}
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			h := benchHarness(b)
			opts := k.backlog(b, h, b.N)
			b.ResetTimer()
			start, cpu0 := time.Now(), processCPU(b)
			r := h.start("bench", opts...)
			h.caughtUpWithin(r, time.Hour)
			elapsed, cpu := time.Since(start), processCPU(b)-cpu0
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
			// CPU of the whole process (the fold, Pebble, the embedded
			// NATS server delivering): what travels to a busier machine,
			// where wall time per message does not.
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
			_ = r.stop()
		})
	}
}

// BenchmarkReport measures the authorization-context report over HTTP on
// a store of -projections.receipts governed receipts spread over 100
// capabilities: filtered by one capability (1% of them) and unfiltered
// (every receipt projected and counted, 50 rows returned).
func BenchmarkReport(b *testing.B) {
	n := *reportReceipts
	const caps = 100
	h := benchHarness(b)
	h.publishAll(caps, func(i int) *nats.Msg {
		raw, _ := json.Marshal(decisionEvent(fmt.Sprintf("d-%d", i), chain("root-"+benchCap(i), benchCap(i))...))
		return &nats.Msg{Subject: schemas.SubjectDecision, Data: raw}
	})
	h.publishAll(n, receiptMsg(signLeaves(b, n, caps)))
	r := h.start("bench")
	h.caughtUpWithin(r, time.Hour)
	srv := server(b, r.Service)
	for _, c := range []struct{ name, query string }{
		{"filtered", "?capabilityId=" + benchCap(7)},
		{"unfiltered", ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			var want float64
			for b.Loop() {
				code, body, raw := get(b, srv.URL, "/v1/reports/authorization-context"+c.query, opToken)
				if code != http.StatusOK {
					b.Fatalf("%d %s", code, raw)
				}
				want = body["summary"].(map[string]any)["matchingReceipts"].(float64)
			}
			exp := float64(n)
			if c.query != "" {
				exp = float64(n / caps)
			}
			if want != exp {
				b.Fatalf("matching %v, want %v", want, exp)
			}
			b.ReportMetric(float64(n), "stored")
		})
	}
}
