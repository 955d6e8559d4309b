package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// Limits of the task stream and of each owner. A caller must not be able
// to grow the stream without bound: the stream has hard caps, enforced by
// the server, and new tasks are refused before they are reached, so that
// the tasks already accepted can still be written to their end.
const (
	// DefaultMaxStreamBytes: no byte cap of its own by default. A
	// stream's MaxBytes reserves that much of the server's storage, and
	// the server refuses a stream whose cap exceeds what it has, so the
	// right figure depends on the deployment (WithMaxStreamBytes); the
	// server's own storage limit stays the backstop.
	DefaultMaxStreamBytes = 0
	// DefaultMaxStreamMsgs caps its commits: at a few hundred bytes to a
	// few KiB per commit, tens of GiB or more.
	DefaultMaxStreamMsgs = 100_000_000
	// DefaultMaxCommitsPerTask caps one task's commits, server-side; it
	// is above what DefaultMaxTaskBytes lets a task hold in practice.
	DefaultMaxCommitsPerTask = 100_000
	// DefaultMaxLiveTasksPerOwner bounds the tasks one principal holds
	// that are not terminal (submitted, working, or waiting for input).
	DefaultMaxLiveTasksPerOwner = 1000

	// admitHeadroom is the share of the stream's caps that new tasks may
	// fill: the rest is kept for the commits of tasks already accepted
	// (their status, artifacts and results), which the full stream would
	// otherwise refuse, leaving them stuck half way.
	admitHeadroomPct = 90
	// streamInfoTTL is how long AdmitOwner reuses the stream's state.
	streamInfoTTL = time.Second
	// indexWait bounds how long AdmitOwner waits for the live-task index
	// to read the stream (at start): a caller is answered, not held.
	indexWait = 10 * time.Second
)

var (
	// ErrQuotaExceeded means the owner already holds the maximum number
	// of live tasks; nothing was written.
	ErrQuotaExceeded = errors.New("task quota exceeded")
	// ErrStoreFull means the task stream is near its caps and takes no
	// new tasks (the tasks it holds are still written to their end).
	ErrStoreFull = errors.New("task store full")
)

// jsStoreFailed is the JetStream API error code of a message the stream
// refused to store; at a DiscardNew cap its description names the cap.
const jsStoreFailed jetstream.ErrorCode = 10077

// atLimit is the error of a commit the stream refused at one of its
// caps: ErrTooLarge at the task's own, ErrStoreFull at the stream's; nil
// for any other refusal.
func atLimit(e *jetstream.APIError) error {
	if e.ErrorCode != jsStoreFailed {
		return nil
	}
	switch d := e.Description; {
	case strings.Contains(d, "per subject"):
		return ErrTooLarge
	case strings.Contains(d, "maximum messages"), strings.Contains(d, "maximum bytes"):
		return ErrStoreFull
	}
	return nil
}

// withLimits is cfg with the store's caps: DiscardNew (from the schema)
// refuses a write past them rather than dropping history, and the
// per-task cap refuses a task's next commit (DiscardNewPerSubject) rather
// than drop its first ones, which would lose the task.
func withLimits(cfg jetstream.StreamConfig, o *options) jetstream.StreamConfig {
	cfg.MaxBytes = o.maxStreamBytes
	cfg.MaxMsgs = o.maxStreamMsgs
	cfg.MaxMsgsPerSubject = o.maxCommitsPerTask
	cfg.DiscardNewPerSubject = o.maxCommitsPerTask > 0
	return cfg
}

// AdmitOwner says whether owner may start another task: ErrQuotaExceeded
// when its principal (owner.Subject, over all tenants) holds the maximum
// number of live tasks, ErrStoreFull when the stream is past the share of
// its caps new tasks may use. The edge asks before accepting a new task,
// before any tool runs, so a refusal costs nothing but the answer.
//
// Live tasks are counted from the stream itself (the summary of each
// task's last commit, followed in memory), so the quota holds across
// replicas: every replica sees every task. It may be exceeded by the
// tasks being accepted at the same moment, on any replica, that the
// count has not seen yet (each replica counts its own as soon as they
// are written).
func (s *Store) AdmitOwner(ctx context.Context, owner Owner) error {
	if err := s.admitStream(ctx); err != nil {
		return err
	}
	if s.opts.maxLiveTasks <= 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, indexWait)
	defer cancel()
	idx, err := s.owners(wctx)
	if err != nil {
		return fmt.Errorf("admit task: count live tasks: %w", err)
	}
	if n := idx.count(owner.Subject); n >= s.opts.maxLiveTasks {
		return fmt.Errorf("%w: principal %s holds %d live tasks (limit %d); cancel or finish some first",
			ErrQuotaExceeded, abbreviate(owner.Subject), n, s.opts.maxLiveTasks)
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

// admitStream refuses a new task once the stream is past its admit share.
func (s *Store) admitStream(ctx context.Context) error {
	if s.opts.maxStreamBytes <= 0 && s.opts.maxStreamMsgs <= 0 {
		return nil
	}
	s.limits.mu.Lock()
	defer s.limits.mu.Unlock()
	if now := time.Now(); now.After(s.limits.at.Add(streamInfoTTL)) {
		info, err := s.stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("admit task: stream state: %w", err)
		}
		s.limits.state, s.limits.at = info.State, now
	}
	st := s.limits.state
	switch {
	case s.opts.maxStreamBytes > 0 && st.Bytes*100 >= uint64(s.opts.maxStreamBytes)*admitHeadroomPct:
		return fmt.Errorf("%w: the task stream holds %d bytes, %d%% of its %d-byte cap is for new tasks", ErrStoreFull, st.Bytes, admitHeadroomPct, s.opts.maxStreamBytes)
	case s.opts.maxStreamMsgs > 0 && st.Msgs*100 >= uint64(s.opts.maxStreamMsgs)*admitHeadroomPct:
		return fmt.Errorf("%w: the task stream holds %d commits, %d%% of its %d-commit cap is for new tasks", ErrStoreFull, st.Msgs, admitHeadroomPct, s.opts.maxStreamMsgs)
	}
	return nil
}

