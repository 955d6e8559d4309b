package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/edges/eventwriter"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// ourConns is how many client connections publish events: a few edges.
const ourConns = 4

// eventMsg is one pre-encoded event, so that producers spend no time on JSON.
type eventMsg struct {
	subject, id string
	data        []byte
}

// receiptEvents are the events of one call; the last one completes the receipt.
type receiptEvents struct {
	id   string
	msgs []eventMsg
}

// buildEvents returns n calls' events, as scripts/ledgerbench makes them:
// odd calls a deny decision (one event), even calls an allow decision and
// its completed outcome (two events), 1.5 events per receipt on average.
//
// Each decision names the edge of signer, as a certified edge's does; a
// run that signs nothing (ourConfig.signer nil) folds it all the same.
func buildEvents(n int, signer *schemas.EdgeSigner) ([]receiptEvents, error) {
	ts := uint64(time.Now().Unix())
	cred := signer.Credential()
	out := make([]receiptEvents, n)
	for i := range out {
		id := uuid.Must(uuid.NewV7()).String()
		d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(id), ReceiptID: id,
			Timestamp: ts, CapabilityID: "cap-" + strconv.Itoa(i%64), ToolServer: "hello", ToolName: "hello_task",
			Parameters: json.RawMessage(fmt.Sprintf(`{"message":{"role":"user","parts":[{"text":"hello %d"}]}}`, i)),
			Decision:   schemas.Decision{Verdict: schemas.VerdictAllow}, PolicyHash: schemas.SHA256Hex([]byte("policy")),
			Evidence: []schemas.GuardEvidence{{GuardName: "CapabilityGuard", Verdict: true}},
			EdgeID:   cred.EdgeID, EdgeKey: cred.PublicKey, EdgeCredentialID: cred.ID}
		if i%2 == 1 {
			d.Decision = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "tool not granted", Guard: "grant"}
		}
		db, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("encode decision: %w", err)
		}
		out[i] = receiptEvents{id: id, msgs: []eventMsg{{schemas.SubjectDecision, d.EventID, db}}}
		if i%2 == 1 {
			continue
		}
		o := schemas.OutcomeEvent{Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(id), ReceiptID: id,
			Timestamp: ts, Outcome: schemas.OutcomeCompleted, ContentHash: schemas.SHA256Hex([]byte(strconv.Itoa(i)))}
		ob, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("encode outcome: %w", err)
		}
		out[i].msgs = append(out[i].msgs, eventMsg{schemas.SubjectOutcome, o.EventID, ob})
	}
	return out, nil
}

// ourConfig is how our ledger is run: only its existing options.
type ourConfig struct {
	batch     int
	batchWait time.Duration
	// signer, when set, signs every write as a certified edge's writer
	// does, and the ledger folds only what its issuer certified.
	signer *schemas.EdgeSigner
}

// benchEdge is a certified edge for the ledger section: a fresh issuer
// and edge key, the credential valid for a day.
func benchEdge() (*schemas.EdgeSigner, error) {
	_, issuer, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	now := uint64(time.Now().Unix())
	cred, err := schemas.IssueEdgeCredential(issuer, schemas.EdgeCredentialBody{ID: "edge.bench", EdgeID: "bench",
		PublicKey: schemas.EncodePublicKey(key.Public().(ed25519.PublicKey)), IssuedAt: now - 60, ExpiresAt: now + 86400})
	if err != nil {
		return nil, fmt.Errorf("edge credential: %w", err)
	}
	return schemas.NewEdgeSigner(cred, key)
}

// ledgerOptions are the ledger's options for cfg.
func (cfg ourConfig) ledgerOptions(extra ...ledger.Option) []ledger.Option {
	opts := append([]ledger.Option{ledger.WithLogger(slog.New(slog.DiscardHandler)), ledger.WithBatch(cfg.batch, cfg.batchWait)}, extra...)
	if cfg.signer != nil {
		opts = append(opts, ledger.WithEdgeTrust(ledger.EdgeTrust{Issuers: []string{cfg.signer.Credential().Issuer}}))
	}
	return opts
}

// ourRun holds one run of our ledger.
type ourRun struct {
	ns    *natsembed.Server
	conns []*nats.Conn
	js    []jetstream.JetStream
	store *logstore.Store
	keys  ledger.Keys

	pubErrs  atomic.Int64
	pubErr   atomic.Pointer[error] // first publish or write error
	failed   chan struct{}         // closed on the first failed write
	failOnce sync.Once
}

