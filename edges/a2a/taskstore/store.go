package taskstore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/schemas"
)

// JetStream names of the task store.
const (
	// StreamName is the stream holding every task's events.
	StreamName = schemas.TasksStream
	// StreamSubjects is its subject filter: one subject per task.
	StreamSubjects = schemas.TasksSubjects

	// DefaultMaxMessageBytes caps one commit (headers and body).
	DefaultMaxMessageBytes = 1 << 20
	// DefaultMaxTaskBytes caps the sum of a task's commits, so that a
	// Load stays bounded.
	DefaultMaxTaskBytes = 16 << 20
	// DefaultDuplicateWindow is the stream's publish dedup window.
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultMaxAttempts bounds how often Transition loads and appends
	// when other writers keep winning.
	DefaultMaxAttempts = 10
	// DefaultBatchThreshold is how many concurrent commits on distinct
	// tasks make group commit write them as one atomic batch: below it,
	// a batch's fixed cost on a single node (the server stages it in a
	// store of its own, ~4-6 ms here) exceeds the fsyncs it saves. 8, not
	// the 16 a quiet disk suggests: under load each fsync costs more (1-2
	// ms), and chio up at 64 clients measured 938/s at 8 against 728/s at
	// 16 (965/s at 4), with no difference at 16 clients and below.
	DefaultBatchThreshold = 8

	summaryHeader = schemas.HeaderTaskSummary
	commitVersion = schemas.TaskCommitVersion
)

// Subject is the subject of task id's events.
func Subject(id string) string { return schemas.TaskSubject(id) }

// StreamConfig is the configuration of StreamName, created or updated by
// Open: schemas.TasksStreamConfig, the one the projections also give it.
// Task events are kept until the stream is purged (a task's fold needs
// all of them, so there is no age limit that would cut a task in half);
// DiscardNew refuses writes rather than drop history when a limit set by
// an operator is reached. AllowDirect serves Load from any replica with
// one batched direct get. AllowAtomicPublish, on a single replica only,
// allows group commit (see the package doc).
func StreamConfig(replicas int, maxMessageBytes int32, duplicates time.Duration) jetstream.StreamConfig {
	return schemas.TasksStreamConfig(replicas, maxMessageBytes, duplicates)
}

// Option configures a Store. As everywhere in the project, an option only
// records its value; Open checks them all and refuses an invalid one with
// an ErrInvalidArgument naming it.
type Option func(*options)

type options struct {
	replicas        int
	maxMessageBytes int
	maxTaskBytes    int
	duplicates      time.Duration
	maxAttempts     int
	batchThreshold  int
	now             func() time.Time
	log             *slog.Logger
	replicaID       string
	signer          *schemas.EdgeSigner
	verifier        *schemas.EdgeVerifier
	// Limits (quota.go); 0 means none.
	maxStreamBytes    int64
	maxStreamMsgs     int64
	maxCommitsPerTask int64
	maxLiveTasks      int
}

