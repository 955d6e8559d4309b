package push

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/backoff"
)

// JetStream names and defaults of the config store.
const (
	// Bucket is the KV bucket holding every push config.
	Bucket = "CHIO_A2A_PUSH"
	// bucketStream and bucketSubjectPrefix are the bucket's backing
	// stream and subject prefix (the KV layout of nats.go).
	bucketStream        = "KV_" + Bucket
	bucketSubjectPrefix = "$KV." + Bucket + "."

	// DefaultMaxConfigsPerTask bounds the configs of one task (all owners).
	DefaultMaxConfigsPerTask = 16
	// DefaultMaxConfigsPerOwner bounds the configs one owner holds over
	// all its tasks: a task's configs go when it ends, so only a caller
	// keeping thousands of tasks open with webhooks on each reaches it.
	DefaultMaxConfigsPerOwner = 4096
	// DefaultClosedTaskTTL is how long the closed mark CloseTask (or DeleteTask) leaves
	// is kept: notifications of the task still queued within it are
	// delivered, later ones dropped.
	DefaultClosedTaskTTL = 24 * time.Hour
	// DefaultPageSize and MaxPageSize are List's page sizes.
	DefaultPageSize = 50
	MaxPageSize     = 100

	// maxValueBytes caps one stored config.
	maxValueBytes = 32 << 10
)

// BucketConfig is the configuration of Bucket, created or updated by
// OpenStore: file storage, one value per key (history 1), and per-key
// TTLs, used for the closed marks of tasks (LimitMarkerTTL is what
// enables them; it is also how long the server keeps the marker it
// leaves when a TTL expires).
func BucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         Bucket,
		Description:    "Chio A2A push notification configs, <task>.<owner>.<config>",
		History:        1,
		MaxValueSize:   maxValueBytes,
		Storage:        jetstream.FileStorage,
		Replicas:       max(replicas, 1),
		LimitMarkerTTL: time.Minute,
	}
}

// StoreOption configures a Store. As everywhere in the project, an option
// only records its value; OpenStore checks them all and refuses an invalid
// one with an ErrInvalidArgument naming it.
type StoreOption func(*storeOptions)

type storeOptions struct {
	replicas   int
	maxConfigs int
	maxOwner   int
	closedTTL  time.Duration
	log        *slog.Logger
}

// WithStoreReplicas sets the bucket's replica count (default 1).
func WithStoreReplicas(n int) StoreOption { return func(o *storeOptions) { o.replicas = n } }

// WithStoreLogger sets the Store's logger (default slog.Default()).
func WithStoreLogger(l *slog.Logger) StoreOption { return func(o *storeOptions) { o.log = l } }

// WithMaxConfigsPerTask bounds the configs of one task, of all owners
// together (default DefaultMaxConfigsPerTask).
func WithMaxConfigsPerTask(n int) StoreOption { return func(o *storeOptions) { o.maxConfigs = n } }

// WithMaxConfigsPerOwner bounds the configs one owner holds over all its
// tasks (default DefaultMaxConfigsPerOwner): the per-task limit alone
// lets a caller with many open tasks store without bound.
func WithMaxConfigsPerOwner(n int) StoreOption { return func(o *storeOptions) { o.maxOwner = n } }

// WithClosedTaskTTL sets how long the closed mark of an ended task is
// kept (default DefaultClosedTaskTTL). Keep it far above the longest time
// a notification can wait in the outbox.
func WithClosedTaskTTL(d time.Duration) StoreOption { return func(o *storeOptions) { o.closedTTL = d } }

// check refuses an invalid option, naming it.
func (o *storeOptions) check() error {
	switch {
	case o.replicas < 1 || o.replicas > 5:
		return fmt.Errorf("%w: WithStoreReplicas: replicas %d not in 1..5", ErrInvalidArgument, o.replicas)
	case o.log == nil:
		return fmt.Errorf("%w: WithStoreLogger: nil logger", ErrInvalidArgument)
	case o.maxConfigs < 1 || o.maxConfigs > 1000:
		return fmt.Errorf("%w: WithMaxConfigsPerTask: max configs per task %d not in 1..1000", ErrInvalidArgument, o.maxConfigs)
	case o.maxOwner < 1 || o.maxOwner > 1<<20:
		return fmt.Errorf("%w: WithMaxConfigsPerOwner: max configs per owner %d not in 1..%d", ErrInvalidArgument, o.maxOwner, 1<<20)
	case o.closedTTL < time.Second:
		return fmt.Errorf("%w: WithClosedTaskTTL: closed task TTL %s below 1s", ErrInvalidArgument, o.closedTTL)
	}
	return nil
}

