package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/push"
	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// Push is what push notifications need; a nil Config.Push turns them off
// (capabilities.pushNotifications false, every push method -32003).
type Push struct {
	Store  *push.Store
	Outbox *push.Outbox
	// Policy decides which webhook URLs a config may name (SSRF); the
	// outbox applies it again when it connects.
	Policy push.Policy
	// ConfigsKept is how long a finished task's configs are kept
	// (DefaultConfigsKept when 0; at least a second).
	ConfigsKept time.Duration
}

// pushDurable is the consumer every replica shares to turn task commits
// into notifications, so each commit is handled by one of them.
const pushDurable = "chio-a2a-push"

// pushOwner is the push store's owner key of a task owner.
func pushOwner(o taskstore.Owner) string { return o.Subject + "\x00" + o.Tenant }

// pushConfigOp runs the four push-config methods, scoped to the caller.
func (e *Edge) pushConfigOp(ctx context.Context, rc rpcCall, op wire.Operation, params any) (any, *wire.Error) {
	if e.cfg.Push == nil {
		return nil, wire.PushNotSupported()
	}
	tenant, taskID := "", ""
	switch p := params.(type) {
	case *wire.CreatePushConfigParams:
		tenant, taskID = p.Config.Tenant, p.Config.TaskID
	case *wire.GetPushConfigParams:
		tenant, taskID = p.Tenant, p.TaskID
	case *wire.ListPushConfigsParams:
		tenant, taskID = p.Tenant, p.TaskID
	case *wire.DeletePushConfigParams:
		tenant, taskID = p.Tenant, p.TaskID
	default:
		return nil, wire.InternalError(fmt.Sprintf("%s: unexpected params %T", op, params))
	}
	owner, werr := e.owner(ctx, rc.caller, tenant)
	if werr != nil {
		return nil, werr
	}
	// Only the task's owner may see or change its configs; to anyone else
	// the task does not exist.
	task, err := e.tasks.Load(ctx, taskID, owner)
	if err != nil {
		return nil, storeError(taskID, err)
	}
	ps := e.cfg.Push.Store
	switch p := params.(type) {
	case *wire.CreatePushConfigParams:
		cfg, werr := e.checkPushConfig(ctx, &p.Config, rc.dialect.Version())
		if werr != nil {
			return nil, werr
		}
		cfg.TaskID, cfg.Owner = taskID, pushOwner(owner)
		stored, err := ps.Put(ctx, cfg)
		if err != nil {
			return nil, pushError(err)
		}
		if !task.State.Terminal() {
			// The task may have ended while the config was written, its
			// last commit handled before the config existed: nothing would
			// then expire it. Looked at again after the write, an end not
			// seen here is handled with the config there.
			again, err := e.tasks.Load(ctx, taskID, owner)
			if err != nil {
				return nil, storeError(taskID, err)
			}
			task = again
		}
		if task.State.Terminal() {
			// A finished task keeps its configs readable (the spec lets a
			// client manage them whatever the state), though nothing more
			// will be sent; they go like those of a task that just ended.
			if werr := e.expireConfig(ctx, taskID, stored); werr != nil {
				return nil, werr
			}
		}
		return encodePushResult(rc.dialect.EncodePushConfig(toWirePush(stored, tenant)))
	case *wire.GetPushConfigParams:
		cfg, err := ps.Get(ctx, pushOwner(owner), taskID, p.ID)
		if err != nil {
			return nil, pushError(err)
		}
		return encodePushResult(rc.dialect.EncodePushConfig(toWirePush(cfg, tenant)))
	case *wire.ListPushConfigsParams:
		cfgs, next, err := ps.List(ctx, pushOwner(owner), taskID, p.PageSize, p.PageToken)
		if err != nil {
			return nil, pushError(err)
		}
		out := make([]wire.PushConfig, 0, len(cfgs))
		for _, c := range cfgs {
			out = append(out, *toWirePush(c, tenant))
		}
		return encodePushResult(rc.dialect.EncodePushConfigList(out, next))
	case *wire.DeletePushConfigParams:
		if err := ps.Delete(ctx, pushOwner(owner), taskID, p.ID); err != nil {
			return nil, pushError(err)
		}
		return rc.dialect.DeletePushConfigResult(), nil
	}
	return nil, wire.InternalError("unreachable")
}