// WithReplicas sets the stream's replica count (default 1).
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithMaxMessageBytes caps one commit (default DefaultMaxMessageBytes;
// never more than the connection's max payload).
func WithMaxMessageBytes(n int) Option { return func(o *options) { o.maxMessageBytes = n } }

// WithMaxTaskBytes caps the sum of a task's commits (default
// DefaultMaxTaskBytes).
func WithMaxTaskBytes(n int) Option { return func(o *options) { o.maxTaskBytes = n } }

// WithDuplicateWindow sets the stream's dedup window (default
// DefaultDuplicateWindow).
func WithDuplicateWindow(d time.Duration) Option { return func(o *options) { o.duplicates = d } }

// WithMaxAttempts bounds Transition's load-and-append attempts (default
// DefaultMaxAttempts).
func WithMaxAttempts(n int) Option { return func(o *options) { o.maxAttempts = n } }

// WithBatchThreshold sets how many commits must be waiting at once, on
// as many distinct tasks, before they are written as one atomic batch
// instead of one message each (default DefaultBatchThreshold; 0 never
// batches). It applies on a single-replica stream only: a replicated one
// already groups concurrent writes.
func WithBatchThreshold(n int) Option { return func(o *options) { o.batchThreshold = n } }

// WithClock sets the clock used for event times and lease checks.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithLogger sets the logger for events the store skips or cleanups that
// fail (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithReplicaID names the edge replica writing through the store (its
// edge id): each commit carries it in a schemas.HeaderReplica header, so
// readers can tell who wrote what. Default: no header.
func WithReplicaID(id string) Option { return func(o *options) { o.replicaID = id } }

// WithMaxStreamBytes caps the task stream's bytes (default
// DefaultMaxStreamBytes, none; 0: no cap). New tasks are refused
// (ErrStoreFull) at 90% of it, the rest kept for the tasks already
// accepted. The server reserves the cap from its storage and refuses to
// open the stream if it has less.
func WithMaxStreamBytes(n int64) Option { return func(o *options) { o.maxStreamBytes = n } }

// WithMaxStreamMsgs caps the task stream's commits (default
// DefaultMaxStreamMsgs; 0: no cap), with the same 90% rule.
func WithMaxStreamMsgs(n int64) Option { return func(o *options) { o.maxStreamMsgs = n } }

// WithMaxCommitsPerTask caps one task's commits, enforced by the server
// (default DefaultMaxCommitsPerTask; 0: no cap).
func WithMaxCommitsPerTask(n int64) Option { return func(o *options) { o.maxCommitsPerTask = n } }

// WithMaxLiveTasksPerOwner bounds the live (not terminal) tasks of one
// principal (default DefaultMaxLiveTasksPerOwner; 0: no bound); see
// AdmitOwner.
func WithMaxLiveTasksPerOwner(n int) Option { return func(o *options) { o.maxLiveTasks = n } }

// WithEdgeSigner signs every commit with the edge's key: readers with
// WithEdgeTrust (and the projections) honour only signed commits.
func WithEdgeSigner(sg *schemas.EdgeSigner) Option { return func(o *options) { o.signer = sg } }

// WithEdgeTrust makes every read honour only commits a certified edge
// signed (schemas.EdgeVerifier.CheckTaskCommit): a load skips the others'
// events and refuses a commit replayed onto another position, and a
// list, watch, follow or live index skips them, so a NATS credential
// alone cannot forge a task. Without it every commit is honoured.
func WithEdgeTrust(v *schemas.EdgeVerifier) Option { return func(o *options) { o.verifier = v } }

// check refuses an invalid option, naming it.
func (o *options) check() error {
	switch {
	case o.replicas < 1 || o.replicas > 5:
		return fmt.Errorf("%w: WithReplicas: replicas %d not in 1..5", ErrInvalidArgument, o.replicas)
	case o.maxMessageBytes < 4<<10 || o.maxMessageBytes > 64<<20:
		return fmt.Errorf("%w: WithMaxMessageBytes: max message bytes %d not in 4KiB..64MiB", ErrInvalidArgument, o.maxMessageBytes)
	case o.maxTaskBytes < 4<<10:
		return fmt.Errorf("%w: WithMaxTaskBytes: max task bytes %d below 4KiB", ErrInvalidArgument, o.maxTaskBytes)
	case o.duplicates < time.Second:
		return fmt.Errorf("%w: WithDuplicateWindow: duplicate window %s below 1s", ErrInvalidArgument, o.duplicates)
	case o.maxAttempts < 1:
		return fmt.Errorf("%w: WithMaxAttempts: max attempts %d below 1", ErrInvalidArgument, o.maxAttempts)
	case o.batchThreshold < 0 || o.batchThreshold > maxBatchMessages:
		return fmt.Errorf("%w: WithBatchThreshold: batch threshold %d not in 0..%d", ErrInvalidArgument, o.batchThreshold, maxBatchMessages)
	case o.now == nil:
		return fmt.Errorf("%w: WithClock: nil clock", ErrInvalidArgument)
	case o.log == nil:
		return fmt.Errorf("%w: WithLogger: nil logger", ErrInvalidArgument)
	case o.maxStreamBytes < 0 || (o.maxStreamBytes > 0 && o.maxStreamBytes < 1<<20):
		return fmt.Errorf("%w: WithMaxStreamBytes: %d is neither 0 (no cap) nor at least 1 MiB", ErrInvalidArgument, o.maxStreamBytes)
	case o.maxStreamMsgs < 0 || (o.maxStreamMsgs > 0 && o.maxStreamMsgs < 100):
		return fmt.Errorf("%w: WithMaxStreamMsgs: %d is neither 0 (no cap) nor at least 100", ErrInvalidArgument, o.maxStreamMsgs)
	case o.maxCommitsPerTask < 0 || (o.maxCommitsPerTask > 0 && o.maxCommitsPerTask < 16):
		return fmt.Errorf("%w: WithMaxCommitsPerTask: %d is neither 0 (no cap) nor at least 16", ErrInvalidArgument, o.maxCommitsPerTask)
	case o.maxLiveTasks < 0:
		return fmt.Errorf("%w: WithMaxLiveTasksPerOwner: %d is negative", ErrInvalidArgument, o.maxLiveTasks)
	}
	return nil
}

// Store keeps A2A tasks as event streams on JetStream. It holds no task
// state in memory: any number of Stores (one per replica) may share the
// stream, and every read folds what the stream holds. A Store is safe for
// concurrent use.
type Store struct {
	js        jetstream.JetStream
	nc        *nats.Conn
	stream    jetstream.Stream
	apiPrefix string
	opts      options
	readBatch int        // messages per direct get request
	batch     *committer // group commit; nil: one publish per commit

	limits   streamLimits
	ownersMu sync.Mutex
	ownerIdx *ownerIndex // live tasks per principal, started by AdmitOwner
}

// Open creates or updates the task stream and returns a Store on it.
func Open(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Store, error) {
	o := options{
		replicas:        1,
		maxMessageBytes: DefaultMaxMessageBytes,
		maxTaskBytes:    DefaultMaxTaskBytes,
		duplicates:      DefaultDuplicateWindow,
		maxAttempts:     DefaultMaxAttempts,
		batchThreshold:  DefaultBatchThreshold,
		now:             time.Now,
		log:             slog.Default(),

		maxStreamBytes:    DefaultMaxStreamBytes,
		maxStreamMsgs:     DefaultMaxStreamMsgs,
		maxCommitsPerTask: DefaultMaxCommitsPerTask,
		maxLiveTasks:      DefaultMaxLiveTasksPerOwner,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("open task store: %w", err)
	}
	if js == nil {
		return nil, fmt.Errorf("open task store: %w: nil JetStream", ErrInvalidArgument)
	}
	nc := js.Conn()
	if mp := int(nc.MaxPayload()); mp > 0 && mp < o.maxMessageBytes {
		o.maxMessageBytes = mp
	}
	o.maxTaskBytes = max(o.maxTaskBytes, o.maxMessageBytes)
	cfg := withLimits(StreamConfig(o.replicas, int32(o.maxMessageBytes), o.duplicates), &o)
	stream, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open task store: create stream %s: %w", StreamName, err)
	}
	jo := js.Options()
	prefix := jetstream.DefaultAPIPrefix
	switch {
	case jo.Domain != "":
		prefix = "$JS." + jo.Domain + ".API."
	case jo.APIPrefix != "":
		prefix = jo.APIPrefix
		if prefix[len(prefix)-1] != '.' {
			prefix += "."
		}
	}
	s := &Store{js: js, nc: nc, stream: stream, apiPrefix: prefix, opts: o, readBatch: defaultReadBatch}
	// Group commit only where the stream is what it pays off on: one
	// replica (whatever created it) that accepts atomic batches.
	if sc := stream.CachedInfo().Config; o.batchThreshold > 0 && sc.Replicas <= 1 && sc.AllowAtomicPublish {
		s.batch = newCommitter(js, o.batchThreshold, o.log)
	}
	if o.maxLiveTasks > 0 {
		// Warm the live-task index now, so the first send need not wait
		// for it to read the stream.
		go func() { _, _ = s.owners(context.WithoutCancel(ctx)) }()
	}
	return s, nil
}

