package a2a

import (
	"context"
	"sync"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
)

// hub shares one JetStream watch of a task among all the streams of that
// task on this replica: a hundred subscribers cost one ordered consumer,
// not a hundred. Each subscriber reads the feed's events at its own pace
// from the start (the feed keeps them, as bounded as the task itself), so
// a slow reader delays nobody and nothing is dropped.
type hub struct {
	tasks *taskstore.Store
	mu    sync.Mutex
	feeds map[feedKey]*feed
}

// feedKey includes the owner: a watch is opened for its owner only, and a
// caller who does not own the task must not read another's feed.
type feedKey struct {
	id    string
	owner taskstore.Owner
}

type feed struct {
	ready chan struct{} // closed once the watch is open (or failed: err)
	err   error
	ctx   context.Context // the watch's: it outlives any one reader
	stop  context.CancelFunc
	refs  int // guarded by hub.mu

	mu      sync.Mutex
	events  []taskstore.Event
	changed chan struct{} // closed and replaced on every append and at the end
	ended   bool
}

func newHub(tasks *taskstore.Store) *hub {
	return &hub{tasks: tasks, feeds: map[feedKey]*feed{}}
}

// watch streams task id's events from the first, like Store.Watch, until
// the task ends, the watch fails or ctx ends.
func (h *hub) watch(ctx context.Context, id string, owner taskstore.Owner) (<-chan taskstore.Event, error) {
	key := feedKey{id, owner}
	h.mu.Lock()
	f, ok := h.feeds[key]
	if !ok {
		f = &feed{ready: make(chan struct{}), changed: make(chan struct{})}
		f.ctx, f.stop = context.WithCancel(context.Background())
		h.feeds[key] = f
	}
	f.refs++
	h.mu.Unlock()
	if !ok {
		h.open(key, f)
	}
	select {
	case <-f.ready:
	case <-ctx.Done():
		h.release(key, f)
		return nil, ctx.Err()
	}
	if f.err != nil {
		h.release(key, f)
		return nil, f.err
	}
	out := make(chan taskstore.Event, 16)
	go func() {
		defer close(out)
		defer h.release(key, f)
		for i := 0; ; {
			f.mu.Lock()
			if i < len(f.events) {
				ev := f.events[i]
				f.mu.Unlock()
				i++
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				continue
			}
			ended, wait := f.ended, f.changed
			f.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-wait:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// open starts the feed's one watch; it lives until its last reader goes.
func (h *hub) open(key feedKey, f *feed) {
	events, err := h.tasks.Watch(f.ctx, key.id, key.owner)
	if err != nil {
		f.err = err
		close(f.ready)
		return
	}
	close(f.ready)
	go func() {
		terminal := false
		for ev := range events {
			terminal = ev.Terminal()
			f.mu.Lock()
			f.events = append(f.events, ev)
			close(f.changed)
			f.changed = make(chan struct{})
			f.mu.Unlock()
		}
		if !terminal {
			// The watch failed: new streams must open a fresh one rather
			// than join a feed that has ended.
			h.mu.Lock()
			if h.feeds[key] == f {
				delete(h.feeds, key)
			}
			h.mu.Unlock()
		}
		f.mu.Lock()
		f.ended = true
		close(f.changed)
		f.changed = make(chan struct{})
		f.mu.Unlock()
	}()
}

// release drops one reader; the last one stops the watch and forgets the
// feed, so a later stream opens a fresh one.
func (h *hub) release(key feedKey, f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.refs--
	if f.refs > 0 {
		return
	}
	if h.feeds[key] == f {
		delete(h.feeds, key)
	}
	f.stop()
}