// firstErr is the first publish or write error, nil when none.
func (o *ourRun) firstErr() error {
	if p := o.pubErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (o *ourRun) close() {
	for _, nc := range o.conns {
		nc.Close()
	}
	if o.store != nil {
		o.store.Close()
	}
	o.ns.Stop()
}

// openOurRun starts NATS (SyncAlways when syncEvery is zero) and opens the
// log store, both under dir (reopened if they exist).
func openOurRun(ctx context.Context, dir string, syncEvery time.Duration) (*ourRun, error) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(dir, "nats"), DontListen: true, SyncInterval: syncEvery})
	if err != nil {
		return nil, err
	}
	o := &ourRun{ns: ns, failed: make(chan struct{})}
	// One connection for the ledger, ourConns for the producers.
	for k := range ourConns + 1 {
		nc, err := ns.Connect()
		if err != nil {
			o.close()
			return nil, err
		}
		o.conns = append(o.conns, nc)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
			jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
				o.pubErrs.Add(1)
				o.pubErr.CompareAndSwap(nil, &err)
			}))
		if err != nil {
			o.close()
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		if k > 0 {
			o.js = append(o.js, js)
		}
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "bench.local/ledger")
	if err != nil {
		o.close()
		return nil, fmt.Errorf("checkpoint key: %w", err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	o.keys = ledger.Keys{Kernel: kernel, Checkpoint: signer, CheckpointVerifier: verifier}
	if o.store, err = logstore.Open(filepath.Join(dir, "log"), logstore.WithLogger(slog.New(slog.DiscardHandler))); err != nil {
		o.close()
		return nil, fmt.Errorf("open log store: %w", err)
	}
	if err := ledger.EnsureStreams(ctx, o.js[0], 1); err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

// runOurs runs our ledger in dir while producers publish evs (their first
// n) under shape. With keepLeaves it also returns the signed receipts in
// log order (Tessera appends the same bytes).
func runOurs(ctx context.Context, dir string, evs []receiptEvents, n int, shape loadShape, cfg ourConfig, keepLeaves bool) (runResult, [][]byte, error) {
	o, err := openOurRun(ctx, dir, 0)
	if err != nil {
		return runResult{}, nil, err
	}
	defer o.close()

	win := make(window, shape.window)
	var (
		cps      []covered // written by the ledger goroutine only, read after it stops
		batches  int
		finished bool
		done     = make(chan struct{})
	)
	l, err := ledger.New(o.js[0], o.store, o.keys, cfg.ledgerOptions(
		ledger.WithOnCommit(func(c ledger.Commit) {
			if c.Receipts == 0 {
				return
			}
			batches++
			cps = append(cps, covered{size: c.TreeSize, at: c.Committed})
			win.release(c.Receipts)
			if c.TreeSize >= uint64(n) && !finished {
				finished = true
				close(done)
			}
		}))...)
	if err != nil {
		return runResult{}, nil, fmt.Errorf("ledger: %w", err)
	}
	lctx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- l.Run(lctx) }()
	// The ledger stops before the store closes (o.close), whichever way
	// this returns.
	ledgerDone := false
	defer func() {
		stop()
		if !ledgerDone {
			<-stopped
		}
	}()

	// Events go out as edges write them: through one coalescing writer
	// per edge process (connection), a call's outcome after its decision
	// was acknowledged, concurrent calls sharing writes. An edge looks at
	// the stream's consumers once before its first call; here the ledger
	// is already running, as it is when edges take traffic.
	ws := o.writers(cfg.signer)
	if err := o.awaitLedger(ctx, ws); err != nil {
		return runResult{}, nil, err
	}
	t0 := make([]time.Time, n)
	var calls sync.WaitGroup
	submit := func(i int, due time.Time) error {
		calls.Go(func() { o.writeCall(ctx, ws[i%len(ws)], &evs[i], func() { t0[i] = submitTime(due) }) })
		return nil
	}
	err = drive(ctx, n, shape, win, submit)
	if err != nil {
		return runResult{}, nil, err
	}
	select {
	case <-done:
	case <-o.failed:
		return runResult{}, nil, fmt.Errorf("a write failed: %v", o.firstErr())
	case err := <-stopped:
		ledgerDone = true
		return runResult{}, nil, fmt.Errorf("ledger stopped early: %w", err)
	case <-ctx.Done():
		return runResult{}, nil, ctx.Err()
	}
	stop()
	calls.Wait()
	ledgerDone = true
	if err := <-stopped; err != nil {
		return runResult{}, nil, fmt.Errorf("ledger: %w", err)
	}
	if k := o.pubErrs.Load(); k > 0 {
		return runResult{}, nil, fmt.Errorf("%d publishes failed: %v", k, o.firstErr())
	}
	if err := checkOurLog(o.store, o.keys.CheckpointVerifier, n); err != nil {
		return runResult{}, nil, err
	}

	ids := make(map[string]int, n)
	for i := range n {
		ids[evs[i].id] = i
	}
	res := runResult{n: n, first: t0[0], last: cps[len(cps)-1].at, lat: make(Latencies, 0, n), checkpoints: batches}
	var leaves [][]byte
	seen := make([]bool, n)
	err = o.store.Entries(0, uint64(n), func(idx uint64, leaf []byte) error {
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(leaf, &r); err != nil {
			return fmt.Errorf("receipt %d: %w", idx, err)
		}
		i, ok := ids[r.ID]
		if !ok || seen[i] {
			return fmt.Errorf("receipt %d: id %q not submitted or twice in the log", idx, r.ID)
		}
		seen[i] = true
		at, ok := coveredAt(cps, idx)
		if !ok {
			return fmt.Errorf("receipt %d: no commit covers it", idx)
		}
		res.lat = append(res.lat, at.Sub(t0[i]))
		if t0[i].Before(res.first) {
			res.first = t0[i]
		}
		if keepLeaves {
			leaves = append(leaves, bytes.Clone(leaf))
		}
		return nil
	})
	if err != nil {
		return runResult{}, nil, fmt.Errorf("read back the log: %w", err)
	}
	events := 0
	for i := range n {
		events += len(evs[i].msgs)
	}
	writes, err := o.writes(ctx)
	if err != nil {
		return runResult{}, nil, err
	}
	res.note = fmt.Sprintf("%.0f receipts per batch; %s events stored in %d synced writes (%.1f events per write)", float64(n)/float64(max(batches, 1)),
		fmtRate(float64(events)/res.last.Sub(res.first).Seconds()), writes, float64(events)/float64(max(writes, 1)))
	return res, leaves, nil
}

// writers returns one event writer per producer connection, as each edge
// process has one.
func (o *ourRun) writers(signer *schemas.EdgeSigner) []*eventwriter.Writer {
	ws := make([]*eventwriter.Writer, len(o.js))
	for i, js := range o.js {
		if signer != nil {
			ws[i] = eventwriter.New(js, eventwriter.WithSigner(signer))
		} else {
			ws[i] = eventwriter.New(js)
		}
	}
	return ws
}

// awaitLedger waits until the ledger's durable consumer exists, then has
// every writer look at the stream's consumers, as an edge does before its
// first call: the run measures a ledger taking traffic, not its start.
func (o *ourRun) awaitLedger(ctx context.Context, ws []*eventwriter.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := o.js[0].Consumer(ctx, schemas.EventsStream, schemas.LedgerConsumer); err == nil {
			break
		} else if !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("look up the ledger's consumer: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the ledger's consumer: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, w := range ws {
		if err := w.Look(ctx); err != nil {
			return fmt.Errorf("writer: %w", err)
		}
		if !w.Envelopes() {
			return errors.New("writer: envelopes off beside this release's ledger")
		}
	}
	return nil
}

// writeCall writes one call's events as an edge does: the decision, then,
// once it is durable, the outcome. last runs just before the event that
// completes the receipt is handed over.
func (o *ourRun) writeCall(ctx context.Context, w *eventwriter.Writer, r *receiptEvents, last func()) {
	for j, m := range r.msgs {
		if j == len(r.msgs)-1 && last != nil {
			last()
		}
		if err := w.Write(ctx, m.id, schemas.StreamEvent{Subject: m.subject, Data: m.data}); err != nil {
			o.pubErrs.Add(1)
			o.pubErr.CompareAndSwap(nil, &err)
			o.failOnce.Do(func() { close(o.failed) })
			return
		}
	}
}

// writes is the number of messages (synced writes) on the events stream.
func (o *ourRun) writes(ctx context.Context) (uint64, error) {
	st, err := o.js[0].Stream(ctx, schemas.EventsStream)
	if err != nil {
		return 0, fmt.Errorf("events stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("events stream: %w", err)
	}
	return info.State.Msgs, nil
}

// backlogWriters is how many calls write their events at once when the
// backlog is pre-published: edges under load.
const backlogWriters = 256

// checkOurLog checks that the log holds exactly n receipts under a valid
// signed checkpoint of size n.
func checkOurLog(store *logstore.Store, v note.Verifier, n int) error {
	size, cp := store.Head()
	if size != uint64(n) {
		return fmt.Errorf("our log holds %d receipts, want %d", size, n)
	}
	got, err := checkpointSize(cp, v)
	if err != nil {
		return fmt.Errorf("our checkpoint: %w", err)
	}
	if got != uint64(n) {
		return fmt.Errorf("our checkpoint commits to %d entries, want %d", got, n)
	}
	return nil
}

// checkpointSize verifies a C2SP checkpoint note and returns its size.
func checkpointSize(raw []byte, v note.Verifier) (uint64, error) {
	nt, err := note.Open(raw, note.VerifierList(v))
	if err != nil {
		return 0, fmt.Errorf("verify checkpoint: %w", err)
	}
	return parseCheckpointSize([]byte(nt.Text))
}

// parseCheckpointSize reads the size line (the second) of a checkpoint
// without verifying it: the watcher polls it every millisecond.
func parseCheckpointSize(raw []byte) (uint64, error) {
	_, rest, ok := bytes.Cut(raw, []byte{'\n'})
	if !ok {
		return 0, errors.New("checkpoint without a size line")
	}
	line, _, _ := bytes.Cut(rest, []byte{'\n'})
	size, err := strconv.ParseUint(string(line), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("checkpoint size: %w", err)
	}
	return size, nil
}

// runOursBacklog measures our ledger alone: n receipts' events are
// published first (into a server that fsyncs once a minute, so publishing
// is quick), the server is restarted with SyncAlways, and the time runs
// from the ledger's start to its commit of the n-th receipt.
func runOursBacklog(ctx context.Context, dir string, evs []receiptEvents, n int, cfg ourConfig) (runResult, error) {
	o, err := openOurRun(ctx, dir, time.Minute)
	if err != nil {
		return runResult{}, err
	}
	ws := o.writers(cfg.signer)
	var next atomic.Int64
	var calls sync.WaitGroup
	for range backlogWriters {
		calls.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				o.writeCall(ctx, ws[i%len(ws)], &evs[i], nil)
			}
		})
	}
	calls.Wait()
	if ctx.Err() != nil {
		o.close()
		return runResult{}, ctx.Err()
	}
	failed := o.pubErrs.Load()
	o.close() // Stop flushes the stream to disk
	if failed > 0 {
		return runResult{}, fmt.Errorf("%d publishes failed: %v", failed, o.firstErr())
	}

	if o, err = openOurRun(ctx, dir, 0); err != nil {
		return runResult{}, err
	}
	defer o.close()
	var (
		batches  int
		finished bool
		last     time.Time
		done     = make(chan struct{})
	)
	l, err := ledger.New(o.js[0], o.store, o.keys, cfg.ledgerOptions(
		ledger.WithOnCommit(func(c ledger.Commit) {
			if c.Receipts > 0 {
				batches++
			}
			if c.TreeSize >= uint64(n) && !finished {
				finished, last = true, c.Committed
				close(done)
			}
		}))...)
	if err != nil {
		return runResult{}, fmt.Errorf("ledger: %w", err)
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan error, 1)
	first := time.Now()
	go func() { stopped <- l.Run(lctx) }()
	select {
	case <-done:
	case err := <-stopped:
		return runResult{}, fmt.Errorf("ledger stopped early: %w", err)
	case <-ctx.Done():
		return runResult{}, ctx.Err()
	}
	stop()
	if err := <-stopped; err != nil {
		return runResult{}, fmt.Errorf("ledger: %w", err)
	}
	if err := checkOurLog(o.store, o.keys.CheckpointVerifier, n); err != nil {
		return runResult{}, err
	}
	return runResult{n: n, first: first, last: last, checkpoints: batches,
		note: fmt.Sprintf("%.0f receipts per batch", float64(n)/float64(max(batches, 1)))}, nil
}