// validID reports whether id is a canonical UUID string, the only form
// the store generates; anything else (which could also be a wildcard or a
// multi-token subject) cannot name a task.
func validID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && len(id) == 36 && u.String() == id
}

// maxContextID bounds a caller-chosen context id.
const maxContextID = 256

// Create starts a task owned by owner: a server-generated UUIDv7 id, the
// given context id (a UUIDv7 when empty), state submitted, the first
// message as history, and the deferred request to execute later (nil for
// none). Payloads are opaque JSON and may be nil.
func (s *Store) Create(ctx context.Context, owner Owner, contextID string, firstMessage, request, metadata json.RawMessage) (*Task, error) {
	return s.Start(ctx, NewTask{Owner: owner, ContextID: contextID, Message: firstMessage, Request: request, Metadata: metadata})
}

// NewTask is a task for Store.Start.
type NewTask struct {
	// ID is a UUIDv7 the caller generated, so that it can name the task
	// (in a decision event written at the same time) before it is stored;
	// empty means the store generates one.
	ID        string
	Owner     Owner
	ContextID string // a UUIDv7 when empty
	Message   json.RawMessage
	Request   json.RawMessage
	Metadata  json.RawMessage
	// Then are further events of the task's first commit, typically its
	// working status and its claim: one write where Create and a
	// Transition take two. A claim may carry the ExecutionID to use.
	Then []Event
}