// Store keeps push configs in the JetStream KV bucket Bucket, so that any
// replica of the edge serves them. It holds no state in memory and is
// safe for concurrent use. Get, List and ForTask read configs with KV
// gets, which with a replicated bucket a follower a few milliseconds
// behind the leader may serve; the key listing behind List, ForTask and
// the limit comes from the stream leader.
//
// Besides the configs, the bucket holds one key per task that CloseTask or
// DeleteTask closed, "<task>" (outside every "<task>.>" filter), with a TTL: it tells
// the Outbox that the configs of the task are gone because the task
// ended, not because their owner deleted them (see Outbox).
type Store struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream // the bucket's backing stream
	opts   storeOptions
	// probe: ForTask first asks whether the task has any key at all,
	// with one direct get (see ForTask); only on a single-replica bucket,
	// where the one server that answers a direct get is the leader.
	probe bool
}

// OpenStore creates or updates the config bucket and returns a Store on it.
func OpenStore(ctx context.Context, js jetstream.JetStream, opts ...StoreOption) (*Store, error) {
	o := storeOptions{replicas: 1, maxConfigs: DefaultMaxConfigsPerTask, maxOwner: DefaultMaxConfigsPerOwner, closedTTL: DefaultClosedTaskTTL, log: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		opt(&o)
	}
	if err := o.check(); err != nil {
		return nil, fmt.Errorf("open push store: %w", err)
	}
	if js == nil {
		return nil, fmt.Errorf("open push store: %w: nil JetStream", ErrInvalidArgument)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, BucketConfig(o.replicas))
	if err != nil {
		return nil, fmt.Errorf("open push store: create bucket %s: %w", Bucket, err)
	}
	stream, err := js.Stream(ctx, bucketStream)
	if err != nil {
		return nil, fmt.Errorf("open push store: bind stream %s: %w", bucketStream, err)
	}
	sc := stream.CachedInfo().Config
	return &Store{js: js, kv: kv, stream: stream, opts: o, probe: sc.Replicas <= 1 && sc.AllowDirect}, nil
}

// Put stores cfg and returns it as stored: with a UUIDv7 ID when cfg.ID
// is empty and Created set when it is zero. A config with the ID of one of
// the owner's configs of the task replaces it. A new config beyond the
// task's limit (all owners together) is ErrTooMany; one beyond the
// owner's limit over all its tasks is ErrOwnerQuota. Put checks the URL's
// syntax only: the edge applies its Policy (Policy.CheckURL) first.
//
// The limits hold under concurrent Puts: a new config is created only if
// the task and the owner had room, and both are counted again after the
// write; a Put that then finds either over its limit removes its own config and, after a
// random pause, tries again (a few times, then ErrTooMany). Racing Puts
// for the last slot may thus all fail, never all succeed.
func (s *Store) Put(ctx context.Context, cfg Config) (Config, error) {
	if cfg.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return Config{}, fmt.Errorf("put push config: generate id: %w", err)
		}
		cfg.ID = id.String()
	}
	if cfg.Created.IsZero() {
		cfg.Created = time.Now().UTC()
	}
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("put push config: %w", err)
	}
	val, err := json.Marshal(cfg)
	if err != nil {
		return Config{}, fmt.Errorf("put push config: encode: %w", err)
	}
	if len(val) > maxValueBytes {
		return Config{}, fmt.Errorf("put push config: %w: %d bytes encoded", ErrTooLarge, len(val))
	}
	for attempt := 1; ; attempt++ {
		lost, err := s.put(ctx, cfg, val)
		if err != nil {
			return Config{}, fmt.Errorf("put push config: %w", err)
		}
		if !lost {
			return cfg, nil
		}
		if attempt == maxPutAttempts {
			return Config{}, fmt.Errorf("put push config: %w: limit %d per task, %d per owner (concurrent creates)", ErrTooMany, s.opts.maxConfigs, s.opts.maxOwner)
		}
		if err := putRetry.Wait(ctx, attempt); err != nil {
			return Config{}, fmt.Errorf("put push config: %w", err)
		}
	}
}

// maxPutAttempts bounds Put's attempts when concurrent creates keep
// overfilling the task.
const maxPutAttempts = 4

// putRetry paces those attempts: concurrent creates over the limit spread
// out and settle.
var putRetry = backoff.Policy{Base: 20 * time.Millisecond, Cap: 160 * time.Millisecond}

