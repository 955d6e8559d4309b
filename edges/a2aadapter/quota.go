package a2aadapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounds of the task registry. Every task a partner reports is recorded,
// so without them a caller could grow the bucket without end: records
// expire, the bucket is capped, and each caller's live tasks are bounded.
const (
	// DefaultRecordTTL is how long a record is kept after the task was
	// last observed; a follow-up after that is refused as for a task
	// never observed.
	DefaultRecordTTL = 7 * 24 * time.Hour
	// DefaultMaxRecords caps the records the bucket holds: the server
	// refuses a new one past it (a replicated bucket refuses updates too,
	// which the 10% kept from new tasks leaves room for).
	DefaultMaxRecords = 1_000_000
	// DefaultMaxLiveTasks bounds the tasks one caller holds on the
	// partners that are not known to have ended.
	DefaultMaxLiveTasks = 1000
	// DefaultLiveWindow is how long a task not known to have ended counts
	// after it was last recorded. The adapter learns that a task ended
	// only when a call sees it; a caller that never looks again would
	// otherwise hold its quota until the record expired.
	DefaultLiveWindow = 24 * time.Hour

	// admitHeadroomPct is the share of the record cap that new tasks may
	// fill, so that the tasks recorded, and one a partner has just
	// started, can still be written.
	admitHeadroomPct = 90
	// bucketStateTTL is how long admission reuses the bucket's state.
	bucketStateTTL = time.Second
	// indexWait bounds how long admission waits for the live-task index
	// to read the bucket: a caller is answered, not held.
	indexWait = 10 * time.Second
	// sweepEvery is how often counting drops every expired record.
	sweepEvery = time.Minute
)

var (
	// ErrTaskQuota: the caller already holds the maximum number of live
	// tasks; the call was refused before any upstream request.
	ErrTaskQuota = errors.New("task quota exceeded")
	// ErrRegistryFull: the task registry is near its cap and records no
	// new task; the call was refused before any upstream request.
	ErrRegistryFull = errors.New("task registry full")
)

// RegistryOption configures OpenTaskRegistry.
type RegistryOption func(*registryOptions)

type registryOptions struct {
	ttl        time.Duration
	maxRecords int64
	maxLive    int
	liveWindow time.Duration
}

// WithRecordTTL sets how long a record outlives the task's last
// observation (DefaultRecordTTL by default; 0: forever).
func WithRecordTTL(d time.Duration) RegistryOption {
	return func(o *registryOptions) { o.ttl = d }
}

// WithMaxRecords caps the records the bucket holds (DefaultMaxRecords by
// default; 0: no cap). New tasks are refused (ErrRegistryFull) at 90% of
// it.
func WithMaxRecords(n int64) RegistryOption {
	return func(o *registryOptions) { o.maxRecords = n }
}

// WithMaxLiveTasks bounds the tasks each caller (the subject of its
// capability) may hold unended over every replica (DefaultMaxLiveTasks by
// default; 0: no bound). One more is refused (ErrTaskQuota).
func WithMaxLiveTasks(n int) RegistryOption {
	return func(o *registryOptions) { o.maxLive = n }
}

// WithLiveWindow sets how long a task not known to have ended counts
// against its caller after it was last recorded (DefaultLiveWindow by
// default; at most the record TTL).
func WithLiveWindow(d time.Duration) RegistryOption {
	return func(o *registryOptions) { o.liveWindow = d }
}

// openBucket creates the bucket, or brings an existing one to cfg, with
// its backing stream capped at maxRecords values (0: none) under
// DiscardNew: the bucket configuration has no such cap. An existing
// bucket is changed in one stream update, so that it is never left
// uncapped between two (nats.go's bucket update would lift the cap).
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, maxRecords int64) (jetstream.KeyValue, error) {
	want := maxRecords
	if want <= 0 {
		want = -1
	}
	s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateKeyValue(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return nil, err
		}
		if s, err = js.Stream(ctx, "KV_"+cfg.Bucket); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	sc := s.CachedInfo().Config
	dup := 2 * time.Minute // the bucket's own rule: at most its TTL
	if cfg.TTL > 0 && cfg.TTL < dup {
		dup = cfg.TTL
	}
	if sc.MaxMsgs != want || sc.Discard != jetstream.DiscardNew || sc.MaxAge != cfg.TTL || sc.Replicas != cfg.Replicas ||
		sc.MaxMsgSize != cfg.MaxValueSize || sc.Duplicates != dup {
		sc.MaxMsgs, sc.Discard, sc.MaxAge, sc.Replicas, sc.MaxMsgSize, sc.Duplicates = want, jetstream.DiscardNew, cfg.TTL, cfg.Replicas, cfg.MaxValueSize, dup
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("cap records: %w", err)
		}
	}
	return js.KeyValue(ctx, cfg.Bucket)
}

