package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/kernel"
)

// Defaults of the task limits and leases.
const (
	// DefaultMaxTasks caps the tasks the bucket holds (any state, until
	// their TTL): the server refuses a new one past it, while the tasks
	// it holds can still be updated to their end (one value per key).
	DefaultMaxTasks = 1_000_000
	// DefaultMaxLiveTasks bounds the live (pending or running) tasks of
	// one principal.
	DefaultMaxLiveTasks = 1000
	// DefaultTaskLease is how long a running task's lease lasts without
	// renewal: the edge running it renews it every third of that, and
	// another replica's sweep takes over a task whose lease ran out.
	DefaultTaskLease = 30 * time.Second
)

// indexWait bounds how long tool/stream waits for the task index to read
// the bucket (at start): a caller is answered, not held.
const indexWait = 10 * time.Second

// tasksStream is the bucket's backing stream (the KV layout of nats.go).
const tasksStream = "KV_" + TasksBucket

// errTaskQuota and errTasksFull refuse a new task.
var (
	errTaskQuota = errors.New("task quota exceeded")
	errTasksFull = errors.New("task store full")
)

// capTasks caps the bucket's backing stream at max values (0: none).
// nats.go's bucket configuration has no such cap, so it is set on the
// stream after each create or update of the bucket. With the bucket's
// DiscardNew and one value per key, the server refuses a new key at the
// cap but still takes updates of the keys it holds: a full bucket takes
// no new task and never strands one half way.
func capTasks(ctx context.Context, js jetstream.JetStream, max int64) error {
	s, err := js.Stream(ctx, tasksStream)
	if err != nil {
		return fmt.Errorf("cap tasks bucket: %w", err)
	}
	cfg := s.CachedInfo().Config
	want := max
	if want <= 0 {
		want = -1
	}
	if cfg.MaxMsgs == want && cfg.Discard == jetstream.DiscardNew {
		return nil
	}
	cfg.MaxMsgs, cfg.Discard = want, jetstream.DiscardNew
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("cap tasks bucket: %w", err)
	}
	return nil
}

// jsStoreFailed is the JetStream API error code of a write the stream
// refused to store; a stream at its MaxMsgs under DiscardNew answers it
// with "maximum messages exceeded".
const jsStoreFailed jetstream.ErrorCode = 10077

// bucketFull reports whether err is the bucket refusing a new task at its
// cap.
func bucketFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsStoreFailed && strings.Contains(apiErr.Description, "maximum messages")
}

// taskIndex follows the bucket (a KV watch, on every replica) and keeps
// what admission and the sweep need: the live tasks of each principal,
// and the running tasks with their leases. Every replica sees every
// update, so both hold across replicas.
type taskIndex struct {
	ttl  time.Duration
	mu   sync.Mutex
	live map[string]indexed // task id → its entry, pending or running only
	mine map[string]indexed // written here, not yet seen by the watch
	// owned: each principal's ids in live or mine, so that counting costs
	// a principal's tasks, not every task.
	owned map[string]map[string]struct{}
	ready chan struct{}
}

type indexed struct {
	principal string
	stored    time.Time // the value's time: the bucket drops it ttl later
	running   bool
	holder    string
	expires   time.Time
}

// current: the bucket still holds it (its TTL has not run out: a value
// the TTL removes leaves no mark for a watch to see).
func (x indexed) current(now time.Time, ttl time.Duration) bool {
	return ttl <= 0 || now.Before(x.stored.Add(ttl))
}

func newTaskIndex(ttl time.Duration) *taskIndex {
	return &taskIndex{ttl: ttl, live: map[string]indexed{}, mine: map[string]indexed{}, owned: map[string]map[string]struct{}{},
		ready: make(chan struct{})}
}

