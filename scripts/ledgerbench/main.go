// Command ledgerbench measures the ledger end to end on this machine: an
// embedded NATS server with JetStream file storage and SyncAlways, a real
// Pebble store with synced commits, the real consumer.
//
//	go run ./scripts/ledgerbench                  # both phases, default sizes
//	go run ./scripts/ledgerbench -n 200000 -rate 10000 -duration 20s
//
// Phase 1 (throughput) pre-publishes n receipts' worth of events (half deny
// decisions, half allow decisions with their completed outcome, so 1.5 events
// per receipt), then starts the ledger and times first event to last
// integrated leaf. Phase 2 (latency) publishes at a fixed receipt rate into a
// running ledger and reports the time from the stream storing the completing
// event to the synced commit that integrated its receipt.
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

func main() {
	n := flag.Int("n", 100000, "receipts in the throughput phase")
	rate := flag.Int("rate", 5000, "receipts per second in the latency phase")
	duration := flag.Duration("duration", 10*time.Second, "length of the latency phase")
	batch := flag.Int("batch", 1024, "ledger batch size")
	wait := flag.Duration("batch-wait", 2*time.Millisecond, "ledger batch wait")
	dir := flag.String("dir", "", "work directory (default: a temporary one, removed afterwards)")
	flag.DurationVar(&natsSync, "nats-sync", 0, "JetStream fsync interval (0: SyncAlways, fsync before every ack)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the throughput phase's ledger run")
	flag.Parse()
	profile = *cpuprofile
	if err := run(*n, *rate, *duration, *batch, *wait, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "ledgerbench:", err)
		os.Exit(1)
	}
}

// Flags read by the phases.
var (
	natsSync time.Duration
	profile  string
)

func syncMode() string {
	if natsSync == 0 {
		return "SyncAlways"
	}
	return "fsync every " + natsSync.String()
}

type env struct {
	ns    *natsembed.Server
	js    jetstream.JetStream
	store *logstore.Store
	keys  ledger.Keys
	close func()
}

func newEnv(dir string) (*env, error) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(dir, "nats"), DontListen: true, SyncInterval: natsSync})
	if err != nil {
		return nil, err
	}
	nc, err := ns.Connect()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, err
	}
	skey, vkey, _ := note.GenerateKey(rand.Reader, "bench.local/log")
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	keys := ledger.Keys{Kernel: kernel, Checkpoint: signer, CheckpointVerifier: verifier}
	store, err := logstore.Open(filepath.Join(dir, "log"), logstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if err := ledger.EnsureStreams(context.Background(), js, 1); err != nil {
		return nil, err
	}
	return &env{ns: ns, js: js, store: store, keys: keys, close: func() { store.Close(); nc.Close(); ns.Stop() }}, nil
}

// events returns the events of receipt i: a deny decision, or an allow
// decision and its completed outcome. Sizes are those of a small real call.
func events(i int, ts uint64) [][2]any {
	id := uuid.Must(uuid.NewV7()).String()
	d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(id), ReceiptID: id,
		Timestamp: ts, CapabilityID: "cap-" + fmt.Sprint(i%64), ToolServer: "hello", ToolName: "hello_task",
		Parameters: json.RawMessage(fmt.Sprintf(`{"message":{"role":"user","parts":[{"text":"hello %d"}]}}`, i)),
		Decision:   schemas.Decision{Verdict: schemas.VerdictAllow}, PolicyHash: schemas.SHA256Hex([]byte("policy")),
		Evidence: []schemas.GuardEvidence{{GuardName: "CapabilityGuard", Verdict: true}}}
	if i%2 == 1 {
		d.Decision = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "tool not granted", Guard: "grant"}
		return [][2]any{{schemas.SubjectDecision, d}}
	}
	o := schemas.OutcomeEvent{Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(id), ReceiptID: id,
		Timestamp: ts, Outcome: schemas.OutcomeCompleted, ContentHash: schemas.SHA256Hex([]byte(fmt.Sprint(i)))}
	return [][2]any{{schemas.SubjectDecision, d}, {schemas.SubjectOutcome, o}}
}

func publish(js jetstream.JetStream, subject string, v any) (jetstream.PubAckFuture, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var id string
	switch e := v.(type) {
	case schemas.DecisionEvent:
		id = e.EventID
	case schemas.OutcomeEvent:
		id = e.EventID
	}
	return js.PublishAsync(subject, data, jetstream.WithMsgID(id), jetstream.WithStallWait(time.Minute))
}

