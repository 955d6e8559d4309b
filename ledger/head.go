package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/google/renameio/v2"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The published head. A log that lost its store (or had an older copy
// restored) and rebuilt it from the stream would sign and serve
// checkpoints smaller than ones it already published: a rollback, which
// every monitor and witness that saw the larger one reports. So the
// ledger records the largest checkpoint it has published outside the
// store it might lose, in two places: a file beside its keys
// (WithHeadFile) and schemas.LogBucket (replicated with the streams).
// A ledger whose store is below the largest it finds, or not consistent
// with it, serves no checkpoint and no proof (HeadErr) until it has
// caught up from the stream and its tree extends that head.

// logKeyHead is the LogBucket key of the published head.
const logKeyHead = "head"

// PublishedHead is the largest checkpoint a log published.
type PublishedHead struct {
	Origin string `json:"origin"`
	// KeyHash is the checkpoint key's note key hash: a log made again
	// with new keys under the same origin is another log.
	KeyHash uint32 `json:"key_hash"`
	Size    uint64 `json:"size"`
	Root    []byte `json:"root"`
}

// WithHeadFile keeps the published head in the file at path too (beside
// the keys: not in the store's directory, which a mistake may delete or
// replace with an older copy).
func WithHeadFile(path string) Option { return func(c *config) { c.headFile = path } }

// BehindError is HeadErr while the store is below the published head.
type BehindError struct{ Size, Published uint64 }

func (e *BehindError) Error() string {
	return fmt.Sprintf("log store holds %d receipts, but this log has published a checkpoint of size %d: catching up from the events stream; no checkpoint or proof is served until it reaches %d", e.Size, e.Published, e.Published)
}

// ErrForked is HeadErr when the tree does not extend the published head.
var ErrForked = errors.New("log does not extend the checkpoint it published")

// headGate is what the ledger knows of its published head.
type headGate struct {
	mu       sync.Mutex
	loaded   bool           // a look has read what there is to read
	kvFailed error          // the bucket's copy could not be read: look again
	kvRead   bool           // a look has read the bucket's copy (since this instance became the writer)
	want     *PublishedHead // the largest found (nil: none)
	reached  bool           // the tree was checked to extend want
	err      error          // a fork, for good
	recorded uint64         // the largest size recorded (by this instance)
	kick     chan struct{}
}

// errHeadUnread: no look at the published head has answered yet.
var errHeadUnread = errors.New("the checkpoint this log published is not read yet: serving no checkpoint or proof until it is")

// LoadPublishedHead reads the published head now (the larger of the file
// and the bucket), so that HeadErr holds from the first request; Run and
// Follow read it again as they start (a standby becoming the writer
// takes the head the last writer published) and while the bucket's copy
// could not be read.
func (l *Ledger) LoadPublishedHead(ctx context.Context) { l.loadHead(ctx) }

func (l *Ledger) loadHead(ctx context.Context) {
	var found []*PublishedHead
	if l.cfg.headFile != "" {
		raw, err := os.ReadFile(l.cfg.headFile)
		switch {
		case err == nil:
			var h PublishedHead
			if err := strictjson.UnmarshalExactKnown(raw, &h); err != nil {
				l.log.Error("published head file unreadable: ignored", "file", l.cfg.headFile, "err", err)
			} else {
				found = append(found, &h)
			}
		case !errors.Is(err, os.ErrNotExist):
			l.log.Error("published head file unreadable: ignored", "file", l.cfg.headFile, "err", err)
		}
	}
	var kvErr error
	if l.js != nil {
		h, err := l.bucketHead(ctx)
		if err != nil {
			kvErr = err
		} else if h != nil {
			found = append(found, h)
		}
	}
	g := &l.head
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case kvErr == nil, g.kvFailed != nil && g.loaded: // nothing new to say
	case g.kvRead:
		l.log.Warn("cannot read the published head from the bucket: serving against the head read before, looking again", "bucket", schemas.LogBucket, "err", kvErr)
	default:
		l.log.Warn("cannot read the published head from the bucket: serving no checkpoint or proof until it can", "bucket", schemas.LogBucket, "err", kvErr)
	}
	g.loaded, g.kvFailed = true, kvErr
	g.kvRead = g.kvRead || (kvErr == nil && l.js != nil)
	for _, h := range found {
		if h.Origin == l.keys.Origin() && h.KeyHash == l.keyHash() && (g.want == nil || h.Size > g.want.Size) {
			g.want, g.reached = h, false
			g.recorded = max(g.recorded, h.Size)
			if size := l.store.State().Size; size < h.Size {
				l.log.Warn("log store is below the checkpoint this log published: catching up from the stream, serving no checkpoint or proof meanwhile",
					"store_size", size, "published_size", h.Size)
			}
		}
	}
}

// forgetRead makes HeadErr wait for a look at the bucket that answers
// again, as at the start.
func (g *headGate) forgetRead() {
	g.mu.Lock()
	g.kvRead = false
	g.mu.Unlock()
}

