package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/chio-ledger/chio/internal/natsembed"
)

// limit is one measured ceiling.
type limit struct {
	what  string
	ops   int64         // operations done
	per   int           // units (signatures, messages, values) per operation
	took  time.Duration // wall time of the measurement
	notes string
}

func (l limit) rate() float64        { return float64(l.ops) / l.took.Seconds() }
func (l limit) unitRate() float64    { return l.rate() * float64(l.per) }
func (l limit) perOp() time.Duration { return time.Duration(float64(l.took) / float64(max(l.ops, 1))) }

// runLimits measures the machine's ceilings the ledger works under: the
// crypto it does per receipt, and the two fsyncs every batch waits for.
func runLimits(ctx context.Context, env *Env) (*Section, error) {
	span := pick(env, 150*time.Millisecond, 2500*time.Millisecond)
	cores := runtime.GOMAXPROCS(0)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("limits: generate key: %w", err)
	}
	leaf, msg, err := limitsSampleReceipt(key)
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	pub := key.Public().(ed25519.PublicKey)
	sig := ed25519.Sign(key, msg)

	var rows []limit
	add := func(l limit, err error) error {
		if err != nil {
			return err
		}
		env.Logf("%-44s %s", l.what, fmtRate(l.unitRate()))
		rows = append(rows, l)
		return nil
	}
	for _, w := range []int{1, cores} {
		label := limitsCores(w)
		if err := add(limitsSpin(ctx, "Ed25519 sign, "+label, w, span, func() { ed25519.Sign(key, msg) })); err != nil {
			return nil, err
		}
		var bad atomic.Bool
		if err := add(limitsSpin(ctx, "Ed25519 verify, "+label, w, span, func() {
			if !ed25519.Verify(pub, msg, sig) {
				bad.Store(true)
			}
		})); err != nil {
			return nil, err
		}
		if bad.Load() {
			return nil, errors.New("limits: the sample receipt's signature does not verify")
		}
	}
	hashRow := func(w int) error {
		l, err := limitsSpin(ctx, "SHA-256 RFC 6962 leaf hash, "+limitsCores(w), w, span, func() { rfc6962.DefaultHasher.HashLeaf(leaf) })
		if err == nil {
			l.notes = fmt.Sprintf("%.0f MB/s over %d-byte leaves", l.rate()*float64(len(leaf))/1e6, len(leaf))
		}
		return add(l, err)
	}
	if err := hashRow(1); err != nil {
		return nil, err
	}
	if cores > 1 {
		if err := hashRow(cores); err != nil {
			return nil, err
		}
	}
	for _, n := range []int{1, 64} {
		if err := add(limitsPebble(ctx, filepath.Join(env.Dir, fmt.Sprintf("pebble-%d", n)), leaf, n, span)); err != nil {
			return nil, err
		}
	}
	js, err := limitsJetStream(ctx, filepath.Join(env.Dir, "nats"), leaf, span)
	if err != nil {
		return nil, err
	}
	for _, l := range js {
		if err := add(l, nil); err != nil {
			return nil, err
		}
	}

	sec := &Section{
		Settings: []string{
			fmt.Sprintf("GOMAXPROCS %d; each figure is the operations completed in a fixed wall time of %s.", cores, span),
			fmt.Sprintf("Receipt size from a representative signed chio.receipt.v1 built by schemas.SignReceiptLeaf (the ledger's signing path): leaf %d bytes; Ed25519 signs and verifies its body's JCS, %d bytes.", len(leaf), len(msg)),
			"Pebble: default options in the section's scratch dir, one writer, every batch committed with pebble.Sync.",
			"JetStream: embedded server (internal/natsembed, SyncInterval 0 → SyncAlways, checked on the running server), file storage, one replica, in-process client, message ids set as the edges set them.",
		},
		Tables: []Table{{
			Caption: "Ceilings, one row per measurement",
			Header:  []string{"what", "rate", "per-op time", "notes"},
		}},
	}
	for _, l := range rows {
		unit := "ops"
		if l.per > 1 {
			unit = "values"
		}
		notes := l.notes
		if notes == "" {
			notes = fmt.Sprintf("%d %s in %s", l.ops*int64(l.per), unit, l.took.Round(time.Millisecond))
		}
		sec.Tables[0].Rows = append(sec.Tables[0].Rows, []string{l.what, fmtRate(l.rate()), fmtDur(l.perOp()), notes})
	}
	sec.Findings = limitsFindings(rows, cores)
	return sec, nil
}

func limitsCores(w int) string {
	if w == 1 {
		return "1 core"
	}
	return fmt.Sprintf("%d cores", w)
}