// follow watches the bucket until ctx ends; ready is closed once the
// watch has delivered every value the bucket held.
func (x *taskIndex) follow(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch tasks: %w", err)
	}
	go func() {
		defer func() { _ = w.Stop() }()
		var once sync.Once
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

func (x *taskIndex) apply(kve jetstream.KeyValueEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	id := kve.Key()
	x.forget(id)
	var rec taskRecord
	if kve.Operation() != jetstream.KeyValuePut || json.Unmarshal(kve.Value(), &rec) != nil {
		return
	}
	if rec.Task.State == TaskPending || rec.Task.State == TaskRunning {
		x.live[id] = indexed{principal: rec.Principal, stored: kve.Created(), running: rec.Task.State == TaskRunning,
			holder: rec.Holder, expires: rec.LeaseExpires}
		x.own(rec.Principal, id)
	}
}

// forget drops task id from the index; x.mu is held.
func (x *taskIndex) forget(id string) {
	for _, m := range []map[string]indexed{x.live, x.mine} {
		if t, ok := m[id]; ok {
			delete(m, id)
			if ids := x.owned[t.principal]; ids != nil {
				delete(ids, id)
				if len(ids) == 0 {
					delete(x.owned, t.principal)
				}
			}
		}
	}
}

// own files id under principal; x.mu is held.
func (x *taskIndex) own(principal, id string) {
	ids := x.owned[principal]
	if ids == nil {
		ids = map[string]struct{}{}
		x.owned[principal] = ids
	}
	ids[id] = struct{}{}
}

// note counts a task this edge just created until the watch delivers it.
func (x *taskIndex) note(id, principal string, now time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, seen := x.live[id]; !seen {
		x.mine[id] = indexed{principal: principal, stored: now}
		x.own(principal, id)
	}
}

// count is how many live tasks principal holds; tasks the bucket's TTL
// has removed are dropped on the way.
func (x *taskIndex) count(principal string, now time.Time) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for id := range x.owned[principal] {
		t, ok := x.live[id]
		if !ok {
			t, ok = x.mine[id]
		}
		if ok && t.current(now, x.ttl) {
			n++
		} else {
			x.forget(id)
		}
	}
	return n
}

// lapsed are the running tasks whose lease ran out by now.
func (x *taskIndex) lapsed(now time.Time) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var ids []string
	for id, t := range x.live {
		if t.running && t.holder != "" && !now.Before(t.expires) && t.current(now, x.ttl) {
			ids = append(ids, id)
		}
	}
	return ids
}

// admit refuses a new task of principal past its quota.
func (e *Edge) admit(ctx context.Context, principal string) *Error {
	if e.opts.maxLiveTasks <= 0 {
		return nil
	}
	wait := time.NewTimer(indexWait)
	defer wait.Stop()
	select {
	case <-e.index.ready:
	case <-wait.C:
		return rpcErr(CodeInternal, nil, "chio: the task index is still reading the tasks bucket; retry")
	case <-ctx.Done():
		return rpcErr(CodeInternal, nil, "chio: the task index is not ready: %v", ctx.Err())
	}
	if n := e.index.count(principal, time.Now()); n >= e.opts.maxLiveTasks {
		return rpcErr(CodeResourceExhausted, map[string]any{"liveTasks": n, "limit": e.opts.maxLiveTasks},
			"%v: principal %s holds %d live tasks (limit %d); resume or cancel some first", errTaskQuota, abbreviate(principal), n, e.opts.maxLiveTasks)
	}
	return nil
}

// abbreviate shortens a principal for an error message.
func abbreviate(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:61] + "..."
}

// leaseKeeper renews a running task's lease until stopped.
type leaseKeeper struct {
	stopc chan struct{}
	done  chan struct{}
	rev   uint64
	lost  bool // another replica took the task over: write nothing more
}

// keepLease renews rec's lease (at revision rev) every third of the lease
// until stop, or until the edge ends: then the lease runs out and another
// replica's sweep takes the task over.
func (e *Edge) keepLease(rec taskRecord, rev uint64) *leaseKeeper {
	k := &leaseKeeper{stopc: make(chan struct{}), done: make(chan struct{}), rev: rev}
	go func() {
		defer close(k.done)
		t := time.NewTicker(e.opts.taskLease / 3)
		defer t.Stop()
		for {
			select {
			case <-k.stopc:
				return
			case <-e.life.Done():
				return
			case <-t.C:
			}
			r := rec
			r.LeaseExpires = time.Now().UTC().Add(e.opts.taskLease)
			// Not cut by stop: a renewal whose answer were lost would
			// leave the revision unknown.
			ctx, cancel := context.WithTimeout(context.Background(), e.opts.taskLease/3)
			next, err := e.putTask(ctx, &r, k.rev)
			cancel()
			switch {
			case err == nil:
				k.rev, rec = next, r
			case errors.Is(err, errLostRace):
				k.lost = true
				return
			default:
				e.log.Warn("acp: task lease not renewed", "task_id", rec.Task.ID, "err", err)
			}
		}
	}()
	return k
}