// put makes one attempt of Put. lost reports a new config written and
// taken back because concurrent creates overfilled the task.
func (s *Store) put(ctx context.Context, cfg Config, val []byte) (lost bool, err error) {
	key := configKey(cfg.Owner, cfg.TaskID, cfg.ID)
	keys, err := s.keys(ctx, taskPrefix(cfg.TaskID)+">")
	if err != nil {
		return false, err
	}
	if slices.Contains(keys, key) {
		if _, err := s.kv.Put(ctx, key, val); err != nil {
			return false, fmt.Errorf("replace: %w", err)
		}
		return false, nil
	}
	if len(keys) >= s.opts.maxConfigs {
		return false, fmt.Errorf("%w: limit %d", ErrTooMany, s.opts.maxConfigs)
	}
	mine, err := s.keys(ctx, ownerFilter(cfg.Owner))
	if err != nil {
		return false, err
	}
	if len(mine) >= s.opts.maxOwner {
		return false, fmt.Errorf("%w: the owner holds %d push configs (limit %d); delete some or let their tasks end", ErrOwnerQuota, len(mine), s.opts.maxOwner)
	}
	if _, err := s.kv.Create(ctx, key, val); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return false, fmt.Errorf("create: %w", err)
		}
		// A concurrent Put of the same id created it first: replace.
		if _, err := s.kv.Put(ctx, key, val); err != nil {
			return false, fmt.Errorf("replace: %w", err)
		}
		return false, nil
	}
	keys, err = s.keys(ctx, taskPrefix(cfg.TaskID)+">")
	if err == nil {
		if mine, err = s.keys(ctx, ownerFilter(cfg.Owner)); err == nil && len(keys) <= s.opts.maxConfigs && len(mine) <= s.opts.maxOwner {
			return false, nil
		}
	}
	// Over the limit (or unknown): take the new config back.
	if perr := s.purge(context.WithoutCancel(ctx), key); perr != nil {
		s.opts.log.Warn("push: remove config over the limit", "task", cfg.TaskID, "config", cfg.ID, "err", perr)
	}
	if err != nil {
		return false, fmt.Errorf("recount: %w", err)
	}
	return true, nil
}

// Get returns the owner's config id of task taskID. Another owner's
// config is ErrNotFound, exactly like a missing one.
func (s *Store) Get(ctx context.Context, owner, taskID, id string) (Config, error) {
	if !validRef(owner, taskID, id) {
		return Config{}, fmt.Errorf("get push config: %w", ErrNotFound)
	}
	e, err := s.kv.Get(ctx, configKey(owner, taskID, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Config{}, fmt.Errorf("get push config: %w", ErrNotFound)
	}
	if err != nil {
		return Config{}, fmt.Errorf("get push config: %w", err)
	}
	cfg, err := decodeConfig(e.Value())
	if err != nil || cfg.Owner != owner || cfg.TaskID != taskID || cfg.ID != id {
		return Config{}, fmt.Errorf("get push config: %w", ErrNotFound)
	}
	return cfg, nil
}

// List returns one page of the owner's configs of task taskID, ordered by
// ID (creation order for generated ids), and the token of the next page
// ("" on the last one). pageSize 0 means DefaultPageSize; larger than
// MaxPageSize means MaxPageSize. A task with no configs of the owner is an
// empty list, not an error.
func (s *Store) List(ctx context.Context, owner, taskID string, pageSize int, pageToken string) ([]Config, string, error) {
	switch {
	case pageSize < 0:
		return nil, "", fmt.Errorf("list push configs: %w: negative page size", ErrInvalidArgument)
	case pageSize == 0:
		pageSize = DefaultPageSize
	case pageSize > MaxPageSize:
		pageSize = MaxPageSize
	}
	after := ""
	if pageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(pageToken)
		id, ok := strings.CutPrefix(string(b), "1:")
		if err != nil || !ok || id == "" {
			return nil, "", fmt.Errorf("list push configs: %w", ErrInvalidPageToken)
		}
		after = id
	}
	if !validRef(owner, taskID, "-") {
		return []Config{}, "", nil
	}
	all, err := s.scan(ctx, ownerPrefix(owner, taskID)+"*")
	if err != nil {
		return nil, "", fmt.Errorf("list push configs: %w", err)
	}
	page := make([]Config, 0, min(len(all), pageSize+1))
	for _, c := range all {
		if c.Owner != owner || c.TaskID != taskID || (after != "" && c.ID <= after) {
			continue
		}
		page = append(page, c)
	}
	next := ""
	if len(page) > pageSize {
		page = page[:pageSize]
		next = base64.RawURLEncoding.EncodeToString([]byte("1:" + page[pageSize-1].ID))
	}
	return page, next, nil
}

