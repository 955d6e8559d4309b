package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// A stream is one SendStreamingMessage or SubscribeToTask answer: the
// task's JetStream events from the moment it starts, whichever replica
// produces them. The edge serving the stream holds no state another
// replica needs: a client that loses its stream subscribes anywhere, and
// with Last-Event-ID gets exactly the events it missed.
//
// Each event's SSE id is the task's generation after it (see taskstore,
// "Generations"); the snapshot's is the task's generation when loaded.
type stream struct {
	dialect wire.Dialect
	taskID  string
	// task is the snapshot sent first; nil for a resumed subscription,
	// which sends only the events after its Last-Event-ID.
	task *taskstore.Task
	// after is the generation the client has: the snapshot's, or the
	// resumed Last-Event-ID. Only events after it are sent.
	after  int64
	events <-chan taskstore.Event
	cancel context.CancelFunc
	// holdTask delays the snapshot until the tool's first event, because
	// an A2A-native tool may answer with a lone message instead of a task.
	holdTask bool
	// untilTerminal keeps a subscription open while the task waits for
	// its client (input-required, auth-required): the follow-up message
	// continues the turn, and the stream ends with the terminal status. A
	// send's stream ends at interrupted, as the binding says.
	untilTerminal bool
	// draining ends the stream when the replica drains, once the client
	// has been sent the task (so it knows what to resubscribe to): the
	// task goes on (a send's run here, which the drain waits for, or a
	// run anywhere), and the client subscribes again at another replica
	// with the last generation it has (sink.handover).
	draining <-chan struct{}
	// release gives back the caller's stream slot when the stream ends.
	release func()
}

// sink writes one binding's frames: an encoded StreamResponse with its
// event id, an error after the stream opened, a keep-alive.
type sink interface {
	event(id string, ev json.RawMessage) error
	fail(werr *wire.Error)
	keepAlive() error
	// handover ends a stream the replica's drain cuts before its task
	// ended: it tells the client to subscribe again elsewhere, after
	// generation last (the last event it was sent; 0 if none had one).
	handover(last int64)
}

// openStream validates a streaming call and returns its stream, or the
// error to answer with before any stream opens.
//
// The caller's stream slot is taken first, so that a stream refused for
// it has had no effect (no task, no decision event); run gives it back.
func (e *Edge) openStream(ctx context.Context, rc rpcCall, op wire.Operation, params any) (*stream, *wire.Error) {
	callFrom(ctx).setTask(taskIDOf(params))
	release, werr := e.takeStream(rc)
	if werr != nil {
		return nil, werr
	}
	var st *stream
	defer func() {
		// A panic below is recovered by the server, not here: the slot
		// must not go with it (release runs at most once).
		if st == nil || st.release == nil {
			release()
		}
	}()
	switch p := params.(type) {
	case *wire.SendParams:
		if op == wire.OpSendStreamingMessage {
			st, werr = e.sendStream(ctx, rc, p)
		}
	case *wire.CancelTaskParams: // SubscribeToTask's params are {id, tenant}
		if op == wire.OpSubscribeToTask {
			st, werr = e.subscribe(ctx, rc, p)
		}
	}
	if st == nil && werr == nil {
		werr = wire.InternalError(fmt.Sprintf("%s is not a streaming operation", op))
	}
	if werr != nil {
		return nil, werr
	}
	st.release = release
	return st, nil
}

// sendStream creates the task, starts watching it and runs the tool in the
// background: the client going away stops its stream, never the task.
func (e *Edge) sendStream(ctx context.Context, rc rpcCall, p *wire.SendParams) (*stream, *wire.Error) {
	t, _, werr := e.accept(ctx, rc, p, modeStreaming) // streaming: always stored
	if werr != nil {
		return nil, werr
	}
	wctx, cancel := context.WithCancel(ctx)
	events, err := e.watchNew(wctx, t)
	e.spawn(ctx, func() {
		if _, err := e.execute(background(ctx), rc.caller, t); err != nil {
			e.log.Error("a2a: streamed task failed", "task", t.ID, "err", err)
		}
	})
	if err != nil {
		cancel()
		return nil, storeError(t.ID, err)
	}
	var req execRequest
	_ = json.Unmarshal(t.Request, &req)
	return &stream{dialect: rc.dialect, taskID: t.ID, task: t, after: t.Generation, events: events, cancel: cancel, holdTask: req.Native,
		draining: e.draining}, nil
}

// newTaskLookups bounds watchNew's looks at a task it has just created.
const newTaskLookups = 40

