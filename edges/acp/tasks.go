package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/chio-ledger/chio/schemas"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// TasksBucket holds the deferred tasks of tool/stream.
const TasksBucket = "CHIO_ACP_TASKS"

// TasksBucketConfig is the bucket's configuration: one value per task
// (compare-and-set needs no history), kept ttl.
func TasksBucketConfig(replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: TasksBucket, Description: "Chio ACP edge deferred tasks",
		History: 1, TTL: ttl, Replicas: replicas, Storage: jetstream.FileStorage}
}

// TaskState is a deferred task's state.
type TaskState string

// Task states: pending until resumed or canceled; running while the one
// resume that won the compare-and-set dispatches it; then terminal.
const (
	TaskPending   TaskState = "pending"
	TaskRunning   TaskState = "running"
	TaskCompleted TaskState = "completed"
	TaskFailed    TaskState = "failed"
	TaskDenied    TaskState = "denied"
	TaskCanceled  TaskState = "canceled"
)

// Task is a deferred invocation as the profile shows it.
type Task struct {
	ID           string    `json:"id"`
	CapabilityID string    `json:"capabilityId"`
	State        TaskState `json:"state"`
	CreatedAt    time.Time `json:"createdAt"`
	UpdatedAt    time.Time `json:"updatedAt"`
	ReceiptID    string    `json:"receiptId,omitempty"`
}