// Delete removes the owner's config id of task taskID; notifications still
// queued for it are dropped (see Outbox). It is idempotent: a missing
// config, or another owner's, is not an error (and nothing is written).
func (s *Store) Delete(ctx context.Context, owner, taskID, id string) error {
	if !validRef(owner, taskID, id) {
		return nil
	}
	if err := s.purge(ctx, configKey(owner, taskID, id)); err != nil {
		return fmt.Errorf("delete push config: %w", err)
	}
	return nil
}

// Expire rewrites the owner's config id of task taskID to expire after
// ttl (at least a second): the config of a finished task, to which nothing
// more will be sent. The expiry is the bucket's own (a per-message TTL),
// so it happens whichever replica stops, unlike a timer's. The rewrite is
// one write, conditional on the config read: the key never disappears in
// between (the delivery side would take the task for one without configs),
// and a Put of the same id racing it is expired in its turn.
func (s *Store) Expire(ctx context.Context, owner, taskID, id string, ttl time.Duration) error {
	if !validRef(owner, taskID, id) {
		return fmt.Errorf("expire push config: %w", ErrNotFound)
	}
	if ttl < time.Second {
		return fmt.Errorf("expire push config: %w: ttl %s below 1s", ErrInvalidArgument, ttl)
	}
	key := configKey(owner, taskID, id)
	for range maxPutAttempts {
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("expire push config: %w", ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("expire push config: %w", err)
		}
		_, err = s.js.PublishMsg(ctx, &nats.Msg{Subject: bucketSubjectPrefix + key, Data: e.Value()},
			jetstream.WithMsgTTL(ttl), jetstream.WithExpectLastSequencePerSubject(e.Revision()))
		if !wrongLastSequence(err) {
			if err != nil {
				return fmt.Errorf("expire push config: %w", err)
			}
			return nil
		}
		// Rewritten since it was read: expire what is there now.
	}
	return fmt.Errorf("expire push config: rewritten %d times in a row", maxPutAttempts)
}

// wrongLastSequence reports whether err is a conditional write refused
// because the key was written since (10071; 10164 on a replicated stream).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// ForTask returns every config of task taskID, of any owner, ordered by
// owner token and ID: the delivery side's view, for enqueueing a task's
// notifications. A task MayHaveConfigs says has none costs that one
// direct get; only a task with a key pays for the listing (a stream-info
// request with a subject filter) and the reads.
func (s *Store) ForTask(ctx context.Context, taskID string) ([]Config, error) {
	if taskID == "" || len(taskID) > MaxIDBytes {
		return []Config{}, nil
	}
	if maybe, err := s.MayHaveConfigs(ctx, taskID); err == nil && !maybe {
		return []Config{}, nil
	}
	// Found (a config, or the marker an expired one leaves) or not known:
	// the listing decides.
	all, err := s.scan(ctx, taskPrefix(taskID)+">")
	if err != nil {
		return nil, fmt.Errorf("configs of task: %w", err)
	}
	out := all[:0]
	for _, c := range all {
		if c.TaskID == taskID {
			out = append(out, c)
		}
	}
	return out, nil
}

// MayHaveConfigs reports false only when task taskID has no config: on a
// single-replica bucket, from the one direct get ForTask starts with; on
// a replicated one it always says true (ForTask decides). The delivery
// side asks it before it even decodes a commit.
func (s *Store) MayHaveConfigs(ctx context.Context, taskID string) (bool, error) {
	if taskID == "" || len(taskID) > MaxIDBytes {
		return false, nil
	}
	if !s.probe {
		return true, nil
	}
	_, err := s.stream.GetMsg(ctx, 0, jetstream.WithGetMsgSubject(bucketSubjectPrefix+taskPrefix(taskID)+">"))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	case err != nil:
		return true, fmt.Errorf("probe push configs of task: %w", err)
	}
	return true, nil
}