// Admits reports whether Start will take nt as far as can be told without
// encoding it: owner and context id valid, and its payloads, with room to
// spare for the commit around them, within the message limit. A task it
// refuses may still fit (Start says exactly); one it admits does, so a
// caller may announce the task before writing it.
func (s *Store) Admits(nt NewTask) bool {
	if validateOwner(nt.Owner) != nil || len(nt.ContextID) > maxContextID || (nt.ID != "" && !validID(nt.ID)) {
		return false
	}
	n := len(nt.Message) + len(nt.Request) + len(nt.Metadata) + len(nt.Owner.Subject) + len(nt.Owner.Tenant) + len(nt.ContextID)
	for _, e := range nt.Then {
		n += len(e.Message) + len(e.Request) + len(e.Metadata) + len(e.Artifact) + 512
	}
	// JSON escaping can at most double a string; the commit's own fields
	// and headers (summary, ids, times) take well under 4 KiB.
	return 2*n+4<<10 <= s.opts.maxMessageBytes && 2*n+4<<10 <= s.opts.maxTaskBytes
}

// Start stores a new task as one commit: created, then nt.Then. It is
// Create with more in the first write.
func (s *Store) Start(ctx context.Context, nt NewTask) (*Task, error) {
	if err := validateOwner(nt.Owner); err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	if len(nt.ContextID) > maxContextID {
		return nil, fmt.Errorf("create task: %w: context id longer than %d bytes", ErrInvalidArgument, maxContextID)
	}
	id := nt.ID
	if id == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("create task: generate id: %w", err)
		}
		id = u.String()
	} else if !validID(id) {
		return nil, fmt.Errorf("create task: %w: id %q is not a UUID", ErrInvalidArgument, id)
	}
	contextID := nt.ContextID
	if contextID == "" {
		cid, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("create task: generate context id: %w", err)
		}
		contextID = cid.String()
	}
	owner := nt.Owner
	events := append([]Event{{Type: EventCreated, Owner: &owner, ContextID: contextID, Message: nt.Message, Request: nt.Request, Metadata: nt.Metadata}}, nt.Then...)
	var mine []string
	for attempt := range s.opts.maxAttempts {
		if attempt > 0 { // the outcome of the last append is unknown: read it back
			got, err := s.fold(ctx, id)
			switch {
			case err == nil && landed(got, mine):
				s.noteStarted(got, owner)
				return got, nil
			case err == nil:
				return nil, fmt.Errorf("create task: %w: id %s taken", ErrConflict, id)
			case !errors.Is(err, ErrNotFound):
				return nil, fmt.Errorf("create task: %w", err)
			}
		}
		cid := uuid.NewString()
		mine = append(mine, cid)
		next, err := s.commit(ctx, &Task{ID: id}, events, cid)
		var unknown *unknownOutcomeError
		switch {
		case err == nil:
			s.noteStarted(next, owner)
			return next, nil
		case errors.As(err, &unknown) && attempt+1 < s.opts.maxAttempts:
			s.opts.log.Warn("taskstore: append outcome unknown; reading back", "task", id, "err", err)
		case errors.Is(err, ErrConflict) && attempt+1 < s.opts.maxAttempts:
		default:
			return nil, fmt.Errorf("create task: %w", err)
		}
	}
	return nil, fmt.Errorf("create task: %w", ErrConflict)
}