// watchNew watches a task this call has just created. The watch first
// looks the task up, and on a replicated task stream that lookup (a direct
// get) may be answered by a follower that has not applied the create yet:
// "not found" then means "not yet", so it looks again, briefly (40 looks,
// 25 ms apart), rather than tell the client its own new task is missing.
func (e *Edge) watchNew(ctx context.Context, t *taskstore.Task) (<-chan taskstore.Event, error) {
	events, err := e.hub.watch(ctx, t.ID, t.Owner)
	for try := 1; errors.Is(err, taskstore.ErrNotFound) && try < newTaskLookups; try++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
		events, err = e.hub.watch(ctx, t.ID, t.Owner)
	}
	return events, err
}

// subscribe streams an existing task: without a resume point, the current
// task first (it must not be terminal), then every event after it; with
// one (Last-Event-ID, or params.metadata[wire.LastGenerationKey]), exactly
// the events after that generation, through the terminal one if the task
// has ended since. Either stays open while the task waits for input.
func (e *Edge) subscribe(ctx context.Context, rc rpcCall, p *wire.CancelTaskParams) (*stream, *wire.Error) {
	owner, werr := e.owner(ctx, rc.caller, p.Tenant)
	if werr != nil {
		return nil, werr
	}
	from, werr := resumePoint(ctx, p)
	if werr != nil {
		return nil, werr
	}
	wctx, cancel := context.WithCancel(ctx)
	// Watch before Load: the watch replays from the first event, so
	// nothing committed between the two is lost.
	events, err := e.hub.watch(wctx, p.ID, owner)
	if err != nil {
		cancel()
		return nil, storeError(p.ID, err)
	}
	t, err := e.tasks.Load(ctx, p.ID, owner)
	if err != nil {
		cancel()
		return nil, storeError(p.ID, err)
	}
	switch {
	case from > t.Generation:
		cancel()
		return nil, wire.InvalidParams(fmt.Sprintf("Last-Event-ID %d is past task %s, whose generation is %d", from, t.ID, t.Generation),
			wire.FieldViolation{Field: "Last-Event-ID", Description: "is newer than the task's generation"})
	case t.State.Terminal() && (from == 0 || from == t.Generation):
		cancel()
		return nil, wire.UnsupportedOperation(fmt.Sprintf("task %s is %s; there is nothing left to subscribe to", t.ID, t.State))
	}
	st := &stream{dialect: rc.dialect, taskID: t.ID, task: t, after: t.Generation, events: events, cancel: cancel,
		untilTerminal: true, draining: e.draining}
	if from > 0 {
		st.task, st.after = nil, from
	}
	return st, nil
}

// run writes the stream to s until the task ends (or pauses, for a send),
// the client goes away (ctx) or the event source fails.
func (st *stream) run(ctx context.Context, s sink, keepAlive time.Duration) {
	defer st.cancel()
	if st.release != nil {
		defer st.release()
	}
	w := &streamWriter{st: st, s: s, tr: newTracker(st.taskID), sentTask: st.task == nil, last: st.after} // a resumed stream has no snapshot
	if !w.sentTask && !st.holdTask {
		if !w.sendTask() {
			return
		}
		// The snapshot says the task waits for its client: a send's
		// stream ends there, as the binding does for interrupted; a
		// subscription waits for the turn the next message starts.
		if st.task.State.Interrupted() && !st.untilTerminal {
			return
		}
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		ev, ok := w.await(ctx, tick)
		if !ok {
			return
		}
		sent, done := w.deliver(ev)
		if done {
			return
		}
		if sent {
			tick.Reset(keepAlive)
		}
	}
}

// streamWriter is one run of a stream: what it has sent so far.
type streamWriter struct {
	st       *stream
	s        sink
	tr       *tracker
	sentTask bool  // the snapshot went out (or a resume needs none)
	last     int64 // the generation the client has: the last event id sent
}

// sendTask sends the task snapshot; false if the stream must end (it
// failed, and the sink was told).
func (w *streamWriter) sendTask() bool {
	w.sentTask = true
	t, err := toWire(w.st.task, nil, true)
	var raw json.RawMessage
	if err == nil {
		raw, err = w.st.dialect.EncodeStreamEvent(&wire.StreamEvent{Task: t})
	}
	if err == nil {
		err = w.s.event(wire.GenerationEventID(w.st.task.Generation), raw)
	}
	if err != nil {
		w.s.fail(wire.InternalError(err.Error()))
		return false
	}
	w.last = w.st.task.Generation
	return true
}

// await is the task's next event, keeping the stream alive while it is
// idle; false when the stream must end (the client went away, the replica
// drains, a keep-alive failed, or the event source ended before the task).
// A drain hands the stream over only once the client knows the task: a
// send's stream that has sent nothing yet waits for the run's first
// event, which this replica produces.
func (w *streamWriter) await(ctx context.Context, tick *time.Ticker) (taskstore.Event, bool) {
	for {
		draining := w.st.draining
		if !w.sentTask {
			draining = nil
		}
		select {
		case <-ctx.Done():
			return taskstore.Event{}, false
		case <-draining:
			w.s.handover(w.last)
			return taskstore.Event{}, false
		case <-tick.C:
			if w.s.keepAlive() != nil {
				return taskstore.Event{}, false
			}
		case ev, ok := <-w.st.events:
			if !ok && ctx.Err() == nil {
				w.s.fail(wire.InternalError(fmt.Sprintf("the event stream of task %s ended before the task did", w.st.taskID)))
			}
			return ev, ok
		}
	}
}

