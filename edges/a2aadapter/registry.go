package a2aadapter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TaskBucket is the JetStream KV bucket of the task registry.
const TaskBucket = "CHIO_A2A_TASKS"

const (
	maxTaskRecordBytes = 4 << 10
	// maxObserveRetries bounds the compare-and-set loop of observe: other
	// replicas update the same task only as often as its events come.
	maxObserveRetries = 8
)

// Sources of a task record: which call observed the task last.
const (
	SourceSendMessage          = "send_message"
	SourceSendStreamingMessage = "send_streaming_message"
	SourceGetTask              = "get_task"
	SourceSubscribeTask        = "subscribe_task"
	SourceCancelTask           = "cancel_task"
)

// ErrTaskNotRecorded: the registry holds no record of the task.
var ErrTaskNotRecorded = errors.New("task is not recorded")

// TaskBinding is what a follow-up must match: the tool, server, binding,
// interface and tenant the task was observed through, and the caller (the
// subject of the capability) whose call started it.
type TaskBinding struct {
	Tool         string `json:"tool"`
	ServerID     string `json:"server_id"`
	InterfaceURL string `json:"interface_url"`
	Binding      string `json:"binding"`
	Tenant       string `json:"tenant"`
	Caller       string `json:"caller"`
}

// TaskRecord is one observed upstream task.
type TaskRecord struct {
	TaskID string `json:"task_id"`
	TaskBinding
	Partner string `json:"partner"`
	// State is the last observed state ("" until one is observed) and
	// Source the call that observed the task last.
	State   string    `json:"state"`
	Source  string    `json:"source"`
	Updated time.Time `json:"updated"`
}

// TaskRegistry records every upstream task the adapters observe in a
// JetStream KV bucket, so that any replica, before or after a restart,
// refuses a follow-up for a task another tool, binding, interface or
// tenant observed. It is safe for concurrent use.
type TaskRegistry struct {
	kv   jetstream.KeyValue
	now  func() time.Time
	opts registryOptions

	bucket bucketState // the bucket's size, for admission
	liveMu sync.Mutex
	live   *liveIndex // each caller's live tasks, started by admission
}

// TaskBucketConfig is the bucket's configuration: file storage, one value
// per key, each kept ttl after its last write (0: forever).
func TaskBucketConfig(replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       TaskBucket,
		Description:  "Chio A2A adapter: upstream tasks and the tool binding each was observed through",
		History:      1,
		TTL:          ttl,
		MaxValueSize: maxTaskRecordBytes,
		Storage:      jetstream.FileStorage,
		Replicas:     replicas,
	}
}

// OpenTaskRegistry creates or updates the bucket TaskBucket with replicas
// (1 to 5), with its record TTL and cap, and returns the registry on it.
func OpenTaskRegistry(ctx context.Context, js jetstream.JetStream, replicas int, opts ...RegistryOption) (*TaskRegistry, error) {
	o := registryOptions{ttl: DefaultRecordTTL, maxRecords: DefaultMaxRecords, maxLive: DefaultMaxLiveTasks, liveWindow: DefaultLiveWindow}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case js == nil:
		return nil, errors.New("open task registry: nil JetStream")
	case replicas < 1 || replicas > 5:
		return nil, fmt.Errorf("open task registry: replicas %d not in 1..5", replicas)
	case o.ttl < 0 || o.maxRecords < 0 || o.maxLive < 0 || o.liveWindow < 0:
		return nil, errors.New("open task registry: record TTL, record cap, live-task bound and live window must not be negative")
	}
	kv, err := openBucket(ctx, js, TaskBucketConfig(replicas, o.ttl), o.maxRecords)
	if err != nil {
		return nil, fmt.Errorf("open task registry: bucket %s: %w", TaskBucket, err)
	}
	return &TaskRegistry{kv: kv, now: time.Now, opts: o}, nil
}

// taskKey is the record's key: a digest of the server id and task id, since
// task ids are the partner's strings and may hold anything a key may not.
func taskKey(serverID, taskID string) string {
	sum := sha256.Sum256([]byte(serverID + "\x00" + taskID))
	return hex.EncodeToString(sum[:])
}