// DeleteTask removes every config of task taskID, of every owner, in one
// purge of the task's keys, and marks the task closed for the closed task
// TTL. Notifications of the task already queued are still delivered
// within that time, with the fields they carry, so the edge may call it
// as soon as it has enqueued a terminal task's last notifications. It is
// idempotent.
func (s *Store) DeleteTask(ctx context.Context, taskID string) error {
	if taskID == "" || len(taskID) > MaxIDBytes {
		return nil
	}
	// The mark first: a config never disappears before the mark exists.
	if err := s.markClosed(ctx, taskID); err != nil {
		return fmt.Errorf("delete push configs of task: %w", err)
	}
	if err := s.purge(ctx, taskPrefix(taskID)+">"); err != nil {
		return fmt.Errorf("delete push configs of task: %w", err)
	}
	return nil
}

// CloseTask marks task taskID closed, as DeleteTask does, and makes every
// config of it, of every owner, expire keep from now (at least a second):
// the task has ended, and its configs stay readable a while, for its
// notifications still in flight. The expiry is the bucket's (a per-key
// TTL), so the configs go whichever replica stops first; a timer's would
// leave them, counted against their owners, for good. It is idempotent (a
// repeat restarts the expiry).
func (s *Store) CloseTask(ctx context.Context, taskID string, keep time.Duration) error {
	if taskID == "" || len(taskID) > MaxIDBytes {
		return nil
	}
	if err := s.markClosed(ctx, taskID); err != nil {
		return fmt.Errorf("close task's push configs: %w", err)
	}
	cfgs, err := s.scan(ctx, taskPrefix(taskID)+">")
	if err != nil {
		return fmt.Errorf("close task's push configs: %w", err)
	}
	for _, c := range cfgs {
		if err := s.Expire(ctx, c.Owner, taskID, c.ID, keep); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("close task's push configs: %w", err)
		}
	}
	return nil
}

// markClosed writes task taskID's closed mark, for the closed task TTL.
func (s *Store) markClosed(ctx context.Context, taskID string) error {
	closed, err := json.Marshal(map[string]any{"task_id": taskID, "closed": time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := s.kv.Create(ctx, encodeID(taskID), closed, jetstream.KeyTTL(s.opts.closedTTL)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("mark closed: %w", err)
	}
	return nil
}

// purge removes every message of the keys matching filter, leaving no
// marker.
func (s *Store) purge(ctx context.Context, filter string) error {
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(bucketSubjectPrefix+filter)); err != nil {
		return fmt.Errorf("purge %s: %w", filter, err)
	}
	return nil
}

// validRef reports whether owner, taskID and id can name a stored config.
func validRef(owner, taskID, id string) bool {
	return owner != "" && len(owner) <= MaxOwnerBytes && taskID != "" && len(taskID) <= MaxIDBytes &&
		id != "" && len(id) <= MaxIDBytes
}

func decodeConfig(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return Config{}, fmt.Errorf("decode push config: %w", err)
	}
	return c, nil
}

// keys returns the keys matching filter, from the bucket stream's
// per-subject state: one request, a snapshot unaffected by concurrent
// writes or purges. The filter's keys are configs, and for a minute
// after a config expires (Expire, CloseTask) the marker the server leaves
// in its place (LimitMarkerTTL): an expired config still counts against
// its task's and owner's limits for that minute. Deletions leave none.
func (s *Store) keys(ctx context.Context, filter string) ([]string, error) {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(bucketSubjectPrefix+filter))
	if err != nil {
		return nil, fmt.Errorf("list keys %s: %w", filter, err)
	}
	keys := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		if k, ok := strings.CutPrefix(subj, bucketSubjectPrefix); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// scan returns the configs under the keys matching filter, ordered by
// owner token and ID. A key gone between listing and reading is skipped;
// undecodable values are skipped and logged.
func (s *Store) scan(ctx context.Context, filter string) ([]Config, error) {
	keys, err := s.keys(ctx, filter)
	if err != nil {
		return nil, err
	}
	type keyed struct {
		owner string
		cfg   Config
	}
	all := make([]keyed, 0, len(keys))
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		c, err := decodeConfig(e.Value())
		if err != nil {
			s.opts.log.Warn("push: skipping unreadable config", "key", k, "err", err)
			continue
		}
		if k != configKey(c.Owner, c.TaskID, c.ID) {
			s.opts.log.Warn("push: skipping config stored under another key", "key", k)
			continue
		}
		all = append(all, keyed{ownerToken(c.Owner), c})
	}
	slices.SortFunc(all, func(a, b keyed) int {
		return cmp.Or(strings.Compare(a.owner, b.owner), strings.Compare(a.cfg.ID, b.cfg.ID))
	})
	out := make([]Config, len(all))
	for i, k := range all {
		out[i] = k.cfg
	}
	return out, nil
}
