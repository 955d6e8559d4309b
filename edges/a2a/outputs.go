package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/tools"
)

// The core: a running tool's output, committed to its task as it comes.

// outputs turns a running tool's chunks into task events as they come, so
// that every subscriber, on any replica, sees them live.
type outputs struct {
	edge *Edge
	task *taskstore.Task
	mu   sync.Mutex
	cur  *taskstore.Task // the task as this run last wrote it (mu)
	// renewed is when the run's lease was last renewed (unix ns), shared
	// with the renewal ticker; a commit older than renewEvery renews it.
	renewed    *atomic.Int64
	renewEvery time.Duration
	native     bool
	chunks     int
	streamed   bool // artifact chunks were committed
	// A native tool's direct reply, or its terminal or interrupted status.
	reply       *wire.Message
	finalState  taskstore.State
	finalStatus *wire.Message
	err         error // the first invalid native event
}

func (o *outputs) artifactID() string { return o.task.ID + "-result" }

func (o *outputs) emit(ctx context.Context, ch tools.Chunk) error {
	o.chunks++
	if !o.native {
		parts, err := wire.ResultToParts(ch.Data)
		if err != nil {
			return fmt.Errorf("convert stream chunk: %w", err)
		}
		art, err := storedDialect.EncodeArtifact(&wire.Artifact{ArtifactID: o.artifactID(), Name: "result", Parts: parts})
		if err != nil {
			return fmt.Errorf("encode stream chunk: %w", err)
		}
		o.streamed = true
		return o.commit(ctx, taskstore.ArtifactChunkEvent(art, o.chunks > 1, ch.Last))
	}
	if err := o.native1(ctx, ch); err != nil {
		o.err = err
		return err
	}
	return nil
}

// native1 applies one event of an A2A-native tool.
func (o *outputs) native1(ctx context.Context, ch tools.Chunk) error {
	if o.reply != nil || o.finalState != "" {
		return errors.New("an event after the tool's final message or status")
	}
	ev, werr := wire.DecodeStreamEvent(ch.Data)
	switch {
	case werr != nil:
		return werr
	case ev.Task != nil:
		return errors.New("a tool may not send a task; the edge owns it")
	case ev.Message != nil:
		if o.chunks != 1 {
			return errors.New("a direct message must be the tool's only event")
		}
		m := *ev.Message
		m.Role, m.ContextID, m.TaskID = wire.RoleAgent, o.task.ContextID, ""
		o.reply = &m
		return nil
	case ev.Status != nil:
		st := taskstore.State(ev.Status.Status.State)
		msg := ev.Status.Status.Message
		if msg != nil {
			m := *msg
			m.Role, m.ContextID, m.TaskID = wire.RoleAgent, o.task.ContextID, o.task.ID
			msg = &m
		}
		if st.Terminal() || st.Interrupted() {
			if st == taskstore.StateCanceled {
				return errors.New("a tool may not cancel its task; the client does")
			}
			o.finalState, o.finalStatus = st, msg
			return nil
		}
		var raw json.RawMessage
		if msg != nil {
			var err error
			if raw, err = encodeStored(msg); err != nil {
				return err
			}
		}
		return o.commit(ctx, taskstore.StatusEvent(st, raw))
	default:
		a := ev.Artifact
		art, err := storedDialect.EncodeArtifact(&a.Artifact)
		if err != nil {
			return err
		}
		o.streamed = true
		return o.commit(ctx, taskstore.ArtifactChunkEvent(art, a.Append, a.LastChunk))
	}
}

// final is a native tool's last word: its direct reply (the task completes
// with it), its terminal or interrupted status, or completed.
func (o *outputs) final() (taskstore.State, *wire.Message) {
	switch {
	case o.reply != nil:
		m := *o.reply
		m.TaskID = o.task.ID
		return taskstore.StateCompleted, &m
	case o.finalState != "":
		return o.finalState, o.finalStatus
	}
	return taskstore.StateCompleted, nil
}

// current is the task as this run last stored it.
func (o *outputs) current() *taskstore.Task {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur != nil {
		return o.cur
	}
	return o.task
}

// setTask records t as stored, unless a later commit is known already.
func (o *outputs) setTask(t *taskstore.Task) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur == nil || o.cur.Seq < t.Seq {
		o.cur = t
	}
}

func (o *outputs) commit(ctx context.Context, ev taskstore.Event) error {
	// From the task as last written: no re-read per chunk unless another
	// writer (a lease renewal, a cancel) got in between.
	now := time.Now()
	renew := o.renewed != nil && now.Sub(time.Unix(0, o.renewed.Load())) >= o.renewEvery
	next, err := o.edge.tasks.TransitionFrom(ctx, o.current(), func(cur *taskstore.Task) ([]taskstore.Event, error) {
		if cur.State.Terminal() {
			return nil, taskstore.ErrAlreadyTerminal
		}
		if renew && cur.ClaimedBy == o.edge.cfg.EdgeID {
			// The lease rides along: the run never races itself for it.
			return []taskstore.Event{ev, taskstore.ClaimEvent(o.edge.cfg.EdgeID, now.Add(o.edge.cfg.ClaimLease).UTC())}, nil
		}
		return []taskstore.Event{ev}, nil
	})
	if err != nil {
		return fmt.Errorf("record tool output: %w", err)
	}
	if renew && next.ClaimedBy == o.edge.cfg.EdgeID {
		o.renewed.Store(now.UnixNano())
	}
	o.setTask(next)
	return nil
}