// checkPushConfig validates a config a client sent (its URL against the
// SSRF policy) and returns it in the store's form, without task or owner.
func (e *Edge) checkPushConfig(ctx context.Context, c *wire.PushConfig, v wire.Version) (push.Config, *wire.Error) {
	if err := e.cfg.Push.Policy.CheckURL(ctx, c.URL); err != nil {
		return push.Config{}, wire.InvalidParams(err.Error(), wire.FieldViolation{Field: "url", Description: err.Error()})
	}
	cfg := push.Config{ID: c.ID, URL: c.URL, Token: c.Token, Version: string(v)}
	if c.Auth != nil {
		cfg.AuthScheme, cfg.AuthCredentials = c.Auth.Scheme, c.Auth.Credentials
	}
	return cfg, nil
}

// inlinePush decodes and checks the config a send carries, before any
// task exists: a refused config refuses the send.
func (e *Edge) inlinePush(ctx context.Context, v wire.Version, p *wire.SendParams) (*push.Config, *wire.Error) {
	if len(p.Configuration.PushConfig) == 0 {
		return nil, nil
	}
	if e.cfg.Push == nil {
		return nil, wire.PushNotSupported()
	}
	c, werr := wire.DecodeInlinePushConfig(p.Configuration.PushConfig, v)
	if werr != nil {
		return nil, werr
	}
	cfg, werr := e.checkPushConfig(ctx, c, v)
	if werr != nil {
		return nil, werr
	}
	return &cfg, nil
}

func toWirePush(c push.Config, tenant string) *wire.PushConfig {
	w := &wire.PushConfig{ID: c.ID, TaskID: c.TaskID, URL: c.URL, Token: c.Token, Tenant: tenant}
	if c.AuthScheme != "" {
		w.Auth = &wire.PushAuth{Scheme: c.AuthScheme, Credentials: c.AuthCredentials}
	}
	return w
}

func encodePushResult(raw json.RawMessage, err error) (any, *wire.Error) {
	if err != nil {
		return nil, wire.InternalError(err.Error())
	}
	return raw, nil
}

func pushError(err error) *wire.Error {
	switch {
	case errors.Is(err, push.ErrNotFound):
		return wire.InvalidParams("no such push notification config")
	case errors.Is(err, push.ErrOwnerQuota):
		// The caller holds as many configs as it may: it may add one once
		// some are deleted or their tasks end.
		return wire.ResourceExhausted(err.Error())
	case errors.Is(err, push.ErrTooMany), errors.Is(err, push.ErrInvalidArgument),
		errors.Is(err, push.ErrInvalidPageToken), errors.Is(err, push.ErrTooLarge), errors.Is(err, push.ErrForbiddenURL):
		return wire.InvalidParams(err.Error())
	}
	return wire.InternalError("push config store: " + err.Error())
}

