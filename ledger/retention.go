package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/readfloor"
	"github.com/chio-ledger/chio/schemas"
)

// Event retention. Once an event is folded into the log (its receipt
// signed, its position committed with the batch) and every reader of the
// stream has read it, the log is the record and the event is needed only
// to rebuild a log from the stream. WithEventRetention has the writing
// ledger purge CHIO_EVENTS below the lowest of:
//   - its own committed position, plus one;
//   - every durable consumer's read floor, plus one (readfloor.Read), with
//     the named readers required to exist;
//   - every standby's reported position, plus one (standbys follow with
//     ordered consumers, which JetStream does not count), for reports no
//     older than the retention itself;
//   - the first event stored within the retention: at least that much of
//     the stream stays, whatever has read it.
//
// So nothing any reader has not read is purged, and a standby away for
// less than the retention catches up from the stream. A store behind what
// the stream still holds (a standby away for longer, a store restored from
// an old backup) refuses to fold rather than skip: *PurgedError. A log
// cannot be rebuilt from a purged stream (Rebuild refuses); it is restored
// from a backup of its store instead.

// WithEventRetention makes the writing ledger purge CHIO_EVENTS as the
// retention rules above say, keeping at least keep of events by the time
// the stream stored them; readers are durable consumers that must exist
// for anything to be purged (the projections' events consumer, say).
// keep <= 0, the default: the stream keeps every event.
func WithEventRetention(keep time.Duration, readers ...string) Option {
	return func(c *config) { c.retention, c.retentionReaders = keep, readers }
}

// WithPositions has a following ledger report its position in kv (at most
// once a second while it folds, and every positionRefresh while idle) as
// instance, and a writing ledger with event retention honour the
// positions reported there. kv is the writer lease's bucket: only ledgers
// write it.
func WithPositions(kv jetstream.KeyValue, instance string) Option {
	return func(c *config) { c.positions, c.instance = kv, instance }
}

// ErrEventsPurged is the stream no longer holding events a log has not
// folded.
var ErrEventsPurged = errors.New("events purged before this log folded them")

// PurgedError is why a ledger does not fold the events stream: the events
// from Next to First-1 are gone from it.
type PurgedError struct {
	Next  uint64 // the first sequence the log has not folded
	First uint64 // the stream's first sequence
}

func (e *PurgedError) Error() string {
	return fmt.Sprintf("%v: %s begins at sequence %d, but this log has folded it only to %d, so sequences %d to %d are gone (purged by event retention, or by an operator); integration stopped rather than skip them: restore this ledger's store from a backup of one that has folded them (the writer's or a standby's)",
		ErrEventsPurged, schemas.EventsStream, e.First, e.Next-1, e.Next, e.First-1)
}

func (e *PurgedError) Unwrap() error { return ErrEventsPurged }

// checkHeld returns a *PurgedError if the stream no longer holds sequence
// next while it holds or held later ones.
func checkHeld(info *jetstream.StreamInfo, next uint64) error {
	if first := info.State.FirstSeq; first > next {
		return &PurgedError{Next: next, First: first}
	}
	return nil
}

// positionRefresh is how often an idle follower reports its position
// again, so that a live standby's report never ages past the retention.
const positionRefresh = 10 * time.Second

// position is a follower's report in the positions bucket.
type position struct {
	Instance     string `json:"instance"`
	EventsStream string `json:"events_stream"` // schemas.StreamIdentity of the stream it follows
	StreamSeq    uint64 `json:"stream_seq"`
}

// positionPrefix starts every position key in the lease bucket.
const positionPrefix = "position."

// positionKey is a KV key for any instance name: KV keys take a narrow
// alphabet, instance names (host names, say) need not.
func positionKey(instance string) string {
	h := sha256.Sum256([]byte(instance))
	return positionPrefix + hex.EncodeToString(h[:12])
}