// Lookup returns the record of taskID on serverID (ErrTaskNotRecorded when
// there is none).
func (r *TaskRegistry) Lookup(ctx context.Context, serverID, taskID string) (TaskRecord, error) {
	rec, _, err := r.get(ctx, taskKey(serverID, taskID))
	if err != nil {
		return TaskRecord{}, fmt.Errorf("look up task %s: %w", taskID, err)
	}
	return rec, nil
}

func (r *TaskRegistry) get(ctx context.Context, key string) (TaskRecord, uint64, error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return TaskRecord{}, 0, ErrTaskNotRecorded
	}
	if err != nil {
		return TaskRecord{}, 0, err
	}
	var rec TaskRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return TaskRecord{}, 0, fmt.Errorf("decode record %s: %w", key, err)
	}
	return rec, e.Revision(), nil
}

// check refuses a follow-up for taskID unless it was recorded for b. A
// task of another binding gets the same answer as an unknown one: a caller
// learns nothing of other tools' tasks.
func (r *TaskRegistry) check(ctx context.Context, b TaskBinding, taskID string) error {
	rec, _, err := r.get(ctx, taskKey(b.ServerID, taskID))
	switch {
	case errors.Is(err, ErrTaskNotRecorded) || (err == nil && rec.TaskBinding != b):
		return fmt.Errorf("%w: task %q was not observed for tool %s on this server, binding, interface and tenant", ErrFollowUpRefused, taskID, b.Tool)
	case err != nil:
		return fmt.Errorf("%w: task registry: %w", ErrFollowUpRefused, err)
	}
	return nil
}

// observe records that rec.TaskID was seen through rec.TaskBinding: it
// creates the record, or updates its state and source. A task recorded for
// another binding is refused (ErrTaskRebound): the partner answered one
// tool with another's task. An empty rec.State keeps the recorded state.
func (r *TaskRegistry) observe(ctx context.Context, rec TaskRecord) error {
	key := taskKey(rec.ServerID, rec.TaskID)
	rec.Updated = r.now().UTC()
	for range maxObserveRetries {
		next := rec
		cur, rev, err := r.get(ctx, key)
		switch {
		case errors.Is(err, ErrTaskNotRecorded):
		case err != nil:
			return fmt.Errorf("record task %s: %w", rec.TaskID, err)
		case cur.TaskBinding != rec.TaskBinding:
			return fmt.Errorf("record task %s for tool %s: %w", rec.TaskID, rec.Tool, ErrTaskRebound)
		default:
			if next.State == "" {
				next.State = cur.State
			}
			// The same again is not written, unless the record is half
			// way to its TTL or out of its live window: both count from
			// the last write, and a task still being followed must
			// neither expire nor stop counting against its caller.
			if cur.State == next.State && cur.Source == next.Source && cur.Partner == next.Partner &&
				(r.opts.countFor() <= 0 || rec.Updated.Sub(cur.Updated) < r.opts.countFor()/2) {
				return nil
			}
		}
		raw, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("record task %s: %w", rec.TaskID, err)
		}
		var wrote uint64
		if rev == 0 {
			wrote, err = r.kv.Create(ctx, key, raw)
		} else {
			wrote, err = r.kv.Update(ctx, key, raw, rev)
		}
		switch {
		case err == nil:
			r.noted(key, next, wrote)
			return nil
		case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue // another replica wrote first: compare with theirs
		case registryFull(err) && rev == 0:
			return fmt.Errorf("record task %s: %w: the bucket is at its cap of %d records", rec.TaskID, ErrRegistryFull, r.opts.maxRecords)
		case registryFull(err):
			// A replicated bucket at its cap refuses updates too.
			return fmt.Errorf("record task %s: update refused: %w: the bucket is at its cap of %d records", rec.TaskID, ErrRegistryFull, r.opts.maxRecords)
		default:
			return fmt.Errorf("record task %s: %w", rec.TaskID, err)
		}
	}
	return fmt.Errorf("record task %s: %d concurrent updates in a row", rec.TaskID, maxObserveRetries)
}