// RunPush delivers push notifications until ctx ends or one of its two
// loops fails (then it stops the other and returns the error, for the
// caller to run it again): it follows every task commit (sharing the work
// with the other replicas), turns the commits of tasks with configs into
// one notification per config and event, and runs this replica's share of
// the outbox. A nil Config.Push returns at once.
func (e *Edge) RunPush(ctx context.Context) error {
	if e.cfg.Push == nil {
		return nil
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make(chan error, 2)
	go func() { errs <- e.cfg.Push.Outbox.Run(ctx) }()
	// A task without a config has nothing to notify: its commits are not
	// even decoded.
	go func() {
		errs <- e.tasks.Follow(ctx, pushDurable, e.notify, taskstore.FollowTasks(e.cfg.Push.Store.MayHaveConfigs))
	}()
	err := <-errs
	stop()
	if err2 := <-errs; err == nil {
		err = err2
	}
	if err == nil && ctx.Err() == nil {
		err = errors.New("push delivery stopped")
	}
	return err
}

// DefaultConfigsKept is how long a finished task's push configs outlive
// it by default: its earlier commits may still be in flight on other
// replicas (or come back for a retry) and must find them.
const DefaultConfigsKept = 10 * time.Minute

// configsKept is Push.ConfigsKept, or its default.
func (e *Edge) configsKept() time.Duration {
	if k := e.cfg.Push.ConfigsKept; k > 0 {
		return max(k, time.Second) // the bucket's TTLs are whole seconds
	}
	return DefaultConfigsKept
}

// notify enqueues the notifications of one task commit. It is idempotent:
// a redelivered commit enqueues the same keys, which the outbox drops. A
// notification that can never be queued (too large) is logged and skipped,
// not retried forever. Follow gives each mutation its generation (see
// taskstore.Commit), the number a stream names the same event by, so a
// 1.0 payload carries it in metadata (tracker.next) and a client can resume
// a stream from it with Last-Event-ID; a commit written before commits
// recorded generations has none to carry.
func (e *Edge) notify(ctx context.Context, c taskstore.Commit) error {
	visible := false
	for _, ev := range c.Events {
		switch ev.Type {
		case taskstore.EventStatus, taskstore.EventArtifact, taskstore.EventFinished, taskstore.EventCanceled:
			visible = true
		}
	}
	if !visible {
		return nil // claims, lease renewals, receipts: nothing to tell, no lookup
	}
	ps := e.cfg.Push
	cfgs, err := ps.Store.ForTask(ctx, c.TaskID)
	if err != nil || len(cfgs) == 0 {
		return err
	}
	tr := newTracker(c.TaskID)
	tr.contextID = c.ContextID
	var task *taskstore.Task // loaded when a payload needs the whole task
	load := func() (*taskstore.Task, error) {
		if task == nil {
			t, err := e.tasks.Load(ctx, c.TaskID, c.Owner)
			if err != nil {
				return nil, err
			}
			task = t
		}
		return task, nil
	}
	for i, ev := range c.Events {
		if ev.Terminal() || ev.State.Interrupted() {
			// The end of a turn carries the receipt: take the metadata and
			// receipts linked so far from the task itself.
			t, err := load()
			if err != nil {
				return err
			}
			tr.setMetadata(t.Metadata)
			tr.receipts = t.ReceiptIDs
		}
		out := tr.next(ev)
		if out == nil {
			continue
		}
		for _, cfg := range cfgs {
			payload, err := e.pushPayload(cfg, out, load)
			if err == nil {
				err = ps.Outbox.Enqueue(ctx, cfg, strconv.FormatUint(c.Seq, 10)+"/"+strconv.Itoa(i), payload)
			}
			switch {
			case errors.Is(err, push.ErrTooLarge), errors.Is(err, push.ErrInvalidArgument):
				e.log.Warn("a2a: push notification cannot be queued; skipped", "task", c.TaskID, "config", cfg.ID, "err", err)
			case err != nil:
				return err
			}
		}
	}
	if c.State.Terminal() {
		// Nothing more will happen: the configs expire after a while, by
		// the bucket's TTL, so that a replica stopping in between leaves
		// none behind counted against its owner; the notifications queued
		// are delivered whatever happens to them. A failure here has the
		// commit delivered again.
		if err := ps.Store.CloseTask(ctx, c.TaskID, e.configsKept()); err != nil {
			return err
		}
	}
	return nil
}

// expireConfig makes one config of a finished task go after configsKept,
// like the configs of a task that just ended; the expiry is the bucket's
// (a per-key TTL), so no timer outlives this replica.
func (e *Edge) expireConfig(ctx context.Context, taskID string, c push.Config) *wire.Error {
	if err := e.cfg.Push.Store.Expire(ctx, c.Owner, taskID, c.ID, e.configsKept()); err != nil {
		return pushError(err)
	}
	return nil
}

// pushPayload is the body of one notification: a 1.0 StreamResponse, or,
// for a config made through 0.3, the task as it is now (0.3 pushes tasks),
// in the form of the binding that made the config.
func (e *Edge) pushPayload(cfg push.Config, ev *wire.StreamEvent, load func() (*taskstore.Task, error)) ([]byte, error) {
	d := pushDialect(cfg)
	if d.Version() == wire.V10 {
		return d.EncodeStreamEvent(ev)
	}
	t, err := load()
	if err != nil {
		return nil, err
	}
	w, err := toWire(t, nil, true)
	if err != nil {
		return nil, err
	}
	return d.EncodeTask(w)
}

// pushDialect is the dialect of the binding that made cfg: V10, V03REST,
// else the JSON-RPC 0.3 one (the hello-a2a profile borrows 0.3's pushes).
func pushDialect(cfg push.Config) wire.Dialect {
	switch v := wire.Version(cfg.Version); v {
	case wire.V10, wire.V03REST:
		return wire.DialectOf(v)
	}
	return wire.DialectOf(wire.V03)
}