// headUnread reports whether the last look could not read the bucket.
func (l *Ledger) headUnread() bool {
	l.head.mu.Lock()
	defer l.head.mu.Unlock()
	return !l.head.loaded || l.head.kvFailed != nil
}

// bucketHead reads the head kept in schemas.LogBucket: nil when there is
// none (no bucket, no key).
func (l *Ledger) bucketHead(ctx context.Context) (*PublishedHead, error) {
	kv, err := l.js.KeyValue(ctx, schemas.LogBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, logKeyHead)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h PublishedHead
	if err := strictjson.UnmarshalExactKnown(e.Value(), &h); err != nil {
		return nil, fmt.Errorf("published head in %s: %w", schemas.LogBucket, err)
	}
	return &h, nil
}

// HeadErr is why the log serves no checkpoint or proof now: a
// *BehindError while its store is below the head it published, ErrForked
// for good when its tree does not extend that head; nil otherwise.
func (l *Ledger) HeadErr() error {
	g := &l.head
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	if !g.loaded {
		return errHeadUnread
	}
	// Once the bucket has been read, a later look that fails (NATS
	// broken for a while, a standby taking the lease meanwhile) keeps the
	// head already known: the store was checked against it, and refusing
	// every proof for the length of an outage would protect nothing more.
	if g.kvFailed != nil && !g.kvRead {
		return fmt.Errorf("%w: %w", errHeadUnread, g.kvFailed)
	}
	if g.want == nil || g.reached {
		return nil
	}
	st := l.store.State()
	if st.Size < g.want.Size {
		return &BehindError{Size: st.Size, Published: g.want.Size}
	}
	var err error
	if st.Size == g.want.Size {
		if !bytes.Equal(st.Root, g.want.Root) {
			err = fmt.Errorf("%w: at size %d its root is %x, the published one %x", ErrForked, st.Size, st.Root, g.want.Root)
		}
	} else {
		var p [][]byte
		if p, err = l.store.ConsistencyProof(g.want.Size, st.Size); err == nil {
			if verr := proof.VerifyConsistency(rfc6962.DefaultHasher, g.want.Size, st.Size, p, g.want.Root, st.Root); verr != nil {
				err = fmt.Errorf("%w: size %d does not extend the published size %d: %v", ErrForked, st.Size, g.want.Size, verr)
			}
		} else {
			return fmt.Errorf("check the log against the published head: %w", err) // the store's read failed: try again
		}
	}
	if err != nil {
		g.err = err
		l.log.Error("serving no checkpoint or proof", "err", err)
		return err
	}
	g.reached = true
	l.log.Info("log store reached the checkpoint it published: serving", "published_size", g.want.Size, "size", st.Size)
	return nil
}

// keyHash is the checkpoint key's note key hash (0 without a verifier).
func (l *Ledger) keyHash() uint32 {
	if l.keys.CheckpointVerifier == nil {
		return 0
	}
	return l.keys.CheckpointVerifier.KeyHash()
}

// kickHead wakes the head recorder after a commit.
func (l *Ledger) kickHead() {
	select {
	case l.head.kick <- struct{}{}:
	default:
	}
}

// recordHeads records the store's head each time a commit grows it past
// what was recorded, until ctx ends; a head is recorded only once the
// tree is known to extend the one published before.
func (l *Ledger) recordHeads(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.head.kick:
		}
		if l.HeadErr() != nil {
			continue
		}
		st := l.store.State()
		l.head.mu.Lock()
		grew := st.Size > l.head.recorded
		l.head.mu.Unlock()
		if !grew {
			continue
		}
		if err := l.recordHead(ctx, PublishedHead{Origin: l.keys.Origin(), KeyHash: l.keyHash(), Size: st.Size, Root: st.Root}); err != nil {
			l.log.Warn("cannot record the published head", "size", st.Size, "err", err)
			continue
		}
		l.head.mu.Lock()
		l.head.recorded = max(l.head.recorded, st.Size)
		l.head.mu.Unlock()
	}
}

func (l *Ledger) recordHead(ctx context.Context, h PublishedHead) error {
	raw, err := json.Marshal(h)
	if err != nil {
		return err
	}
	var errs []error
	if l.cfg.headFile != "" {
		// A crash leaves the old file or the new one, whole.
		if err := renameio.WriteFile(l.cfg.headFile, raw, 0o600); err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", l.cfg.headFile, err))
		}
	}
	// Never a smaller head over a larger one (another writer's, or this
	// one's before a failover): the bucket keeps the largest.
	cur, err := l.bucketHead(ctx)
	if err == nil && (cur == nil || cur.Origin != h.Origin || cur.KeyHash != h.KeyHash || cur.Size < h.Size) {
		var kv jetstream.KeyValue
		if kv, err = l.logBucket(ctx); err == nil {
			_, err = kv.Put(ctx, logKeyHead, raw)
		}
	}
	errs = append(errs, err)
	return errors.Join(errs...)
}