// jsStoreFailed is the JetStream API error code of a write the stream
// refused to store; at MaxMsgs under DiscardNew it says "maximum messages".
const jsStoreFailed jetstream.ErrorCode = 10077

// registryFull reports whether err is the bucket refusing a new record at
// its cap.
func registryFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsStoreFailed && strings.Contains(apiErr.Description, "maximum messages")
}

// admit refuses a call that would start a new upstream task when the
// bucket is past the share of its cap new tasks may use, or when caller
// holds its maximum of live tasks. The count is the bucket's, followed on
// every replica, so the bound holds across replicas; it may be exceeded by
// the tasks being started at the same moment that no replica has recorded
// yet.
func (r *TaskRegistry) admit(ctx context.Context, caller string) error {
	if err := r.admitBucket(ctx); err != nil {
		return err
	}
	if r.opts.maxLive <= 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, indexWait)
	defer cancel()
	idx, err := r.index(wctx)
	if err != nil {
		return fmt.Errorf("task registry: count live tasks: %w", err)
	}
	if n := idx.count(caller, r.now()); n >= r.opts.maxLive {
		return fmt.Errorf("%w: caller %s holds %d live tasks on this adapter's partners (limit %d); a task stops counting once a call sees it end (get_task, subscribe_task or cancel_task), or %s after it was last recorded",
			ErrTaskQuota, abbreviate(caller), n, r.opts.maxLive, r.opts.countFor())
	}
	return nil
}

// abbreviate shortens a caller for an error message.
func abbreviate(s string) string {
	switch {
	case s == "":
		return `""`
	case len(s) > 64:
		return s[:61] + "..."
	}
	return s
}

// admitBucket refuses a new task once the bucket is past its admit share.
func (r *TaskRegistry) admitBucket(ctx context.Context) error {
	if r.opts.maxRecords <= 0 {
		return nil
	}
	r.bucket.mu.Lock()
	defer r.bucket.mu.Unlock()
	if now := r.now(); now.After(r.bucket.at.Add(bucketStateTTL)) {
		st, err := r.kv.Status(ctx)
		if err != nil {
			return fmt.Errorf("task registry: bucket state: %w", err)
		}
		r.bucket.values, r.bucket.at = st.Values(), now
	}
	if r.bucket.values*100 >= uint64(r.opts.maxRecords)*admitHeadroomPct {
		expire := "records do not expire"
		if r.opts.ttl > 0 {
			expire = fmt.Sprintf("records expire %s after a task was last seen", r.opts.ttl)
		}
		return fmt.Errorf("%w: the registry holds %d records, %d%% of its cap of %d is for new tasks; %s",
			ErrRegistryFull, r.bucket.values, admitHeadroomPct, r.opts.maxRecords, expire)
	}
	return nil
}

// bucketState caches the bucket's size for admitBucket.
type bucketState struct {
	mu     sync.Mutex
	at     time.Time
	values uint64
}

// index is the live-task index, started on first use and again after it
// stopped, ready once it has read every record.
func (r *TaskRegistry) index(ctx context.Context) (*liveIndex, error) {
	r.liveMu.Lock()
	idx := r.live
	if idx == nil || idx.stopped() {
		idx = newLiveIndex(r.opts.countFor(), r.now())
		// The index lives as long as the registry's connection, not the
		// call that happened to start it.
		if err := idx.follow(context.WithoutCancel(ctx), r.kv); err != nil {
			r.liveMu.Unlock()
			return nil, err
		}
		r.live = idx
	}
	r.liveMu.Unlock()
	select {
	case <-idx.ready:
		if idx.stopped() {
			return nil, errors.New("the task registry's watch stopped")
		}
		return idx, nil
	case <-ctx.Done():
		select {
		case <-idx.ready: // both were ready: the index is
			if !idx.stopped() {
				return idx, nil
			}
		default:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && r.now().Sub(idx.started) >= indexWait {
				// A watch that has not read the bucket by now may never
				// say so: the next admission starts another.
				idx.stop()
			}
		}
		return nil, ctx.Err()
	}
}

// noted tells the index of a record this replica just wrote, until its
// watch delivers it.
func (r *TaskRegistry) noted(key string, rec TaskRecord, rev uint64) {
	r.liveMu.Lock()
	idx := r.live
	r.liveMu.Unlock()
	if idx != nil {
		idx.note(key, rec, rev, r.now())
	}
}

// countFor is how long a live record counts: the live window, or the
// record TTL if that is shorter (0: for ever).
func (o registryOptions) countFor() time.Duration {
	switch {
	case o.ttl <= 0:
		return o.liveWindow
	case o.liveWindow <= 0:
		return o.ttl
	}
	return min(o.ttl, o.liveWindow)
}