// deliver writes what ev becomes for the client, if anything: sent when
// an event went out, done when the stream ends with it (or failed).
func (w *streamWriter) deliver(ev taskstore.Event) (sent, done bool) {
	out := w.tr.next(ev)
	if ev.Generation <= w.st.after {
		// In the snapshot, or before the resume point; a stream whose
		// client has the task's end already is over.
		return false, ev.Terminal()
	}
	if out == nil {
		return false, false // nothing a client sees
	}
	id := wire.GenerationEventID(ev.Generation)
	if !w.sentTask {
		if reply := w.tr.directReply(ev); reply != nil {
			raw, err := w.st.dialect.EncodeStreamEvent(&wire.StreamEvent{Message: reply})
			if err == nil {
				err = w.s.event(id, raw)
			}
			if err != nil {
				w.s.fail(wire.InternalError(err.Error()))
			}
			w.last = ev.Generation
			return err == nil, true
		}
		if !w.sendTask() {
			return false, true
		}
	}
	raw, err := w.st.dialect.EncodeStreamEvent(out)
	if err != nil {
		w.s.fail(wire.InternalError(err.Error()))
		return false, true
	}
	if w.s.event(id, raw) != nil {
		return false, true
	}
	w.last = ev.Generation
	// A stream ends with the task; a send's also when the task waits for
	// its client (the binding's "terminal or interrupted").
	return true, ev.Terminal() || (!w.st.untilTerminal && ev.Type == taskstore.EventStatus && ev.State.Interrupted())
}

// tracker folds what a client-facing event needs from the events before
// it: the task's context and its latest metadata and receipts.
type tracker struct {
	taskID, contextID string
	metadata          json.RawMessage
	receipts          []string
}

func newTracker(taskID string) *tracker { return &tracker{taskID: taskID} }

// next folds ev and returns the StreamResponse it becomes, or nil for an
// event clients do not see (claims, receipts, metadata, history): exactly
// the mutations (ev.Generation > 0) but the created event, which a stream
// shows as its snapshot. Each update carries its generation in metadata
// (wire.GenerationKey).
func (tr *tracker) next(ev taskstore.Event) *wire.StreamEvent {
	switch ev.Type {
	case taskstore.EventCreated:
		tr.contextID = ev.ContextID
		tr.setMetadata(ev.Metadata)
	case taskstore.EventMetadata:
		tr.setMetadata(ev.Metadata)
	case taskstore.EventReceipt:
		tr.receipts = append(tr.receipts, ev.ReceiptID)
	case taskstore.EventStatus, taskstore.EventFinished, taskstore.EventCanceled:
		u := &wire.StatusUpdate{TaskID: tr.taskID, ContextID: tr.contextID}
		u.Status.State, _ = wire.ParseTaskState(string(ev.State))
		u.Status.Timestamp = ev.Time
		if len(ev.Message) > 0 {
			if m, werr := wire.DecodeMessage(ev.Message); werr == nil {
				u.Status.Message = m
			}
		}
		if ev.Terminal() || ev.State.Interrupted() {
			// The end of a turn carries the receipt it bears.
			u.Metadata = tr.chioMetadata()
		}
		u.Metadata = withGeneration(u.Metadata, ev.Generation)
		return &wire.StreamEvent{Status: u}
	case taskstore.EventArtifact:
		a, werr := wire.DecodeArtifact(ev.Artifact)
		if werr != nil {
			return nil
		}
		return &wire.StreamEvent{Artifact: &wire.ArtifactUpdate{TaskID: tr.taskID, ContextID: tr.contextID,
			Artifact: *a, Append: ev.Append, LastChunk: ev.LastChunk, Metadata: withGeneration(nil, ev.Generation)}}
	}
	return nil
}

func (tr *tracker) setMetadata(raw json.RawMessage) {
	if len(raw) > 0 && json.Valid(raw) {
		tr.metadata = raw
	}
}

// chioMetadata is the task metadata with the receipts linked so far, as
// toWire shows it.
func (tr *tracker) chioMetadata() map[string]any {
	m, _ := linkedMetadata(tr.metadata, tr.receipts)
	return m
}

// directReply is the lone message that replaces the task in a stream
// when ev completes it as a native tool's direct reply.
func (tr *tracker) directReply(ev taskstore.Event) *wire.Message {
	if ev.Type != taskstore.EventFinished {
		return nil
	}
	return replyMessage(ev.State, tr.chioMetadata(), ev.Message)
}