// landed reports whether one of the commits in mine is part of t.
func landed(t *Task, mine []string) bool {
	for _, id := range mine {
		if slices.Contains(t.commitIDs, id) {
			return true
		}
	}
	return false
}

// Load returns the fold of task id's events. A task owned by anyone but
// owner is ErrNotFound, exactly like a missing one.
func (s *Store) Load(ctx context.Context, id string, owner Owner) (*Task, error) {
	t, err := s.load(ctx, id, owner)
	if err != nil {
		return nil, fmt.Errorf("load task: %w", err)
	}
	return t, nil
}

func (s *Store) load(ctx context.Context, id string, owner Owner) (*Task, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	t, err := s.fold(ctx, id)
	if err != nil {
		return nil, err
	}
	if t.Owner != owner {
		return nil, ErrNotFound
	}
	return t, nil
}

// fold reads every commit of task id and folds them, skipping refused
// events (see Task.apply).
func (s *Store) fold(ctx context.Context, id string) (*Task, error) {
	t := &Task{ID: id}
	subject := Subject(id)
	err := s.readCommits(ctx, subject, func(seq uint64, h nats.Header, data []byte) error {
		prev, ok := s.authentic(subject, seq, h, data, schemas.StoredTime(h))
		var c commit
		switch {
		case !ok: // logged
		case prev >= 0 && uint64(prev) != t.Seq:
			s.opts.log.Warn("taskstore: skipping a commit replayed onto another position", "task", id, "seq", seq, "signed_prev", prev, "prev", t.Seq)
		case json.Unmarshal(data, &c) != nil:
			s.opts.log.Warn("taskstore: skipping undecodable commit", "task", id, "seq", seq)
		default:
			for i := range c.Events {
				if err := t.apply(&c.Events[i]); err != nil {
					s.opts.log.Warn("taskstore: skipping refused event", "task", id, "seq", seq, "err", err)
				}
			}
		}
		t.Seq = seq
		t.size += len(data)
		t.commitIDs = append(t.commitIDs, h.Get(jetstream.MsgIDHeader))
		return nil
	})
	if err != nil {
		return nil, err
	}
	if t.State == "" {
		return nil, ErrNotFound
	}
	return t, nil
}

// Transition is the primitive every change goes through. It loads the
// task, calls fn with a copy of it, and appends the events fn returns as
// one commit that the stream accepts only if no other commit landed on
// the task since the load (expected last subject sequence). When another
// writer won, it reloads and calls fn again, up to the configured number
// of attempts (then ErrConflict); fn must therefore decide from the task
// it is given and have no side effects it cannot repeat. The events are
// checked against the task first: one that is refused (an event after a
// terminal state is ErrAlreadyTerminal) fails the transition and nothing
// is written. No events means no write; the current task is returned.
// An error from fn is returned as is (wrapped).
func (s *Store) Transition(ctx context.Context, id string, owner Owner, fn func(t *Task) ([]Event, error)) (*Task, error) {
	t, err := s.transition(ctx, id, owner, fn, nil)
	if err != nil {
		return t, fmt.Errorf("transition task %s: %w", id, err)
	}
	return t, nil
}