// liveIndex follows the bucket and keeps each caller's live tasks: the
// records whose last observed state is not terminal, written within the
// live window, which the bucket's TTL has not yet removed (a value the
// TTL removes leaves no mark for a watch to see, so each is dropped when
// counted after its time).
type liveIndex struct {
	ttl     time.Duration // how long a record counts after its write
	started time.Time
	stop    context.CancelFunc // ends the watch
	mu      sync.Mutex
	callers map[string]map[string]liveRecord // caller → key → record
	keys    map[string]string                // key → its caller in callers
	read    uint64                           // the highest revision the watch delivered
	swept   time.Time                        // when expired records were last dropped
	ready   chan struct{}
	done    bool
}

type liveRecord struct {
	stored time.Time // the value's time: the bucket drops it ttl later
	rev    uint64
}

func newLiveIndex(ttl time.Duration, now time.Time) *liveIndex {
	return &liveIndex{ttl: ttl, started: now, swept: now, stop: func() {}, callers: map[string]map[string]liveRecord{},
		keys: map[string]string{}, ready: make(chan struct{})}
}

func (x *liveIndex) stopped() bool { x.mu.Lock(); defer x.mu.Unlock(); return x.done }

// follow watches every record until ctx ends, x.stop is called or the
// watch stops; ready is closed once the records the bucket held are read
// (or the watch stopped).
func (x *liveIndex) follow(ctx context.Context, kv jetstream.KeyValue) error {
	ctx, x.stop = context.WithCancel(ctx)
	w, err := kv.WatchAll(ctx)
	if err != nil {
		x.stop()
		return fmt.Errorf("watch task registry: %w", err)
	}
	go func() {
		var once sync.Once
		defer func() {
			x.stop()
			_ = w.Stop()
			x.mu.Lock()
			x.done = true
			x.mu.Unlock()
			once.Do(func() { close(x.ready) })
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case kve, ok := <-w.Updates():
				if !ok {
					return
				}
				if kve == nil {
					once.Do(func() { close(x.ready) })
					continue
				}
				x.apply(kve)
			}
		}
	}()
	return nil
}

func (x *liveIndex) apply(kve jetstream.KeyValueEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.read = max(x.read, kve.Revision())
	key := kve.Key()
	x.forget(key)
	var rec TaskRecord
	if kve.Operation() != jetstream.KeyValuePut || json.Unmarshal(kve.Value(), &rec) != nil || !live(rec) {
		return
	}
	x.keep(key, rec.Caller, liveRecord{stored: kve.Created(), rev: kve.Revision()})
}

// note counts a record this replica wrote at rev, unless the watch has
// read that far already (it then holds the record, or a later one).
func (x *liveIndex) note(key string, rec TaskRecord, rev uint64, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done || rev <= x.read {
		return
	}
	x.forget(key)
	if live(rec) {
		x.keep(key, rec.Caller, liveRecord{stored: now, rev: rev})
	}
}

// live: the task was seen in a state that is not terminal. A task whose
// state was never seen (a partner that answered a send with a message
// naming it) is not counted: it could not be told apart from one that
// ended, and would hold its caller's quota until its record expired.
func live(rec TaskRecord) bool {
	return rec.State != "" && !a2a.TaskState(rec.State).Terminal()
}

// keep files key under caller; x.mu is held.
func (x *liveIndex) keep(key, caller string, r liveRecord) {
	recs := x.callers[caller]
	if recs == nil {
		recs = map[string]liveRecord{}
		x.callers[caller] = recs
	}
	recs[key] = r
	x.keys[key] = caller
}

// forget drops key; x.mu is held.
func (x *liveIndex) forget(key string) {
	caller, ok := x.keys[key]
	if !ok {
		return
	}
	delete(x.keys, key)
	if recs := x.callers[caller]; recs != nil {
		delete(recs, key)
		if len(recs) == 0 {
			delete(x.callers, caller)
		}
	}
}

// count is how many live tasks caller holds at now. Now and then it drops
// every caller's expired records, not only this one's: a caller that
// never calls again must not hold memory for good.
func (x *liveIndex) count(caller string, now time.Time) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ttl > 0 && now.Sub(x.swept) >= sweepEvery {
		x.swept = now
		for c := range x.callers {
			x.countLocked(c, now)
		}
	}
	return x.countLocked(caller, now)
}

func (x *liveIndex) countLocked(caller string, now time.Time) int {
	n := 0
	for key, r := range x.callers[caller] {
		if x.ttl > 0 && !now.Before(r.stored.Add(x.ttl)) {
			x.forget(key)
			continue
		}
		n++
	}
	return n
}
