package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// WithAcceptEventsStream lets the ledger continue its log from the events
// stream whose schemas.StreamIdentity is id, when that stream is not the
// one the log was built from: the log gains a receipt signed by the
// kernel key that names the break (AcceptTool) and folds the new stream
// from its start. Only that stream: the identity is the one the refusal
// named, so a flag left in place accepts no later reset.
func WithAcceptEventsStream(id string) Option { return func(c *config) { c.acceptStream = id } }

// The receipt of an accepted break: the ledger's own, not a tool call's.
const (
	AcceptToolServer = "chio.ledger"
	AcceptTool       = "events-stream.accept"
)

// AcceptReceiptID is the id of the receipt that records the log moving
// from the stream previous to the stream id: one per break.
func AcceptReceiptID(previous, id string) string {
	h := sha256.Sum256([]byte(previous + "\n" + id))
	return "chio-ledger-accept-" + hex.EncodeToString(h[:16])
}

// StreamResetError is why the ledger does not fold the events stream.
type StreamResetError struct {
	Recorded  string // the stream the log folds ("" in a log of an older release)
	Found     string // the stream there is now
	StreamSeq uint64 // the log's position in Recorded
	LastSeq   uint64 // Found's last sequence
}

func (e *StreamResetError) Error() string {
	rec := e.Recorded
	if rec == "" {
		rec = "a stream whose last sequence was at least " + fmt.Sprint(e.StreamSeq) + " (recorded by an older release)"
	}
	return fmt.Sprintf("%v: the log was built from %s and has folded it to sequence %d, but %s is %s (last sequence %d): integration stopped; to continue this log from the new stream start the ledger with --accept-events-stream %s, or rebuild the log",
		schemas.ErrStreamReset, rec, e.StreamSeq, schemas.EventsStream, e.Found, e.LastSeq, e.Found)
}

func (e *StreamResetError) Unwrap() error { return schemas.ErrStreamReset }

// StreamErr is why the ledger does not integrate the events stream now
// (a *StreamResetError), or nil: readiness reports it.
func (l *Ledger) StreamErr() error {
	if p := l.streamErr.Load(); p != nil {
		return *p
	}
	return nil
}

// checkStream makes sure the events stream is the one the log folds,
// before anything is folded from it: it records the stream in a log that
// has none yet (a new log, or one of an older release whose position the
// stream still holds), accepts a new one the operator named, or returns a
// *StreamResetError. Then it mirrors the record in schemas.LogBucket for
// the edges. A standby (writer false) accepts nothing and mirrors
// nothing: it follows the stream the writer folds, or none.
func (l *Ledger) checkStream(ctx context.Context, stream jetstream.Stream, writer bool) error {
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("ledger: look up stream %s: %w", schemas.EventsStream, err)
	}
	id := schemas.StreamIdentity(info)
	st := l.store.State()
	switch {
	case st.EventsStream == id:
	case st.EventsStream == "" && info.State.LastSeq >= st.StreamSeq:
		tx := l.store.Begin()
		tx.SetEventsStream(id)
		if err := tx.Commit(l.signCheckpoint); err != nil {
			return fmt.Errorf("ledger: record the events stream: %w", err)
		}
		l.log.Info("log records the events stream it folds", "stream", id, "stream_seq", st.StreamSeq)
	case writer && l.cfg.acceptStream == id:
		if err := l.acceptStream(st, id); err != nil {
			return err
		}
	default:
		return &StreamResetError{Recorded: st.EventsStream, Found: id, StreamSeq: st.StreamSeq, LastSeq: info.State.LastSeq}
	}
	l.streamErr.Store(nil)
	l.metrics.streamReset.Set(0)
	if writer {
		l.mirrorStream(ctx, id)
	}
	return nil
}

