// Package revocation mirrors the CHIO_REVOCATIONS JetStream KV bucket in
// memory, for every process that must refuse revoked capabilities: the
// kernel before a tool runs, the read APIs before they answer.
package revocation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// Watcher mirrors RevocationsBucket through a watch. Only a loaded,
// running, up-to-date mirror is trusted: its users deny otherwise. An
// auditor compares the mirror with the bucket's stream every
// auditInterval, so a watch that silently stalls, or a bucket deleted and
// recreated under it, is caught within two intervals and the watch rebuilt.
type Watcher struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu      sync.RWMutex
	revoked map[string]bool
	watcher jetstream.KeyWatcher
	created time.Time // creation time of the stream being mirrored

	live    atomic.Bool   // loaded, watching, and not found stale
	applied atomic.Uint64 // stream sequence the mirror reflects
	done    chan struct{}
}

const auditInterval = 400 * time.Millisecond

// Watch loads every revocation in kv and follows the bucket until Stop.
func Watch(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger) (*Watcher, error) {
	r := &Watcher{kv: kv, log: log, revoked: map[string]bool{}, done: make(chan struct{})}
	if err := r.restart(ctx); err != nil {
		return nil, fmt.Errorf("watch revocations: %w", err)
	}
	go r.audit()
	return r, nil
}

// restart opens a fresh watch, loads every revocation into a new map and
// swaps it in; updates then flow into that map until the next restart.
func (r *Watcher) restart(ctx context.Context) error {
	st, err := r.kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("bucket status: %w", err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	// The watch lives until the next restart or stop, not until ctx ends.
	w, err := r.kv.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	m := map[string]bool{}
	applied := info.State.LastSeq // everything up to here is in the initial values
	for loading := true; loading; {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				return errors.New("watch ended during the initial load")
			case e == nil:
				loading = false
			default:
				r.apply(m, e)
				applied = max(applied, e.Revision())
			}
		case <-ctx.Done():
			_ = w.Stop()
			return fmt.Errorf("initial load: %w", ctx.Err())
		}
	}
	r.mu.Lock()
	select {
	case <-r.done: // stopped meanwhile
		r.mu.Unlock()
		go func() { _ = w.Stop() }()
		return errors.New("stopped")
	default:
	}
	old := r.watcher
	r.watcher, r.revoked, r.created = w, m, info.Created
	r.applied.Store(applied)
	r.mu.Unlock()
	if old != nil {
		go func() { _ = old.Stop() }()
	}
	r.live.Store(true)
	go r.follow(w)
	return nil
}

func (r *Watcher) follow(w jetstream.KeyWatcher) {
	for e := range w.Updates() {
		if e == nil {
			continue
		}
		r.mu.Lock()
		if r.watcher != w { // superseded by a restart
			r.mu.Unlock()
			return
		}
		r.apply(r.revoked, e)
		r.applied.Store(max(r.applied.Load(), e.Revision()))
		r.mu.Unlock()
	}
	r.mu.Lock()
	if r.watcher == w {
		r.live.Store(false) // the watch ended: fail closed until the auditor rebuilds it
	}
	r.mu.Unlock()
}

func (r *Watcher) apply(m map[string]bool, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		// A deleted or purged key is an operator lifting a revocation;
		// every replica (and any new one) then agrees.
		for id := range m {
			if schemas.KVKey(id) == e.Key() {
				delete(m, id)
			}
		}
		return
	}
	var rev schemas.Revocation
	if err := json.Unmarshal(e.Value(), &rev); err != nil || schemas.KVKey(rev.CapabilityID) != e.Key() {
		r.log.Warn("revocation: ignoring malformed entry", "key", e.Key())
		return
	}
	m[rev.CapabilityID] = true
}

// audit checks the mirror against the bucket: a recreated stream, a watch
// that ended, or a sequence the mirror has not reached one interval later
// marks it stale (deny) and rebuilds the watch.
func (r *Watcher) audit() {
	t := time.NewTicker(auditInterval)
	defer t.Stop()
	var behind uint64 // stream sequence seen last tick that the mirror had not reached
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		stale := !r.live.Load()
		st, err := r.kv.Status(ctx)
		if err != nil {
			r.live.Store(false)
			cancel()
			continue
		}
		info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
		r.mu.RLock()
		recreated := !info.Created.Equal(r.created)
		r.mu.RUnlock()
		applied := r.applied.Load()
		if recreated || (behind != 0 && applied < behind) {
			stale = true
		}
		behind = 0
		if info.State.LastSeq > applied {
			behind = info.State.LastSeq
		}
		if stale {
			r.live.Store(false)
			if err := r.restart(ctx); err != nil {
				r.log.Warn("revocation: watch is stale and could not be rebuilt; denying", "err", err)
			} else {
				behind = 0
			}
		}
		cancel()
	}
}

// FirstRevoked returns the first of ids that is revoked, or "".
func (r *Watcher) FirstRevoked(ids []string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, id := range ids {
		if r.revoked[id] {
			return id
		}
	}
	return ""
}

// Stop ends the watch and the auditor. Stopping a watch sends a request to
// the server, which waits out its timeout when NATS is unreachable; Close
// must not block on that, so it runs in the background.
func (r *Watcher) Stop() {
	r.live.Store(false)
	close(r.done)
	r.mu.Lock()
	w := r.watcher
	r.watcher = nil
	r.mu.Unlock()
	if w != nil {
		go func() { _ = w.Stop() }()
	}
}

// Live reports whether the mirror is loaded, watching and up to date. A
// caller must treat every id as revoked while it is not.
func (r *Watcher) Live() bool { return r.live.Load() }