// taskRecord is what the bucket stores: the task, whom it belongs to,
// what it runs, and how it ended.
type taskRecord struct {
	Task Task `json:"task"`
	// Principal is the authority path of the capability that created the
	// task: another caller's resume or cancel finds nothing.
	Principal string          `json:"principal"`
	Arguments json.RawMessage `json:"arguments"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *Error          `json:"error,omitempty"`
	// While running: the edge replica that runs it, until when its lease
	// holds (it renews it), how many edges have taken it, and the
	// capability its resume ran under, for another replica to run it
	// again if this one dies. All cleared once the task ends. A running
	// task without a holder was stored before leases: it is never taken
	// over.
	Holder       string    `json:"holder,omitempty"`
	LeaseExpires time.Time `json:"leaseExpires,omitzero"`
	Attempt      int       `json:"attempt,omitempty"`
	Token        string    `json:"token,omitempty"`
}

// taskParams are tool/resume's and tool/cancel's.
type taskParams struct {
	TaskID string `json:"taskId"`
}

// taskAnswer is the answer of the task methods.
type taskAnswer struct {
	Task   Task            `json:"task"`
	Result json.RawMessage `json:"result,omitempty"`
}

// stream creates a deferred task: nothing runs until tool/resume. The
// kernel decides at resume, under the resuming call's capability (which
// must have the creator's principal), so a task of a tool the caller may
// not invoke ends denied, with its receipt.
func (e *Edge) stream(ctx context.Context, c *call) (any, *Error) {
	b, args, perr := e.callParams(c)
	if perr != nil {
		return nil, perr
	}
	// A task is stored only for a tool the caller may invoke, with
	// arguments within the call bound: the bucket is not free storage.
	if !c.id.Invokes(b.entry) {
		return nil, rpcErr(CodeInvalidParams, nil, "unknown capability %q", b.cap.ID)
	}
	if len(args) > schemas.MaxParametersBytes {
		return nil, rpcErr(CodeInvalidParams, nil, "arguments are %d bytes, over %d", len(args), schemas.MaxParametersBytes)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, rpcErr(CodeInternal, nil, "chio: task id: %v", err)
	}
	now := time.Now().UTC()
	rec := &taskRecord{Task: Task{ID: id.String(), CapabilityID: b.cap.ID, State: TaskPending, CreatedAt: now, UpdatedAt: now},
		Principal: c.id.Principal, Arguments: args}
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, rpcErr(CodeInternal, nil, "chio: encode task: %v", err)
	}
	if perr := e.admit(ctx, c.id.Principal); perr != nil {
		return nil, perr
	}
	if _, err := e.tasks.Create(ctx, rec.Task.ID, raw); err != nil {
		if bucketFull(err) {
			return nil, rpcErr(CodeResourceExhausted, nil, "%v: the task bucket holds as many tasks as it may (%d); retry once some have expired", errTasksFull, e.opts.maxTasks)
		}
		return nil, rpcErr(CodeInternal, nil, "chio: store task: %v", err)
	}
	e.index.note(rec.Task.ID, rec.Principal, now)
	return taskAnswer{Task: rec.Task}, nil
}

// resume runs a pending task through the kernel, once across replicas:
// the resume that moves it pending→running by compare-and-set dispatches
// it; any other gets the stored outcome, or an error while it runs.
func (e *Edge) resume(ctx context.Context, c *call) (any, *Error) {
	rec, rev, rerr := e.loadTask(ctx, c)
	if rerr != nil {
		return nil, rerr
	}
	b, ok := e.table().byID[rec.Task.CapabilityID]
	if perr := e.provesTask(ctx, c, b, rec); perr != nil {
		return nil, perr
	}
	if rec.Task.State != TaskPending {
		return storedOutcome(rec)
	}
	if !ok {
		// The table changed under the task (another build): fail closed.
		return nil, rpcErr(CodeTaskState, nil, "task %s: capability %q is no longer published", rec.Task.ID, rec.Task.CapabilityID)
	}
	if perr := e.permitted(ctx, c, b, rec.Arguments, rec.Task.ID); perr != nil {
		return nil, perr // the task stays pending: a permitted caller may resume it
	}
	now := time.Now().UTC()
	rec.Task.State, rec.Task.UpdatedAt = TaskRunning, now
	rec.Holder, rec.LeaseExpires, rec.Attempt, rec.Token = e.id, now.Add(e.opts.taskLease), 1, c.token
	rev, err := e.putTask(ctx, rec, rev)
	if errors.Is(err, errLostRace) {
		if rec, _, rerr = e.loadTask(ctx, c); rerr != nil {
			return nil, rerr
		}
		return storedOutcome(rec)
	}
	if err != nil {
		return nil, rpcErr(CodeInternal, nil, "chio: claim task %s: %v", rec.Task.ID, err)
	}
	// From here the task is this call's: it finishes and is recorded even
	// if the client goes away.
	return e.run(context.WithoutCancel(ctx), c, b, rec, rev)
}

// run dispatches a task this edge holds the lease of (at revision rev),
// renewing the lease while the tool runs, and stores how it ended. If
// the edge closes meanwhile the run is cut and nothing more is written:
// the lease runs out and another replica's sweep takes the task over. If
// another replica took it over (this edge stalled past its lease), the
// outcome is not written over the taker's.
func (e *Edge) run(ctx context.Context, c *call, b *binding, rec *taskRecord, rev uint64) (any, *Error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.life, cancel)()
	lease := e.keepLease(*rec, rev)
	res, derr := e.dispatch.Do(rctx, e.dispatchCall(c, b, rec.Arguments, rec.Task.ID))
	rev, lost := lease.stop()
	if e.life.Err() != nil {
		return nil, rpcErr(CodeInternal, map[string]any{"task": rec.Task},
			"chio: task %s: this edge stopped while it ran; another replica takes it over", rec.Task.ID)
	}
	if lost {
		e.log.Warn("acp: task taken over by another replica while it ran here; its outcome here is not stored", "task_id", rec.Task.ID)
		return nil, rpcErr(CodeTaskState, map[string]any{"task": rec.Task},
			"task %s was taken over by another replica while it ran here", rec.Task.ID)
	}
	out, oerr := e.outcome(res, derr)
	rec.Holder, rec.LeaseExpires, rec.Token = "", time.Time{}, ""
	rec.Task.UpdatedAt = time.Now().UTC()
	if res != nil {
		rec.Task.ReceiptID = res.ReceiptID
	}
	switch {
	case oerr == nil:
		rec.Task.State, rec.Result = TaskCompleted, out
	case oerr.Code == CodeDenied || oerr.Code == CodeUnauthorized:
		rec.Task.State, rec.Error = TaskDenied, oerr
	default:
		rec.Task.State, rec.Error = TaskFailed, oerr
	}
	_, err := e.putTask(ctx, rec, rev)
	if err != nil && !errors.Is(err, errLostRace) && rec.Result != nil {
		// The result may not fit the bucket: end the task without it,
		// rather than leave it running for a sweep to run again.
		e.log.Warn("acp: task result not stored; failing the task", "task_id", rec.Task.ID, "err", err)
		full := *rec
		rec.Result, rec.Task.State = nil, TaskFailed
		rec.Error = rpcErr(CodeInternal, nil, "chio: task %s ran (receipt %s) but its result could not be stored: %v", rec.Task.ID, rec.Task.ReceiptID, err)
		if _, err = e.putTask(ctx, rec, rev); err == nil {
			return storedOutcome(&full)
		}
	}
	if err != nil {
		// The receipt holds the truth; the task stays running, and its
		// lease ends: the sweep runs it again.
		e.log.Error("acp: task outcome not stored", "task_id", rec.Task.ID, "receipt_id", rec.Task.ReceiptID, "err", err)
	}
	return storedOutcome(rec)
}

// provesTask checks, before a resume answers anything, that its tool
// proof (if that is its form) names the task's call: the capability's
// tool with the task's arguments, as the dispatch of a pending task checks
// it again. A proof for anything else is refused with the task's deny
// receipt, whatever the task's state. b is the task's binding, nil when
// its capability is no longer published (a tool proof is then refused:
// its call cannot be named). An HTTP request's DPoP proof is bound to the
// request and was checked by identify.
func (e *Edge) provesTask(ctx context.Context, c *call, b *binding, rec *taskRecord) *Error {
	if c.proof == nil || len(c.proof.Tool) == 0 {
		return nil
	}
	if b == nil {
		return rpcErr(CodeTaskState, nil, "task %s: capability %q is no longer published", rec.Task.ID, rec.Task.CapabilityID)
	}
	c.proof.Request = b.call(rec.Arguments)
	_, dec := e.kernel.Identify(ctx, c.token, c.proof)
	if dec == nil {
		return nil
	}
	data := refusedData(dec, "")
	rid, err := e.refuse(ctx, c, b, rec.Arguments, rec.Task.ID, dec)
	if err != nil {
		return rpcErr(CodeNotRecorded, data, "chio: the refusal could not be recorded: %v", err)
	}
	data.ReceiptID = rid
	return unauthorized(dec, data)
}

// cancel cancels a pending task (compare-and-set); canceling a canceled
// task answers it again, canceling one that ran or runs is an error.
func (e *Edge) cancel(ctx context.Context, c *call) (any, *Error) {
	for {
		rec, rev, rerr := e.loadTask(ctx, c)
		if rerr != nil {
			return nil, rerr
		}
		switch rec.Task.State {
		case TaskCanceled:
			return taskAnswer{Task: rec.Task}, nil
		case TaskPending:
		default:
			return nil, rpcErr(CodeTaskState, map[string]any{"task": rec.Task},
				"task %s is %s: only a pending task can be canceled", rec.Task.ID, rec.Task.State)
		}
		rec.Task.State, rec.Task.UpdatedAt = TaskCanceled, time.Now().UTC()
		_, err := e.putTask(ctx, rec, rev)
		if errors.Is(err, errLostRace) {
			continue // a resume or cancel got there first: answer its state
		}
		if err != nil {
			return nil, rpcErr(CodeInternal, nil, "chio: cancel task %s: %v", rec.Task.ID, err)
		}
		return taskAnswer{Task: rec.Task}, nil
	}
}

// storedOutcome answers a task that is not pending.
func storedOutcome(rec *taskRecord) (any, *Error) {
	switch rec.Task.State {
	case TaskCompleted:
		return taskAnswer{Task: rec.Task, Result: rec.Result}, nil
	case TaskDenied, TaskFailed:
		if rec.Error == nil {
			return nil, rpcErr(CodeTaskState, map[string]any{"task": rec.Task}, "task %s is %s", rec.Task.ID, rec.Task.State)
		}
		out := *rec.Error
		out.Data = withTask(out.Data, rec.Task)
		return nil, &out
	case TaskRunning:
		return nil, rpcErr(CodeTaskState, map[string]any{"task": rec.Task},
			"task %s is running: another tool/resume is executing it", rec.Task.ID)
	case TaskCanceled:
		return nil, rpcErr(CodeTaskState, map[string]any{"task": rec.Task}, "task %s was canceled", rec.Task.ID)
	}
	return nil, rpcErr(CodeTaskState, map[string]any{"task": rec.Task}, "task %s is %s", rec.Task.ID, rec.Task.State)
}

// withTask adds the task to an error's data, which after a round trip
// through the bucket is a JSON object.
func withTask(data any, t Task) any {
	m := map[string]any{}
	if data != nil {
		if raw, err := json.Marshal(data); err == nil {
			_ = json.Unmarshal(raw, &m)
		}
	}
	m["task"] = t
	return m
}

// errLostRace: another replica or call changed the task first.
var errLostRace = errors.New("task changed concurrently")

// loadTask reads c's task; a task of another principal is not found, so
// a caller cannot learn that another's task exists.
func (e *Edge) loadTask(ctx context.Context, c *call) (*taskRecord, uint64, *Error) {
	var p taskParams
	if perr := params(c.params, &p); perr != nil {
		return nil, 0, perr
	}
	if p.TaskID == "" {
		return nil, 0, rpcErr(CodeInvalidParams, nil, "invalid params: taskId is required")
	}
	notFound := rpcErr(CodeTaskNotFound, nil, "task %q not found", p.TaskID)
	if _, err := uuid.Parse(p.TaskID); err != nil {
		return nil, 0, notFound
	}
	kve, err := e.tasks.Get(ctx, p.TaskID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, notFound
	}
	if err != nil {
		return nil, 0, rpcErr(CodeInternal, nil, "chio: read task %s: %v", p.TaskID, err)
	}
	var rec taskRecord
	if err := json.Unmarshal(kve.Value(), &rec); err != nil {
		return nil, 0, rpcErr(CodeInternal, nil, "chio: decode task %s: %v", p.TaskID, err)
	}
	if rec.Principal != c.id.Principal {
		return nil, 0, notFound
	}
	return &rec, kve.Revision(), nil
}

// putTask stores rec if the task is still at revision rev.
func (e *Edge) putTask(ctx context.Context, rec *taskRecord, rev uint64) (uint64, error) {
	raw, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("encode task: %w", err)
	}
	next, err := e.tasks.Update(ctx, rec.Task.ID, raw, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("update task %s: %w", rec.Task.ID, errLostRace)
	}
	if err != nil {
		return 0, fmt.Errorf("update task %s: %w", rec.Task.ID, err)
	}
	return next, nil
}