// TransitionFrom is Transition starting from t, a task as this store
// returned it (from Load, Transition or TransitionFrom): it commits against
// t without reading the task again, and only when another writer moved the
// task on does it reload and retry like Transition. A writer appending a
// long run of events (a streaming tool's chunks) keeps each append O(1)
// instead of folding the whole task every time.
func (s *Store) TransitionFrom(ctx context.Context, t *Task, fn func(t *Task) ([]Event, error)) (*Task, error) {
	events, err := fn(t.clone())
	if err != nil {
		return t, fmt.Errorf("transition task %s: %w", t.ID, err)
	}
	if len(events) == 0 {
		return t, nil
	}
	cid := uuid.NewString()
	next, err := s.commit(ctx, t, events, cid)
	var unknown *unknownOutcomeError
	var mine []string
	switch {
	case err == nil:
		return next, nil
	case errors.Is(err, ErrConflict):
	case errors.As(err, &unknown):
		mine = []string{cid} // it may have landed: the reload says
	default:
		return t, fmt.Errorf("transition task %s: %w", t.ID, err)
	}
	next, err = s.transition(ctx, t.ID, t.Owner, fn, mine)
	if err != nil {
		return next, fmt.Errorf("transition task %s: %w", t.ID, err)
	}
	return next, nil
}

func (s *Store) transition(ctx context.Context, id string, owner Owner, fn func(t *Task) ([]Event, error), mine []string) (*Task, error) {
	var last *Task // mine: ids of this transition's commits whose outcome is unknown
	for attempt := range s.opts.maxAttempts {
		if attempt > 0 {
			if err := conflictRetry.Wait(ctx, attempt); err != nil {
				return last, err
			}
		}
		t, err := s.load(ctx, id, owner)
		if err != nil {
			return nil, err
		}
		if landed(t, mine) { // an append whose ack was lost did land
			return t, nil
		}
		last = t
		events, err := fn(t.clone())
		if err != nil {
			return t, err
		}
		if len(events) == 0 {
			return t, nil
		}
		cid := uuid.NewString()
		next, err := s.commit(ctx, t, events, cid)
		var unknown *unknownOutcomeError
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, ErrConflict):
		case errors.As(err, &unknown) && attempt+1 < s.opts.maxAttempts:
			// Reload: if it landed, the next load says so; if it lands
			// later, it fails its expected sequence against whatever
			// lands first.
			s.opts.log.Warn("taskstore: append outcome unknown; reading back", "task", id, "err", err)
			mine = append(mine, cid)
		default:
			return t, err
		}
	}
	return last, ErrConflict
}

// unknownOutcomeError is a publish that got no acknowledgement (a timeout,
// a lost connection): the commit may or may not have landed.
type unknownOutcomeError struct{ err error }

func (e *unknownOutcomeError) Error() string { return "append outcome unknown: " + e.err.Error() }
func (e *unknownOutcomeError) Unwrap() error { return e.err }

// conflictRetry paces the retries of a transition that lost its
// compare-and-set: short and jittered, since the winner's commit is there
// to read and contending replicas must not retry in lockstep.
var conflictRetry = backoff.Policy{Base: 2 * time.Millisecond, Cap: 50 * time.Millisecond}

// commit is one message on a task's subject: the events of one
// transition, written atomically.
type commit = schemas.TaskCommit