// limitsSpin runs op on w goroutines for span and counts the calls. Each
// goroutine checks the clock every 64 calls, so the clock is not what is
// measured.
func limitsSpin(ctx context.Context, what string, w int, span time.Duration, op func()) (limit, error) {
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(span)
	for range w {
		wg.Go(func() {
			var n int64
			for time.Now().Before(deadline) && ctx.Err() == nil {
				for range 64 {
					op()
				}
				n += 64
			}
			total.Add(n)
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := ctx.Err(); err != nil {
		return limit{}, fmt.Errorf("limits: %s: %w", what, err)
	}
	return limit{what: what, ops: total.Load(), per: 1, took: took}, nil
}

// limitsPebble commits batches of n receipt-sized values with pebble.Sync
// from one writer for span: the ledger's commit is one such batch.
func limitsPebble(ctx context.Context, dir string, value []byte, n int, span time.Duration) (limit, error) {
	what := limitsPebbleLabel(n)
	db, err := pebble.Open(dir, &pebble.Options{Logger: limitsQuiet{}})
	if err != nil {
		return limit{}, fmt.Errorf("limits: open pebble: %w", err)
	}
	defer db.Close()
	var key [8]byte
	var seq uint64
	var commits int64
	start := time.Now()
	for time.Since(start) < span {
		if err := ctx.Err(); err != nil {
			return limit{}, fmt.Errorf("limits: %s: %w", what, err)
		}
		b := db.NewBatch()
		for range n {
			seq++
			binary.BigEndian.PutUint64(key[:], seq)
			if err := b.Set(key[:], value, nil); err != nil {
				return limit{}, fmt.Errorf("limits: pebble batch set: %w", err)
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return limit{}, fmt.Errorf("limits: pebble synced commit: %w", err)
		}
		_ = b.Close()
		commits++
	}
	took := time.Since(start)
	l := limit{what: what, ops: commits, per: n, took: took}
	l.notes = fmt.Sprintf("%s values; %d commits in %s", fmtRate(l.unitRate()), commits, took.Round(time.Millisecond))
	return l, nil
}

func limitsPebbleLabel(n int) string {
	if n == 1 {
		return "Pebble synced commit, 1 value per batch"
	}
	return fmt.Sprintf("Pebble synced commit, %d values per batch", n)
}

// limitsQuiet keeps Pebble's informational log out of the report.
type limitsQuiet struct{}

func (limitsQuiet) Infof(string, ...any)  {}
func (limitsQuiet) Errorf(string, ...any) {}
func (limitsQuiet) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// limitsWindow bounds the async publishes in flight. Every message is
// fsynced on its own under SyncAlways, so a deeper window adds queueing,
// not throughput, and its drain after the timed span would dominate a
// short run.
const limitsWindow = 256

// limitsJetStream measures publishes of receipt-sized messages to a
// file-storage stream on a SyncAlways server: async with a bounded window
// (the throughput ceiling), and one at a time (the latency of one stored
// and synced message).
func limitsJetStream(ctx context.Context, dir string, payload []byte, span time.Duration) ([]limit, error) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: dir, DontListen: true, SyncInterval: 0})
	if err != nil {
		return nil, fmt.Errorf("limits: start nats: %w", err)
	}
	defer ns.Stop()
	if c := ns.JetStreamConfig(); c == nil || !c.SyncAlways {
		return nil, errors.New("limits: embedded JetStream is not running with SyncAlways")
	}
	nc, err := ns.Connect()
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	defer nc.Close()
	var pubErrs atomic.Int64
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(limitsWindow),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { pubErrs.Add(1) }))
	if err != nil {
		return nil, fmt.Errorf("limits: jetstream client: %w", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LIMITS", Subjects: []string{"limits.>"},
		Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
		return nil, fmt.Errorf("limits: create stream: %w", err)
	}

	var n int64
	start := time.Now()
	for time.Since(start) < span {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("limits: jetstream async publish: %w", err)
		}
		if _, err := js.PublishAsync("limits.async", payload, jetstream.WithMsgID(fmt.Sprintf("a-%d", n)), jetstream.WithStallWait(time.Minute)); err != nil {
			return nil, fmt.Errorf("limits: jetstream async publish: %w", err)
		}
		n++
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return nil, fmt.Errorf("limits: wait for jetstream acks: %w", ctx.Err())
	case <-time.After(time.Minute):
		return nil, errors.New("limits: wait for jetstream acks: not all acked within a minute")
	}
	took := time.Since(start)
	if e := pubErrs.Load(); e > 0 {
		return nil, fmt.Errorf("limits: jetstream async publish: %d of %d publishes failed", e, n)
	}
	async := limit{what: "JetStream async publish, file storage, SyncAlways", ops: n, per: 1, took: took,
		notes: fmt.Sprintf("%d msgs of %d bytes, window %d, all acked in %s", n, len(payload), limitsWindow, took.Round(time.Millisecond))}

	var m int64
	start = time.Now()
	for time.Since(start) < span {
		if _, err := js.Publish(ctx, "limits.sync", payload, jetstream.WithMsgID(fmt.Sprintf("s-%d", m))); err != nil {
			return nil, fmt.Errorf("limits: jetstream publish: %w", err)
		}
		m++
	}
	took = time.Since(start)
	one := limit{what: "JetStream publish one at a time, SyncAlways", ops: m, per: 1, took: took,
		notes: fmt.Sprintf("%d msgs, each waits for its own synced store", m)}
	return []limit{async, one}, nil
}