func run(n, rate int, duration time.Duration, batch int, wait time.Duration, dir string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "ledgerbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	fmt.Printf("ledgerbench: GOMAXPROCS=%d %s, batch %d / %s, NATS %s, Pebble Sync\n", runtime.GOMAXPROCS(0), runtime.Version(), batch, wait, syncMode())
	if err := throughput(filepath.Join(dir, "throughput"), n, batch, wait); err != nil {
		return err
	}
	return latency(filepath.Join(dir, "latency"), rate, duration, batch, wait)
}

func throughput(dir string, n, batch int, wait time.Duration) error {
	e, err := newEnv(dir)
	if err != nil {
		return err
	}
	defer e.close()
	start := time.Now()
	ts := uint64(start.Unix())
	msgs := 0
	for i := 0; i < n; i++ {
		for _, ev := range events(i, ts) {
			if _, err := publish(e.js, ev[0].(string), ev[1]); err != nil {
				return err
			}
			msgs++
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("publishing did not complete")
	}
	pubTime := time.Since(start)
	fmt.Printf("published %d events (%d receipts) in %s: %.0f events/s (async publish, %s)\n", msgs, n, pubTime.Round(time.Millisecond), float64(msgs)/pubTime.Seconds(), syncMode())

	var commits, folded int
	l, err := ledger.New(e.js, e.store, e.keys, ledger.WithLogger(slog.New(slog.DiscardHandler)), ledger.WithBatch(batch, wait),
		ledger.WithOnCommit(func(c ledger.Commit) { commits++; folded += c.Events }))
	if err != nil {
		return err
	}
	defer func() {
		fmt.Printf("  %d batches, %.0f events per batch on average\n", commits, float64(folded)/float64(max(commits, 1)))
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	begin, cpuBegin := time.Now(), cpuTime()
	go func() { done <- l.Run(ctx) }()
	for e.store.State().Size < uint64(n) {
		select {
		case err := <-done:
			cancel()
			return fmt.Errorf("ledger stopped: %w", err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed, cpu := time.Since(begin), cpuTime()-cpuBegin
	cancel()
	<-done
	fmt.Printf("THROUGHPUT: %d receipts (%d events) integrated in %s: %.0f receipts/s, %.0f events/s\n",
		n, msgs, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), float64(msgs)/elapsed.Seconds())
	// CPU per receipt travels between runs on a shared machine where the
	// rate does not: it is this process's user+system time (the ledger and
	// the embedded NATS server delivering to it) over the receipts.
	fmt.Printf("CPU: %s user+system over the run, %.1f µs per receipt, %.2f cores busy on average\n",
		cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(n), cpu.Seconds()/elapsed.Seconds())
	return nil
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func latency(dir string, rate int, duration time.Duration, batch int, wait time.Duration) error {
	e, err := newEnv(dir)
	if err != nil {
		return err
	}
	defer e.close()
	var mu sync.Mutex
	var lat []time.Duration
	l, err := ledger.New(e.js, e.store, e.keys, ledger.WithLogger(slog.New(slog.DiscardHandler)), ledger.WithBatch(batch, wait),
		ledger.WithOnCommit(func(c ledger.Commit) {
			mu.Lock()
			for _, s := range c.Stored {
				lat = append(lat, c.Committed.Sub(s))
			}
			mu.Unlock()
		}))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	total := int(duration.Seconds() * float64(rate))
	tick := time.Second / 100 // publish in 10ms slices
	perTick := max(rate/100, 1)
	start := time.Now()
	sent := 0
	for i := 0; sent < total; i++ {
		for j := 0; j < perTick && sent < total; j++ {
			for _, ev := range events(sent, uint64(time.Now().Unix())) {
				if _, err := publish(e.js, ev[0].(string), ev[1]); err != nil {
					return err
				}
			}
			sent++
		}
		if d := time.Until(start.Add(time.Duration(i+1) * tick)); d > 0 {
			time.Sleep(d)
		}
	}
	for e.store.State().Size < uint64(total) {
		select {
		case err := <-done:
			return fmt.Errorf("ledger stopped: %w", err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("LATENCY at %d receipts/s offered (%d receipts over %s): stored→integrated p50 %s p99 %s max %s\n",
		rate, len(lat), elapsed.Round(time.Millisecond), pct(0.50).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond))
	return nil
}