// summary is the task's state after a commit, carried by that commit in
// summaryHeader, so that the last message of every task subject
// describes the task (List reads only those headers). Generation, the
// task's generation after the commit, lets Follow number the commit's
// mutations without folding the task (see the package doc); commits
// written before it was added lack it (0).
type summary struct {
	Subject      string    `json:"o"`
	Tenant       string    `json:"n,omitempty"`
	ContextID    string    `json:"c"`
	State        State     `json:"s"`
	StatusTime   time.Time `json:"t"`
	ClaimedBy    string    `json:"cb,omitempty"`
	ClaimExpires time.Time `json:"ce,omitzero"`
	HasRequest   bool      `json:"r,omitempty"`
	Created      time.Time `json:"cr"`
	Generation   int64     `json:"g,omitempty"`
}

func summarize(t *Task) summary {
	return summary{
		Subject: t.Owner.Subject, Tenant: t.Owner.Tenant, ContextID: t.ContextID,
		State: t.State, StatusTime: t.StatusTime, ClaimedBy: t.ClaimedBy, ClaimExpires: t.ClaimExpires,
		HasRequest: len(t.Request) > 0, Created: t.Created, Generation: t.Generation,
	}
}

func encodeSummary(sm summary) (string, error) {
	b, err := json.Marshal(sm)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeSummary(v string) (summary, error) {
	var sm summary
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return sm, err
	}
	err = json.Unmarshal(b, &sm)
	return sm, err
}

// commit stamps events, checks them against t (a task with no state is
// a new one), and appends them as one message expecting t.Seq as the
// subject's last sequence. It returns the task after the events, or
// ErrConflict if another commit landed first.
func (s *Store) commit(ctx context.Context, t *Task, events []Event, commitID string) (*Task, error) {
	now := s.opts.now().UTC()
	next := t.clone()
	stamped := make([]Event, len(events))
	for i, e := range events {
		e.Time, e.Seq = now, 0
		if e.Type == EventCreated && t.State != "" {
			return nil, fmt.Errorf("%w: created on an existing task", ErrInvalidEvent)
		}
		if e.Type == EventClaimed {
			if err := s.stampClaim(next, &e); err != nil {
				return nil, err
			}
		}
		if err := next.apply(&e); err != nil {
			return nil, err
		}
		stamped[i] = e
	}
	body, err := json.Marshal(commit{V: commitVersion, Events: stamped})
	if err != nil {
		return nil, fmt.Errorf("%w: encode commit: %v", ErrInvalidEvent, err)
	}
	sum, err := encodeSummary(summarize(next))
	if err != nil {
		return nil, fmt.Errorf("encode summary: %w", err)
	}
	msg := &nats.Msg{Subject: Subject(t.ID), Data: body, Header: nats.Header{}}
	msg.Header.Set(summaryHeader, sum)
	if s.opts.replicaID != "" {
		msg.Header.Set(schemas.HeaderReplica, s.opts.replicaID)
	}
	// Headers the client adds: the message id and the expected sequence.
	size := len(body) + len(summaryHeader) + len(sum) + len(jetstream.MsgIDHeader) + len(commitID) +
		len(jetstream.ExpectedLastSubjSeqHeader) + 20 + 64 + len(schemas.HeaderReplica) + len(s.opts.replicaID)
	if sg := s.opts.signer; sg != nil {
		// It follows t.Seq, which the stream enforces on the write.
		sg.SignTaskCommit(msg.Subject, msg.Header, body, t.Seq)
		size += sg.TaskCommitSignatureBytes()
	}
	if size > s.opts.maxMessageBytes {
		return nil, fmt.Errorf("%w: commit of %d bytes exceeds the %d-byte message limit", ErrTooLarge, size, s.opts.maxMessageBytes)
	}
	if m := s.opts.maxCommitsPerTask; m > 0 && int64(len(t.commitIDs)) >= m-1 && !next.State.Terminal() {
		// The stream refuses a task's commit past m; the last one is kept
		// for the commit that ends the task, so it can always end.
		return nil, fmt.Errorf("%w: task has %d commits, limit %d (the last kept for its end)", ErrTooLarge, len(t.commitIDs), m)
	}
	if t.size+len(body) > s.opts.maxTaskBytes {
		return nil, fmt.Errorf("%w: task would grow to %d bytes, limit %d", ErrTooLarge, t.size+len(body), s.opts.maxTaskBytes)
	}
	seq, err := s.append(ctx, msg, commitID, t.Seq, size)
	if err != nil {
		return nil, err
	}
	next.Seq = seq
	next.size += len(body)
	next.commitIDs = append(next.commitIDs, commitID)
	return next, nil
}