// acceptStream appends the receipt of the break and moves the position to
// the new stream's start, in one batch.
func (l *Ledger) acceptStream(st logstore.State, id string) error {
	params, err := json.Marshal(map[string]any{
		"previous_stream": st.EventsStream, "previous_stream_seq": st.StreamSeq, "stream": id,
		"statement": fmt.Sprintf("an operator accepted a new events stream: this log folded %s to sequence %d and continues from %s", orUnknown(st.EventsStream), st.StreamSeq, id),
	})
	if err != nil {
		return fmt.Errorf("ledger: accept stream: %w", err)
	}
	body := &schemas.ReceiptBody{
		ID: AcceptReceiptID(st.EventsStream, id), Timestamp: uint64(l.cfg.now().Unix()),
		CapabilityID: AcceptToolServer, ToolServer: AcceptToolServer, ToolName: AcceptTool,
		Action:      schemas.ToolCallAction{Parameters: params},
		Decision:    schemas.Decision{Verdict: schemas.VerdictAllow},
		ContentHash: schemas.EmptyContentHash, PolicyHash: AcceptToolServer, TrustLevel: schemas.TrustMediated,
	}
	sum := logstore.Summary{ReceiptID: body.ID, Timestamp: body.Timestamp, CapabilityID: body.CapabilityID,
		ToolServer: body.ToolServer, ToolName: body.ToolName, Verdict: string(body.Decision.Verdict)}
	leaves, err := signAll(l.keys.Kernel, []*schemas.ReceiptBody{body}, []logstore.Summary{sum}, nil)
	if err != nil {
		return err
	}
	tx := l.store.Begin()
	defer tx.Discard()
	if _, err := tx.AppendLeaf(&leaves[0]); err != nil {
		return fmt.Errorf("ledger: accept stream: %w", err)
	}
	tx.SetEventsStream(id)
	tx.SetStreamSeq(0)
	if err := tx.Commit(l.signCheckpoint); err != nil {
		return fmt.Errorf("ledger: accept stream: %w", err)
	}
	l.log.Warn("log continues from a new events stream, as the operator asked; its receipt records the break",
		"receipt_id", body.ID, "previous_stream", orUnknown(st.EventsStream), "previous_stream_seq", st.StreamSeq, "stream", id)
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(not recorded)"
	}
	return s
}

// mirrorStream writes the record the edges check. A failure is logged,
// not fatal: the log itself is safe, and the next start writes it again.
func (l *Ledger) mirrorStream(ctx context.Context, id string) {
	rec, _ := json.Marshal(schemas.EventsStreamRecord{Stream: id, Origin: l.keys.Origin()})
	kv, err := l.logBucket(ctx)
	if err == nil {
		var e jetstream.KeyValueEntry
		if e, err = kv.Get(ctx, schemas.LogKeyEventsStream); err == nil && string(e.Value()) == string(rec) {
			return
		}
		_, err = kv.Put(ctx, schemas.LogKeyEventsStream, rec)
	}
	if err != nil {
		l.log.Warn("cannot tell the edges which events stream the log folds", "bucket", schemas.LogBucket, "err", err)
	}
}

// logBucket opens schemas.LogBucket once (an open is a stream update).
func (l *Ledger) logBucket(ctx context.Context) (jetstream.KeyValue, error) {
	l.logKVmu.Lock()
	defer l.logKVmu.Unlock()
	if l.logKV != nil {
		return l.logKV, nil
	}
	kv, err := schemas.OpenLogBucket(ctx, l.js, l.cfg.replicas)
	if err != nil {
		return nil, err
	}
	l.logKV = kv
	return kv, nil
}

// streamRecheck is how often a ledger stopped by a reset looks again (the
// recorded stream may come back, restored).
const streamRecheck = 5 * time.Second

// awaitStream reports err (readiness, the metric, the log) and waits
// before the next look; false means ctx ended first.
func (l *Ledger) awaitStream(ctx context.Context, err error) bool {
	if l.streamErr.Swap(&err) == nil {
		l.log.Error("events stream is not the one the log folds: integration stopped", "err", err)
	}
	l.metrics.streamReset.Set(1)
	return sleep(ctx, streamRecheck)
}

// watchStream looks at the events stream every streamRecheck while the
// ledger folds it, and ends the run (cancel) when the stream is gone or
// is another: a stream deleted under a running ledger leaves its pull
// consumer waiting, not always told. Run then starts over, which makes
// the stream again if it is gone and refuses it (checkStream).
func (l *Ledger) watchStream(ctx context.Context, cancel context.CancelCauseFunc, writer bool) {
	t := time.NewTicker(l.cfg.streamEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s, err := l.js.Stream(ctx, schemas.EventsStream)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			cancel(fmt.Errorf("%w: stream %s is gone", errConsumerLost, schemas.EventsStream))
			return
		case err != nil:
			continue // not answering now: the consumer waits, and so does this
		}
		id, rec := schemas.StreamIdentity(s.CachedInfo()), l.store.State().EventsStream
		if rec != "" && id != rec {
			cancel(fmt.Errorf("%w: stream %s is another (%s, not %s)", errConsumerLost, schemas.EventsStream, id, rec))
			return
		}
		if writer && rec != "" {
			l.mirrorStream(ctx, rec) // again, in case a write of it failed
		}
		if l.headUnread() {
			l.loadHead(ctx) // again while the bucket's copy could not be read
		}
		l.measureLag(ctx, s)
	}
}

// isStreamReset reports whether err is a refusal of the events stream.
func isStreamReset(err error) bool { return errors.Is(err, schemas.ErrStreamReset) }