// reportPositions reports the store's position every second it changed,
// and every positionRefresh regardless, until ctx ends.
func (l *Ledger) reportPositions(ctx context.Context) {
	if l.cfg.positions == nil {
		return
	}
	key := positionKey(l.cfg.instance)
	var sent uint64
	var at time.Time
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st := l.store.State()
		if st.StreamSeq != sent || time.Since(at) >= positionRefresh {
			raw, _ := json.Marshal(position{Instance: l.cfg.instance, EventsStream: st.EventsStream, StreamSeq: st.StreamSeq})
			if _, err := l.cfg.positions.Put(ctx, key, raw); err != nil {
				if ctx.Err() != nil {
					return
				}
				l.log.Warn("report this standby's position for event retention", "err", err)
			} else {
				sent, at = st.StreamSeq, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// retentionEvery is how often the writer looks for events to purge: often
// enough that the stream holds little more than the retention, rarely
// enough to cost nothing.
func retentionEvery(keep time.Duration) time.Duration {
	return min(max(keep/8, time.Second), 10*time.Minute)
}

// runRetention purges the stream every retentionEvery until ctx ends.
func (l *Ledger) runRetention(ctx context.Context, stream jetstream.Stream) {
	if l.cfg.retention <= 0 {
		return
	}
	every := retentionEvery(l.cfg.retention)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := l.retain(ctx, stream); err != nil && ctx.Err() == nil {
			l.log.Warn("event retention: nothing purged this pass", "err", err)
		}
		t.Reset(every)
	}
}

// Retained is one retention pass.
type Retained struct {
	First  uint64 // the stream's first sequence after the pass
	Purged uint64 // sequences the pass removed
	// HeldBy names what held the purge where it stopped: "log",
	// "retention", a durable consumer's name, or a standby's instance.
	HeldBy string
}

// retain runs one pass of event retention (see above).
func (l *Ledger) retain(ctx context.Context, stream jetstream.Stream) (Retained, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return Retained{}, fmt.Errorf("stream info: %w", err)
	}
	st := l.store.State()
	if schemas.StreamIdentity(info) != st.EventsStream {
		return Retained{First: info.State.FirstSeq}, errors.New("the stream is not the one the log folds")
	}
	keepFrom, heldBy := st.StreamSeq+1, "log"
	hold := func(seq uint64, by string) {
		if seq < keepFrom {
			keepFrom, heldBy = seq, by
		}
	}
	floor, by, err := readfloor.Holder(ctx, stream, info.State.LastSeq, l.cfg.retentionReaders...)
	if err != nil {
		return Retained{First: info.State.FirstSeq}, err
	}
	if by != "" {
		hold(floor+1, by)
	}
	if err := l.standbyFloor(ctx, st.EventsStream, hold); err != nil {
		return Retained{First: info.State.FirstSeq}, err
	}
	cutoff := l.cfg.now().Add(-l.cfg.retention)
	young, err := firstStoredSince(ctx, stream, cutoff)
	if err != nil {
		return Retained{First: info.State.FirstSeq}, err
	}
	switch {
	case young != 0:
		hold(young, "retention")
	case !info.State.LastTime.Before(cutoff):
		// The stream stored something since the cutoff, and the look
		// found nothing: purge nothing on a look that cannot be right.
		return Retained{First: info.State.FirstSeq}, errors.New("no event found within the retention, though the stream's last is within it")
	}
	first := max(info.State.FirstSeq, 1)
	if keepFrom <= first {
		l.metrics.firstSeq.Set(float64(info.State.FirstSeq))
		return Retained{First: info.State.FirstSeq, HeldBy: heldBy}, nil
	}
	if l.cfg.fence != nil {
		if err := l.cfg.fence(); err != nil {
			return Retained{First: first}, fmt.Errorf("fenced: %w", err)
		}
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(keepFrom)); err != nil {
		return Retained{First: first}, fmt.Errorf("purge below sequence %d: %w", keepFrom, err)
	}
	l.metrics.purged.Add(float64(keepFrom - first))
	l.metrics.firstSeq.Set(float64(keepFrom))
	l.log.Debug("event retention purged the stream", "below", keepFrom, "held_by", heldBy)
	return Retained{First: keepFrom, Purged: keepFrom - first, HeldBy: heldBy}, nil
}

// standbyFloor holds the purge at every standby's reported position on
// the log's stream, for reports younger than the retention (and than
// three refresh intervals, so a short retention never ages out a live
// standby). Older ones are deleted: a standby away that long refuses to
// fold (PurgedError).
func (l *Ledger) standbyFloor(ctx context.Context, stream string, hold func(uint64, string)) error {
	kv := l.cfg.positions
	if kv == nil {
		return nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("list standby positions: %w", err)
	}
	type revised struct {
		key string
		rev uint64
	}
	var stale []revised
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, positionPrefix) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read standby position %s: %w", k, err)
		}
		var p position
		if err := json.Unmarshal(e.Value(), &p); err != nil || p.EventsStream != stream {
			stale = append(stale, revised{k, e.Revision()})
			continue
		}
		if l.cfg.now().Sub(e.Created()) > max(l.cfg.retention, 3*positionRefresh) {
			stale = append(stale, revised{k, e.Revision()})
			continue
		}
		if p.Instance != l.cfg.instance {
			hold(p.StreamSeq+1, "standby "+p.Instance)
		}
	}
	for _, k := range stale {
		// Only the report read: a standby reporting again since keeps it.
		if err := kv.Delete(ctx, k.key, jetstream.LastRevision(k.rev)); err != nil && ctx.Err() == nil {
			l.log.Debug("event retention: delete a stale standby position", "key", k.key, "err", err)
		}
	}
	return nil
}

// firstStoredSince returns the sequence of the first event the stream
// stored at or after t, or 0 if it stored none since.
func firstStoredSince(ctx context.Context, stream jetstream.Stream, t time.Time) (uint64, error) {
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{
		Description:   "chio ledger retention: first event within the retention",
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t,
		AckPolicy: jetstream.AckNonePolicy, HeadersOnly: true,
		MemoryStorage: true, Replicas: 1, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return 0, fmt.Errorf("consumer from %s: %w", t.UTC().Format(time.RFC3339), err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stream.DeleteConsumer(dctx, cons.CachedInfo().Name) // else it goes after its inactive threshold
	}()
	batch, err := cons.FetchNoWait(1)
	if err != nil {
		return 0, fmt.Errorf("fetch from %s: %w", t.UTC().Format(time.RFC3339), err)
	}
	var seq uint64
	for m := range batch.Messages() {
		if meta, err := m.Metadata(); err == nil {
			seq = meta.Sequence.Stream
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return 0, fmt.Errorf("fetch from %s: %w", t.UTC().Format(time.RFC3339), err)
	}
	return seq, nil
}

func newRetentionMetrics(m *metrics) {
	m.purged = prometheus.NewCounter(prometheus.CounterOpts{Name: "chio_ledger_events_purged_total",
		Help: "CHIO_EVENTS sequences event retention purged: folded into the log, read by every reader, and older than the retention."})
	m.firstSeq = prometheus.NewGauge(prometheus.GaugeOpts{Name: "chio_ledger_events_first_sequence",
		Help: "CHIO_EVENTS's first sequence as of the last retention pass (0 with retention off)."})
}