// stop ends the renewals and returns the task's revision and whether
// another replica took it over.
func (k *leaseKeeper) stop() (uint64, bool) {
	close(k.stopc)
	<-k.done
	return k.rev, k.lost
}

// sweep runs until the edge closes, every third of the lease, taking
// over running tasks whose edge stopped renewing their lease (it died,
// or was closed mid-run): each is claimed by compare-and-set, so exactly
// one replica resumes it, and run again under the capability its resume
// stored, as a new attempt with a receipt of its own (the tool may thus
// run a second time if the first edge died while it ran). A task whose
// capability is honoured only with its holder's proof of possession
// cannot be run by anyone else: it is failed. Every replica sweeps; it
// costs nothing while no lease has run out (the index is in memory).
func (e *Edge) sweep() {
	t := time.NewTicker(e.opts.taskLease / 3)
	defer t.Stop()
	for {
		select {
		case <-e.life.Done():
			return
		case <-t.C:
		}
		for _, id := range e.index.lapsed(time.Now()) {
			e.takeOver(e.life, id)
		}
	}
}

// takeOver claims task id if its lease still ran out, and runs it.
func (e *Edge) takeOver(ctx context.Context, id string) {
	kve, err := e.tasks.Get(ctx, id)
	if err != nil {
		return
	}
	var rec taskRecord
	if json.Unmarshal(kve.Value(), &rec) != nil {
		return
	}
	now := time.Now().UTC()
	if rec.Task.State != TaskRunning || rec.Holder == "" || now.Before(rec.LeaseExpires) {
		return
	}
	b, published := e.table().byID[rec.Task.CapabilityID]
	if rec.Token == "" || !published || e.proofBound(ctx, rec.Token) {
		e.abandon(ctx, &rec, kve.Revision(), published)
		return
	}
	from := rec.Holder
	rec.Holder, rec.LeaseExpires, rec.Attempt, rec.Task.UpdatedAt = e.id, now.Add(e.opts.taskLease), rec.Attempt+1, now
	rev, err := e.putTask(ctx, &rec, kve.Revision())
	if err != nil {
		return // another replica took it first, or the bucket is unreachable: the next sweep looks again
	}
	e.log.Info("acp: taking over a task whose edge stopped", "task_id", id, "from", from, "attempt", rec.Attempt)
	c := &call{token: rec.Token, method: MethodResume}
	e.runs.Add(1)
	go func() {
		defer e.runs.Done()
		if _, rerr := e.run(context.WithoutCancel(ctx), c, b, &rec, rev); rerr != nil && rerr.Code != CodeDenied && rerr.Code != CodeToolFailed {
			e.log.Warn("acp: taken-over task", "task_id", id, "err", rerr.Message)
		}
	}()
}

// proofBound: tok is honoured only with its holder's proof of possession,
// which no edge but the one that took the resume ever had.
func (e *Edge) proofBound(ctx context.Context, tok string) bool {
	_, d := e.kernel.Identify(ctx, tok, nil)
	return d != nil && d.Guard == kernel.StepDPoP
}

// abandon fails a running task whose edge stopped and that no other may
// run; compare-and-set decides which sweep writes it.
func (e *Edge) abandon(ctx context.Context, rec *taskRecord, rev uint64, published bool) {
	why := "the edge running this task stopped, and it cannot be resumed without its holder's proof of possession"
	if !published {
		why = fmt.Sprintf("the edge running this task stopped, and capability %q is no longer published", rec.Task.CapabilityID)
	}
	rec.Task.State, rec.Task.UpdatedAt = TaskFailed, time.Now().UTC()
	rec.Error = rpcErr(CodeTaskState, nil, "task %s: %s", rec.Task.ID, why)
	rec.Holder, rec.Token, rec.LeaseExpires = "", "", time.Time{}
	if _, err := e.putTask(ctx, rec, rev); err == nil {
		e.log.Info("acp: failed a task whose edge stopped", "task_id", rec.Task.ID)
	}
}

// Close ends the edge's part in its tasks: lease renewals stop, the runs
// in progress are cut and their tasks left running for another replica's
// sweep to take over when their leases run out (as if this process had
// died), and the sweep and the task index stop. Serving after Close is not
// supported.
func (e *Edge) Close() {
	e.stop()
	e.runs.Wait()
}