// stampClaim fills in the attempt and execution id of a claim on t: a
// renewal by the holder of a live lease keeps the attempt, anyone else
// starts the next one; the execution id is kept once set. The first claim
// may bring its own (the receipt id of a call whose decision is written
// with the claim), else one is generated.
func (s *Store) stampClaim(t *Task, e *Event) error {
	if e.ReplicaID == "" {
		return fmt.Errorf("%w: claim without a replica id", ErrInvalidEvent)
	}
	now := s.opts.now()
	switch {
	case t.ClaimedBy == e.ReplicaID && t.Claimed(now):
		e.Attempt = t.Attempt
	case t.Claimed(now):
		return fmt.Errorf("%w: claimed by %s until %s", ErrInvalidEvent, t.ClaimedBy, t.ClaimExpires.Format(time.RFC3339Nano))
	default:
		e.Attempt = t.Attempt + 1
	}
	if t.ExecutionID != "" {
		e.ExecutionID = t.ExecutionID
	} else if e.ExecutionID != "" && !validID(e.ExecutionID) {
		return fmt.Errorf("%w: execution id %q is not a UUID", ErrInvalidEvent, e.ExecutionID)
	}
	if e.ExecutionID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("generate execution id: %w", err)
		}
		e.ExecutionID = id.String()
	}
	return nil
}

// Claim takes the execution lease of a task for replicaID until now +
// lease. It wins only if the task is submitted or working (not terminal,
// not waiting for the client) and no other replica holds an unexpired
// lease; the holder itself may call it again to renew. Because the claim
// is appended with the expected last sequence, two replicas claiming at
// once cannot both win: the second one's append conflicts, it reloads
// and sees the claim. Lease semantics: a lease that expired (the holder
// died or stalled) may be taken by another replica, which records the
// next Attempt with the same ExecutionID; the execution is then at most
// once per lease, and the tool call must be made idempotent on
// ExecutionID. Leases compare against the local clock, so they must be
// much longer than the clock skew between replicas. It returns the task
// and whether replicaID holds the lease now.
func (s *Store) Claim(ctx context.Context, id string, owner Owner, replicaID string, lease time.Duration) (*Task, bool, error) {
	if replicaID == "" || lease <= 0 {
		return nil, false, fmt.Errorf("claim task %s: %w: empty replica id or non-positive lease", id, ErrInvalidArgument)
	}
	won := false
	t, err := s.Transition(ctx, id, owner, func(t *Task) ([]Event, error) {
		now := s.opts.now()
		won = false
		if t.State != StateSubmitted && t.State != StateWorking {
			return nil, nil
		}
		if t.Claimed(now) && t.ClaimedBy != replicaID {
			return nil, nil
		}
		won = true
		return []Event{ClaimEvent(replicaID, now.Add(lease).UTC())}, nil
	})
	if err != nil {
		return t, false, fmt.Errorf("claim: %w", err)
	}
	return t, won, nil
}

// Cancel ends a non-terminal task as canceled and returns it. A task
// already terminal (canceled included) is ErrNotCancelable, returned with
// the task so that a caller treating cancel as idempotent can answer
// with it. A completion racing with the cancel loses: once canceled, the
// fold refuses it (ErrAlreadyTerminal) and nothing of it is written.
func (s *Store) Cancel(ctx context.Context, id string, owner Owner) (*Task, error) {
	t, err := s.Transition(ctx, id, owner, func(t *Task) ([]Event, error) {
		if t.State.Terminal() {
			return nil, ErrNotCancelable
		}
		return []Event{CancelEvent(nil)}, nil
	})
	if err != nil {
		return t, fmt.Errorf("cancel: %w", err)
	}
	return t, nil
}