// streamLimits caches the stream's state for admitStream.
type streamLimits struct {
	mu    sync.Mutex
	at    time.Time
	state jetstream.StreamState
}

// owners is the live-task index, started on first use and again after it
// failed, ready once it has read every task's last commit.
func (s *Store) owners(ctx context.Context) (*ownerIndex, error) {
	s.ownersMu.Lock()
	idx := s.ownerIdx
	if idx == nil || idx.failed() {
		idx = &ownerIndex{live: map[string]liveTask{}, counts: map[string]int{}, mine: map[string]liveTask{}, ready: make(chan struct{})}
		if err := idx.follow(s); err != nil {
			s.ownersMu.Unlock()
			return nil, err
		}
		s.ownerIdx = idx
	}
	s.ownersMu.Unlock()
	select {
	case <-idx.ready:
		if idx.failed() {
			return nil, idx.error()
		}
		return idx, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// noteStarted counts a task this store just wrote (t, its first commit),
// until the index reads that commit. A task that ended in its first
// commit is not live, and one the index has already read is counted
// there: the follow can deliver the commit before its writer has the ack.
func (s *Store) noteStarted(t *Task, owner Owner) {
	if t.State.Terminal() {
		return
	}
	s.ownersMu.Lock()
	idx := s.ownerIdx
	s.ownersMu.Unlock()
	if idx != nil {
		idx.note(t.ID, owner.Subject, t.Seq)
	}
}

// ownerIndex counts the live tasks of each principal from the summary
// headers of the task stream's last commits.
type ownerIndex struct {
	mu     sync.Mutex
	live   map[string]liveTask // task id → its principal and last sequence
	counts map[string]int      // principal → live tasks
	mine   map[string]liveTask // tasks written here, at a sequence not yet read
	read   uint64              // the highest stream sequence read
	ready  chan struct{}
	once   sync.Once
	err    error
}

type liveTask struct {
	subject string
	seq     uint64
}

func (x *ownerIndex) failed() bool { x.mu.Lock(); defer x.mu.Unlock(); return x.err != nil }
func (x *ownerIndex) error() error { x.mu.Lock(); defer x.mu.Unlock(); return x.err }

func (x *ownerIndex) count(subject string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.counts[subject]
	for id, t := range x.mine {
		if t.seq <= x.read {
			// Read since (the follow is in stream order), so counted by
			// the index if still live; apply normally removes it first.
			delete(x.mine, id)
			continue
		}
		if t.subject == subject {
			n++
		}
	}
	return n
}

func (x *ownerIndex) note(id, subject string, seq uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err == nil && seq > x.read {
		x.mine[id] = liveTask{subject: subject, seq: seq}
	}
}

// follow starts following the stream's last commit per task, then every
// new one, for as long as the connection lasts.
func (x *ownerIndex) follow(s *Store) error {
	ctx := context.Background() // the index lives as long as the store's connection
	cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{StreamSubjects},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return fmt.Errorf("follow task owners: create consumer: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("follow task owners: consumer info: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow task owners: consume: %w", err)
	}
	if info.NumPending == 0 {
		x.once.Do(func() { close(x.ready) })
	}
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				x.mu.Lock()
				x.err = fmt.Errorf("task owner index stopped: %w", err)
				x.mu.Unlock()
				x.once.Do(func() { close(x.ready) })
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) && !errors.Is(err, jetstream.ErrConnectionClosed) {
					s.opts.log.Warn("taskstore: task owner index stopped; it restarts on the next admission", "err", err)
				}
				return
			}
			x.apply(s, m)
			if meta, err := m.Metadata(); err == nil && meta.NumPending == 0 {
				x.once.Do(func() { close(x.ready) })
			}
		}
	}()
	return nil
}

func (x *ownerIndex) apply(s *Store, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	id, ok := strings.CutPrefix(m.Subject(), schemas.TasksSubjectPrefix)
	if !ok || !validID(id) {
		return
	}
	sm, err := s.readSummary(m.Subject(), meta.Sequence.Stream, m.Headers(), meta.Timestamp)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.read = max(x.read, meta.Sequence.Stream)
	delete(x.mine, id)
	prev, seen := x.live[id]
	if seen && prev.seq >= meta.Sequence.Stream {
		return // an older commit, redelivered after the consumer was reset
	}
	if seen {
		if x.counts[prev.subject]--; x.counts[prev.subject] <= 0 {
			delete(x.counts, prev.subject)
		}
		delete(x.live, id)
	}
	if err == nil && sm.State != "" && !sm.State.Terminal() {
		x.live[id] = liveTask{subject: sm.Subject, seq: meta.Sequence.Stream}
		x.counts[sm.Subject]++
	}
}