// limitsFindings says which ceiling binds, from the figures: per receipt
// the ledger needs one Ed25519 signature (on every core), one leaf hash
// (on its one writer goroutine) and 1–2 stream messages (decision, and
// the outcome of an allowed call); per batch it waits for one synced
// Pebble commit.
func limitsFindings(rows []limit, cores int) []string {
	find := func(what string) limit {
		for _, l := range rows {
			if l.what == what {
				return l
			}
		}
		return limit{took: 1}
	}
	signAll := find("Ed25519 sign, " + limitsCores(cores))
	sign1 := find("Ed25519 sign, 1 core")
	hash := find("SHA-256 RFC 6962 leaf hash, 1 core")
	peb1 := find(limitsPebbleLabel(1))
	peb64 := find(limitsPebbleLabel(64))
	jsAsync := find("JetStream async publish, file storage, SyncAlways")
	jsSync := find("JetStream publish one at a time, SyncAlways")

	// Receipts/s each ceiling allows. The stream carries 1.5 events per
	// receipt in the ledger's benchmark mix (half denials: one event; half
	// allowed calls: decision and outcome).
	type bound struct {
		name string
		rps  float64
	}
	bounds := []bound{
		// One event per write: what a lone caller sees. Loaded edges share
		// writes (edges/eventwriter), so they are bound by writes, not events.
		{"JetStream SyncAlways publishes at one event per write (÷1.5 events per receipt)", jsAsync.rate() / 1.5},
		{fmt.Sprintf("Ed25519 signing on %d core(s)", cores), signAll.rate()},
		{"RFC 6962 leaf hashing on the writer's one core", hash.rate()},
		{"Pebble synced writes at 64 values per commit (a lower bound: ledger batches reach 1024)", peb64.unitRate()},
	}
	low := bounds[0]
	for _, b := range bounds[1:] {
		if b.rps < low.rps {
			low = b
		}
	}
	var out []string
	out = append(out, fmt.Sprintf("Lowest per-receipt ceiling: %s, %s receipts; the others: %s.", low.name, fmtRate(low.rps), limitsOthers(low.name, bounds, func(b bound) (string, float64) { return b.name, b.rps })))
	out = append(out, fmt.Sprintf("Ed25519 on all %d cores signs %s (%s of one core); the JetStream SyncAlways async rate of %s msgs is %s of it, so the stream is %s than signing.",
		cores, fmtRate(signAll.rate()), fmtRatio(signAll.rate(), sign1.rate()), fmtRate(jsAsync.rate()), fmtRatio(jsAsync.rate(), signAll.rate()), limitsBelowAbove(jsAsync.rate(), signAll.rate())))
	out = append(out, fmt.Sprintf("A synced Pebble commit of one value takes %s (%s commits); with 64 values per commit it moves %s values, %s of one value per commit: the fsync, not the bytes, is the cost, and the ledger pays it once per batch (up to 1024 receipts, %.2f µs of fsync per receipt when full).",
		fmtDur(peb1.perOp()), fmtRate(peb1.rate()), fmtRate(peb64.unitRate()), fmtRatio(peb64.unitRate(), peb1.rate()), float64(peb1.perOp())/1024/1e3))
	out = append(out, fmt.Sprintf("A single JetStream publish waits %s for its synced store (%s one at a time) against %s per message with %d in flight: the stream's latency floor per write, which an edge pays before it answers (and which concurrent calls share: the edges' coalescing writer puts every event queued behind a write into the next one).",
		fmtDur(jsSync.perOp()), fmtRate(jsSync.rate()), fmtDur(jsAsync.perOp()), limitsWindow))
	return out
}

func limitsBelowAbove(a, b float64) string {
	if a < b {
		return "slower"
	}
	return "faster"
}

// limitsOthers lists the bounds other than the lowest, with their ratio to it.
func limitsOthers[T any](lowest string, all []T, f func(T) (string, float64)) string {
	var low float64
	for _, b := range all {
		if n, r := f(b); n == lowest {
			low = r
		}
	}
	s := ""
	for _, b := range all {
		n, r := f(b)
		if n == lowest {
			continue
		}
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%s %s (%s)", n, fmtRate(r), fmtRatio(r, low))
	}
	return s
}
